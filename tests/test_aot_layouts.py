"""The decode kernel's K/V tile loads, compiled for sm_90 on this CPU machine
(scripts/dev/aot_inspect.py), put neighbouring lanes on neighbouring 16-byte
vectors of the cache.

A tile whose axes show no contiguity leaves the lane order to a tie-break in
Triton's coalescing pass; once that put the 32 lanes of a warp on 32 chunks
1 KiB apart and every K sector was fetched in two halves (H200, 33% excess
sectors; docs/benchmarks-attention.md, fourth session). This checks the layout
the installed Triton chooses, in a subprocess without TRITON_INTERPRET.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.helpers.subproc import ROOT, clean_env

pytestmark = pytest.mark.sglang_independent


def _inspect(tmp_path, *args):
    env = clean_env()
    env.pop("TRITON_INTERPRET", None)
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "dev", "aot_inspect.py"), *args,
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.parametrize("kv,elems", [("bf16", 8), ("fp8", 16)])
def test_decode_kv_tiles_put_lanes_on_contiguous_vectors(tmp_path, kv, elems):
    out = _inspect(tmp_path, "decode", "--kv", kv)
    lines = out.splitlines()
    copies = [(lines[i], lines[i + 1]) for i, line in enumerate(lines)
              if "async_copy_global_to_local" in line and ("bf16" in line or "f8E4M3FN" in line)]
    assert len(copies) >= 2, out  # the K and the V tile (and their pipelined copies)
    for op, layout in copies:
        # 2-D [chunks (or token groups), contiguous elements]: 16 bytes per lane
        # along the contiguous axis, all 32 lanes of a warp on that axis
        assert re.search(r"\d+x\d+x!tt\.ptr", op), op
        assert f"sizePerThread = [1, {elems}]" in layout, (op, layout)
        assert "threadsPerWarp = [1, 32]" in layout and "order = [1, 0]" in layout, (op, layout)
    for sass in tmp_path.glob("*.sass"):  # where the wheel can disassemble: the copies are cp.async
        assert "LDGSTS" in sass.read_text()
