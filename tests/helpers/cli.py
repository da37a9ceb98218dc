"""Run ``sglang-kv5d launch`` / ``check`` in subprocesses for the tests.

``run_cli(args)`` starts a fresh interpreter on ``python -m sglang_kv5d.cli``,
which is what the ``sglang-kv5d`` console script runs (the package's click
group, where sglang_kv5d.cli.launch.register adds launch and check).

``run_batch(cases)`` starts ONE interpreter that runs many ``check`` / ``launch
--kv5d-dry-run`` invocations through the same click entry point, one after the
other, each with its own environment. SGLang's parser import costs seconds, so
the rule matrix goes through one process; a few cases per file still run as
separate real subprocesses.

As a script (``python tests/helpers/cli.py --batch``) it reads the cases as
JSON on stdin and prints the results as one JSON line.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from typing import Dict, List, Optional, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI_MODULE = "sglang_kv5d.cli"
PROFILE = os.path.join(ROOT, "launch", "qwen3.5-397b-a17b-fp8-tp8-5d.toml")

# Variables that change what the rules or the overlay do: never inherited from
# the developer's shell.
_SCRUB_PREFIXES = ("SGLANG_", "SGL_", "AITER_", "HSA_", "USE_AITER")


def base_env(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_SCRUB_PREFIXES)}
    env["PYTHONWARNINGS"] = "ignore"
    env["PYTHONUNBUFFERED"] = "1"
    if extra:
        env.update(extra)
    return env


def run_cli(args: Sequence[str], env: Optional[Dict[str, str]] = None, timeout: int = 240,
            python: Optional[str] = None, pythonpath: Optional[str] = None) -> subprocess.CompletedProcess:
    full_env = base_env(env)
    if pythonpath:
        full_env["PYTHONPATH"] = pythonpath + (os.pathsep + full_env["PYTHONPATH"] if full_env.get("PYTHONPATH") else "")
    return subprocess.run(
        [python or sys.executable, "-m", CLI_MODULE, *args],
        capture_output=True, text=True, env=full_env, timeout=timeout, cwd=ROOT,
    )


def run_batch(cases: List[dict], timeout: int = 600) -> List[dict]:
    """cases: [{"argv": [...], "env": {...}, "probe": [[name, reason], ...] or None}]."""
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--batch"],
        input=json.dumps(cases), capture_output=True, text=True, env=base_env(), timeout=timeout, cwd=ROOT,
    )
    if proc.returncode != 0:
        raise AssertionError(f"batch runner failed rc={proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _run_one(case: dict) -> dict:
    from sglang_kv5d.launch import probes as launcher  # probe_patch_problems is looked up there per plan
    from sglang_kv5d.cli import main  # the console script's entry point (standalone click: SystemExit)

    saved_env = dict(os.environ)
    saved_probe = launcher.probe_patch_problems
    out, err = io.StringIO(), io.StringIO()
    try:
        os.environ.clear()
        os.environ.update(base_env(case.get("env")))
        if "probe" in case:
            problems = case["probe"]
            launcher.probe_patch_problems = lambda: (  # type: ignore[assignment]
                None if problems is None else [tuple(p) for p in problems],
                None if problems is not None else "KV5D011 not checked: no probe (test)",
            )
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(case["argv"])
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        launcher.probe_patch_problems = saved_probe
        os.environ.clear()
        os.environ.update(saved_env)
    return {"code": code, "out": out.getvalue(), "err": err.getvalue()}


def _batch_main() -> int:
    cases = json.loads(sys.stdin.read())
    results = []
    real_stdout = sys.stdout
    for case in cases:
        results.append(_run_one(case))
    real_stdout.write(json.dumps(results) + "\n")
    return 0


if __name__ == "__main__":
    # Run as a script: tests/helpers must not shadow anything; the repo root must import.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    if sys.argv[1:] == ["--batch"]:
        sys.exit(_batch_main())
    sys.stderr.write("usage: cli.py --batch < cases.json\n")
    sys.exit(2)
