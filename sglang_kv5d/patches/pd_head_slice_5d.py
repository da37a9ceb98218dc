"""pd-head-slice-5d: PD transfer between different attention-TP sizes over SHUFFLE 5D pages;
pd-buffer-layouts (internal): what layout each registered KV region is in;
fail-closed-pd-head-slice-nixl (internal): refuse NIXL's head slicing and the staging buffer over 5D.

With prefill and decode at different attention-TP sizes, mooncake's
``MooncakeKVManager.send_kvcache_slice`` (every tested SGLang) moves
each decode rank's heads with one descriptor per TOKEN of every page, at NHD
offsets ``page * item_len + token * row + head_start * head_row``. On a 5D page
(K ``[H, D/X, page, X]``, V ``[H, page/X, D, X]``) those offsets land inside
other heads' dims and tokens: wrong bytes at the decode node, attention silently
wrong. The wrapper sends a manager whose local regions are SHUFFLE 5D to
sglang_kv5d.disagg.head_slice, which moves a rank's heads as ONE descriptor per
page and side, through the same ``engine.batch_transfer_sync`` per layer side
(on the manager's executor) and the same status handling; managers whose
regions are all NHD reach the original. A region of SGLang's speculative draft
(NHD under 5D, draft-pool-nhd) in a 5D manager gets SGLang's own per-token NHD
descriptors, computed by the same module.

Layout of a region: SGLang's kv_args carry only addresses and page byte sizes,
which are equal for NHD and 5D pages. ``pd-buffer-layouts`` wraps
``MHATokenToKVPool.get_contiguous_buf_infos`` (what prefill.py / decode.py call
to build kv_args; HybridLinearKVPool and SWAKVPool delegate to it) and, with 5D
requested, records for each returned address the physical buffer's layout and
geometry (sglang_kv5d.pools). It lives in its own patch because mooncake's
module is imported after the kv_args are built. A 5D-requested manager whose
regions the record does not know is refused, never guessed.

The decode side's layout is taken to be the prefill side's (pd-layout-handshake
refuses a 5D / NHD pairing at bootstrap); the decode peer's item length is
checked against the heads it must hold.

Refused over 5D (fail closed, naming the engine and the fix: equal attention-TP):
the staging buffer (``SGLANG_DISAGG_STAGING_BUFFER``; ``set_kv_buffer_tensors``
of mooncake and NIXL receives the pool's tensors: refused when they are 5D),
NIXL's heterogeneous-TP descriptor lists (``_init_hetero_tp_prep_handle``).
Mori's TP-slice plan (``MoriKVManager._build_tp_slice_config``) slices NHD rows
too, but its module imports the ``mori`` package at the top, so a binding there
could never resolve where mori is not installed (the doctor would fail every
such machine); a 5D deployment over mori with different attention-TP is refused
at the decode side's bootstrap check (pd-layout-handshake: a TP mismatch over 5D
without pd-head-slice-5d applied, which needs mooncake's module). Ascend's
manager is a mooncake subclass (an NPU backend: no 5D pools there).
"""

from __future__ import annotations

import concurrent.futures
import inspect
import logging
import threading
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .. import config
from ..surface_names import ENV_DISAGG_STAGING_BUFFER as STAGING_ENV
from . import Binding, Patch

logger = logging.getLogger("sglang_kv5d")


# --------------------------------------------------------------------------- #
# pd-buffer-layouts: the layout of each registered KV region                   #
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class RegionLayout:
    """One registered KV region (one layer's K or V buffer) as the pool built it.

    ``five_d``: SHUFFLE 5D buffers; ``heads``: KV heads of this rank;
    ``head_dim``: D (K) or D_v (V); ``page``: tokens per page; ``elem``: bytes
    per stored element; ``x``: the 5D vector width (0 for NHD); ``side``: "k" / "v"."""

    five_d: bool
    heads: int
    head_dim: int
    page: int
    elem: int
    x: int
    side: str


_LOCK = threading.Lock()
_REGIONS: Dict[int, RegionLayout] = {}


def region_layout(ptr: int) -> Optional[RegionLayout]:
    """The recorded layout of the region starting at ``ptr``, or None."""
    with _LOCK:
        return _REGIONS.get(int(ptr))


def forget_regions() -> None:
    """Drop every record (tests)."""
    with _LOCK:
        _REGIONS.clear()


def _layout_of(t: Any, side: str, five_d: bool, page_size: int) -> RegionLayout:
    shape = tuple(int(s) for s in t.shape)
    elem = int(t.element_size())
    if five_d:
        if side == "k":  # (blocks, H, D // X, page, X)
            return RegionLayout(True, shape[1], shape[2] * shape[4], shape[3], elem, shape[4], side)
        return RegionLayout(True, shape[1], shape[3], shape[2] * shape[4], elem, shape[4], side)  # (blocks, H, page // X, D_v, X)
    heads, dim = (shape[1], shape[2]) if len(shape) == 3 else (0, 0)
    return RegionLayout(False, heads, dim, int(page_size), elem, 0, side)


def record_pool_regions(pool: Any, ptrs: Sequence[int]) -> int:
    """Record the layout of every address of ``ptrs`` that is one of ``pool``'s
    K / V buffers (decided from the physical buffers). Returns how many."""
    from ..pools import is_vectorized_5d

    five_d = is_vectorized_5d(pool)
    by_ptr = {}
    for side, attr in (("k", "k_buffer"), ("v", "v_buffer")):
        for t in getattr(pool, attr, None) or ():
            by_ptr[int(t.data_ptr())] = (t, side)
    found = {}
    for p in ptrs:
        hit = by_ptr.get(int(p))
        if hit is not None:
            found[int(p)] = _layout_of(hit[0], hit[1], five_d, getattr(pool, "page_size", 0))
    with _LOCK:
        _REGIONS.update(found)
    return len(found)


def _make_record(original):
    def get_contiguous_buf_infos(wrapped, pool, args, kwargs):
        out = wrapped(*args, **kwargs)
        if config.wants_5d():
            try:
                record_pool_regions(pool, out[0])
            except Exception as exc:  # a refusal later names the unknown region
                logger.warning("sglang-kv5d: could not record the KV regions' layout of %s: %s",
                               type(pool).__name__, exc)
        return out

    return get_contiguous_buf_infos


# --------------------------------------------------------------------------- #
# The manager's regions                                                        #
# --------------------------------------------------------------------------- #


def _manager_layouts(mgr: Any) -> List[Optional[RegionLayout]]:
    return [region_layout(p) for p in getattr(mgr.kv_args, "kv_data_ptrs", None) or ()]


def manager_is_5d(mgr: Any) -> bool:
    """Does any local KV region of this transfer manager hold SHUFFLE 5D pages?"""
    return any(lay is not None and lay.five_d for lay in _manager_layouts(mgr))


def _unknown_refusal(engine: str, ptrs: Sequence[int]) -> str:
    shown = ", ".join(f"{int(p):#x}" for p in list(ptrs)[:4])
    return (
        f"sglang-kv5d: the {engine} transfer manager registers KV regions ({shown}) whose layout sglang-kv5d "
        f"did not record ({config.LAYOUT}=vectorized_5d): they did not come from "
        "MHATokenToKVPool.get_contiguous_buf_infos with pd-buffer-layouts applied, so a head-sliced transfer "
        "could move NHD offsets over 5D pages. Fix: keep pd-buffer-layouts and pd-head-slice-5d selected "
        f"({config.PATCHES}), or run prefill and decode with equal attention-TP"
    )


def head_slice_refusal(engine: str, what: str, staging: bool = False) -> str:
    """The refusal of a head-sliced transfer path over SHUFFLE 5D pages."""
    from ..disagg.head_slice import FIX_EQUAL_TP, unsupported_engine_reason

    reason = unsupported_engine_reason(engine, staging=staging)
    flag = f" ({STAGING_ENV}=1)" if staging else ""
    fix = (f"unset {STAGING_ENV} (mooncake's head-sliced send then moves the 5D pages, one descriptor per page "
           "and side), or run prefill and decode with the same attention-TP size") if staging else FIX_EQUAL_TP
    return (
        f"sglang-kv5d: {engine}{flag} cannot move SHUFFLE 5D KV pages between prefill and decode with different "
        f"attention-TP sizes ({config.LAYOUT}=vectorized_5d; {what}): {reason}, so the decode node would "
        f"receive other heads' bytes. Fix: {fix}"
    )


# --------------------------------------------------------------------------- #
# pd-head-slice-5d: mooncake's send_kvcache_slice                              #
# --------------------------------------------------------------------------- #


def _entry_pairs(mgr: Any, n_src: int, n_dst: int, dst_layer_ids) -> List[Tuple[int, int]]:
    """(prefill entry, decode entry) index pairs, paired as SGLang pairs them."""
    src_layer_ids = getattr(mgr.kv_args, "kv_layer_ids", None)
    if src_layer_ids or dst_layer_ids:
        from ..surface import find_loaded

        build = find_loaded("disagg_utils.build_transfer_entry_pairs")
        if build is None:
            raise RuntimeError("layer ids given but SGLang's build_transfer_entry_pairs is not loaded")
        return list(build(src_layer_ids, dst_layer_ids or [], n_src, n_dst,
                          allow_positional_fallback=getattr(mgr, "pp_size", 1) == 1))
    sk, sv, dk, dv, layers = mgr.get_mha_kv_ptrs_with_pp(list(range(n_src)), list(range(n_dst)))
    return [(sk[i], dk[i]) for i in range(layers)] + [(sv[i], dv[i]) for i in range(layers)]


def build_slice_transfers(mgr: Any, dst_kv_ptrs: Sequence[int], prefill_pages, dst_pages, dst_tp_rank: int,
                          dst_attn_tp_size: int, dst_kv_item_len: int, dst_layer_ids=None):
    """[(src addresses, dst addresses, lengths)] per layer side, for a manager
    holding SHUFFLE 5D regions. Raises HeadSliceError / RuntimeError naming the problem."""
    from ..disagg import head_slice as hs

    kv = mgr.kv_args
    src_ptrs = list(kv.kv_data_ptrs)
    layouts = _manager_layouts(mgr)
    unknown = [p for p, lay in zip(src_ptrs, layouts) if lay is None]
    if unknown:
        raise RuntimeError(_unknown_refusal("mooncake", unknown))
    item_lens = list(kv.kv_item_lens)
    if len(set(item_lens)) != 1:
        raise hs.HeadSliceError(f"head-sliced transfer needs one KV item length, got {sorted(set(item_lens))}")
    total = getattr(kv, "total_kv_head_num", 0) or 0
    if total <= 0:
        total = kv.kv_head_num * mgr.attn_tp_size
    plan = hs.plan_head_slice(mgr.attn_tp_size, dst_attn_tp_size, kv.engine_rank, dst_tp_rank, total)
    page = kv.page_size
    data_lens = list(getattr(kv, "kv_data_lens", None) or [])
    out = []
    for i, j in _entry_pairs(mgr, len(src_ptrs), len(dst_kv_ptrs), dst_layer_ids):
        lay = layouts[i]
        if lay.heads != plan.src_heads:
            raise hs.HeadSliceError(f"KV region {i} holds {lay.heads} heads, the plan expects {plan.src_heads}")
        n_src_pages = data_lens[i] // item_lens[i] if i < len(data_lens) and item_lens[i] else None
        if lay.five_d:
            side = hs.plan_5d_side(plan, lay.head_dim, page, lay.elem, lay.x, item_lens[i], dst_kv_item_len)
            out.append(hs.page_descriptors(side, src_ptrs[i], dst_kv_ptrs[j], prefill_pages, dst_pages,
                                           src_num_pages=n_src_pages))
        else:
            out.append(hs.nhd_token_descriptors(plan, lay.head_dim, page, lay.elem, item_lens[i], dst_kv_item_len,
                                                src_ptrs[i], dst_kv_ptrs[j], prefill_pages, dst_pages,
                                                src_num_pages=n_src_pages))
    return out


def _await(mgr: Any, futures) -> int:
    wait = getattr(mgr, "_await_transfer_futures", None)
    if callable(wait):
        return wait(futures)
    for future in concurrent.futures.as_completed(futures):  # SGLang before _await_transfer_futures
        status = future.result()
        if status != 0:
            for f in futures:
                f.cancel()
            return status
    return 0


def _make_slice(original):
    sig = inspect.signature(original)

    def send_kvcache_slice(wrapped, mgr, args, kwargs):
        if not config.wants_5d() or not manager_is_5d(mgr):
            return wrapped(*args, **kwargs)
        a = sig.bind(mgr, *args, **kwargs).arguments
        session = a["mooncake_session_id"]
        try:
            transfers = build_slice_transfers(
                mgr, a["dst_kv_ptrs"], a["prefill_kv_indices"], a["dst_kv_indices"], a["dst_tp_rank"],
                a["dst_attn_tp_size"], a["dst_kv_item_len"], a.get("dst_layer_ids"))
        except (ValueError, RuntimeError, TypeError) as exc:
            # Upstream's own refusals here log and return -1: the session fails, the room is concluded failed.
            logger.error("[%s] sglang-kv5d: 5D head-sliced transfer refused: %s", session, exc)
            return -1
        executor = a["executor"]
        futures = [executor.submit(mgr.engine.batch_transfer_sync, session, src, dst, lens)
                   for src, dst, lens in transfers if src]
        return _await(mgr, futures)

    return send_kvcache_slice


def _staging_guard(engine: str):
    def make(original):
        sig = inspect.signature(original)

        def set_kv_buffer_tensors(wrapped, mgr, args, kwargs):
            if config.wants_5d():
                from ..activation import fail_closed

                a = sig.bind_partial(mgr, *args, **kwargs).arguments
                k = list(a.get("k_buffers") or ())
                if any(getattr(t, "dim", lambda: 0)() == 5 for t in k) or manager_is_5d(mgr):
                    msg = head_slice_refusal(engine, "the staging buffer gathers this pool's 5D tensors", staging=True)
                    logger.error("%s", msg)
                    fail_closed(msg)
            return wrapped(*args, **kwargs)

        return set_kv_buffer_tensors

    return make


def _engine_guard(engine: str, what: str):
    def make(original):
        def guard(wrapped, mgr, args, kwargs):
            if config.wants_5d() and manager_is_5d(mgr):
                from ..activation import fail_closed

                msg = head_slice_refusal(engine, what)
                logger.error("%s", msg)
                fail_closed(msg)
            return wrapped(*args, **kwargs)

        return guard

    return make


_WHY = (
    "With different attention-TP sizes between prefill and decode, MooncakeKVManager.send_kvcache_slice moves "
    "each decode rank's KV heads with one transfer descriptor per token of every page, at NHD offsets "
    "(page * item_len + token * row + head_start * head_bytes). A SHUFFLE 5D page keeps the head axis "
    "outermost (K [H, D/X, page, X], V [H, page/X, D, X]), so those offsets read and write inside other heads' "
    "dims and tokens: the decode node's cache holds wrong bytes and attention is silently wrong. For a manager "
    "whose registered regions are 5D (recorded from the physical buffers by pd-buffer-layouts) the wrapper "
    "computes the heads each rank pair exchanges as SGLang's NHD math does (replicated KV heads included), "
    "checks the peer's TP size, rank and item length, and issues one descriptor per page and side through "
    "the same engine.batch_transfer_sync per layer side; NHD managers reach the original. With 5D requested "
    f"the staging buffer is refused ({STAGING_ENV} hands the pool's K/V tensors to "
    "set_kv_buffer_tensors, whose staging path gathers and scatters NHD [page, heads, head_dim] pages; "
    "Kv5dNotReadyError names the flag and the fix), as is NIXL's head-sliced path "
    "(fail-closed-pd-head-slice-nixl)."
)

PATCH = Patch(
    name="pd-head-slice-5d",
    summary="PD transfer between different attention-TP sizes over SHUFFLE 5D pages (mooncake: one descriptor per page).",
    bindings=(
        Binding("mooncake_conn.MooncakeKVManager.send_kvcache_slice", _make_slice),
        Binding("mooncake_conn.MooncakeKVManager.set_kv_buffer_tensors", _staging_guard("mooncake")),
    ),
    problem=(
        "PD with different attention-TP: mooncake's `send_kvcache_slice` cuts heads out of every token row of an "
        "NHD page; on a SHUFFLE 5D page those offsets are other heads' bytes (decode attention silently wrong)"
    ),
    why=_WHY,
    upstream="unfixed in every tested release (every head-sliced path assumes NHD pages)",
    removal="when SGLang's head-sliced PD transfer addresses SHUFFLE 5D pages (head-major within a page)",
    reads=("disagg_utils.build_transfer_entry_pairs",),
    core=("sglang_kv5d.disagg.head_slice",),
)

BUFFER_LAYOUTS = Patch(
    name="pd-buffer-layouts",
    summary="Record the layout of every KV region a pool registers for PD transfer (for pd-head-slice-5d).",
    bindings=(Binding("memory_pool.MHATokenToKVPool.get_contiguous_buf_infos", _make_record),),
    internal=True,
    why=(
        "SGLang's PD kv_args carry each KV region's address and page byte size only, equal for NHD and SHUFFLE "
        "5D pages. With 5D requested, after MHATokenToKVPool.get_contiguous_buf_infos (which prefill.py and "
        "decode.py call to build the kv_args; composite pools delegate to it) the overlay records, per returned "
        "address, the physical buffer's layout, heads, head_dim, page and element size; pd-head-slice-5d and "
        "the engine guards read the record. Nothing else changes."
    ),
    upstream="n/a (SGLang does not describe a region's layout)",
    removal="when the transfer manager knows its regions' layout (kv_args) or pd-head-slice-5d goes",
)

NIXL_GUARD = Patch(
    name="fail-closed-pd-head-slice-nixl",
    summary="Refuse NIXL's head-sliced (different attention-TP) and staging paths over SHUFFLE 5D pages.",
    bindings=(
        Binding("nixl_conn.NixlKVManager._init_hetero_tp_prep_handle",
                _engine_guard("nixl", "a decode peer registered with another attention-TP size")),
        Binding("nixl_conn.NixlKVManager.set_kv_buffer_tensors", _staging_guard("nixl")),
    ),
    internal=True,
    why=(
        "NixlKVManager._init_hetero_tp_prep_handle prepares, once per decode peer with another attention-TP "
        "size, descriptor lists of per-token head runs in NHD rows and send_kvcache_slice indexes them per "
        f"token; its staging path ({STAGING_ENV}, set_kv_buffer_tensors) gathers NHD tensors. On SHUFFLE 5D "
        "pages both move other heads' bytes. When "
        f"{config.LAYOUT}=vectorized_5d and the manager's regions are 5D they raise Kv5dNotReadyError naming "
        "NIXL and the fix (equal attention-TP, or mooncake without staging); a warning with "
        f"{config.STRICT}=0."
    ),
    upstream="unfixed in every tested release",
    removal="when NIXL's heterogeneous-TP descriptor lists address SHUFFLE 5D pages",
)
