"""Head-sliced PD transfer of SHUFFLE 5D pages between different attention-TP sizes (pure).

When prefill and decode run with different attention-TP sizes, each decode rank
holds another subset of the KV heads than each prefill rank, so a page is moved
by heads. SGLang's transfer engines slice inside every token row of an NHD page
``[page, heads, head_dim]``: one descriptor per token and layer side. In a SHUFFLE
5D page the head axis is outermost::

    K page  [H, D // X, page, X]      head h = bytes [h * D * page * e, (h + 1) * D * page * e)
    V page  [H, page // X, D_v, X]    head h = bytes [h * D_v * page * e, (h + 1) * D_v * page * e)
    e = element bytes, X = 16 // e    (8 for bf16/fp16, 16 for fp8)

so any run of consecutive heads of one page is ONE contiguous byte run, the same
form for K and V (only the head's byte size differs): one descriptor per page and
side. This module computes those descriptors; it imports nothing from SGLang and
no torch (numpy only), and validates every input: TP sizes, ranks and item
lengths come from the peer's bootstrap handshake and are treated as hostile.

Which heads go where mirrors SGLang's NHD math (``compute_head_slice_params`` in
``disaggregation/common/staging_buffer.py``, every tested release from 0.5.16 on), re-derived here:

    heads per rank   max(1, total // tp) on each side
    prefill TP > decode TP   each prefill rank sends all its heads; they land at
                             decode head (u * src_heads) % dst_heads, where
                             u = src_rank // max(1, src_tp // total) is the
                             prefill rank's distinct head group
    prefill TP <= decode TP  each decode rank takes dst_heads heads starting at
                             prefill head (u * dst_heads) % src_heads, where
                             u = dst_rank // max(1, dst_tp // total)

Replicated KV heads (more ranks than KV heads, e.g. 2 heads at TP 8): a rank
holds one head, ranks ``r`` with equal ``r // (tp // total)`` hold the same head.
Going down (TP 8 -> 4 with 2 heads) several prefill ranks write the same head to
the same decode bytes (identical data, as SGLang does); going up (TP 2 -> 8) the
decode ranks that replicate a head each take it from the one prefill rank that
holds it. Which prefill ranks feed which decode rank is SGLang's
(``CommonKVReceiver._resolve_rank_mapping``: decode rank d takes prefill ranks
d * r .. d * r + r - 1 when prefill TP = r * decode TP, and prefill rank
d // r when decode TP = r * prefill TP); :func:`plan_head_slice` refuses a
rank pair that mapping never forms.

Covered shapes, refused otherwise with a message naming them: TP sizes 1 ..
:data:`MAX_TP`, one a multiple of the other; on each side the total KV heads a
multiple of the TP size or the TP size a multiple of the total (SGLang's
``max(1, total // tp)`` silently drops heads otherwise).

    plan_head_slice(src_tp, dst_tp, src_rank, dst_rank, total_kv_heads)  -> HeadSlice
    plan_5d_side(slice, head_dim, page_size, dtype_size, x, src_item_len, dst_item_len) -> SidePlan
    page_descriptors(side, src_base, dst_base, src_pages, dst_pages, ...) -> (src, dst, lengths)
    nhd_token_descriptors(slice, ...)            SGLang's per-token NHD descriptors (draft regions)
    nhd_descriptor_count(num_pages, page_size)   the NHD path's count, for comparison
    unsupported_engine_reason(engine, staging)   why an engine path cannot move 5D heads
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Tuple

from ..surface_names import ENV_DISAGG_STAGING_BUFFER

__all__ = [
    "HeadSliceError",
    "HeadSlice",
    "SidePlan",
    "MAX_TP",
    "plan_head_slice",
    "plan_5d_side",
    "page_descriptors",
    "nhd_token_descriptors",
    "nhd_descriptor_count",
    "describe_counts",
    "unsupported_engine_reason",
    "FIX_EQUAL_TP",
]

#: Largest attention-TP size accepted from a peer.
MAX_TP = 1024
#: Largest total KV head count accepted.
MAX_HEADS = 1 << 16
#: Largest head_dim / page size accepted.
MAX_DIM = 1 << 16
#: Addresses and lengths must stay below this (64-bit unsigned arithmetic).
_ADDR_LIMIT = 1 << 63
#: Bytes per SHUFFLE vector (X * element bytes).
VECTOR_BYTES = 16

FIX_EQUAL_TP = (
    "run prefill and decode with the same attention-TP size (tp_size // dp_size equal on both roles), or "
    f"use the mooncake transfer backend without {ENV_DISAGG_STAGING_BUFFER}, whose head-sliced send "
    "sglang-kv5d moves 5D pages with (pd-head-slice-5d)"
)


class HeadSliceError(ValueError):
    """A head-sliced transfer this module does not cover, or a hostile/inconsistent input."""


def _int(name: str, value: Any, lo: int, hi: int) -> int:
    # bool is an int subclass; numpy integers are accepted through __index__.
    if isinstance(value, bool):
        raise HeadSliceError(f"{name} must be an integer, got {value!r}")
    try:
        v = int(value.__index__())
    except (AttributeError, TypeError):
        raise HeadSliceError(f"{name} must be an integer, got {type(value).__name__} {value!r}") from None
    if not lo <= v <= hi:
        raise HeadSliceError(f"{name}={v} is outside the accepted range {lo} .. {hi}")
    return v


@dataclass(frozen=True)
class HeadSlice:
    """Which heads one prefill rank sends to one decode rank (head units, per page).

    ``src_heads`` / ``dst_heads``: KV heads each rank of that side holds;
    the run is heads ``[src_head_start, src_head_start + num_heads)`` of the
    prefill rank into ``[dst_head_start, dst_head_start + num_heads)`` of the
    decode rank."""

    src_tp: int
    dst_tp: int
    src_rank: int
    dst_rank: int
    total_kv_heads: int
    src_heads: int
    dst_heads: int
    src_head_start: int
    dst_head_start: int
    num_heads: int


def _heads_per_rank(side: str, total: int, tp: int) -> int:
    if total % tp and tp % total:
        raise HeadSliceError(
            f"{side} attention-TP {tp} does not divide {total} KV heads (nor do the heads divide the TP size): "
            f"SGLang's max(1, {total} // {tp}) = {max(1, total // tp)} heads per rank would drop heads; "
            f"not covered. Fix: {FIX_EQUAL_TP}"
        )
    return max(1, total // tp)


def plan_head_slice(src_tp: Any, dst_tp: Any, src_rank: Any, dst_rank: Any, total_kv_heads: Any) -> HeadSlice:
    """The heads prefill rank ``src_rank`` (of ``src_tp``) sends to decode rank
    ``dst_rank`` (of ``dst_tp``), for a model with ``total_kv_heads`` KV heads.

    Ranks are taken modulo their TP size first (SGLang passes the global TP rank
    on the prefill side; attention-DP groups repeat the pattern). Raises
    :class:`HeadSliceError` for shapes not covered (see the module docstring)
    and for a rank pair SGLang's rank mapping never pairs."""
    src_tp = _int("prefill attention-TP size", src_tp, 1, MAX_TP)
    dst_tp = _int("decode attention-TP size", dst_tp, 1, MAX_TP)
    src_rank = _int("prefill rank", src_rank, 0, MAX_TP * MAX_TP) % src_tp
    dst_rank = _int("decode rank", dst_rank, 0, MAX_TP * MAX_TP) % dst_tp
    total = _int("total KV heads", total_kv_heads, 1, MAX_HEADS)
    if max(src_tp, dst_tp) % min(src_tp, dst_tp):
        raise HeadSliceError(
            f"prefill attention-TP {src_tp} and decode attention-TP {dst_tp}: neither is a multiple of the other; "
            f"SGLang's rank mapping and this transfer cover only integer ratios. Fix: {FIX_EQUAL_TP}"
        )
    src_heads = _heads_per_rank("prefill", total, src_tp)
    dst_heads = _heads_per_rank("decode", total, dst_tp)
    if src_tp >= dst_tp:
        ratio = src_tp // dst_tp
        if src_rank // ratio != dst_rank:
            raise HeadSliceError(
                f"prefill rank {src_rank} of {src_tp} does not feed decode rank {dst_rank} of {dst_tp} "
                f"(SGLang pairs decode rank d with prefill ranks d * {ratio} .. d * {ratio} + {ratio - 1})"
            )
        group = src_rank // max(1, src_tp // total)
        src_start, num, dst_start = 0, src_heads, (group * src_heads) % dst_heads
    else:
        ratio = dst_tp // src_tp
        if dst_rank // ratio != src_rank:
            raise HeadSliceError(
                f"decode rank {dst_rank} of {dst_tp} is not fed by prefill rank {src_rank} of {src_tp} "
                f"(SGLang pairs decode rank d with prefill rank d // {ratio})"
            )
        group = dst_rank // max(1, dst_tp // total)
        src_start, num, dst_start = (group * dst_heads) % src_heads, dst_heads, 0
    if src_start + num > src_heads or dst_start + num > dst_heads:  # cannot happen for covered shapes
        raise HeadSliceError(
            f"head run {src_start}+{num} of {src_heads} -> {dst_start}+{num} of {dst_heads} does not fit "
            f"(prefill TP {src_tp}, decode TP {dst_tp}, {total} KV heads)"
        )
    return HeadSlice(src_tp, dst_tp, src_rank, dst_rank, total, src_heads, dst_heads, src_start, dst_start, num)


@dataclass(frozen=True)
class SidePlan:
    """One side (K or V) of a 5D page: byte offsets inside a page and the run length.

    ``src_offset`` / ``dst_offset``: bytes from the page's start on each side;
    ``length``: bytes of the run; ``head_bytes`` = head_dim * page * element bytes."""

    src_item_len: int
    dst_item_len: int
    head_bytes: int
    src_offset: int
    dst_offset: int
    length: int


def plan_5d_side(
    head_slice: HeadSlice,
    head_dim: Any,
    page_size: Any,
    dtype_size: Any,
    x: Any,
    src_item_len: Any,
    dst_item_len: Any,
) -> SidePlan:
    """The page-relative run of one side of a SHUFFLE 5D page.

    ``head_dim``: D for K, D_v for V. ``src_item_len`` is the prefill pool's page
    bytes of that side (``get_contiguous_buf_infos`` item length),
    ``dst_item_len`` the decode peer's (from its registration). Both must be
    exactly heads-per-rank * head_dim * page * dtype_size; X must be
    16 // dtype_size and divide head_dim and page (the SHUFFLE 5D layout)."""
    d = _int("head_dim", head_dim, 1, MAX_DIM)
    p = _int("page size", page_size, 1, MAX_DIM)
    e = _int("dtype size", dtype_size, 1, 8)
    xv = _int("X", x, 1, VECTOR_BYTES)
    if xv * e != VECTOR_BYTES or d % xv or p % xv:
        raise HeadSliceError(
            f"not a SHUFFLE 5D geometry: X={xv}, element bytes {e} (X must be {VECTOR_BYTES} // {e}), "
            f"head_dim {d} and page size {p} must be multiples of X"
        )
    head_bytes = d * p * e
    src_len = _int("prefill KV item length", src_item_len, 1, _ADDR_LIMIT)
    dst_len = _int("decode KV item length", dst_item_len, 1, _ADDR_LIMIT)
    hs = head_slice
    if src_len != hs.src_heads * head_bytes:
        raise HeadSliceError(
            f"prefill KV item length {src_len} is not {hs.src_heads} heads x {d} dims x page {p} x {e} bytes "
            f"= {hs.src_heads * head_bytes} (a 5D page of this rank)"
        )
    if dst_len != hs.dst_heads * head_bytes:
        raise HeadSliceError(
            f"decode peer's KV item length {dst_len} is not {hs.dst_heads} heads x {d} dims x page {p} x {e} bytes "
            f"= {hs.dst_heads * head_bytes} for decode attention-TP {hs.dst_tp} with {hs.total_kv_heads} KV heads: "
            "the peer's geometry (heads, head_dim, page size or dtype) differs"
        )
    return SidePlan(src_len, dst_len, head_bytes, hs.src_head_start * head_bytes, hs.dst_head_start * head_bytes,
                    hs.num_heads * head_bytes)


def _pages(name: str, pages: Any, limit: Optional[int]):
    import numpy as np

    arr = np.asarray(pages)
    if arr.ndim != 1 and arr.size:
        arr = arr.reshape(-1)
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise HeadSliceError(f"{name} page ids must be integers, got dtype {arr.dtype}")
    arr = arr.astype(np.int64, copy=False).reshape(-1)
    if arr.size and int(arr.min()) < 0:
        raise HeadSliceError(f"{name} page ids must be >= 0, got {int(arr.min())}")
    if arr.size and limit is not None and int(arr.max()) >= limit:
        raise HeadSliceError(f"{name} page id {int(arr.max())} is past the region's {limit} pages")
    return arr


def page_descriptors(
    side: SidePlan,
    src_base: Any,
    dst_base: Any,
    src_pages: Any,
    dst_pages: Any,
    src_num_pages: Optional[int] = None,
    dst_num_pages: Optional[int] = None,
) -> Tuple[list, list, list]:
    """(src addresses, dst addresses, lengths): one descriptor per page of one
    layer side, page ``src_pages[i]`` of the prefill region at ``src_base`` to
    page ``dst_pages[i]`` of the decode region at ``dst_base``. Python ints
    (what the transfer engines take). ``*_num_pages`` bound the page ids when the
    region size is known."""
    import numpy as np

    sb = _int("prefill region address", src_base, 0, _ADDR_LIMIT)
    db = _int("decode region address", dst_base, 0, _ADDR_LIMIT)
    sp = _pages("prefill", src_pages, src_num_pages)
    dp = _pages("decode", dst_pages, dst_num_pages)
    if sp.size != dp.size:
        raise HeadSliceError(f"page count mismatch: prefill {sp.size}, decode {dp.size}")
    if not sp.size:
        return [], [], []
    for name, base, pages, item in (("prefill", sb, sp, side.src_item_len), ("decode", db, dp, side.dst_item_len)):
        if base + (int(pages.max()) + 1) * item >= _ADDR_LIMIT:
            raise HeadSliceError(f"{name} page {int(pages.max())} x {item} bytes from {base:#x} overflows 63 bits")
    src = (sb + side.src_offset + sp.astype(np.uint64) * np.uint64(side.src_item_len)).tolist()
    dst = (db + side.dst_offset + dp.astype(np.uint64) * np.uint64(side.dst_item_len)).tolist()
    return [int(a) for a in src], [int(a) for a in dst], [side.length] * len(src)


def nhd_token_descriptors(
    head_slice: HeadSlice,
    head_dim: Any,
    page_size: Any,
    dtype_size: Any,
    src_item_len: Any,
    dst_item_len: Any,
    src_base: Any,
    dst_base: Any,
    src_pages: Any,
    dst_pages: Any,
    src_num_pages: Optional[int] = None,
) -> Tuple[list, list, list]:
    """SGLang's NHD head-sliced descriptors (one per token) for an NHD region
    ``[page, heads, head_dim]`` (a speculative draft's region inside a 5D
    manager): the heads of ``head_slice`` of token ``t`` of each page, at
    ``page * item_len + t * heads * head_dim * e + head_start * head_dim * e``."""
    import numpy as np

    d = _int("head_dim", head_dim, 1, MAX_DIM)
    p = _int("page size", page_size, 1, MAX_DIM)
    e = _int("dtype size", dtype_size, 1, 8)
    row = d * e
    hs = head_slice
    src_len = _int("prefill KV item length", src_item_len, 1, _ADDR_LIMIT)
    dst_len = _int("decode KV item length", dst_item_len, 1, _ADDR_LIMIT)
    if src_len != p * hs.src_heads * row or dst_len != p * hs.dst_heads * row:
        raise HeadSliceError(
            f"NHD KV item lengths (prefill {src_len}, decode {dst_len}) are not page {p} x "
            f"{hs.src_heads} / {hs.dst_heads} heads x {d} dims x {e} bytes"
        )
    side = SidePlan(src_len, dst_len, row, hs.src_head_start * row, hs.dst_head_start * row, hs.num_heads * row)
    src, dst, _ = page_descriptors(side, src_base, dst_base, src_pages, dst_pages, src_num_pages=src_num_pages)
    if not src:
        return [], [], []
    tok = np.arange(p, dtype=np.uint64)
    s = (np.asarray(src, dtype=np.uint64)[:, None] + tok * np.uint64(hs.src_heads * row)).reshape(-1).tolist()
    t = (np.asarray(dst, dtype=np.uint64)[:, None] + tok * np.uint64(hs.dst_heads * row)).reshape(-1).tolist()
    return [int(a) for a in s], [int(a) for a in t], [side.length] * len(s)


def nhd_descriptor_count(num_pages: int, page_size: int) -> int:
    """Descriptors SGLang's NHD head-sliced path issues per layer side: one per token."""
    return int(num_pages) * int(page_size)


_ENGINE_REASONS = {
    "nixl": (
        "NIXL's heterogeneous-TP path prepares strided descriptor lists once per peer "
        "(_init_hetero_tp_prep_handle: one run per token and head group of NHD rows) and indexes them per "
        "token; a 5D page has no per-token head runs"
    ),
    "mori": (
        "Mori's TP-slice plan (_build_tp_slice_config) cuts every token row of an NHD page into head "
        "slices; a 5D page keeps each head's tokens together"
    ),
    "staging": (
        f"the staging buffer ({ENV_DISAGG_STAGING_BUFFER}) gathers and scatters pages as NHD "
        "[page, heads, head_dim] tensors on both sides"
    ),
}


def unsupported_engine_reason(engine: str, staging: bool = False) -> Optional[str]:
    """Why a transfer path cannot move SHUFFLE 5D pages between different
    attention-TP sizes, or None when sglang-kv5d moves them (mooncake without
    staging). For the handshake and the refusals."""
    if staging:
        return _ENGINE_REASONS["staging"]
    name = str(engine).lower()
    if name == "mooncake":
        return None
    return _ENGINE_REASONS.get(name, f"the {name} transfer backend slices heads inside NHD token rows")


def describe_counts(num_pages: int, page_size: int, layers: int) -> str:
    """One line: descriptors of the 5D path against the NHD path for a transfer."""
    five = 2 * layers * int(num_pages)
    nhd = 2 * layers * nhd_descriptor_count(num_pages, page_size)
    return f"{five} descriptors (5D, one per page and side) vs {nhd} (NHD, one per token and side)"

