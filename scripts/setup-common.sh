# shellcheck shell=bash
# Shared by scripts/setup.sh and scripts/setup-dev.sh (sourced, from the checkout root).
# PIP and MIN_FREE_GB are used by the scripts that source this.
# shellcheck disable=SC2034
PY=${PYTHON:-python3.11}
VENV=.venv
PIP=("$VENV/bin/python" -m pip)
MIN_FREE_GB=${SETUP_DEV_MIN_FREE_GB:-9}
SETUP_NAME=${SETUP_NAME:-$(basename "$0" .sh)}
log() { printf '[%s] %s\n' "$SETUP_NAME" "$*" >&2; }
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
# The tested SGLang releases, written once in sglang_kv5d/versions.py, read with
# the base interpreter and the standard library only (nothing else is imported).
sglang_version() {
  local out
  out=$("$PY" -m sglang_kv5d.versions "$1") || die "'$PY -m sglang_kv5d.versions $1' failed"
  [ -n "$out" ] || die "'$PY -m sglang_kv5d.versions $1' printed nothing"
  printf '%s\n' "$out"
}
