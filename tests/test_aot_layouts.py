"""The decode kernel's K/V tile loads, compiled for sm_90 on this CPU machine
(scripts/dev/aot_inspect.py), put neighbouring lanes on neighbouring 16-byte
vectors of the cache.

A tile whose axes show no contiguity leaves the lane order to a tie-break in
Triton's coalescing pass; once that put the 32 lanes of a warp on 32 chunks
1 KiB apart and every K sector was fetched in two halves (H200, 33% excess
sectors; docs/benchmarks.md, decisions: 5D decode attention). This checks the layout
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
              if "async_copy_global_to_local" in line and ("bf16" in line or "ptr<i8>" in line)]  # fp8: uint8 views
    assert len(copies) >= 2, out  # the K and the V tile (and their pipelined copies)
    for op, layout in copies:
        # 2-D [chunks (or token groups), contiguous elements]: 16 bytes per lane
        # along the contiguous axis, all 32 lanes of a warp on that axis
        assert re.search(r"\d+x\d+x!tt\.ptr", op), op
        assert f"sizePerThread = [1, {elems}]" in layout, (op, layout)
        assert "threadsPerWarp = [1, 32]" in layout and "order = [1, 0]" in layout, (op, layout)
    for sass in tmp_path.glob("*.sass"):  # where the wheel can disassemble: the copies are cp.async
        assert "LDGSTS" in sass.read_text()


def test_write_kernel_v_byte_stores_walk_tokens_first(tmp_path):
    """The fused FP8 write's 5D V byte stores (bytes path, 512 tokens, Llama-like):
    the as-loaded store is one 1-D tile with tokens innermost, so 16 lanes fill
    one 16-byte vector of a run on any Triton (the 3-D tile's lane order is a
    tie-break: tokens first on Triton 3.6, dims first from 3.7); the decode
    store's lanes walk 4 tokens, then 8 dims."""
    out = _inspect(tmp_path, "write", "--t", "512")
    lines = out.splitlines()
    stores = [(lines[i], lines[i + 1]) for i, line in enumerate(lines) if "tt.store" in line and "ptr<i8>" in line]
    flat = [(op, lay) for op, lay in stores if re.search(r"tt\.store \d+x!tt\.ptr<i8>", op)]
    assert len(flat) == 1, out
    assert "threadsPerWarp = [32]" in flat[0][1] and "sizePerThread = [1]" in flat[0][1], flat
    lanes = [(op, lay) for op, lay in stores if "tt.store 4x128x1x4x" in op]
    assert len(lanes) == 1, out
    tpw = [int(x) for x in re.search(r"threadsPerWarp = \[([\d, ]+)\]", lanes[0][1]).group(1).split(",")]
    assert tpw[0] * tpw[3] == 4 and tpw[1] == 8, lanes  # (token, dim, head, token block)


@pytest.mark.parametrize("layout,block_s", [("5d", 16), ("nhd", 16), ("5d", 1)])
def test_store_floor_compiles_with_whole_vector_stores(tmp_path, layout, block_s):
    """The benchmark's store floor compiles for the GPU (the interpreter misses
    errors the compiler makes, such as a name that is a scalar in one branch
    and a tensor in another); its 5D group stores and K stores take 16 bytes
    per lane."""
    out = _inspect(tmp_path, "floor", "--layout", layout, "--block-s", str(block_s))
    lines = out.splitlines()
    stores = [lines[i + 1] for i, line in enumerate(lines) if "tt.store" in line]
    assert len(stores) == (3 if layout == "5d" else 4), out  # K (+ NHD V), groups, loose bytes
    if block_s == 16:  # (one-slot programs have one warp: 4 lanes share a 16-byte K vector)
        assert re.search(r"sizePerThread = \[1, (1, )?16\]", stores[0]), out
    assert "sizePerThread = [16]" in stores[-2], out  # one whole group: 16 bytes per lane
