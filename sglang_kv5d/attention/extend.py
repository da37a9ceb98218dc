"""5D extend (chunked prefill): SGLang's ``forward_extend_vectorized_5d``
through aiter's ``mha_batch_prefill_func`` or the portable kernel.

Both aiter calls pass a page-index table padded past its last used entry
(sglang_kv5d.attention.page_indices: CK's batch prefill reads ahead of it)."""

from __future__ import annotations

from typing import Optional

from .page_indices import linear_page_indices
from .common import portable_args, dtype_name, is_fp8, kernels_module, kv_scales, layer_cache, layer_window, max_kv_len, backend_qo_indptr, block_table_from_token_slots, gather_5d_to_linear, quantize_per_tensor
from .routing import ConfigKey, EXTEND_SINKS_UNSUPPORTED, EXTEND_FNS, aiter_fp8_dtype, is_no_kernel, remember_fallback, route, run_portable


def forward_extend_vectorized_5d(backend, q, k, v, layer, forward_batch, bs0, window_size, sinks):
    """Extend attention over a SHUFFLE 5D cache; returns ``(T, Hq * D_v)``.

    ``k``/``v`` are the new tokens' keys and values, already written to the
    cache by the caller; ``bs0`` is batch size + 1; ``window_size`` is the
    caller's aiter-style ``(left, right)`` (``(sliding_window_size, -1)`` or
    ``(-1, -1)``).
    """
    import torch

    _, k_cache, v_cache, k_store, v_store, kv_dtype, page = layer_cache(backend, layer)
    meta = backend.forward_metadata
    bs = int(bs0) - 1
    hq, hkv, hkv_v = int(layer.tp_q_head_num), int(layer.tp_k_head_num), int(layer.tp_v_head_num)
    d, dv = int(layer.qk_head_dim), int(layer.v_head_dim)
    window = layer_window(layer)
    if window_size is not None and len(window_size) == 2 and int(window_size[0]) >= 0:
        window = int(window_size[0])
    aiter_window = tuple(window_size) if window_size is not None else ((window, -1) if window >= 0 else (-1, -1))
    cap = float(getattr(layer, "logit_cap", 0.0) or 0.0)
    fp8 = is_fp8(kv_dtype)
    out_dtype = getattr(backend, "input_dtype", None) or q.dtype
    q3 = q.reshape(-1, hq, d)
    qo_indptr = backend_qo_indptr(backend)[: bs + 1]

    use_swa_table = window >= 0 and getattr(meta, "swa_page_table", None) is not None
    slots = meta.swa_page_table if use_swa_table else meta.kv_indices

    key = ConfigKey(
        "mha_batch_prefill_func", dtype_name(q.dtype), dtype_name(kv_dtype), page, d, dv, hq, hkv,
        window >= 0, sinks is not None, cap > 0,
    )
    def unsupported() -> Optional[str]:
        if sinks is not None:
            return EXTEND_SINKS_UNSUPPORTED
        if d > 256 or dv > 256:
            return f"head dims {d}/{dv} exceed 256"
        if fp8:
            aiter_fp8 = aiter_fp8_dtype()
            if aiter_fp8 is not None and aiter_fp8 != kv_dtype:
                return f"KV cache is {dtype_name(kv_dtype)} but this aiter build's fp8 is {dtype_name(aiter_fp8)}"
        return None

    impl, fns = route(key, EXTEND_FNS, unsupported)

    def run_aiter(fns):
        o = _extend_aiter(
            fns["mha_batch_prefill_func"], backend, layer, forward_batch, q3, k, v,
            k_store, v_store, kv_dtype, page, slots, qo_indptr, bs, hq, hkv, hkv_v, d, dv,
            fp8, aiter_window, cap, sinks,
        )
        if o.dtype != out_dtype:
            o = o.to(out_dtype)
        return o.reshape(-1, hq * dv)

    if impl == "aiter":
        try:
            return run_aiter(fns)
        except Exception as e:  # aiter raises any type; only its "no matching kernel" is caught, the rest re-raised
            if not is_no_kernel(e):
                raise
            remember_fallback(key, f"{type(e).__name__}: {e}")

    total_kv = int(forward_batch.seq_lens_sum)
    max_len = max_kv_len(backend, forward_batch, total_kv)
    block_tables = block_table_from_token_slots(meta.kv_indptr, slots[:total_kv], page, bs, max_len)
    kv_lens = forward_batch.seq_lens[:bs]
    if kv_lens.dtype != torch.int32:
        kv_lens = kv_lens.to(torch.int32)
    if qo_indptr.dtype != torch.int32:
        qo_indptr = qo_indptr.to(torch.int32)
    out = torch.empty((q3.shape[0], hq, dv), dtype=out_dtype, device=q.device)
    kw = portable_args(layer, backend, kv_dtype, q.device, window=window, sinks=sinks, cap=cap)
    rescued = run_portable(key, EXTEND_FNS, unsupported, run_aiter, q.device, lambda: kernels_module().extend_attention_5d(
        q3, k_cache, v_cache, block_tables, qo_indptr, kv_lens, causal=True, out=out, **kw,
    ))
    if rescued is not None:  # aiter's result (the portable kernel failed)
        return rescued
    return out.reshape(-1, hq * dv)


def _extend_aiter(mha, backend, layer, forward_batch, q3, k, v, k_store, v_store, kv_dtype, page,
                  slots, qo_indptr, bs, hq, hkv, hkv_v, d, dv, fp8, window_size, cap, sinks):
    import torch

    meta = backend.forward_metadata
    device = q3.device
    prefix = getattr(forward_batch, "extend_prefix_lens_cpu", None)
    fresh = prefix is not None and not any(prefix)
    common = dict(
        dropout_p=0.0,
        softmax_scale=float(layer.scaling),
        logits_soft_cap=cap,
        causal=True,
        window_size=window_size,
        alibi_slopes=None,
        deterministic=False,
        return_lse=False,
        return_attn_probs=False,
        out=None,
        sink_ptr=sinks,
    )
    if fresh:
        # Every request starts from an empty prefix: the new k/v are the whole
        # KV stream. No cache read, no descales (k/v are in the model dtype).
        k_lin = k.reshape(-1, hkv, d)
        v_lin = v.reshape(-1, hkv_v, dv)
        if not k_lin.is_contiguous():
            k_lin = k_lin.contiguous()
        if not v_lin.is_contiguous():
            v_lin = v_lin.contiguous()
        max_q = int(meta.max_q_len)
        return mha(
            q=q3 if q3.is_contiguous() else q3.contiguous(),
            k=k_lin,
            v=v_lin,
            cu_seqlens_q=qo_indptr,
            kv_indptr=qo_indptr,
            kv_page_indices=linear_page_indices(k_lin.shape[0], device, torch),  # padded: CK reads past the end
            max_seqlen_q=max_q,
            max_seqlen_k=max_q,
            **common,
        )

    total_kv = int(forward_batch.seq_lens_sum)
    k_lin, v_lin = gather_5d_to_linear(k_store, v_store, slots[:total_kv], page)
    if k_lin.dtype != kv_dtype:
        k_lin = k_lin.view(kv_dtype)
        v_lin = v_lin.view(kv_dtype)
    descales = {}
    q_in = q3
    if fp8:
        q_in, q_descale = quantize_per_tensor(q3, kv_dtype)
        k_descale, v_descale = kv_scales(layer, backend, device)
        descales = dict(q_descale=q_descale, k_descale=k_descale, v_descale=v_descale)
    kv_indptr = meta.kv_indptr[: bs + 1]
    max_kv = max_kv_len(backend, forward_batch, total_kv)
    return mha(
        q=q_in if q_in.is_contiguous() else q_in.contiguous(),
        k=k_lin,
        v=v_lin,
        cu_seqlens_q=qo_indptr,
        kv_indptr=kv_indptr,
        kv_page_indices=linear_page_indices(total_kv, device, torch),  # padded: CK reads past the end
        max_seqlen_q=int(meta.max_q_len),
        max_seqlen_k=max_kv,
        **common,
        **descales,
    )
