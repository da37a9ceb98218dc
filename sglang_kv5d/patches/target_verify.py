"""target-verify-5d: TARGET_VERIFY over a 5D target cache with the overlay's packed decode kernel.

Upstream's ``AiterAttnBackend.forward_extend`` handles target verify before its
5D dispatch, viewing the 5D cache as NHD. This patch:

* after ``AiterAttnBackend.__init__`` on a 5D, non-MLA backend with topk 1,
  turns on SGLang's own unified-verify metadata (``_use_unified_verify``): a
  fixed-width 2-D page table, built eagerly and for CUDA-graph capture/replay;
* for such a backend, builds the verify page tables itself
  (``_build_verify_unified_metadata``, and a persistent table allocated in
  ``init_cuda_graph_state`` for capture/replay): rows ``cdiv(max_context_len +
  N, page)`` wide and every write clamped to its row
  (sglang_kv5d.speculative.verify_tables; upstream's rows are
  ``cdiv(max_context_len, page)`` wide and a request at the context limit
  writes into the next row);
* in ``forward_extend``, for such a backend in TARGET_VERIFY mode, writes the
  drafts' K/V with the pool's 5D write and runs
  sglang_kv5d.speculative.verify.forward_target_verify_5d (no host reads).

Every other mode, MLA, topk > 1 and NHD backends go to the original unchanged.
The page-table flag it needs exists from SGLang 0.5.23 (``decode_uses_page_table``);
older backends are left alone and rule KV5D005 refuses speculative decoding there.
"""

from __future__ import annotations

import functools

from .. import surface
from ..versions import tested_from
from . import Binding, Patch

FLAG = "_kv5d_target_verify_5d"
# The persistent CUDA-graph verify tables (full pool, SWA pool) this patch allocates on a flagged backend.
GRAPH_TABLE = "_kv5d_graph_verify_table"
GRAPH_SWA_TABLE = "_kv5d_graph_verify_swa_table"
_WRITE_LOC = "memory_pool.KVWriteLoc.for_layer"


def enable_verify(backend) -> bool:
    """Turn on unified-verify metadata for a 5D, non-MLA, topk-1 backend; returns whether it did."""
    from ..speculative.readiness import verify_problem

    is_5d = bool(getattr(backend, "kv_cache_is_vectorized_5d", False))
    ok = is_5d and verify_problem(backend, is_5d) is None
    setattr(backend, FLAG, ok)
    if ok:
        backend._use_unified_verify = True
    return ok


def _after_init(original):
    def init(wrapped, instance, args, kwargs):
        result = wrapped(*args, **kwargs)
        enable_verify(instance)
        return result

    return init


@functools.lru_cache(maxsize=1)
def _write_loc_cls():
    """SGLang's KVWriteLoc (for_layer is its classmethod), resolved once: verify calls this per layer."""
    from ..activation import resolve_loaded

    return resolve_loaded(surface.SURFACES[_WRITE_LOC]).owner


def _draft_tokens(backend) -> int:
    return int(getattr(backend, "num_draft_tokens", None) or 0)


def _swa_mapping(backend):
    if not getattr(backend, "use_sliding_window_kv_pool", False):
        return None
    return backend.swa_kv_pool.full_to_swa_index_mapping


def build_verify_metadata(backend, bs, seq_lens, req_pool_indices, draft_num, page_table_dest=None,
                          swa_page_table_dest=None):
    """``_build_verify_unified_metadata`` for a flagged backend: ``(page_table, qo_indptr, N, swa_page_table)``.

    Eager (no destination): fresh ``(bs, cdiv(max_context_len + N, page))``
    tables. CUDA graph (a destination given): the destination when it is that
    wide, else the persistent tables allocated by ``init_cuda_graph_state``, so
    capture and replay see the same storage. Raises VerifyLayoutError when no
    table of the needed width exists.
    """
    import torch

    from ..speculative.verify import VerifyLayoutError
    from ..speculative.verify_tables import build_verify_page_tables, verify_table_width

    n, page = int(draft_num), int(backend.page_size)
    if n <= 0:
        raise VerifyLayoutError(f"target verify with {n} draft tokens per request")
    device = seq_lens.device
    qo_indptr = backend.qo_indptr[: bs + 1]
    qo_indptr.copy_(torch.arange(0, (bs + 1) * n, n, dtype=qo_indptr.dtype, device=qo_indptr.device))
    mapping = _swa_mapping(backend)
    needed = verify_table_width(int(backend.max_context_len), n, page)
    if page_table_dest is None:
        width = verify_table_width(int(backend.max_context_len), max(n, _draft_tokens(backend)), page)
        out = torch.empty(bs, width, dtype=torch.int32, device=device)  # the builder writes every column
        swa_out = None if mapping is None else torch.empty_like(out)
    elif page_table_dest.dim() == 2 and page_table_dest.shape[1] >= needed and (
            mapping is None or (swa_page_table_dest is not None and swa_page_table_dest.shape == page_table_dest.shape)):
        out, swa_out = page_table_dest, (None if mapping is None else swa_page_table_dest)
    else:
        out, swa_out = getattr(backend, GRAPH_TABLE, None), getattr(backend, GRAPH_SWA_TABLE, None)
        if out is None or out.shape[0] < bs or out.shape[1] < needed or (mapping is not None and swa_out is None):
            have = None if out is None else tuple(out.shape)
            raise VerifyLayoutError(
                f"target verify of {bs} requests x {n} drafts under a CUDA graph needs a ({bs}, {needed}) "
                f"page table (max_context_len {backend.max_context_len} + {n} drafts, page {page}); the "
                f"overlay's graph table is {have} (init_cuda_graph_state allocates it for "
                f"num_draft_tokens={_draft_tokens(backend)})"
            )
    table, swa_table = build_verify_page_tables(backend.req_to_token, req_pool_indices, seq_lens, n, page, out,
                                                swa_mapping=mapping, swa_out=swa_out)
    return table, qo_indptr, n, swa_table


def _tables(original):
    def build(wrapped, instance, args, kwargs):
        if not getattr(instance, FLAG, False):
            return wrapped(*args, **kwargs)
        return build_verify_metadata(instance, *args, **kwargs)

    return build


def allocate_graph_tables(backend, max_bs: int) -> None:
    """The persistent (max_bs, cdiv(max_context_len + num_draft_tokens, page)) verify tables for capture."""
    import torch

    from ..speculative.verify_tables import graph_table_shape

    shape = graph_table_shape(max_bs, int(backend.max_context_len), _draft_tokens(backend), int(backend.page_size))
    device = getattr(backend, "device", None)
    setattr(backend, GRAPH_TABLE, torch.zeros(shape, dtype=torch.int32, device=device))
    swa = torch.zeros(shape, dtype=torch.int32, device=device) if _swa_mapping(backend) is not None else None
    setattr(backend, GRAPH_SWA_TABLE, swa)


def _graph_state(original):
    def init_cuda_graph_state(wrapped, instance, args, kwargs):
        result = wrapped(*args, **kwargs)
        if getattr(instance, FLAG, False):
            max_bs = args[0] if args else kwargs["max_bs"]
            allocate_graph_tables(instance, int(max_bs))
        return result

    return init_cuda_graph_state


def _verify(original):
    def forward_extend(wrapped, instance, args, kwargs):
        if not getattr(instance, FLAG, False):
            return wrapped(*args, **kwargs)
        bound = _bind(args, kwargs)
        if bound is None:
            return wrapped(*args, **kwargs)
        q, k, v, layer, forward_batch, save_kv_cache, sinks = bound
        mode = getattr(forward_batch, "forward_mode", None)
        if (mode is None or not mode.is_target_verify() or getattr(forward_batch, "attn_attend_prefix_cache", False)
                or getattr(layer, "is_cross_attention", False)):
            return wrapped(*args, **kwargs)
        from ..speculative.verify import forward_target_verify_5d, write_verify_kv

        if k is not None and save_kv_cache:
            write_verify_kv(instance, layer, forward_batch, k, v, _write_loc_cls())
        return forward_target_verify_5d(instance, q, layer, forward_batch, sinks)

    return forward_extend


_NAMES = ("q", "k", "v", "layer", "forward_batch", "save_kv_cache", "sinks")


def _bind(args, kwargs):
    """(q, k, v, layer, forward_batch, save_kv_cache, sinks) from a forward_extend call, or None."""
    values = dict(zip(_NAMES, args))
    for name in _NAMES:
        if name in kwargs:
            if name in values:
                return None
            values[name] = kwargs[name]
    if any(n not in values for n in _NAMES[:5]):
        return None
    return (values["q"], values["k"], values["v"], values["layer"], values["forward_batch"],
            values.get("save_kv_cache", True), values.get("sinks"))


PATCH = Patch(
    name="target-verify-5d",
    summary="Speculative target verify over a 5D cache: SGLang's fixed-width verify page table, the 5D write, the overlay's packed decode kernel (CUDA-graph safe).",
    bindings=(
        Binding("aiter_backend.init", _after_init, check_signature=False),
        Binding("aiter_backend.forward_extend", _verify),
        Binding("aiter_backend._build_verify_unified_metadata", _tables),
        Binding("aiter_backend.init_cuda_graph_state", _graph_state),
    ),
    problem=(
        "speculative target verify views a 5D cache as NHD in `unified_attention` (silently wrong attention) "
        "or raises in the triton `extend_attention_fwd`; its verify page tables are `cdiv(context_len, page)` "
        "wide, so a request at the context limit writes its draft page into the next request's row (NHD too)"
    ),
    why=(
        "AiterAttnBackend.forward_extend handles TARGET_VERIFY before its 5D dispatch: unified_attention "
        "over k_cache.view(-1, page, H, D), a 5D buffer viewed as NHD (silently wrong attention), or the "
        "triton extend_attention_fwd (which raises on 5-D buffers). For a 5D, non-MLA backend with topk 1 "
        "the patch turns on SGLang's own unified-verify metadata after __init__ (a fixed-width 2-D page "
        "table over prefix and drafts, built eagerly and for CUDA-graph capture and replay) and builds that "
        "table itself: upstream sizes each row cdiv(max_context_len, page) but writes cdiv(seq_len + N, page) "
        "block ids with no clamp, so a request at the context limit with N >= 2 drafts writes into the next "
        "request's row (past the tensor on the last row); the overlay's rows are cdiv(max_context_len + N, "
        "page) wide (a persistent table for CUDA graphs, allocated with init_cuda_graph_state) and every "
        "write is clamped to its row. In "
        "forward_extend it writes the drafts with the pool's 5D write and runs the overlay's 5D decode kernel "
        "with the drafts of a request packed into its head tile (each draft row sees its own prefix, every "
        "K/V tile is read once) over that table with device-side lengths: no host reads, so the step "
        "captures and replays. "
        "Other modes, MLA, topk > 1 and NHD backends reach the original unchanged. The page-table flag it "
        "relies on (decode_uses_page_table) exists from 0.5.23; on older releases the backend hook leaves "
        "verify alone and rule KV5D005 refuses speculative decoding."
    ),
    upstream=("unfixed in every tested release; the verify-table overflow at the context "
              "limit hits NHD unified verify too"),
    removal=("when AiterAttnBackend's target_verify branch dispatches 5D caches to a 5D kernel and its verify "
             "tables are sized for the drafts"),
    sglang=tested_from("0.5.23"),
    reads=("memory_pool.KVWriteLoc.for_layer",),
    core=("sglang_kv5d.speculative.verify",),
)
