"""Run Python snippets in fresh interpreters, the way SGLang's processes start.

Each snippet prints one JSON object as its last stdout line; ``run_py``
returns it parsed (with the full output kept for assertion messages).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from importlib import metadata
from typing import Dict, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Environment variables that must not leak from the developer's shell into
# subprocess tests (they change what the overlay does).
_SCRUB = ("SGLANG_KV5D", "SGLANG_KV5D_PATCHES", "SGLANG_KV5D_STRICT", "SGLANG_KV5D_ALLOW_UNTESTED",
          "SGLANG_KV5D_STATUS_DIR", "SGLANG_KV5D_ATTN_IMPL", "SGLANG_AITER_KV_CACHE_LAYOUT", "SGLANG_PLUGINS")


def sglang_version() -> Optional[str]:
    try:
        return metadata.version("sglang")
    except metadata.PackageNotFoundError:
        return None


def clean_env(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    env.setdefault("PYTHONWARNINGS", "ignore")
    env["PYTHONUNBUFFERED"] = "1"
    if extra:
        env.update(extra)
    return env


class Result:
    def __init__(self, proc: subprocess.CompletedProcess):
        self.proc = proc
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        self.returncode = proc.returncode
        self.data = None
        for line in reversed(proc.stdout.strip().splitlines()):
            try:
                self.data = json.loads(line)
                break
            except ValueError:
                continue

    def __repr__(self):
        return f"<rc={self.returncode}\nstdout:\n{self.stdout[-3000:]}\nstderr:\n{self.stderr[-3000:]}>"


def run_py(code: str, env: Optional[Dict[str, str]] = None, python: Optional[str] = None, timeout: int = 180,
           cwd: Optional[str] = None, args=()) -> Result:
    proc = subprocess.run(
        [python or sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        env=clean_env(env),
        timeout=timeout,
        cwd=cwd or ROOT,
    )
    return Result(proc)
