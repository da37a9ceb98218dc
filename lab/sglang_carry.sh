#!/usr/bin/env bash
# Build, on this machine, what a GPU machine without SGLang needs to run the overlay
# against real SGLang (the H200 proxy: Python 3.12, no network, 64 MiB carry):
#   .device/sglang_site312.tar.xz   SGLang 0.5.23's import set for CPython 3.12
#                                   (../shared/device/build_sglang_closure.py; about 42 MB)
#   .device/stubs/sgl_kernel/       the import-only sgl_kernel stand-in (every op raises if called)
# Reuses an existing archive unless REBUILD=1. Needs .venv (scripts/setup-dev.sh) and a python3.12
# (PY312=... names one). `.device/` must be git-ignored (.git/info/exclude) so it travels only
# when carried. Then, on the GPU machine, with carry [".device"]: bash lab/device_selftest.sh
set -euo pipefail
cd "$(dirname "$0")/.."
shared=${KV5D_SHARED_DEVICE:-../shared/device}
[ -f "$shared/build_sglang_closure.py" ] || { echo "sglang_carry: $shared/build_sglang_closure.py not found (set KV5D_SHARED_DEVICE)" >&2; exit 2; }
[ -x .venv/bin/python ] || { echo "sglang_carry: .venv missing: run bash scripts/setup-dev.sh first" >&2; exit 2; }
git check-ignore -q .device/x || { echo "sglang_carry: .device/ is not ignored: add it to .git/info/exclude" >&2; exit 2; }
mkdir -p .device/stubs/sgl_kernel
cp "$shared/sgl_kernel_stub.py" .device/stubs/sgl_kernel/__init__.py
if [ "${REBUILD:-0}" = 1 ] || [ ! -s .device/sglang_site312.tar.xz ]; then
  python3 "$shared/build_sglang_closure.py" --venv .venv --out .device/sglang_site312.tar.xz
fi
du -sh .device/sglang_site312.tar.xz .device/stubs
echo 'carry: [".device"]   then on the GPU machine: bash lab/device_selftest.sh'
