"""scripts/setup-dev.sh stops at the first failed step and says which.

A CI run on 2026-11-29 ran on a full disk: every pip call failed with
ENOSPC, the script swallowed each exit status, printed "done: .venv is ready"
and the suite then failed on a missing pytest. These tests run the real script
in a copy of the project with a stand-in interpreter whose pip succeeds or
fails on demand, so the script's own control flow is what is tested.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess

import pytest

from tests.helpers.subproc import ROOT

pytestmark = pytest.mark.sglang_independent

# Stands in for both the base interpreter and the venv's python. Every call is
# appended to $FAKE_LOG; pip exits with $FAKE_PIP_RC after printing what a full
# disk makes pip print.
FAKE_PYTHON = r"""#!/usr/bin/env bash
echo "$*" >> "$FAKE_LOG"
case "$1" in
  --version) echo "Python 3.11.7"; exit 0 ;;
  -m)
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
      *importlib.metadata*) echo "0.5.23"; exit 0 ;;
      *"import torch"*) exit 1 ;;
    esac ;;
esac
exit 0
"""


@pytest.fixture()
def project(tmp_path):
    """A copy of what setup-dev.sh reads, and a stand-in interpreter."""
    for rel in ("scripts/setup-dev.sh", "sglang_kv5d.pth"):
        os.makedirs(tmp_path / os.path.dirname(rel), exist_ok=True)
        shutil.copy(os.path.join(ROOT, rel), tmp_path / rel)
    shutil.copytree(os.path.join(ROOT, "requirements"), tmp_path / "requirements")
    fake = tmp_path / "fake-python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    (tmp_path / "site").mkdir()
    return tmp_path


def run_setup(project, **env):
    full = dict(os.environ, PYTHON=str(project / "fake-python"), FAKE_LOG=str(project / "calls.log"),
                FAKE_SITE=str(project / "site"), SETUP_DEV_MIN_FREE_GB="0")
    full.update(env)
    proc = subprocess.run(["bash", str(project / "scripts" / "setup-dev.sh")], env=full,
                          capture_output=True, text=True, timeout=60)
    log = (project / "calls.log").read_text().splitlines() if (project / "calls.log").exists() else []
    return proc, [line for line in log if line.startswith("-m pip")]


def test_all_steps_succeed(project):
    proc, pip_calls = run_setup(project)
    assert proc.returncode == 0, proc.stderr
    assert "done: .venv is ready" in proc.stderr
    # torch, the import closure, the editable install, the overlay, four wheels,
    # the four Triton versions of the AMD compile gate (sglang itself is
    # skipped: the stand-in reports 0.5.23 already installed)
    assert len(pip_calls) == 12, pip_calls
    assert sum("--target .cache/triton/" in c for c in pip_calls) == 4, pip_calls
    assert (project / "site" / "sglang_kv5d.pth").exists()


def test_a_failed_pip_stops_the_script_and_names_the_step(project):
    proc, pip_calls = run_setup(project, FAKE_PIP_RC="1")
    assert proc.returncode == 1
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
