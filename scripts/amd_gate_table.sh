#!/usr/bin/env bash
# Regenerate the static ROCm table in docs/benchmarks.md from the AMD compile
# gate (tests/test_amd_gate.py compiles every kernel for gfx942 / gfx950 on
# every Triton it covers, on this CPU machine, and writes the table).
set -euo pipefail
cd "$(dirname "$0")/.."
KV5D_WRITE_GATE_TABLE=1 .venv/bin/python -m pytest -q -p no:cacheprovider tests/test_amd_gate.py "$@"
