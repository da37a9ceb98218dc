#!/usr/bin/env bash
# On a GPU machine without SGLang (the H200 proxy), from the repository root, with .device carried
# (built by lab/sglang_carry.sh): unpack SGLang 0.5.23's import set, then run against it
#   1. `sglang-kv5d selftest` (cpu-small and gpu-large; the main job, patched SGLang end to end),
#   2. tests/gpu (the prefix-valid GPU test needs SGLang, so it runs only here).
# Writes to $OUT (default /tmp/kv5d_selftest): env.txt, selftest.txt, gpu_tests.txt.
# Pass COMMIT=$(git rev-parse --short HEAD) from the machine the tree came from.
# Exit status: 0 when both steps passed, else 1 (each step's rc is printed).
set -u
OUT=${OUT:-/tmp/kv5d_selftest}
mkdir -p "$OUT"
PY=$(command -v python3 || command -v python)
SITE=${KV5D_SITE:-/tmp/site312}
if [ ! -s .device/sglang_site312.tar.xz ] || [ ! -f .device/stubs/sgl_kernel/__init__.py ]; then
  echo "device_selftest: .device/sglang_site312.tar.xz or the sgl_kernel stub is missing: run lab/sglang_carry.sh and carry .device" >&2
  exit 2
fi
mkdir -p "$SITE" && tar -xJf .device/sglang_site312.tar.xz -C "$SITE" || { echo "device_selftest: unpacking failed" >&2; exit 2; }
export PYTHONPATH="$SITE:$PWD:$PWD/.device/stubs:$PWD/.device/pylib${PYTHONPATH:+:$PYTHONPATH}"
{
  date -u
  echo "commit ${COMMIT:-not given}"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
  $PY -V
  $PY -c "import torch, triton, sglang; print('torch', torch.__version__, 'triton', triton.__version__, 'sglang', sglang.__version__)"
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
timeout "${SELFTEST_TIMEOUT:-300}" $PY -m sglang_kv5d.cli selftest > "$OUT/selftest.txt" 2>&1
st=$?
echo "selftest rc=$st"
grep -h "=>" "$OUT/selftest.txt" || tail -n 5 "$OUT/selftest.txt"
timeout "${TEST_TIMEOUT:-240}" $PY -m pytest tests/gpu -m gpu -q -p no:cacheprovider -ra > "$OUT/gpu_tests.txt" 2>&1
gt=$?
echo "tests/gpu rc=$gt"
tail -n 3 "$OUT/gpu_tests.txt"
[ "$st" -eq 0 ] && [ "$gt" -eq 0 ]
