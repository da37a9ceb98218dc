#!/usr/bin/env bash
# Build the development / CI environment on a fresh CPU machine (Python 3.11).
#
#   .venv                    torch 2.14.1 + torchvision 0.29.1 (pip takes them from
#                            the machine's local cache), triton, the pinned import
#                            closure of SGLang, sglang==0.5.23 --no-deps, this
#                            package (editable) and the test tools.
#   .cache/sglang-0.5.16     SGLang 0.5.16 overlay, first on PYTHONPATH for the
#                            second test environment (scripts/test.sh runs both).
#   .cache/wheels            SGLang wheels for the surface contract tests
#                            (read as source, never installed or imported).
#
# Idempotent: re-running skips what is already there. Stops at the first failed
# step with a message naming it (exit 1); never reports "ready" after a failure.
#
#   PYTHON=...                   interpreter for the venv (default python3.11)
#   SETUP_DEV_MIN_FREE_GB=N      free disk needed before the torch install
#                                (default 9: the CUDA build unpacks to ~5.6 GB)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
VENV=.venv
MIN_FREE_GB=${SETUP_DEV_MIN_FREE_GB:-9}
log() { printf '[setup-dev] %s\n' "$*" >&2; }
die() { log "FAILED: $*"; exit 1; }
free_gb() { df -Pk . | awk 'NR == 2 { printf "%d", $4 / 1048576 }'; }
# pip with one noisy line filtered out; pip's own exit status decides.
quiet_pip() {
  local rc
  set +e
  "$@" 2>&1 | { grep -v "is ignored: it is neither" || true; }
  rc=${PIPESTATUS[0]}
  set -e
  if [ "$rc" -ne 0 ]; then
    die "'$*' exited $rc (see pip's message above; $(free_gb) GB free on $(pwd))"
  fi
}

if [ ! -x "$VENV/bin/python" ]; then
  log "creating $VENV with $($PY --version)"
  "$PY" -m venv "$VENV" || die "'$PY -m venv $VENV' failed"
fi
PIP="$VENV/bin/python -m pip"
if ! "$VENV/bin/python" -c "import torch, torchvision, triton" 2>/dev/null; then
  have=$(free_gb)
  if [ "$have" -lt "$MIN_FREE_GB" ]; then
    die "torch needs about $MIN_FREE_GB GB of free disk, $(pwd) has $have GB; free some space (old venvs, clones, pip caches) and run this again"
  fi
  log "installing torch 2.14.1 / torchvision 0.29.1 (local cache on dev machines)"
  quiet_pip $PIP install -q torch==2.14.1 torchvision==0.29.1
fi
log "installing the pinned SGLang import closure"
quiet_pip $PIP install -q -r requirements/dev.txt
if [ "$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("sglang"))' 2>/dev/null)" != "0.5.23" ]; then
  log "installing sglang==0.5.23 --no-deps"
  quiet_pip $PIP install -q --no-deps sglang==0.5.23
fi
log "installing sglang-kv5d (editable) and its bootstrap .pth"
quiet_pip $PIP install -q --no-deps -e .
# An editable install does not place force-included files; put the bootstrap
# .pth where a wheel install puts it, so spawn / .pth tests see the real thing.
SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
cp sglang_kv5d.pth "$SITE/sglang_kv5d.pth"

OVERLAY=.cache/sglang-0.5.16
if [ ! -f "$OVERLAY/sglang/__init__.py" ]; then
  log "installing the SGLang 0.5.16 overlay into $OVERLAY"
  quiet_pip $PIP install -q --no-deps --upgrade --target "$OVERLAY" -r requirements/sglang-0.5.16-overlay.txt
fi

WHEELS=.cache/wheels
mkdir -p "$WHEELS"
for v in 0.5.13.post1 0.5.16 0.5.20 0.5.23; do
  if ! ls "$WHEELS"/sglang-"$v"-*.whl >/dev/null 2>&1; then
    log "downloading sglang==$v (no deps) for the surface contract tests"
    quiet_pip $PIP download -q --no-deps -d "$WHEELS" "sglang==$v"
  fi
done
# Triton versions for the AMD compile gate (tests/test_amd_gate.py), unpacked
# (never imported by .venv itself: the gate puts one first on PYTHONPATH in a
# subprocess). 3.5.1: buffer ops off by default; 3.6.0: on by default; 3.7.0:
# what aiter pins; 3.9.0: the newest on PyPI. The installed one (.venv's) is
# the fifth.
for v in $(sed -e "s/#.*//" requirements/amd-gate-tritons.txt); do
  if [ ! -f ".cache/triton/$v/triton/__init__.py" ]; then
    log "unpacking triton==$v into .cache/triton/$v for the AMD compile gate"
    rm -rf ".cache/triton/$v"
    quiet_pip $PIP install -q --no-deps --no-compile --target ".cache/triton/$v" "triton==$v"
  fi
done
log "done: $VENV is ready"
