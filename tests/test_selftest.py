"""`sglang-kv5d selftest` on the CPU, as the README's main job runs it."""

from __future__ import annotations

import json
import subprocess
import sys

from sglang_kv5d.versions import parse_version
from tests.helpers.subproc import ROOT, clean_env


def _selftest(env=None):
    return subprocess.run([sys.executable, "-m", "sglang_kv5d.cli", "selftest", "--device", "cpu", "--json"],
                          capture_output=True, text=True, env=clean_env(env), timeout=600, cwd=ROOT)


def test_selftest_passes_on_cpu():
    proc = _selftest()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads(proc.stdout)
    (rep,) = data["reports"]
    assert rep["ok"] and rep["failures"] == []
    phases = {(p["phase"], p["pool"]): p for p in rep["phases"]}
    pools = ("hybrid-fp8", "swa-bf16")
    base = {(ph, pool) for ph in ("extend", "decode") for pool in pools}
    verify = {("verify", pool) for pool in pools}
    verify_nc = {("verify-nc", pool) for pool in pools}  # block-parallel drafts (layers without a window)
    ran = {key for key, p in phases.items() if not p.get("skipped")}
    assert base <= ran and set(phases) - base <= verify | verify_nc
    assert all(phases[k]["calls"] > 0 and phases[k]["tokens"] > 0 and phases[k]["max_ref"] > 1.0 for k in ran)
    if parse_version(rep["sglang"]) >= parse_version("0.5.23"):  # target-verify-5d applies
        assert ran == base | verify | verify_nc
    else:  # the verify phase says why it did not run
        assert set(phases) == base | verify and all("target-verify-5d" in phases[k]["skipped"] for k in verify)
    assert rep["backend_flags"]["hybrid-fp8"] == {"kv_cache_is_vectorized_5d": True, "decode_page_table": True}
    assert rep["patches"]["fp8-kv-write"] == "applied" and rep["patches"]["attention-dispatch-5d"] == "applied"


def test_selftest_fails_when_a_needed_patch_is_off():
    proc = _selftest({"SGLANG_KV5D_PATCHES": "fp8-kv-write", "SGLANG_KV5D_STRICT": "0"})
    assert proc.returncode == 1, proc.stdout[-3000:]
    rep = json.loads(proc.stdout)["reports"][0]
    assert "pool-layout-detection" in rep["error"] and "disabled" in rep["error"]


# ------------------------------------------------ ROCm: both attention paths
# The fake aiter stands in for ROCm with aiter; both_paths=True stands in for
# "this is ROCm" (attention_paths decides it from torch.version.hip otherwise).

_BOTH_PATHS = """
import contextlib, json, sys
sys.path.insert(0, {root!r})
from tests.helpers.fake_aiter import fake_aiter_on_path
with contextlib.redirect_stdout(sys.stderr), fake_aiter_on_path(strict=True) as aiter:
    from sglang_kv5d.selftest import Geometry, run_selftest
    geo = Geometry(name="tiny", prefix=64, own_lengths=(10, 30, 5), chunk=64, decode_steps=1, swa_window=16)
    rep = run_selftest(geo, "cpu", both_paths=True)
    calls = {{n: len(aiter._fake.calls(n)) for n in ("pa_decode_gluon", "mha_batch_prefill_func")}}
print(json.dumps({{"rep": rep, "calls": calls}}))
"""


def test_selftest_runs_both_paths_with_aiter():
    from tests.helpers.subproc import run_py

    res = run_py(_BOTH_PATHS.format(root=ROOT), timeout=900)
    assert res.returncode == 0 and res.data, res
    rep, calls = res.data["rep"], res.data["calls"]
    assert rep["ok"] and rep["failures"] == [], rep["failures"]
    assert list(rep["attention_paths"]) == ["aiter", "triton"]
    assert rep["attention_paths"]["aiter"] == {"ran": "aiter", "fallbacks": {}}
    assert rep["attention_paths"]["triton"]["ran"] == "portable Triton kernels"
    by_path = {}
    for p in rep["phases"]:
        by_path.setdefault(p["path"], {})[(p["phase"], p["pool"])] = p
    want = {("extend", "hybrid-fp8"), ("extend", "swa-bf16"), ("decode", "hybrid-fp8"), ("decode", "swa-bf16")}
    assert set(by_path) == {"aiter", "triton"} and all(want <= set(v) for v in by_path.values())
    assert set(by_path["aiter"]) == set(by_path["triton"])  # the same phases on both paths (verify too)
    # the same requests on both paths, each held against float64
    for key in want:
        a, t = by_path["aiter"][key], by_path["triton"][key]
        assert a["calls"] == t["calls"] > 0 and a["tokens"] == t["tokens"]
        assert a["max_ref"] > 1.0 and t["max_ref"] > 1.0  # (the aiter fp8 extend reference models its fp8 query)
    # every aiter-path call went to (fake) aiter, none on the portable pass
    decode_calls = sum(by_path["aiter"][("decode", pool)]["calls"] for pool in ("hybrid-fp8", "swa-bf16"))
    extend_calls = sum(by_path["aiter"][("extend", pool)]["calls"] for pool in ("hybrid-fp8", "swa-bf16"))
    assert calls == {"pa_decode_gluon": decode_calls, "mha_batch_prefill_func": extend_calls}


def test_attention_paths_decision(monkeypatch):
    from sglang_kv5d import attention
    from sglang_kv5d import config
    from sglang_kv5d.selftest import attention_paths
    from tests.helpers.fake_aiter import fake_aiter_on_path

    monkeypatch.delenv(config.ATTN_IMPL, raising=False)
    attention.reset_state()
    paths, why = attention_paths("cpu")  # not ROCm: as today
    assert paths == ["default"] and why.startswith("not ROCm")
    with fake_aiter_on_path():
        assert attention_paths("cuda", both=True) == (["aiter", "triton"],
                                                      "ROCm with aiter: both paths on the same requests")
        import torch

        monkeypatch.setattr(torch.version, "hip", "6.4")  # ROCm as torch reports it
        assert attention_paths("cuda")[0] == ["aiter", "triton"]
        assert attention_paths("cpu")[0] == ["default"]  # the CPU is the CPU
        monkeypatch.setenv(config.ATTN_IMPL, "triton")
        assert attention_paths("cuda") == (["default"], "SGLANG_KV5D_ATTN_IMPL=triton")
        monkeypatch.delenv(config.ATTN_IMPL)
    monkeypatch.setitem(sys.modules, "aiter", None)
    paths, why = attention_paths("cuda", both=True)
    assert paths == ["triton"] and "aiter is not importable" in why and "portable path only" in why
    assert attention.fallback_configs() == {} and attention.aiter_import_error() is None  # nothing left behind


def test_phases_are_a_list_of_units():
    """A phase is a module with NAME and run(run); the report's phases come in this order."""
    from sglang_kv5d.selftest.phases import PHASES

    names = [p.NAME for p in PHASES]
    assert names[:2] == ["extend", "decode"] and len(set(names)) == len(names)  # prefill first, then decode
    assert all(callable(p.run) for p in PHASES)


def test_request_plan_shares_the_prefix_pages():
    from sglang_kv5d.selftest import CPU_DEFAULT
    from sglang_kv5d.selftest.workload import plan_requests

    reqs, slots = plan_requests(CPU_DEFAULT)
    prefix_pages = CPU_DEFAULT.prefix // CPU_DEFAULT.page
    assert [r.prefix_shared for r in reqs] == [True, True, False]
    assert reqs[0].pages[:prefix_pages] == reqs[1].pages[:prefix_pages] == list(range(prefix_pages))
    own = [p for r in reqs for p in (r.pages[prefix_pages:] if r.prefix_shared else r.pages)]
    assert len(own) == len(set(own)) and not set(own) & set(range(prefix_pages))  # no page is used twice
    for r in reqs:  # room for the prompt and every decode step
        assert len(r.pages) * CPU_DEFAULT.page >= r.length + CPU_DEFAULT.decode_steps
    assert slots == (max(p for r in reqs for p in r.pages) + 1) * CPU_DEFAULT.page
