"""scripts/setup.sh and scripts/setup-dev.sh stop at the first failed step and say which.

A CI run on 2026-11-29 ran on a full disk: every pip call failed with
ENOSPC, the script swallowed each exit status, printed "done: .venv is ready"
and the suite then failed on a missing pytest. These tests run the real script
in a copy of the project with a stand-in interpreter whose pip succeeds or
fails on demand, so the script's own control flow is what is tested.

scripts/setup.sh builds .venv for the main job only; scripts/setup-dev.sh runs
it and adds the test caches. Both read the tested SGLang releases from
sglang_kv5d/versions.py (``python -m sglang_kv5d.versions``), which the
stand-in hands to the real interpreter.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys

import pytest

from sglang_kv5d.versions import CONTRACT_WHEELS, NEWEST
from tests.helpers.subproc import ROOT

pytestmark = pytest.mark.sglang_independent

# Stands in for both the base interpreter and the venv's python. Every call is
# appended to $FAKE_LOG; pip exits with $FAKE_PIP_RC after printing what a full
# disk makes pip print; the installed SGLang is $FAKE_SGLANG.
FAKE_PYTHON = r"""#!/usr/bin/env bash
echo "$*" >> "$FAKE_LOG"
case "$1" in
  --version) echo "Python 3.11.7"; exit 0 ;;
  -m)
    if [ "$2" = sglang_kv5d.versions ]; then
      exec "$FAKE_REAL_PYTHON" "$@"
    fi
    if [ "$2" = venv ]; then
      mkdir -p "$3/bin" && cp "$0" "$3/bin/python" && exit 0
    fi
    if [ "$2" = pip ]; then
      if [ "${FAKE_PIP_RC:-0}" -ne 0 ]; then
        echo "ERROR: Could not install packages due to an OSError: [Errno 28] No space left on device" >&2
      fi
      exit "${FAKE_PIP_RC:-0}"
    fi ;;
  -c)
    case "$2" in
      *sysconfig*) echo "$FAKE_SITE"; exit 0 ;;
      *importlib.metadata*) echo "$FAKE_SGLANG"; exit 0 ;;
      *"import torch"*) exit 1 ;;
    esac ;;
esac
exit 0
"""


@pytest.fixture()
def project(tmp_path):
    """A copy of what the setup scripts read, and a stand-in interpreter."""
    for rel in ("scripts/setup.sh", "scripts/setup-dev.sh", "scripts/setup-common.sh", "sglang_kv5d.pth",
                "sglang_kv5d/__init__.py", "sglang_kv5d/_version.py", "sglang_kv5d/versions.py",
                "sglang_kv5d/surface_names.py"):
        os.makedirs(tmp_path / os.path.dirname(rel), exist_ok=True)
        shutil.copy(os.path.join(ROOT, rel), tmp_path / rel)
    shutil.copytree(os.path.join(ROOT, "requirements"), tmp_path / "requirements")
    fake = tmp_path / "fake-python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    (tmp_path / "site").mkdir()
    return tmp_path


def run_setup(project, script="setup-dev.sh", **env):
    full = dict(os.environ, PYTHON=str(project / "fake-python"), FAKE_LOG=str(project / "calls.log"),
                FAKE_SITE=str(project / "site"), SETUP_DEV_MIN_FREE_GB="0", FAKE_SGLANG=NEWEST,
                FAKE_REAL_PYTHON=sys.executable)
    full.update(env)
    proc = subprocess.run(["bash", str(project / "scripts" / script)], env=full,
                          capture_output=True, text=True, timeout=60)
    log = (project / "calls.log").read_text().splitlines() if (project / "calls.log").exists() else []
    return proc, [line for line in log if line.startswith("-m pip")]


def test_all_steps_succeed(project):
    proc, pip_calls = run_setup(project)
    assert proc.returncode == 0, proc.stderr
    assert "done: .venv and the test caches are ready" in proc.stderr
    # torch, the import closure, the editable install, the overlay, the contract
    # wheels, the four Triton versions of the AMD compile gate (sglang itself is
    # skipped: the stand-in reports the newest tested release already installed)
    assert len(pip_calls) == 4 + len(CONTRACT_WHEELS) + 4, pip_calls
    assert sum("--target .cache/triton/" in c for c in pip_calls) == 4, pip_calls
    downloads = [c.rsplit("sglang==", 1)[1] for c in pip_calls if " download " in c]
    assert downloads == list(CONTRACT_WHEELS), pip_calls  # the one list, sglang_kv5d/versions.py
    assert (project / "site" / "sglang_kv5d.pth").exists()


def test_the_main_job_setup_builds_only_the_venv(project):
    """scripts/setup.sh (the quick start's first command): torch, the import
    closure, SGLang at the newest tested release, the editable install; none of
    the test caches."""
    proc, pip_calls = run_setup(project, "setup.sh", FAKE_SGLANG="0.5.16")
    assert proc.returncode == 0, proc.stderr
    assert f"done: .venv is ready (SGLang {NEWEST})" in proc.stderr
    assert any(c.endswith(f"--no-deps sglang=={NEWEST}") for c in pip_calls), pip_calls
    assert len(pip_calls) == 4, pip_calls
    assert not any("--target" in c or " download " in c for c in pip_calls), pip_calls
    assert (project / "site" / "sglang_kv5d.pth").exists()


def test_a_failed_pip_stops_the_script_and_names_the_step(project):
    proc, pip_calls = run_setup(project, FAKE_PIP_RC="1")
    assert proc.returncode == 1, proc.stderr
    assert "ready" not in proc.stderr
    assert "No space left on device" in proc.stdout  # pip's own message, passed through
    assert "FAILED:" in proc.stderr and "torch==2.14.1" in proc.stderr and "exited 1" in proc.stderr
    assert "GB free on" in proc.stderr
    assert len(pip_calls) == 1, pip_calls  # nothing after the failed step


def test_too_little_disk_is_refused_before_pip_runs(project):
    proc, pip_calls = run_setup(project, SETUP_DEV_MIN_FREE_GB="100000")
    assert proc.returncode == 1
    assert "torch needs about 100000 GB of free disk" in proc.stderr
    assert "ready" not in proc.stderr
    assert pip_calls == []
