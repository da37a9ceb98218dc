"""TARGET_VERIFY attention over a SHUFFLE 5D target cache, CUDA-graph safe.

For speculative decoding with topk 1 (EAGLE/EAGLE3/NEXTN chains, DFLASH
blocks) every request verifies ``N`` draft tokens against its cached prefix
plus the drafts before it: a causal extend of ``bs * N`` queries. SGLang's
AITER backend views the cache as NHD for this (``unified_attention`` on
``k_cache.view(-1, page, H, D)``), which on a 5D buffer is silently wrong.

The patch (sglang_kv5d/patches/target_verify.py) turns on SGLang's own
"unified verify" metadata for 5D targets and builds its page tables with
sglang_kv5d.speculative.verify_tables, eagerly and for CUDA-graph
capture/replay; this function reads:

    forward_metadata.kv_indices      (bs, width) int32 page table, fixed width
                                     cdiv(max_context_len + N, page), covering
                                     prefix + drafts (SGLang writes the drafts'
                                     slots into req_to_token before verify)
    forward_metadata.swa_page_table  the same for the SWA sub-pool, or None
    forward_metadata.max_q_len       N (a Python int fixed per captured graph)
    forward_batch.seq_lens           (bs,) prefix lengths on the device

The attention is the overlay's 5D decode kernel with the N drafts of a
request packed into its head tile (``decode_attention_5d(...,
queries_per_seq=N)``): row ``t * G + g`` is draft ``t`` of query head ``g``,
sees ``prefix + t + 1`` keys, and every K/V tile is read once for all N x G
rows; long contexts are split as in decode. Measured on an H200 (2026-12-02,
``sglang-kv5d bench --what verify``, 16 drafts, docs/benchmarks.md): 1.2-3.8x
one decode step in bf16 and 1.4-5.9x in fp8, against 5.7-134x through the
prefill (extend) kernel, which neither splits the context nor shares a tile
across heads. The G = 8 geometry (Qwen3.5 at TP1, 128 rows) is the slowest:
two head tiles of 64 rows each read the K/V.

No host value is read: the per-row lengths are device ops on ``seq_lens``,
the grid and split count come from tensor shapes, so the call captures and
replays.

Sliding windows follow the overlay's extend and decode (SGLang's
``sliding_window_size + 1`` visible keys), so a token is verified under the
same window it is decoded under.
"""

from __future__ import annotations

from typing import Any, Optional

from ..attention.common import is_fp8, kernels_module, layer_cache, layer_window, portable_args


class VerifyLayoutError(ValueError):
    """The verify step cannot run on this layer or metadata; the message names why."""


def verify_tables(backend, layer):
    """(page table, window) for ``layer``: the SWA table for windowed layers when present."""
    meta = backend.forward_metadata
    window = layer_window(layer)
    table = meta.kv_indices
    swa = getattr(meta, "swa_page_table", None)
    if window >= 0 and swa is not None:
        table = swa
    if table is None or table.dim() != 2:
        raise VerifyLayoutError(
            f"layer {layer.layer_id}: target verify over a 5D cache needs a 2-D page table in "
            f"forward_metadata.kv_indices (SGLang's unified-verify metadata), got "
            f"{None if table is None else tuple(table.shape)}; is the target-verify-5d patch's "
            "backend hook applied?"
        )
    return table, window


def write_verify_kv(backend, layer, forward_batch, k, v, write_loc_cls) -> None:
    """Write the draft tokens' K/V into the 5D target cache, as upstream's 5D branch does.

    ``write_loc_cls`` is SGLang's ``KVWriteLoc`` (read through the surface table);
    the pool's ``set_kv_buffer`` is the overlay's fused write when fp8-kv-write is on.
    """
    k_scale = v_scale = None
    if is_fp8(getattr(backend, "kv_cache_dtype", None)):
        k_scale = layer.k_scale if layer.k_scale is not None else backend.k_scale
        v_scale = layer.v_scale if layer.v_scale is not None else backend.v_scale
    meta = backend.forward_metadata
    loc = write_loc_cls.for_layer(forward_batch, layer, swa_loc=getattr(meta, "swa_out_cache_loc", None))
    backend.token_to_kv_pool.set_kv_buffer(layer, loc, k, v, k_scale, v_scale)


def query_context_lens(prefix_lens, n: int, *, causal: bool = True):
    """``(bs * n,)`` int32 KV length of each verify query row: draft ``t`` of a
    request with ``prefix`` cached tokens sees ``prefix + t + 1`` keys (causal),
    or all ``prefix + n`` (block-parallel drafts). Device ops only."""
    import torch

    prefix = prefix_lens.to(torch.int32)
    if causal:
        steps = torch.arange(1, n + 1, dtype=torch.int32, device=prefix.device)
        return (prefix[:, None] + steps[None, :]).reshape(-1)
    return (prefix + n).repeat_interleave(n)


def forward_target_verify_5d(backend, q, layer, forward_batch, sinks: Optional[Any] = None, *,
                             causal: bool = True):
    """Attention of ``bs * N`` verify queries over the 5D cache; returns ``(bs * N, Hq * D_v)``.

    ``q``: ``(bs * N, Hq * D)`` (or ``(bs * N, Hq, D)``) in the model dtype; the
    drafts' K/V must already be in the cache. ``causal=False`` lets every query
    see all ``seq_lens + N`` keys (block-parallel drafts). Output dtype: the
    backend's ``input_dtype`` or q's.
    """
    import torch

    _, k_cache, v_cache, _, _, kv_dtype, _ = layer_cache(backend, layer)
    meta = backend.forward_metadata
    hq = int(layer.tp_q_head_num)
    d, dv = int(layer.qk_head_dim), int(layer.v_head_dim)
    if d != dv:
        raise VerifyLayoutError(
            f"layer {layer.layer_id}: the 5D verify kernel needs qk_head_dim == v_head_dim, got {d}/{dv}"
        )
    n = int(meta.max_q_len)
    q3 = q.reshape(-1, hq, d)
    if n <= 0 or q3.shape[0] % n:
        raise VerifyLayoutError(
            f"layer {layer.layer_id}: {q3.shape[0]} verify queries are not a whole number of "
            f"{n}-token draft blocks (forward_metadata.max_q_len)"
        )
    bs = q3.shape[0] // n
    table, window = verify_tables(backend, layer)
    if table.shape[0] < bs:
        raise VerifyLayoutError(f"layer {layer.layer_id}: page table has {table.shape[0]} rows for {bs} requests")
    if not causal and window >= 0:
        raise VerifyLayoutError(
            f"layer {layer.layer_id}: block-parallel (non-causal) verify over a sliding window of "
            f"{layer.sliding_window_size} is not defined (the window is relative to each query's position)"
        )
    kv_lens = query_context_lens(forward_batch.seq_lens[:bs], n, causal=causal)
    out_dtype = getattr(backend, "input_dtype", None) or q.dtype
    if q3.dtype != out_dtype:
        q3 = q3.to(out_dtype)
    out = torch.empty((q3.shape[0], hq, dv), dtype=out_dtype, device=q.device)
    cap = float(getattr(layer, "logit_cap", 0.0) or 0.0)
    kw = portable_args(layer, backend, kv_dtype, q.device, window=window, sinks=sinks, cap=cap)
    kernels_module().decode_attention_5d(q3, k_cache, v_cache, table[:bs], kv_lens, out=out,
                                              queries_per_seq=n, **kw)
    return out.reshape(-1, hq * dv)
