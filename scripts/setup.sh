#!/usr/bin/env bash
# Build .venv for the main job on a fresh CPU machine (Python 3.11): what
# `.venv/bin/sglang-kv5d selftest` needs and nothing more.
#
#   .venv    torch 2.14.1 + torchvision 0.29.1 (pip takes them from the machine's
#            local cache), triton, the pinned import closure of SGLang
#            (requirements/dev.txt), SGLang itself --no-deps at the newest tested
#            release (sglang_kv5d/versions.py: NEWEST), this package (editable)
#            and its bootstrap .pth.
#
# The test environment (the 0.5.16 overlay, the contract wheels, the AMD gate's
# Tritons) is scripts/setup-dev.sh, which runs this first.
#
# Idempotent: re-running skips what is already there. Stops at the first failed
# step with a message naming it (exit 1); never reports "ready" after a failure.
#
#   PYTHON=...                   interpreter for the venv (default python3.11)
#   SETUP_DEV_MIN_FREE_GB=N      free disk needed before the torch install
#                                (default 9: the CUDA build unpacks to ~5.6 GB)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/setup-common.sh
. scripts/setup-common.sh

if [ ! -x "$VENV/bin/python" ]; then
  log "creating $VENV with $($PY --version)"
  "$PY" -m venv "$VENV" || die "'$PY -m venv $VENV' failed"
fi
if ! "$VENV/bin/python" -c "import torch, torchvision, triton" 2>/dev/null; then
  have=$(free_gb)
  if [ "$have" -lt "$MIN_FREE_GB" ]; then
    die "torch needs about $MIN_FREE_GB GB of free disk, $(pwd) has $have GB; free some space (old venvs, clones, pip caches) and run this again"
  fi
  log "installing torch 2.14.1 / torchvision 0.29.1 (local cache on dev machines)"
  quiet_pip "${PIP[@]}" install -q torch==2.14.1 torchvision==0.29.1
fi
log "installing the pinned SGLang import closure"
quiet_pip "${PIP[@]}" install -q -r requirements/dev.txt
SGLANG=$(sglang_version newest)
if [ "$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("sglang"))' 2>/dev/null)" != "$SGLANG" ]; then
  log "installing sglang==$SGLANG --no-deps"
  quiet_pip "${PIP[@]}" install -q --no-deps "sglang==$SGLANG"
fi
log "installing sglang-kv5d (editable) and its bootstrap .pth"
quiet_pip "${PIP[@]}" install -q --no-deps -e .
# An editable install does not place force-included files; put the bootstrap
# .pth where a wheel install puts it, so spawn / .pth tests see the real thing.
SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
cp sglang_kv5d.pth "$SITE/sglang_kv5d.pth"
if [ "$SETUP_NAME" = setup ]; then
  log "done: $VENV is ready (SGLang $SGLANG)"
else
  log "$VENV for the main job is built (SGLang $SGLANG); now the test caches"
fi
