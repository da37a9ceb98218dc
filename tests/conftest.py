"""Shared pytest configuration.

GPU tests carry ``@pytest.mark.gpu`` and are skipped, with the reason shown,
where no CUDA/ROCm device is visible. Tests that must run in the SGLang 0.5.16
environment (scripts/test.sh runs the suite twice) read the installed version
through ``tests.helpers.subproc.sglang_version``.
"""

from __future__ import annotations

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Without a GPU, Triton kernels run under the interpreter. triton.jit reads the
# variable when a kernel module is imported, so it is set before anything
# (SGLang, the overlay's patches) imports one.
if not any(os.path.exists(p) for p in ("/dev/nvidia0", "/dev/kfd")):
    os.environ.setdefault("TRITON_INTERPRET", "1")
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def _has_gpu() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    # Kernel tests exercise our Triton kernels only: run them once, not again on 0.5.16.
    for item in items:
        parts = item.nodeid.split("/")
        if len(parts) > 2 and parts[0] == "tests" and parts[1] in ("kernels", "gpu"):
            item.add_marker(pytest.mark.sglang_independent)
    if _has_gpu():
        return
    skip = pytest.mark.skip(reason="needs a CUDA/ROCm GPU (run on the H200 device machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
