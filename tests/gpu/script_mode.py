"""Run a GPU test module's ``test_*`` functions without pytest (bare GPU machines)."""

from __future__ import annotations

import traceback


def run_tests(namespace: dict, have_gpu: bool) -> int:
    """Call every ``test_*`` function in ``namespace``; print PASS/FAIL per test; the exit code."""
    if not have_gpu:
        print("SKIP: no CUDA/ROCm GPU")
        return 0
    failed = 0
    for name, fn in list(namespace.items()):
        if name.startswith("test_") and callable(fn):
            try:
                fn()
                print(f"PASS {name}", flush=True)
            except Exception as exc:  # noqa: BLE001
                failed += 1
                traceback.print_exc()
                print(f"FAIL {name}: {exc}", flush=True)
    return 1 if failed else 0
