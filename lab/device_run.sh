#!/usr/bin/env bash
# One GPU run: the GPU tests (tests/gpu) and `sglang-kv5d bench --what all`, from
# the repository root of a checkout on the GPU machine. Writes to $OUT (default
# /tmp/kv5d_device): env.txt, gpu_tests.txt, bench.json, bench.txt (tables),
# bench_err.txt (progress). The peers come from `python lab/prepare_peers.py`
# run where SGLang is installed, carried as .peer_sglang and
# .device/fp8_write_peers; .device/pylib may hold pytest for a machine without it.
# Pass COMMIT=$(git rev-parse --short HEAD) from the machine the tree came from
# (the copy's own git metadata may be stale).
set -u
OUT=${OUT:-/tmp/kv5d_device}
mkdir -p "$OUT"
PY=$(command -v python3 || command -v python)
export PYTHONPATH="$PWD:$PWD/.device/fp8_write_peers:$PWD/.peer_sglang:$PWD/.device/pylib${PYTHONPATH:+:$PYTHONPATH}"
export SGLANG_KV5D_PEER_PATH="$PWD/.peer_sglang"
{
  date -u
  echo "commit ${COMMIT:-not given}"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  $PY -V
  $PY -c "import torch, triton; print(torch.__version__, triton.__version__)"
} > "$OUT/env.txt" 2>&1
timeout "${TEST_TIMEOUT:-200}" $PY -m pytest tests/gpu -m gpu -q -p no:cacheprovider --durations=6 \
  > "$OUT/gpu_tests.txt" 2>&1
echo "tests rc=$?"
timeout "${BENCH_TIMEOUT:-360}" $PY -m sglang_kv5d.cli bench --what all --out "$OUT/bench.json" \
  > "$OUT/bench.txt" 2> "$OUT/bench_err.txt"
echo "bench rc=$?"
tail -n 3 "$OUT/gpu_tests.txt"
grep -h "targets" "$OUT/bench.txt"
