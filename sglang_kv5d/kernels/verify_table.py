"""Speculative-verify page tables in ONE Triton launch (the GPU path of
``speculative.verify_tables.build_verify_page_tables``).

    verify_page_tables(req_to_token, req_pool_indices, seq_lens, draft_num, page_size, out,
                       swa_mapping=None, swa_out=None)

The same tables as the torch builder (``build_verify_page_tables_torch``, the
reference), bit for bit, for every metadata value:

    pages[i] = clamp(floor((seq_lens[i] + draft_num + page - 1) / page),
                     0, min(width, cdiv(req_to_token.shape[1], page)))
    r        = clamp(req_pool_indices[i], 0, req_to_token.shape[0] - 1)
    out[i, j]     = floor(req_to_token[r, j * page] / page)               j < pages[i]
    swa_out[i, j] = floor(swa_mapping[clamp(req_to_token[r, j * page],
                                            0, len(swa_mapping) - 1)] / page)
    out[i, j] = swa_out[i, j] = 0                                          pages[i] <= j < width

for ``i < bs``; rows ``>= bs`` and columns ``>= width`` of a wider buffer are
not touched. Sums wrap as int64 (as torch's do), divisions round toward minus
infinity (torch's ``//``: a negative slot gives a negative block id), the
stores keep the low bits of the int64 result (torch's ``copy_`` into int32).

Tensors (one device; metadata values are read only by the kernel, never by
the host, so the launch can precede CUDA-graph replay):

    req_to_token      (rows, cols)  int32 | int64  any strides (views are fine)
    req_pool_indices  (bs,)         int32 | int64  any stride
    seq_lens          (bs,)         int32 | int64  any stride
    out               (>= bs, width) int32 | int64 rows and columns must not
                                                   overlap (row-major, a wider
                                                   buffer's columns, ... )
    swa_mapping       (slots,)      int32 | int64  or None (full slot -> SWA slot)
    swa_out           (>= bs, width) int32 | int64 or None, with swa_mapping

Other dtypes or self-overlapping outs are refused with ValueError here
(``verify_table_refusal`` says why); ``build_verify_page_tables`` sends such
calls to the torch builder.

The kernel. Grid ``(bs, programs per row)``: program ``(i, c)`` reads
``seq_lens[i]`` and ``req_pool_indices[i]`` once, clamps them, then walks
chunks ``c, c + programs, ...`` of ``BLOCK`` columns of row ``i`` (a
grid-stride loop, so any width fits the 65535 programs of grid axis 1). Per
chunk: one gather of ``req_to_token`` masked to the live columns (``j <
pages``, which also keeps ``j * page < cols``: no read outside the row), the
block ids (0 where not live), one store masked to ``j < width``; with SWA one
more gather of ``swa_mapping`` at the clamped slots (masked the same way) and
one more store. Every address is an int64 offset (row x stride products of a
large ``req_to_token`` exceed 2**31; the kernel is launch-bound, so the
64-bit arithmetic costs nothing measurable).

Launch configuration (``launch_config``, from the width and the target's
warp size only): ``BLOCK`` = the row width rounded up to a power of two,
between one warp's lanes and 1024 columns; warps such that each lane holds
at least 4 columns (one 16-byte int32 store), at most 4.

Host cost. The kernel's GPU time is a few microseconds; a call costs its
launch. Measured on an H200 (2026-12-02, Triton 3.6.0, a gVisor host, noisy):
Triton's own launch of this kernel 25-33 us of host time, the whole
``build_verify_page_tables`` 50-62 us (its checks, the refusal and the
launch bookkeeping about 6 us of that on a bare-metal CPU), the torch builder
170-320 us on the same machines. So the configuration is cached per width and
target, the target per device, strides are read once per tensor, and the
SWA arguments are None without SWA (nothing for Triton to specialise).

Under the CPU interpreter (``target_of`` gives ``INTERPRETER``) the same
kernel runs: the column loop's counter is then a Python int, which is why
the columns are built as ``arange(...).to(int64) + c0``.
"""

from __future__ import annotations

import functools
from typing import NamedTuple, Optional, Tuple

import torch
import triton
import triton.language as tl

from ..platform import KernelTarget, target_of
from .verify_table_args import check_verify_table_args

__all__ = ["verify_page_tables", "launch_checked", "launch_config", "verify_table_refusal", "failure_key",
           "key_text", "VerifyTableKey", "MAX_BLOCK", "MAX_WIDTH"]

MAX_BLOCK = 1024  # columns per program and chunk
MAX_WIDTH = 2**30  # wider rows go to the torch builder (int32 column loop)
_MAX_ROW_PROGRAMS = 65535  # CUDA / HIP limit of grid axis 1
_MAX_BS = 2**31 - 1  # grid axis 0
_INDEX_DTYPES = (torch.int32, torch.int64)
_TABLE_DTYPES = (torch.int32, torch.int64)


@triton.jit
def _floor_div(x, PAGE: tl.constexpr):
    """floor(x / PAGE) of int64 ``x`` (torch's ``//``), exact for every value:
    for x < 0 it is ~(~x // PAGE) with ~x = -x - 1 >= 0 (no overflow at the
    int64 minimum), so the division only ever sees non-negative numerators,
    where truncating (the GPU, the interpreter) and flooring agree."""
    neg = x < 0
    q = tl.where(neg, ~x, x) // PAGE
    return tl.where(neg, ~q, q)


@triton.jit(do_not_specialize=["width", "max_pages", "last_row", "last_slot", "add"])
def _verify_page_table_kernel(
    r2t_ptr, rp_ptr, seq_ptr, out_ptr, map_ptr, swa_ptr,
    width, max_pages, last_row, last_slot, add,
    s_r2t_row, s_r2t_col, s_rp, s_seq, s_out_row, s_out_col, s_map, s_swa_row, s_swa_col,
    PAGE: tl.constexpr, BLOCK: tl.constexpr, HAS_SWA: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    first = tl.program_id(1)
    step = tl.num_programs(1) * BLOCK
    num = tl.load(seq_ptr + row * s_seq).to(tl.int64) + add  # wraps as torch's int64 sum does
    pages = tl.minimum(tl.where(num < 0, 0, num // PAGE), max_pages)  # num >= 0: // is floor
    r = tl.load(rp_ptr + row * s_rp).to(tl.int64)
    r = tl.minimum(tl.maximum(r, 0), last_row)
    src = r2t_ptr + r * s_r2t_row
    dst = out_ptr + row * s_out_row
    for c0 in range(first * BLOCK, width, step):
        cols = tl.arange(0, BLOCK).to(tl.int64) + c0
        in_row = cols < width
        live = cols < pages  # pages <= cdiv(r2t cols, PAGE): cols * PAGE is inside the row
        slot = tl.load(src + cols * PAGE * s_r2t_col, mask=live, other=0).to(tl.int64)
        blk = tl.where(live, _floor_div(slot, PAGE), 0)
        tl.store(dst + cols * s_out_col, blk.to(out_ptr.dtype.element_ty), mask=in_row)
        if HAS_SWA:
            safe = tl.minimum(tl.maximum(slot, 0), last_slot)
            swa_slot = tl.load(map_ptr + safe * s_map, mask=live, other=0).to(tl.int64)
            swa_blk = tl.where(live, _floor_div(swa_slot, PAGE), 0)
            tl.store(swa_ptr + row * s_swa_row + cols * s_swa_col, swa_blk.to(swa_ptr.dtype.element_ty),
                     mask=in_row)


# --------------------------------------------------------------------------- #
# host                                                                        #
# --------------------------------------------------------------------------- #


def launch_config(width: int, target: KernelTarget) -> Tuple[int, int]:
    """``(BLOCK, num_warps)`` for rows of ``width`` columns on ``target``."""
    return _launch_config(int(width), target)[:2]


@functools.lru_cache(maxsize=256)
def _launch_config(width: int, target: KernelTarget) -> Tuple[int, int, int]:
    """``(BLOCK, num_warps, programs per row)``; cached: it runs on every verify step."""
    warp = max(1, int(target.warp_size))
    block = min(MAX_BLOCK, max(triton.next_power_of_2(max(width, 1)), warp))
    return block, max(1, min(4, block // (4 * warp))), min(triton.cdiv(width, block), _MAX_ROW_PROGRAMS)


_TARGETS: dict = {}


def _target_of(device) -> KernelTarget:
    """``target_of(device)``, remembered per device (it reads the environment)."""
    target = _TARGETS.get(device)
    if target is None:
        target = _TARGETS[device] = target_of(device)
    return target


def _overlaps(t) -> bool:
    """Do two elements of the 2-D ``t`` share memory (a stride 0, rows over each other)?"""
    (n0, n1), (s0, s1) = t.shape, t.stride()
    if s1 == 1 and s0 >= n1:  # row-major, maybe a wider buffer's columns: the tables SGLang allocates
        return False
    if n0 <= 1 or n1 <= 1:
        return (n0 > 1 and s0 == 0) or (n1 > 1 and s1 == 0)
    (small, n_small), big = sorted(((s0, n0), (s1, n1)))
    return small < 1 or big[0] < small * n_small


def verify_table_refusal(req_to_token, req_pool_indices, seq_lens, out, swa_mapping=None,
                         swa_out=None) -> Optional[str]:
    """Why the kernel does not take these tensors, or None. Shapes already
    checked (``check_verify_table_args``); ``out`` and ``swa_out`` are the
    ``bs`` rows to be written (``out[:bs]``). Cheap: it runs on every verify step."""
    device = out.device
    named = (("req_to_token", req_to_token, _INDEX_DTYPES), ("req_pool_indices", req_pool_indices, _INDEX_DTYPES),
             ("seq_lens", seq_lens, _INDEX_DTYPES), ("out", out, _TABLE_DTYPES))
    if swa_out is not None:
        named += (("swa_mapping", swa_mapping, _INDEX_DTYPES), ("swa_out", swa_out, _TABLE_DTYPES))
    for name, t, allowed in named:
        if t.dtype not in allowed:
            return f"{name} is {t.dtype}, the kernel takes {' or '.join(str(d) for d in allowed)}"
        if t.device != device:
            return f"{name} is on {t.device}, out on {device}"
    for name, t in (("out", out), ("swa_out", swa_out)):
        if t is not None and _overlaps(t):
            return f"{name} (strides {tuple(t.stride())}) has elements that share memory"
    if out.shape[1] > MAX_WIDTH:
        return f"rows of {out.shape[1]} block ids (the kernel takes up to {MAX_WIDTH})"
    if out.shape[0] > _MAX_BS:
        return f"{out.shape[0]} requests (the kernel takes up to {_MAX_BS})"
    return None


class VerifyTableKey(NamedTuple):
    """What a compile of the kernel depends on (apart from stride specialisations)."""

    req_to_token: str
    req_pool_indices: str
    seq_lens: str
    out: str
    swa_mapping: str  # "" without SWA
    swa_out: str
    page: int
    block: int
    num_warps: int
    device: str


def _dname(t) -> str:
    return "" if t is None else str(t.dtype).replace("torch.", "")


def failure_key(req_to_token, req_pool_indices, seq_lens, page_size, out, swa_mapping=None, swa_out=None,
                *, _target: Optional[KernelTarget] = None) -> VerifyTableKey:
    block, warps = launch_config(int(out.shape[1]), _target or _target_of(out.device))
    return VerifyTableKey(_dname(req_to_token), _dname(req_pool_indices), _dname(seq_lens), _dname(out),
                          _dname(swa_mapping), _dname(swa_out), int(page_size), block, warps, str(out.device))


def key_text(key: VerifyTableKey) -> str:
    swa = f", SWA mapping {key.swa_mapping} -> {key.swa_out}" if key.swa_mapping else ""
    return (f"req_to_token {key.req_to_token}, req_pool_indices {key.req_pool_indices}, seq_lens {key.seq_lens}, "
            f"table {key.out}{swa}, page {key.page}, BLOCK {key.block}, {key.num_warps} warps")


def verify_page_tables(req_to_token, req_pool_indices, seq_lens, draft_num: int, page_size: int, out,
                       swa_mapping=None, swa_out=None, *, _target: Optional[KernelTarget] = None,
                       _config: Optional[dict] = None):
    """Fill ``out[:bs]`` (and ``swa_out[:bs]``) in one launch; returns
    ``(out[:bs], swa_out[:bs] or None)``. Shapes and dtypes: the module
    docstring. ValueError, before anything is launched, on malformed shapes
    (``check_verify_table_args``) and on tensors the kernel does not take
    (``verify_table_refusal``). ``_target`` compiles for another GPU than
    ``out``'s device (``kernels/aot.py``); ``_config`` overrides ``block``,
    ``num_warps`` and ``programs`` (per row; tests)."""
    bs, width = check_verify_table_args(req_to_token, req_pool_indices, seq_lens, draft_num, page_size, out,
                                        swa_mapping, swa_out)
    table = out[:bs]
    swa_table = None if swa_out is None else swa_out[:bs]
    if bs == 0 or width == 0:
        return table, swa_table
    why = verify_table_refusal(req_to_token, req_pool_indices, seq_lens, table, swa_mapping, swa_table)
    if why is not None:
        raise ValueError(f"verify page table kernel: {why}")
    launch_checked(req_to_token, req_pool_indices, seq_lens, int(draft_num), int(page_size), table, swa_mapping,
                   swa_table, _target=_target, _config=_config)
    return table, swa_table


def launch_checked(req_to_token, req_pool_indices, seq_lens, draft_num: int, page_size: int, table,
                   swa_mapping=None, swa_table=None, *, _target: Optional[KernelTarget] = None,
                   _config: Optional[dict] = None) -> None:
    """The launch of :func:`verify_page_tables` for arguments it has checked:
    ``table`` / ``swa_table`` exactly ``bs`` rows, ``bs`` and width > 0, no
    refusal, ``draft_num`` and ``page_size`` ints. ``build_verify_page_tables``
    calls it after its own checks.

    Host cost matters here (the launch is the whole cost of a verify step's
    tables): the configuration is cached per width and target, each tensor's
    strides are read once, and without SWA its arguments are None (constexpr
    for Triton, nothing to specialise)."""
    bs, width = table.shape
    block, num_warps, programs = _launch_config(width, _target or _target_of(table.device))
    if _config:
        block, num_warps, programs = _override(_config, width, block, num_warps)
    rows, cols = req_to_token.shape
    r2t_s0, r2t_s1 = req_to_token.stride()
    out_s0, out_s1 = table.stride()
    if swa_table is None:
        mapping = last_slot = map_s = swa_s0 = swa_s1 = None
    else:
        mapping, last_slot, (map_s,) = swa_mapping, swa_mapping.shape[0] - 1, swa_mapping.stride()
        swa_s0, swa_s1 = swa_table.stride()
    _verify_page_table_kernel[(bs, programs)](
        req_to_token, req_pool_indices, seq_lens, table, mapping, swa_table,
        width, min(width, -(-cols // page_size)), rows - 1, last_slot, draft_num + page_size - 1,
        r2t_s0, r2t_s1, req_pool_indices.stride(0), seq_lens.stride(0), out_s0, out_s1, map_s, swa_s0, swa_s1,
        PAGE=page_size, BLOCK=block, HAS_SWA=swa_table is not None, num_warps=num_warps,
    )


def _override(cfg: dict, width: int, block: int, num_warps: int) -> Tuple[int, int, int]:
    """``_config`` (tests): ``block``, ``num_warps``, ``programs`` per row, checked."""
    unknown = set(cfg) - {"block", "num_warps", "programs"}
    if unknown:
        raise ValueError(f"_config: unknown keys {sorted(unknown)}")
    block = int(cfg.get("block", block))
    num_warps = int(cfg.get("num_warps", num_warps))
    if block < 1 or block & (block - 1) or num_warps < 1 or num_warps & (num_warps - 1):
        raise ValueError(f"_config: block and num_warps must be powers of two, got {block}, {num_warps}")
    programs = int(cfg.get("programs", triton.cdiv(width, block)))
    if programs < 1:
        raise ValueError(f"_config programs: expected >= 1, got {programs}")
    return block, num_warps, min(programs, _MAX_ROW_PROGRAMS)
