"""CPU tests of the bench's aiter peers and byte floors (no timings asserted).

* which aiter peers `sglang-kv5d bench` uses: none off ROCm; on ROCm each one
  that imports (the fake aiter stands in for a ROCm host with aiter), and the
  failure named for each one that does not;
* the peers' argument builders drive the fake aiter to the float64 answer
  (decode on the bench's 5D cache, extend through the overlay's gather);
* the memory-rate kernels (read, write, copy) do what they say (Triton
  interpreter), and the floor arithmetic picks the right rate and bytes.
"""

from __future__ import annotations

import math

import pytest
import torch

from sglang_kv5d.bench import aiter_peers, bandwidth
from tests.helpers.fake_aiter import fake_aiter, no_aiter  # noqa: F401  (fixtures)


# ------------------------------------------------------------ peer selection


def test_no_aiter_peers_off_rocm(fake_aiter):
    assert aiter_peers.load(rocm=False) == {}
    assert aiter_peers.describe({}, "pa_decode_gluon") == "none (not ROCm)"
    assert not aiter_peers.available({}, "pa_decode_gluon")
    assert aiter_peers.is_rocm() is bool(torch.version.hip)


def test_rocm_with_aiter_uses_each_peer_that_imports(fake_aiter):
    peers = aiter_peers.load(rocm=True)
    assert set(peers) == set(aiter_peers.PEERS)
    assert aiter_peers.available(peers, "pa_decode_gluon") and aiter_peers.available(peers, "mha_batch_prefill_func")
    assert peers["pa_decode_gluon"]["pa_decode_gluon"].__fake_aiter__
    assert aiter_peers.describe(peers, "pa_decode_gluon") == "aiter.ops.triton.gluon.pa_decode_gluon.pa_decode_gluon"
    # the fake has no reshape_and_cache: that peer alone is named unavailable
    assert peers["reshape_and_cache"] == "unavailable: aiter has no reshape_and_cache"
    assert not aiter_peers.available(peers, "reshape_and_cache")


def test_rocm_without_aiter_names_each_failure(no_aiter):
    peers = aiter_peers.load(rocm=True)
    assert set(peers) == set(aiter_peers.PEERS)
    for name, why in peers.items():
        assert isinstance(why, str) and why.startswith("unavailable: import "), why
        assert "ImportError" in why or "ModuleNotFoundError" in why, why


def test_rocm_import_errors_other_than_import_error_are_named():
    def importer(name):
        raise RuntimeError("Get GPU arch from rocminfo failed\nrocminfo: not found")

    peers = aiter_peers.load(rocm=True, importer=importer)
    assert peers["reshape_and_cache"] == "unavailable: import aiter failed: RuntimeError: rocminfo: not found"


# ------------------------------------------------- builders against the fake


def _case(kv, seed=0):
    from sglang_kv5d.bench.attention import build_case

    return build_case(2, 100, 4, 1, 256, kv, "cpu", seed=seed)


@pytest.mark.parametrize("kv", ["bf16", "fp8_e4m3fn"])
def test_decode_peer_builds_the_overlays_call(fake_aiter, kv):
    from sglang_kv5d.kernels.attention_reference import decode_attention_5d_ref

    case = _case(kv)
    q = case["q"]
    scale = torch.ones(1) if case["fp8"] else None
    out = torch.empty_like(q)
    peers = aiter_peers.load(rocm=True)
    with fake_aiter._fake.strict():
        fn, splits, reinterpreted = aiter_peers.decode_callable(
            peers, q, case["k5"], case["v5"], case["bt"], case["ctx"], out, sm_scale=256 ** -0.5,
            k_scale=scale, v_scale=scale)
        fn()
    assert splits == 8 and not reinterpreted  # get_recommended_splits(2, 1) on 304 CUs, capped at 8
    (call,) = fake_aiter._fake.calls("pa_decode_gluon")
    assert call.kwargs["ps"] is True and call.kwargs["max_context_partition_num"] == 8
    assert call.kwargs["key_scale"] is scale and call.kwargs["value_scale"] is scale  # None for bf16
    ref = decode_attention_5d_ref(q, case["k5"], case["v5"], case["bt"], case["ctx"], sm_scale=256 ** -0.5,
                                  k_scale=scale, v_scale=scale)
    torch.testing.assert_close(out.double(), ref, atol=2e-2, rtol=2e-2)


def test_decode_peer_reads_a_foreign_fp8_cache_as_aiters(fake_aiter, monkeypatch):
    monkeypatch.setattr(fake_aiter.dtypes, "fp8", torch.float8_e4m3fnuz)  # gfx942
    case = _case("fp8_e4m3fn")
    out = torch.empty_like(case["q"])
    fn, _, reinterpreted = aiter_peers.decode_callable(
        aiter_peers.load(rocm=True), case["q"], case["k5"], case["v5"], case["bt"], case["ctx"], out,
        sm_scale=0.0625, k_scale=torch.ones(1), v_scale=torch.ones(1))
    fn()
    assert reinterpreted and fake_aiter._fake.calls("pa_decode_gluon")[0].kwargs["key_cache"].dtype == (
        torch.float8_e4m3fnuz)


@pytest.mark.parametrize("fp8", [False, True])
def test_extend_peer_gathers_like_the_overlay(fake_aiter, fp8):
    from sglang_kv5d.attention import gather_5d_to_linear
    from tests.helpers.pools import ref_attention

    g = torch.Generator().manual_seed(3)
    dt = torch.float8_e4m3fn if fp8 else torch.bfloat16
    x, page, hq, hkv, d = (16 if fp8 else 8), 64, 4, 1, 256
    k5 = torch.randn(3, hkv, d // x, page, x, generator=g).to(dt)
    v5 = torch.randn(3, hkv, page // x, d, x, generator=g).to(dt)
    lens, qlens = [70, 20], [6, 20]
    slots = torch.cat([torch.arange(64, 64 + 70), torch.arange(0, 20)])
    q = torch.randn(sum(qlens), hq, d, generator=g).to(torch.bfloat16)
    qo = torch.tensor([0, 6, 26])
    kvp = torch.tensor([0, 70, 90])
    one = torch.ones(1)
    call = aiter_peers.extend_callable(aiter_peers.load(rocm=True), q, k5, v5, slots, page, qo, kvp,
                                       sm_scale=0.0625, max_q=20, max_kv=70, fp8_dtype=dt if fp8 else None,
                                       k_scale=one if fp8 else None, v_scale=one if fp8 else None)
    with fake_aiter._fake.strict():
        out = call()
    kw = fake_aiter._fake.calls("mha_batch_prefill_func")[0].kwargs
    assert kw["k"].dim() == 3 and kw["causal"] is True and (kw.get("q_descale") is not None) == fp8
    k_lin, v_lin = gather_5d_to_linear(k5, v5, slots, page)
    q_ref = kw["q"].double() * (float(kw["q_descale"]) if fp8 else 1.0)
    refs = []
    for b in range(2):
        k_b, v_b = k_lin[kvp[b]:kvp[b + 1]].double(), v_lin[kvp[b]:kvp[b + 1]].double()
        refs.append(ref_attention(q_ref[qo[b]:qo[b + 1]], k_b, v_b, list(range(lens[b] - qlens[b], lens[b])),
                                  sm_scale=0.0625))
    torch.testing.assert_close(out.double(), torch.cat(refs), atol=2e-2, rtol=2e-2)


# ------------------------------------------------------------- byte floors


def test_rate_kernels_read_write_copy():
    n = 1000  # not a multiple of the block: the masks matter
    src = torch.arange(n, dtype=torch.int32)
    partial = torch.full((bandwidth.programs(n, 64, 2),), -1, dtype=torch.int32)
    bandwidth.read(src, partial, block=64, steps=2)
    assert partial.shape == (8,) and int(partial.sum()) == n * (n - 1) // 2
    dst = torch.zeros(n + 7, dtype=torch.int32)
    bandwidth.write(dst[:n], 77, block=64, steps=2)
    assert bool((dst[:n] == 77).all()) and bool((dst[n:] == 0).all())
    out = torch.zeros(n, dtype=torch.int32)
    bandwidth.copy(src, out, block=64, steps=2)
    assert torch.equal(out, src)


def test_measure_times_three_kernels_and_derives_rates():
    seen = []

    def time_fn(fn):
        fn()
        seen.append(fn)
        return {1: 10.0, 2: 20.0, 3: 25.0}[len(seen)]

    r = bandwidth.measure("cpu", 1 << 16, time_fn=time_fn)
    assert len(seen) == 3
    assert r.nbytes == 1 << 16
    assert r.read == pytest.approx((1 << 16) / 10e-6) and r.write == pytest.approx((1 << 16) / 20e-6)
    assert r.copy == pytest.approx(2 * (1 << 16) / 25e-6)  # bytes read + bytes written
    assert set(r.to_dict()) >= {"read_bytes_per_s", "write_bytes_per_s", "read_write_bytes_per_s"}


def test_floor_picks_the_rate_of_the_traffic():
    r = bandwidth.rates_from_times(1000, read_us=1.0, write_us=2.0, copy_us=4.0)  # 1e9, 5e8, 5e8 B/s
    # a decode reads: its floor is its bytes read over the read rate, writes not counted
    assert bandwidth.floor_us("decode", 2000, 300, r) == pytest.approx(2.0)
    # a KV write reads inputs and writes the cache: bytes read + written over the copy rate
    assert bandwidth.floor_us("write", 2000, 500, r) == pytest.approx(5.0)
    with pytest.raises(ValueError, match="time must be > 0"):
        bandwidth.rates_from_times(1000, 0.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="rate must be > 0"):
        bandwidth.floor_us("decode", 1, 1, r._replace(read=math.nan))
    with pytest.raises(KeyError):
        bandwidth.floor_us("unknown", 1, 1, r)


# ------------------------------------------------------------------ tables


def _att_row(**over):
    row = dict(kv="bf16", H_q=4, H_kv=1, D=256, bs=1, ctx=8192, page=64, bytes=1, ours_us=10.0,
               ours_read_fraction=0.8, ours_splits=8, peer_us=30.0, peer_splits=4, peer_read_fraction=0.3,
               speedup_vs_peer=3.0)
    row.update(over)
    from sglang_kv5d.bench.attention import evaluate_targets

    row["targets"] = evaluate_targets(row)
    return row


def test_attention_table_names_the_aiter_peer_and_its_ratio():
    from sglang_kv5d.bench.attention import format_table, summarize

    rows = [_att_row(aiter_us=12.0, aiter_splits=8, aiter_read_fraction=0.66, speedup_vs_aiter=1.2),
            _att_row(ctx=32768, bs=32, aiter_note="failed: AssertionError: pa_decode_gluon only supports gfx942")]
    assert rows[0]["targets"]["ge_aiter"] is True and "ge_aiter" not in rows[1]["targets"]
    assert rows[1]["targets"]["read_ge_70pct"] is True
    result = dict(rows=rows, summary=summarize(rows), device={"gpu": "MI300X"}, read_bytes_per_s=4.2e12, page=64,
                  peer="sglang", aiter_peer="aiter.ops.triton.gluon.pa_decode_gluon.pa_decode_gluon")
    text = format_table(result)
    assert "aiter peer: aiter.ops.triton.gluon.pa_decode_gluon.pa_decode_gluon" in text
    assert "read rate 4200 GB/s" in text and "% read" in text
    assert "| 12.0 (8) | 66.0% | 1.20x |" in text
    assert "| failed |" in text and "aiter: failed: AssertionError: pa_decode_gluon only supports gfx942" in text
    assert "ge_aiter: 1/1 rows met" in text
    # off ROCm: no aiter columns at all
    cuda = format_table(dict(result, rows=[_att_row()], summary=summarize([_att_row()]), aiter_peer="none (not ROCm)"))
    assert "aiter" not in cuda and "| 30.0 (4) | 30.0% | 3.00x | ge_peer met" in cuda


def test_fp8_write_table_lists_aiter_rows():
    from tests.test_bench_fp8_write import _row

    from sglang_kv5d.bench import fp8_write as bench

    rows = [_row("llama-like", "5d", 4096, "prefill", 7.0, 7.5), _row("llama-like", "nhd", 4096, "prefill", 6.0, 7.5)]
    rows[0].update(aiter_us=14.0, fused_vs_aiter=0.5)
    rows[1].update(aiter_note="unavailable: aiter has no reshape_and_cache")
    result = {"rows": rows, "device": {}, "read_write_bytes_per_s": 4.2e12, "page": 64, "input_dtype": "bfloat16",
              "timing": "t", "verdicts": bench.evaluate_targets({"rows": rows})}
    text = bench.format_table(result)
    assert "llama-like/5d/T=4096 e4m3fn: aiter 14.00 us, fused / aiter 0.500" in text
    assert "aiter: unavailable: aiter has no reshape_and_cache" in text
    assert "floor rate 4200 GB/s (read+write" in text


def test_extend_layout_places_each_request_on_its_own_pages():
    from sglang_kv5d.bench.attention import extend_layout

    bt, slots, qo, kvp, kv_lens, nb = extend_layout(3, 10, 100, 64, gen=torch.Generator().manual_seed(0))
    assert bt.shape == (3, 2) and bt.dtype == torch.int32 and nb == 7
    assert len(set(bt.flatten().tolist())) == 6 and int(bt.max()) < nb
    assert slots.shape == (330,) and len(set(slots.tolist())) == 330
    assert (slots[:110] // 64).unique().tolist() == sorted(bt[0].tolist())
    assert int(slots[65]) == int(bt[0, 1]) * 64 + 1  # token 65 of request 0: page 1, offset 1
    assert qo.tolist() == [0, 10, 20, 30] and kvp.tolist() == [0, 110, 220, 330] and kv_lens.tolist() == [110] * 3


def test_extend_table_only_with_rows():
    from sglang_kv5d.bench.attention import format_extend_table, format_table

    rows = [dict(kv="bf16", H_q=4, H_kv=1, D=256, bs=1, new=2048, prefix=2048, page=64, ours_us=100.0,
                 aiter_us=80.0, speedup_vs_aiter=0.8, max_abs_diff_vs_aiter=0.01),
            dict(kv="fp8_e4m3fn", H_q=4, H_kv=1, D=256, bs=1, new=2048, prefix=2048, page=64, ours_us=90.0,
                 aiter_note="failed: RuntimeError: invalid argument for batch_prefill: no matching kernel found")]
    text = format_extend_table(rows, "aiter.mha_batch_prefill_func")
    assert "| bf16 | 4/1 | 256 | 1 | 2048 | 2048 | 100.0 | 80.0 | 0.80x | 0.01 |" in text
    assert "aiter: failed: RuntimeError: invalid argument for batch_prefill: no matching kernel found" in text
    base = dict(rows=[], device={}, read_bytes_per_s=1e12, page=64, peer="p", aiter_peer="none (not ROCm)")
    assert "extend_attention_5d vs" not in format_table(base)  # CUDA: no extend table
    assert "extend_attention_5d vs" in format_table(dict(base, extend_rows=rows, extend_peer="aiter.x"))


# --------------------------------------------- SGLang's peers, through the table


def test_fp8_write_peers_are_the_surface_tables_objects():
    import importlib

    from sglang_kv5d.bench import sglang_peers
    from sglang_kv5d.surface import SURFACES, split_target

    peers = sglang_peers.fp8_write_peers()
    for name, surface_id in sglang_peers.FP8_WRITE_PEERS.items():
        module = peers[name + "_module"]
        assert module in SURFACES[surface_id].modules, (name, module)
        attr = split_target(SURFACES[surface_id].targets[0])[1][-1]
        assert peers[name] is getattr(importlib.import_module(module), attr)


def test_peers_that_do_not_import_name_every_target_tried():
    from sglang_kv5d.bench import sglang_peers
    from sglang_kv5d.surface import SURFACES

    def importer(name):
        raise ModuleNotFoundError(f"No module named {name!r}")

    peers = sglang_peers.fp8_write_peers(importer)
    for name, surface_id in sglang_peers.FP8_WRITE_PEERS.items():
        assert peers[name].startswith("skipped: ") and name + "_module" not in peers
        for module in SURFACES[surface_id].modules:
            assert f"{module}: ModuleNotFoundError" in peers[name]
    with pytest.raises(RuntimeError, match="lab/prepare_peers.py"):
        sglang_peers.decode_peer({}, importer)


def test_peer_path_must_be_an_existing_absolute_directory(tmp_path):
    from sglang_kv5d.bench.sglang_peers import PeerPathError, peer_path

    assert peer_path({}) is None and peer_path({"SGLANG_KV5D_PEER_PATH": ""}) is None
    assert peer_path({"SGLANG_KV5D_PEER_PATH": str(tmp_path)}) == str(tmp_path)
    for bad, why in ((".peer_sglang", "not an absolute path"), (str(tmp_path / "missing"), "not an existing directory"),
                     (str(tmp_path / "f"), "not an existing directory")):
        (tmp_path / "f").write_text("")
        with pytest.raises(PeerPathError) as exc:
            peer_path({"SGLANG_KV5D_PEER_PATH": bad})
        assert "SGLANG_KV5D_PEER_PATH=" in str(exc.value) and why in str(exc.value)
        assert "fix: export SGLANG_KV5D_PEER_PATH=/absolute/path" in str(exc.value)


def test_bench_cli_refuses_a_bad_peer_path_without_a_traceback():
    from click.testing import CliRunner

    from sglang_kv5d.cli.bench import bench as bench_cmd

    out = CliRunner().invoke(bench_cmd, ["--what", "attention"], env={"SGLANG_KV5D_PEER_PATH": "rel/dir"})
    assert out.exit_code == 2, out.output
    assert "SGLANG_KV5D_PEER_PATH='rel/dir'" in out.output and "not an absolute path" in out.output
    assert "Traceback" not in out.output and isinstance(out.exception, SystemExit)


COPY_PROBE = """
import json, sys
from sglang_kv5d.bench import sglang_peers

def importer(name):  # as on a GPU machine without SGLang: only the copy imports
    if name.split(".")[0] == "sglang":
        raise ModuleNotFoundError(f"No module named {name!r}")
    import importlib
    return importlib.import_module(name)

fn, src = sglang_peers.decode_peer(importer=importer)
print(json.dumps({"module": fn.__module__, "name": fn.__name__, "src": src, "last": sys.path[-1],
                  "first": sys.path[0]}))
"""


def test_decode_peer_from_a_copy_made_by_the_lab_script(tmp_path):
    """lab/prepare_peers.py copies the installed SGLang's decode kernel; with
    SGLANG_KV5D_PEER_PATH naming the copy, the bench loads it from there (a
    fresh interpreter: the copy's package must not leak into this one)."""
    import json
    import os
    import subprocess
    import sys

    from tests.helpers.subproc import ROOT, clean_env

    proc = subprocess.run([sys.executable, os.path.join(ROOT, "lab", "prepare_peers.py")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / ".device/fp8_write_peers/sglang/kernels/ops/kvcache/cache_ops.py").is_file()
    env = clean_env({"SGLANG_KV5D_PEER_PATH": str(tmp_path / ".peer_sglang"), "PYTHONPATH": ROOT})
    proc = subprocess.run([sys.executable, "-c", COPY_PROBE], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["module"] == "sglang_peer.decode_attention" and got["name"] == "decode_attention_fwd"
    assert got["src"].startswith("copy of sglang ") and got["last"] == str(tmp_path / ".peer_sglang")
    assert got["first"] != got["last"]  # appended: the copy cannot shadow installed modules
