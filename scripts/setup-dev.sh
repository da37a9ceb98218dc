#!/usr/bin/env bash
# Build the development / CI environment on a fresh CPU machine (Python 3.11):
# scripts/setup.sh (.venv for the main job), then what only the tests need:
#
#   .cache/sglang-0.5.16     SGLang 0.5.16 overlay, first on PYTHONPATH for the
#                            second test environment (scripts/test.sh runs both).
#   .cache/wheels            SGLang wheels for the surface contract tests
#                            (sglang_kv5d/versions.py: CONTRACT_WHEELS; read as
#                            source, never installed or imported).
#   .cache/triton/<version>  the Tritons of the AMD compile gate
#                            (requirements/amd-gate-tritons.txt, ~2.6 GB).
#
# Idempotent: re-running skips what is already there. Stops at the first failed
# step with a message naming it (exit 1); never reports "ready" after a failure.
# Environment: as scripts/setup.sh (PYTHON, SETUP_DEV_MIN_FREE_GB).
set -euo pipefail
cd "$(dirname "$0")/.."
SETUP_NAME=setup-dev
# shellcheck source=scripts/setup-common.sh
. scripts/setup-common.sh
SETUP_NAME=setup-dev bash scripts/setup.sh || exit 1

OVERLAY=.cache/sglang-0.5.16
if [ ! -f "$OVERLAY/sglang/__init__.py" ]; then
  log "installing the SGLang 0.5.16 overlay into $OVERLAY"
  quiet_pip "${PIP[@]}" install -q --no-deps --upgrade --target "$OVERLAY" -r requirements/sglang-0.5.16-overlay.txt
fi

WHEELS=.cache/wheels
mkdir -p "$WHEELS"
CONTRACT=$(sglang_version contract-wheels)
for v in $CONTRACT; do
  if ! ls "$WHEELS"/sglang-"$v"-*.whl >/dev/null 2>&1; then
    log "downloading sglang==$v (no deps) for the surface contract tests"
    quiet_pip "${PIP[@]}" download -q --no-deps -d "$WHEELS" "sglang==$v"
  fi
done
# Triton versions for the AMD compile gate (tests/test_amd_gate.py), unpacked
# (never imported by .venv itself: the gate puts one first on PYTHONPATH in a
# subprocess). 3.5.1: buffer ops off by default; 3.6.0: on by default; 3.7.0:
# what aiter pins; 3.9.0: the newest on PyPI. The installed one (.venv's) is
# the fifth.
while read -r -u 3 v; do
  v=${v%%#*}
  v=${v//[[:space:]]/}
  [ -n "$v" ] || continue
  if [ ! -f ".cache/triton/$v/triton/__init__.py" ]; then
    log "unpacking triton==$v into .cache/triton/$v for the AMD compile gate"
    rm -rf ".cache/triton/$v"
    quiet_pip "${PIP[@]}" install -q --no-deps --no-compile --target ".cache/triton/$v" "triton==$v"
  fi
done 3< requirements/amd-gate-tritons.txt
log "done: $VENV and the test caches are ready"
