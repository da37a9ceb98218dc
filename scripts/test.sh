#!/usr/bin/env bash
# The project's test command (README, .ci/run):
#   1. build or refresh the environment (scripts/setup-dev.sh),
#   2. check that every generated file is up to date (scripts/regen.sh --check),
#   3. run the whole suite on the newest tested SGLang (.venv),
#   4. run the SGLang-dependent tests again on SGLang 0.5.16
#      (.cache/sglang-0.5.16 first on PYTHONPATH).
# GPU tests are skipped on CPU machines with the reason shown (-ra).
# pytest's exit code 5 (no tests collected) counts as a failure.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
bash scripts/setup-dev.sh || exit 1

export PYTHONWARNINGS=ignore
status=0
echo "=== generated files (scripts/regen.sh --check) ==="
bash scripts/regen.sh --check || { echo "=== generated files are stale: run bash scripts/regen.sh and commit them ==="; status=1; }
run_pytest() {
  local label=$1; shift
  echo "=== pytest on $label ==="
  "$@"
  local rc=$?
  if [ "$rc" -eq 5 ]; then
    echo "=== $label: no tests were collected; that is a failure ==="
    rc=1
  fi
  [ "$rc" -eq 0 ] || status=1
  echo "=== $label: exit $rc ==="
}

NEWEST=$(.venv/bin/python -m sglang_kv5d.versions newest) || exit 1
run_pytest "SGLang $NEWEST" .venv/bin/python -m pytest -q "$@" tests
PYTHONPATH="$PWD/.cache/sglang-0.5.16${PYTHONPATH:+:$PYTHONPATH}" \
  run_pytest "SGLang 0.5.16" .venv/bin/python -m pytest -q -m "not sglang_independent" "$@" tests
exit $status
