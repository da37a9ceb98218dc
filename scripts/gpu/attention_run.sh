#!/usr/bin/env bash
# One GPU session for the 5D attention work: correctness at full size, tuning sweep,
# benchmark table. Usage (repo root, .peer_sglang prepared and carried):
#   OUT=/some/dir COMMIT=<hash> bash scripts/gpu/attention_run.sh [tests|sweep|bench ...]
set -u
OUT=${OUT:-/tmp/attn_out}
mkdir -p "$OUT"
export PYTHONPATH="$PWD:$PWD/.peer_sglang:${PYTHONPATH:-}"
export SGLANG_KV5D_PEER_PATH="$PWD/.peer_sglang"
steps=${*:-tests sweep bench}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/gpu.txt"
# The device copy's git metadata can lag the working tree it was given: record the
# commit the caller names (COMMIT=$(git rev-parse HEAD) expanded on the dev machine).
echo "commit: ${COMMIT:-not given (pass COMMIT=...; git HEAD of the device copy may be stale)}" | tee -a "$OUT/gpu.txt"
for s in $steps; do
  t0=$(date +%s)
  case $s in
    tests) timeout ${T_TESTS:-90} python tests/gpu/test_attention_5d_gpu.py > "$OUT/gputest.log" 2>&1; echo "tests rc=$?" ;;
    sweep) timeout ${T_SWEEP:-100} python scripts/gpu/attention_sweep.py --json "$OUT/sweep.json" --budget-s ${SWEEP_BUDGET:-60} > "$OUT/sweep.log" 2>&1; echo "sweep rc=$?" ;;
    bench) timeout ${T_BENCH:-160} python -m sglang_kv5d.bench.attention --json "$OUT/bench.json" > "$OUT/bench.log" 2>&1; echo "bench rc=$?" ;;
  esac
  echo "$s took $(( $(date +%s) - t0 ))s"
done
tail -n 15 "$OUT"/gputest.log 2>/dev/null
tail -n 8 "$OUT"/sweep.log 2>/dev/null
tail -n 70 "$OUT"/bench.log 2>/dev/null
