"""``sglang-kv5d doctor --kernels-for ARCH``: every kernel compiled for an arch
that is not here (CPU), one check per kernel with its figures and the path the
overlay takes, in text and ``--json``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.helpers.subproc import ROOT, clean_env

pytestmark = [pytest.mark.slow, pytest.mark.sglang_independent]


def _doctor(*args):
    env = clean_env()
    env.pop("TRITON_INTERPRET", None)  # doctor's own child unsets it too; this is the operator's shell
    env["TRITON_CACHE_DIR"] = os.path.join(ROOT, ".cache", "triton-cache")  # the AMD gate's compiles
    return subprocess.run([sys.executable, "-m", "sglang_kv5d.cli", "doctor", "--no-spawn", *args],
                          capture_output=True, text=True, timeout=1200, env=env, cwd=ROOT)


def test_kernels_for_gfx942_json_names_every_kernel_its_figures_and_path():
    proc = _doctor("--kernels-for", "gfx942", "--json")
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    checks = json.loads(proc.stdout)
    kernels = [c for c in checks if c["name"].startswith("kernel ")]
    summary = [c for c in checks if c["name"] == "kernels"]
    assert summary and summary[0]["status"] == "ok" and "gfx942" in summary[0]["detail"], summary
    names = " ".join(c["name"] for c in kernels)
    for kernel in ("write_kv_fp8_kernel 5d", "write_kv_fp8_kernel nhd", "decode_5d_kernel", "decode_reduce_kernel",
                   "extend_5d_kernel", "store_floor_kernel"):
        assert kernel in names, (kernel, names)
    for c in kernels:
        assert c["status"] == "ok", c
        assert "waves/SIMD" in c["detail"] and "path:" in c["detail"], c
    fp8_writes = [c for c in kernels if c["name"].startswith("kernel write_kv_fp8_kernel")]
    assert all("fp8 hardware conversion" in c["detail"] for c in fp8_writes), fp8_writes


def test_kernels_for_an_unknown_arch_is_a_usage_error():
    proc = _doctor("--kernels-for", "gfx1100")
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert "gfx942" in proc.stderr and "Traceback" not in proc.stderr


def test_without_a_gpu_the_kernel_section_says_how_to_ask_for_an_arch():
    proc = _doctor("--json")
    checks = json.loads(proc.stdout)
    section = [c for c in checks if c["name"] == "kernels"]
    assert section and "--kernels-for" in section[0]["fix"], section
