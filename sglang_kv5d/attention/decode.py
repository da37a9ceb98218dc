"""5D decode: SGLang's ``forward_decode_vectorized_5d`` through aiter's
``pa_decode_gluon`` (every argument by keyword) or the portable kernel."""

from __future__ import annotations

from typing import Optional

from .common import portable_args, dtype_name, is_fp8, kernels_module, kv_scales, layer_cache, layer_window, max_kv_len, page_table_2d, scale_tensor, block_table_from_token_slots, decode_sliding_window_arg
from .routing import CONTEXT_PARTITION_SIZE, ConfigKey, DECODE_FNS, aiter_fp8_dtype, is_no_kernel, remember_fallback, route, run_portable, decode_page_unsupported


def forward_decode_vectorized_5d(backend, q, layer, forward_batch, k_cache, v_cache, o, sinks):
    """Decode attention (one query token per request) over a SHUFFLE 5D cache.

    Writes into ``o`` (``(bs, Hq * D_v)``) and returns None, like upstream.
    """
    import torch

    _, k_cache, v_cache, _, _, kv_dtype, page = layer_cache(backend, layer, k_cache, v_cache)
    meta = backend.forward_metadata
    bs = int(forward_batch.batch_size)
    hq, hkv = int(layer.tp_q_head_num), int(layer.tp_k_head_num)
    d, dv = int(layer.qk_head_dim), int(layer.v_head_dim)
    window = layer_window(layer)
    cap = float(getattr(layer, "logit_cap", 0.0) or 0.0)
    fp8 = is_fp8(kv_dtype)
    q3 = q.view(-1, hq, d)
    o3 = o.view(-1, hq, dv)

    table = meta.kv_indices
    if window >= 0 and getattr(meta, "swa_page_table", None) is not None:
        table = meta.swa_page_table
    if table.dim() == 2:
        block_tables = page_table_2d(table, bs)
    else:  # flat per-token slots + kv_indptr (decode without a page table)
        max_len = max_kv_len(backend, forward_batch, table.shape[0])
        block_tables = block_table_from_token_slots(meta.kv_indptr, table, page, bs, max_len)
    # SGLang keeps seq_lens as int64. aiter takes int32 lengths and page
    # tables (cast below, on its path only); the Triton kernel reads either,
    # so the portable path launches no cast kernel per layer.
    context_lens = forward_batch.seq_lens[:bs]

    key = ConfigKey(
        "pa_decode_gluon", dtype_name(q.dtype), dtype_name(kv_dtype), page, d, dv, hq, hkv,
        window >= 0, sinks is not None, cap > 0,
    )
    unsupported = lambda: _decode_unsupported(q3, o3, kv_dtype, hq, hkv, d, dv, cap, page)  # noqa: E731
    impl, fns = route(key, DECODE_FNS, unsupported)

    def run_aiter(fns):
        # pa_decode_gluon reads the lengths and sinks as contiguous and the page
        # table's rows as contiguous (research/aiter-api.md): other views are
        # copied here (SGLang's own tensors are already contiguous: no copy)
        lens = context_lens if context_lens.dtype == torch.int32 else context_lens.to(torch.int32)
        table = block_tables if block_tables.dtype == torch.int32 else block_tables.to(torch.int32)
        if not lens.is_contiguous():
            lens = lens.contiguous()
        if table.stride(-1) != 1 and table.shape[-1] > 1:
            table = table.contiguous()
        _decode_aiter(
            fns, backend, layer, q3, o3, k_cache, v_cache, table, lens,
            bs, hq, hkv, d, fp8, window,
            sinks if sinks is None or sinks.is_contiguous() else sinks.contiguous(),
        )

    if impl == "aiter":
        try:
            run_aiter(fns)
            return None
        except Exception as e:  # aiter raises any type; only its "no matching kernel" is caught, the rest re-raised
            if not is_no_kernel(e):
                raise
            remember_fallback(key, f"{type(e).__name__}: {e}")

    kw = portable_args(layer, backend, kv_dtype, q.device, window=window, sinks=sinks, cap=cap)
    run_portable(key, DECODE_FNS, unsupported, run_aiter, q.device, lambda: kernels_module().decode_attention_5d(
        q3, k_cache, v_cache, block_tables, context_lens, num_splits=None, out=o3, **kw,
    ))
    return None


def _decode_unsupported(q3, o3, kv_dtype, hq, hkv, d, dv, cap, page) -> Optional[str]:
    """Why pa_decode_gluon cannot serve this layer, or None."""
    import torch

    why = decode_page_unsupported(page)
    if why:
        return why
    if cap > 0:
        return "pa_decode_gluon has no logit soft-cap"
    if d != dv:
        return f"pa_decode_gluon needs equal QK and V head dims (got {d} and {dv})"
    if hq % hkv or hq // hkv > 64:
        return f"GQA group {hq}/{hkv} unsupported (at most 64 per KV head)"
    if o3.dtype not in (torch.bfloat16, torch.float16):
        return f"output dtype {o3.dtype} unsupported"
    if is_fp8(kv_dtype):
        aiter_fp8 = aiter_fp8_dtype()
        if aiter_fp8 is not None and aiter_fp8 != kv_dtype:
            return f"KV cache is {dtype_name(kv_dtype)} but this aiter build's fp8 is {dtype_name(aiter_fp8)}"
    return None


def _decode_aiter(fns, backend, layer, q3, o3, k_cache, v_cache, block_tables, context_lens,
                  bs, hq, hkv, d, fp8, window, sinks):
    import torch

    device = q3.device
    group = hq // hkv
    if window >= 0:
        splits = 1
    else:
        splits = int(fns["get_recommended_splits"](num_sequences=bs, num_kv_heads=hkv))
    key_scale = value_scale = None
    if fp8:
        key_scale, value_scale = kv_scales(layer, backend, device)
    query_scale = None
    if is_fp8(q3.dtype):
        qs = getattr(layer, "q_scale", None)
        if qs is None:
            qs = getattr(backend, "q_scale", None)
        query_scale = scale_tensor(qs, device)
    compute_type = torch.float16 if o3.dtype == torch.float16 else torch.bfloat16
    exp_sums = torch.empty((bs, hkv, splits, group), dtype=torch.float32, device=device)
    max_logits = torch.empty_like(exp_sums)
    temporary_output = torch.empty((bs, hkv, splits, group, d), dtype=o3.dtype, device=device)
    fns["pa_decode_gluon"](
        output=o3,
        query=q3,
        key_cache=k_cache,
        value_cache=v_cache,
        context_lengths=context_lens,
        block_tables=block_tables,
        softmax_scale=float(layer.scaling),
        query_length=1,
        max_context_partition_num=splits,
        context_partition_size=CONTEXT_PARTITION_SIZE,
        compute_type=compute_type,
        query_scale=query_scale,
        key_scale=key_scale,
        value_scale=value_scale,
        exp_sums=exp_sums,
        max_logits=max_logits,
        temporary_output=temporary_output,
        alibi_slopes=None,
        sinks=sinks,
        sliding_window=decode_sliding_window_arg(window),
        ps=True,
    )
