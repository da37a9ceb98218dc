"""aiter's ``pa_decode_gluon`` compiles for gfx942/gfx950 on this CPU through its own wrapper.

The peer's source is read from ``../shared/aiter-src`` (tests.amd.aiter_peer);
where it or a Gluon-capable Triton is missing, the tests skip with the reason.
Compiling runs in a fresh interpreter (``python -m tests.amd.aiter_peer``): on a
CPU machine tests/conftest.py sets TRITON_INTERPRET=1 before Triton is imported,
which leaves Triton's own library functions interpreter-only in this process.
Figures and compile times are printed (``pytest -s``) so the gate's numbers can
be compared with the issue's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.amd import aiter_peer as P

pytestmark = pytest.mark.sglang_independent  # aiter's source and Triton only: run once, not again on 0.5.16

ROOT = Path(__file__).resolve().parents[2]
TRITON_CACHE = ROOT / ".cache" / "triton"  # unpacked wheels: <version>/triton
HEADS = ("4/1", "16/2")
ATTENTION = {"4/1": "paged_attention_decode_sliding_window_head_1", "16/2": "paged_attention_decode_sliding_window"}
REDUCE = "paged_attention_decode_ps_reduce_kernel"
#: Type of the fp8 KV cache pointer per target (aiter's fp8 there)
FP8_IR = {"gfx942": "f8E4M3FNUZ", "gfx950": "f8E4M3FN"}
LDS_LIMIT = {"gfx942": 65536, "gfx950": 163840}
#: Figures of gfx942 fp8 H 4/1 on Triton 3.7.0 (aiter's pin) quoted in issue 15.
ISSUE_3_7_0 = {"vgpr": 224, "agpr": 0, "sgpr": 70, "scratch": 0, "lds": 6144, "occupancy": 2}
#: Versions compiled for the whole matrix; the others for gfx942 fp8 4/1 only.
FULL = ("installed", "3.7.0")


def _versions():
    found = []
    if TRITON_CACHE.is_dir():
        found = sorted(p.name for p in TRITON_CACHE.iterdir() if (p / "triton" / "__init__.py").is_file())
    return ["installed", *found]


def _run(version: str, tmp: Path, *args: str) -> tuple[list[dict], float, subprocess.CompletedProcess]:
    env = dict(os.environ, TRITON_CACHE_DIR=str(tmp))  # cold cache: compile times of a fresh CI runner
    env.pop("TRITON_INTERPRET", None)
    if version != "installed":
        env["PYTHONPATH"] = str(TRITON_CACHE / version)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "tests.amd.aiter_peer", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)
    seconds = time.perf_counter() - t0
    rows = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert rows and proc.returncode in (0, 3), f"rc {proc.returncode}\n{proc.stdout}\n{proc.stderr[-3000:]}"
    if version != "installed":
        assert all(r["triton"] == version for r in rows), "PYTHONPATH did not select that Triton"
    return rows, seconds, proc


def _print(version, rows, seconds):
    for r in rows:
        if "unavailable" in r:
            print(f"\n{r['triton']} {r['arch']} {r['kv']} {r['heads']}: unavailable: {r['unavailable']}")
            continue
        print(f"\n{r['triton']} {r['arch']} {r['kv']} {r['heads']} {r['label']}: grid {r['grid']} "
              f"VGPR {r['vgpr']} AGPR {r['agpr']} SGPR {r['sgpr']} scratch {r['scratch']} LDS {r['lds']} "
              f"occupancy {r['occupancy']} warps {r['num_warps']} compile {r['seconds']:.1f}s")
    print(f"{version}: {seconds:.1f}s in a fresh interpreter")


@pytest.mark.slow
@pytest.mark.parametrize("version", _versions())
def test_compiles_through_the_wrapper(version, tmp_path):
    """Each Triton either compiles every kernel the wrapper launches or says why (no
    traceback); the installed one and 3.7.0 (aiter's pin) must compile the whole
    matrix, and 3.7.0 must give the issue's figures for gfx942 fp8 4/1."""
    args = () if version in FULL else ("--arch", "gfx942", "--kv", "fp8", "--heads", "4/1")
    rows, seconds, proc = _run(version, tmp_path, *args)
    _print(version, rows, seconds)
    down = [r for r in rows if "unavailable" in r]
    if down:
        assert version not in FULL, down[0]["unavailable"]
        assert len(down) == len(rows), "some configurations compiled, others did not"
        pytest.skip(down[0]["unavailable"])
    assert proc.returncode == 0
    configs = {(r["arch"], r["kv"], r["heads"]) for r in rows}
    if version in FULL:
        assert len(configs) == 8, sorted(configs)
    for arch, kv, heads in configs:
        got = [r for r in rows if (r["arch"], r["kv"], r["heads"]) == (arch, kv, heads)]
        splits = got[0]["splits"]
        assert 1 <= splits <= 8
        # ps=True over more than one split: the attention kernel, then aiter's reduce (Triton fallback)
        assert [r["label"] for r in got] == ([ATTENTION[heads], REDUCE] if splits > 1 else [ATTENTION[heads]])
        hkv = int(heads.split("/")[1])
        assert got[0]["grid"] == [8, hkv, splits]
        assert got[0]["key_cache_type"] == (FP8_IR[arch] if kv == "fp8" else "bf16")
        for r in got:
            assert r["amdgcn_target"].endswith(f"-{arch}"), r["amdgcn_target"]  # e.g. amdgcn-amd-amdhsa--gfx942
            assert r["options"] == {}, "the wrapper sets no launch options: Triton's defaults apply"
            assert r["pointer_range_attr"] and r["divisibility_attr"]
            missing = [k for k in ("vgpr", "agpr", "sgpr", "scratch", "occupancy") if r[k] is None]
            assert not missing, f"{r['label']}: no {missing} in the AMDGCN comments"
            assert 1 <= r["occupancy"] <= 8 and r["vgpr"] <= 256 and r["lds"] <= LDS_LIMIT[arch]
    if version == "3.7.0":
        first = next(r for r in rows if (r["arch"], r["kv"], r["heads"]) == ("gfx942", "fp8", "4/1"))
        got = {k: first[k] for k in ISSUE_3_7_0}
        assert got == ISSUE_3_7_0, f"aiter's figures on 3.7.0 differ from issue 15's: {got}"


@pytest.mark.slow
def test_pointer_range_off(tmp_path):
    rows, seconds, proc = _run("installed", tmp_path, "--arch", "gfx942", "--kv", "fp8", "--heads", "4/1",
                               "--no-pointer-range")
    _print("installed, pointer range off", rows, seconds)
    if "unavailable" in rows[0]:
        pytest.skip(rows[0]["unavailable"])
    assert [r["label"] for r in rows] == [ATTENTION["4/1"], REDUCE]
    for r in rows:
        assert not r["pointer_range_attr"], r["label"]
        assert r["divisibility_attr"], f"{r['label']}: aligned pointers lost their divisibility"


def test_pointer_range_attribute_rule():
    sig = {"a": "*fp8e4b8", "n": "i32", "c": "constexpr", "b": "*bf16"}
    attrs = {(0,): [["tt.divisibility", 16]], (1,): [["tt.divisibility", 16]]}
    on = P._set_pointer_range(sig, attrs, True)
    assert on == {(0,): [["tt.divisibility", 16], ["tt.pointer_range", 32]], (1,): [["tt.divisibility", 16]],
                  (3,): [["tt.pointer_range", 32]]}
    assert P._set_pointer_range(sig, on, False) == attrs


def test_bad_arguments_name_the_problem():
    with pytest.raises(ValueError, match="gfx90a"):
        P.compile_pa_decode_gluon("gfx90a", num_q_heads=4, num_kv_heads=1, head_dim=256, page=64, kv="fp8")
    with pytest.raises(ValueError, match="kv 'fp16'"):
        P.compile_pa_decode_gluon("gfx942", num_q_heads=4, num_kv_heads=1, head_dim=256, page=64, kv="fp16")
    with pytest.raises(ValueError, match="multiple of num_kv_heads"):
        P.compile_pa_decode_gluon("gfx942", num_q_heads=5, num_kv_heads=2, head_dim=256, page=64, kv="bf16")


def test_missing_source_is_unavailable(tmp_path):
    with pytest.raises(P.PeerUnavailable, match="aiter source not found"):
        P.compile_pa_decode_gluon("gfx942", num_q_heads=4, num_kv_heads=1, head_dim=256, page=64, kv="fp8",
                                  aiter_root=tmp_path)


def test_interpreter_process_is_unavailable():
    """Under TRITON_INTERPRET=1 (set by tests/conftest.py on CPU) the API says so instead of failing mid-compile."""
    import triton.language.standard as standard
    from triton.runtime.jit import JITFunction

    if isinstance(standard.cdiv, JITFunction):
        pytest.skip("Triton in this process was imported without the interpreter")
    if not P.DEFAULT_AITER_ROOT.is_dir():
        pytest.skip(f"no aiter source at {P.DEFAULT_AITER_ROOT}")
    with pytest.raises(P.PeerUnavailable, match="TRITON_INTERPRET=1"):
        P.compile_pa_decode_gluon("gfx942", num_q_heads=4, num_kv_heads=1, head_dim=256, page=64, kv="fp8")


def test_stub_modules_do_not_leak(monkeypatch):
    """The bare aiter package is in sys.modules only while the peer imports or runs."""
    import types

    mine = types.ModuleType("aiter")  # e.g. tests/fake_aiter, or a real aiter
    monkeypatch.setitem(sys.modules, "aiter", mine)
    tree = {"aiter": types.ModuleType("aiter")}
    with P._swapped_modules(tree):
        assert sys.modules["aiter"] is tree["aiter"]
        sys.modules["aiter.late"] = late = types.ModuleType("aiter.late")
    assert sys.modules["aiter"] is mine and "aiter.late" not in sys.modules
    assert tree["aiter.late"] is late, "a module the peer imported stays with the peer"
