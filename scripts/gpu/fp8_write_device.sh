#!/usr/bin/env bash
# One device run for the fused FP8 write: GPU correctness tests, an optional
# launch-config sweep, then the benchmark. Everything lands in $OUT.
#   scripts/gpu/fp8_write_device.sh [--sweep [MODE]] [--no-bench] [--dtypes float8_e4m3fn,float8_e4m3fnuz]
# MODE is a mode of scripts/gpu/fp8_write_sweep.py (default all).
# Needs (carried, ignored): .device/fp8_write_peers (SGLang's two Triton kernel
# files, for the peers and the round-trip test) and .device/pylib (pytest) when
# the device has no pytest.
# With --sweep this writes eight files, the most the device machine returns from
# $OUT: anything else written there in the same call (a second benchmark, an
# A/B) is dropped. Run such extras in their own call or tar them into one file.
set -u
OUT=${OUT:-/tmp/fp8_out}
mkdir -p "$OUT"
SWEEP=0
SWEEP_MODE=all
BENCH=1
DTYPES=float8_e4m3fn,float8_e4m3fnuz
TEST_TIMEOUT=${TEST_TIMEOUT:-110}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-170}
while [ $# -gt 0 ]; do
  case "$1" in
    --sweep) SWEEP=1; case "${2:-}" in ""|--*) ;; *) SWEEP_MODE="$2"; shift ;; esac ;;
    --no-bench) BENCH=0 ;;
    --dtypes) DTYPES="$2"; shift ;;
  esac
  shift
done
PY=$(command -v python || command -v python3)
export PYTHONPATH="$PWD:$PWD/.device/fp8_write_peers${PYTHONPATH:+:$PYTHONPATH}"
export TRITON_CACHE_DIR="$PWD/.device/triton_cache_fp8"
{ date -u; echo "commit: ${COMMIT:-not given (pass COMMIT=...; git HEAD of the device copy may be stale)}"; nvidia-smi; $PY -V; $PY -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > "$OUT/env.txt" 2>&1
$PY -c "import pytest" 2>/dev/null || export PYTHONPATH="$PYTHONPATH:$PWD/.device/pylib"
T0=$(date +%s)
timeout "$TEST_TIMEOUT" $PY -m pytest tests/gpu/test_fp8_write_gpu.py -m gpu -q -p no:cacheprovider --durations=8 > "$OUT/gpu_tests.txt" 2>&1
echo "pytest rc=$? after $(( $(date +%s) - T0 ))s" | tee -a "$OUT/gpu_tests.txt"
tail -5 "$OUT/gpu_tests.txt"
if [ "$SWEEP" = 1 ]; then
  T1=$(date +%s)
  timeout "${SWEEP_TIMEOUT:-80}" $PY scripts/gpu/fp8_write_sweep.py "$OUT/sweep.json" "$SWEEP_MODE" > "$OUT/sweep.txt" 2>&1
  echo "sweep rc=$? after $(( $(date +%s) - T1 ))s" | tee -a "$OUT/sweep.txt"
fi
[ "$BENCH" = 1 ] || exit 0
T2=$(date +%s)
timeout "$BENCH_TIMEOUT" $PY scripts/gpu/fp8_write_bench.py "$OUT" "$DTYPES" > "$OUT/bench_stdout.txt" 2>&1
echo "bench rc=$? after $(( $(date +%s) - T2 ))s" | tee -a "$OUT/bench_stdout.txt"
tail -40 "$OUT/bench_stdout.txt"
