"""`sglang-kv5d selftest` on the CPU, as the README's main job runs it."""

from __future__ import annotations

import json
import subprocess
import sys

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
    assert set(phases) == {("extend", "hybrid-fp8"), ("extend", "swa-bf16"), ("decode", "hybrid-fp8"),
                           ("decode", "swa-bf16")}
    assert all(p["calls"] > 0 and p["tokens"] > 0 and p["max_ref"] > 1.0 for p in phases.values())
    assert rep["backend_flags"]["hybrid-fp8"] == {"kv_cache_is_vectorized_5d": True, "decode_page_table": True}
    assert rep["patches"]["fp8-kv-write"] == "applied" and rep["patches"]["attention-dispatch-5d"] == "applied"


def test_selftest_fails_when_a_needed_patch_is_off():
    proc = _selftest({"SGLANG_KV5D_PATCHES": "fp8-kv-write", "SGLANG_KV5D_STRICT": "0"})
    assert proc.returncode == 1, proc.stdout[-3000:]
    rep = json.loads(proc.stdout)["reports"][0]
    assert "pool-layout-detection" in rep["error"] and "disabled" in rep["error"]
