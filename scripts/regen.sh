#!/usr/bin/env bash
# Run every generator of the checkout's generated files, or check them.
#
#   bash scripts/regen.sh                     rewrite what is out of date
#   bash scripts/regen.sh --check             write nothing; exit 1 naming each stale file
#   bash scripts/regen.sh --with-rocm-table   also regenerate docs/benchmarks.md's ROCm
#                                             table (scripts/amd_gate_table.sh)
#
# The fast generators (seconds, every run and every --check):
#   patches/<name>.toml, README patch table   python -m sglang_kv5d.manifests
#   docs/rules.md                             python -m sglang_kv5d.rules --markdown
#   README rules, speculative, switches and   python -m sglang_kv5d.rules --update-readme
#     versions tables
# The ROCm table is opt-in: it runs the AMD compile gate (every kernel for
# gfx942 / gfx950 on five Tritons, about 15 minutes on a CPU machine, and it
# needs the Tritons scripts/setup-dev.sh unpacks and ../shared's aiter source).
# Its freshness is checked by the gate itself (tests/test_amd_gate.py,
# test_docs_table_is_the_gates_own), not by --check.
#
# Needs .venv (bash scripts/setup.sh). scripts/test.sh runs --check.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
CHECK=0
ROCM=0
for a in "$@"; do
  case "$a" in
    --check) CHECK=1 ;;
    --with-rocm-table) ROCM=1 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "regen.sh: unknown argument $a (see --help)" >&2; exit 2 ;;
  esac
done
if [ "$CHECK" = 1 ] && [ "$ROCM" = 1 ]; then
  echo "regen.sh: --check covers the fast generators only; the AMD gate checks the ROCm table itself" >&2
  exit 2
fi
PY=.venv/bin/python
[ -x "$PY" ] || { echo "regen.sh: $PY is missing: run bash scripts/setup.sh first" >&2; exit 2; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
status=0
stale() { echo "regen.sh: $1 is stale: run bash scripts/regen.sh" >&2; status=1; }

if [ "$CHECK" = 1 ]; then
  "$PY" -m sglang_kv5d.manifests --check || status=1
  "$PY" -m sglang_kv5d.rules --markdown > "$TMP/rules.md" || { echo "regen.sh: python -m sglang_kv5d.rules --markdown failed" >&2; exit 1; }
  cmp -s "$TMP/rules.md" docs/rules.md || stale docs/rules.md
  cp README.md "$TMP/README.md"
  "$PY" -m sglang_kv5d.rules --update-readme "$TMP/README.md" || exit 1
  cmp -s "$TMP/README.md" README.md || stale "README.md (its rules, speculative, switches or versions table)"
  [ "$status" = 0 ] && echo "regen.sh: every generated file is up to date" >&2
  exit $status
fi

"$PY" -m sglang_kv5d.manifests --write || status=1
"$PY" -m sglang_kv5d.rules --markdown > "$TMP/rules.md" || exit 1
cmp -s "$TMP/rules.md" docs/rules.md || { cp "$TMP/rules.md" docs/rules.md && echo "wrote docs/rules.md"; }
cp README.md "$TMP/README.md"
"$PY" -m sglang_kv5d.rules --update-readme README.md || exit 1
cmp -s "$TMP/README.md" README.md || echo "wrote README.md (rules, speculative, switches, versions tables)"
if [ "$ROCM" = 1 ]; then
  bash scripts/amd_gate_table.sh || status=1
fi
exit $status
