"""aiter.ops.mha (fake): ``mha_batch_prefill_func`` as a float64 reference.

Signature as at aiter HEAD e4048607 (``sink_size`` since v0.1.15). Layouts:
LINEAR 3D ``[tokens, Hkv, D]`` (page size 1), LINEAR 4D paged
``[pages, page, Hkv, D]`` and VECTORIZED 5D paged (K ``[pages, Hkv, D/x,
page, x]``, V ``[pages, Hkv, page/x, D_v, x]``). Kernel availability follows the
CK instance list: paged page sizes other than ``aiter._fake.PREFILL_PAGE_SIZES``,
dtype/descale combinations without an instance, and (as at e4048607) per-head
sink logits without sink tokens raise ``RuntimeError`` containing "no matching
kernel", like the real C++ check. Like CK before ROCm/rocm-libraries#6932, it
reads ``kv_page_indices`` one entry past each sequence's last page (the V
prefetch's ``page_idx[N]``): a table without a valid entry there raises
``aiter._fake.PageTableOverRead`` (an IndexError), where a GPU would fault
(``aiter._fake.PREFILL_READS_PAST_TABLE = False`` models the fixed kernel; the
vLLM-style ``block_table`` route is not modelled). The real Python wrapper's checks come first,
with its exception types (ValueError for layouts, AssertionError for
``sink_ptr``); the C++ checks raise RuntimeError, as TORCH_CHECK does.
"""

from __future__ import annotations

import math

import torch

from aiter._fake import check, fp8_dtype, recorded, unimplemented

__all__ = ["mha_batch_prefill_func", "flash_attn_varlen_func"]

flash_attn_varlen_func = unimplemented("flash_attn_varlen_func")

_NO_KERNEL = "invalid argument for batch_prefill: no matching kernel found"


def _no_kernel(why: str, page_size, num_pages, dtype):
    raise RuntimeError(
        f"{_NO_KERNEL} ({why}; page_size={page_size}, num_pages={num_pages}, dtype={dtype}). "
        "Note: KV caches > 2GB with page_size < kN0 need CDNA3+"
    )


def _int32_vec(name, t, n=None):
    check(isinstance(t, torch.Tensor) and t.dim() == 1, f"{name} must be a 1-D tensor", RuntimeError)
    check(t.dtype == torch.int32, f"{name} must be int32, got {t.dtype}", RuntimeError)
    if n is not None:
        check(t.shape[0] == n, f"{name} must have {n} entries, got {t.shape[0]}", RuntimeError)


@recorded("mha_batch_prefill_func")
def mha_batch_prefill_func(
    q,
    k,
    v,
    cu_seqlens_q,
    kv_indptr,
    kv_page_indices,
    max_seqlen_q,
    max_seqlen_k,
    dropout_p=0.0,
    softmax_scale=None,
    logits_soft_cap=0.0,
    causal=False,
    window_size=(-1, -1),
    alibi_slopes=None,
    deterministic=False,
    return_lse=False,
    return_attn_probs=False,
    out=None,
    kv_last_page_lens=None,
    block_table=None,
    seqlen_k=None,
    q_descale=None,
    k_descale=None,
    v_descale=None,
    kv_block_descale=None,
    sink_ptr=None,
    sink_size: int = 0,
):
    from aiter import _fake

    fp8 = fp8_dtype()
    # ---- the real Python wrapper's checks, in its order, with its exception types ----
    if sink_ptr is not None:
        check(sink_ptr.device == q.device, "sink_ptr must be on the same device as q")
        check(sink_ptr.shape[0] == q.size(1), "sink_ptr has incorrect shape")
    vec = 16 // k.element_size()
    vectorized = k.dim() == 5 and v.dim() == 5
    linear = (k.dim() == 4 and v.dim() == 4) or (k.dim() == 3 and v.dim() == 3)
    if not (vectorized or linear):
        raise ValueError("Batch prefill requires 5D vectorized, 4D linear, or 3D linear (page_size=1) K/V tensors")
    d_q = q.size(-1)
    d_v = v.size(-2) if vectorized else v.size(-1)
    if d_q % vec or d_v % vec:
        raise ValueError("Batch prefill requires head size divisible by vector size")
    if vectorized:
        if k.size(-3) * vec != d_q:
            raise ValueError("K vectorized layout does not match Q head size")
        if k.size(-2) % vec:
            raise ValueError("Vectorized KV requires page size divisible by vector size")
        if v.size(-1) != vec:
            raise ValueError("Vectorized KV requires last dim equal to vector size")
    else:
        if k.size(-1) != d_q:
            raise ValueError("K linear layout does not match Q head size")
        if k.size(1) != v.size(1) or k.size(2) != v.size(2):
            raise ValueError("K/V linear layout must match page size and head count")
    if k.stride(-1) != 1 or v.stride(-1) != 1:
        raise ValueError("Batch prefill requires K/V with contiguous last dimension")

    # ---- the C++ side's checks (TORCH_CHECK: RuntimeError) ----
    check(q.dim() == 3, f"q must be [total_q, Hq, D], got {tuple(q.shape)}", RuntimeError)
    check(q.dtype == k.dtype == v.dtype, f"q, k, v must share a dtype: {q.dtype}, {k.dtype}, {v.dtype}", RuntimeError)
    check(q.dtype in (fp8, torch.bfloat16, torch.float16), f"unsupported dtype {q.dtype}", RuntimeError)

    total_q, hq, d = q.shape
    mode = {3: "linear", 4: "paged4d", 5: "vectorized"}[k.dim()]
    if mode == "linear":
        page, hkv, dv, num_pages = 1, k.shape[1], v.shape[2], k.shape[0]
        check(v.shape[0] == k.shape[0], "linear k/v token counts differ", RuntimeError)
    elif mode == "paged4d":
        num_pages, page, hkv, dv = k.shape[0], k.shape[1], k.shape[2], v.shape[3]
        check(v.shape[0] == k.shape[0], "paged 4D k/v page counts differ", RuntimeError)
    else:
        num_pages, hkv, _, page, x = k.shape
        dv = v.shape[3]
        check(tuple(k.shape) == (num_pages, hkv, d // x, page, x), f"5D k shape {tuple(k.shape)}", RuntimeError)
        check(tuple(v.shape) == (num_pages, hkv, page // x, dv, x), f"5D v shape {tuple(v.shape)}", RuntimeError)
        check(k.stride(3) == x and k.stride(2) == page * x, "5D k strides", RuntimeError)
        check(v.stride(3) == x and v.stride(2) == dv * x, "5D v strides", RuntimeError)

    check(d <= 256 and dv <= 256, f"head dimension at most 256 (D={d}, D_v={dv})", RuntimeError)
    check(hq % hkv == 0, f"Hq {hq} not a multiple of Hkv {hkv}", RuntimeError)
    group = hq // hkv

    # ---- kernel instance selection (CK): page size, dtype x descale ----
    if mode != "linear" and page not in _page_sizes() - {1}:
        _no_kernel("no instance for this page size", page, num_pages, q.dtype)
    if mode == "linear" and 1 not in _page_sizes():
        _no_kernel("no linear instance", page, num_pages, q.dtype)
    descales = (q_descale, k_descale, v_descale)
    if q.dtype != fp8:
        if any(s is not None for s in descales) or kv_block_descale is not None:
            _no_kernel("bf16/fp16 kernels take no descales", page, num_pages, q.dtype)
    else:
        if kv_block_descale is not None:
            raise NotImplementedError("fake aiter: kv_block_descale is not modelled")
        if any(s is None for s in descales):
            _no_kernel("fp8 needs q_descale, k_descale and v_descale", page, num_pages, q.dtype)
        if return_lse or dropout_p > 0:
            _no_kernel("fp8 kernels have no LSE/dropout variants", page, num_pages, q.dtype)
    # The JIT builds sink instances only for sink tokens under a mask
    # (cmdGenFunc_mha_batch_prefill); the C++ side asks for one whenever
    # sink_ptr is set (mha_fwd_batch_prefill.cu, aiter e4048607).
    causal_eff = causal and not (int(max_seqlen_q) == 1 and alibi_slopes is None)
    masked = causal_eff or tuple(window_size) != (-1, -1)
    if sink_ptr is not None and not (int(sink_size) > 0 and masked) and not _fake.PREFILL_SINK_PTR_KERNELS:
        _no_kernel("sink_ptr without sink_size: the JIT built no sink instance", page, num_pages, q.dtype)
    if k_descale is not None or v_descale is not None:
        check(q_descale is not None, "k/v descale without q_descale", RuntimeError)
    for n, s in (("q_descale", q_descale), ("k_descale", k_descale), ("v_descale", v_descale)):
        if s is not None:
            check(s.dtype == torch.float32, f"{n} must be float32, got {s.dtype}", RuntimeError)
            check(s.numel() == 1, f"{n} must be per-tensor [1], got {tuple(s.shape)}", RuntimeError)
    if alibi_slopes is not None:
        raise NotImplementedError("fake aiter: alibi is not modelled")
    if dropout_p:
        raise NotImplementedError("fake aiter: dropout is not modelled")
    if return_attn_probs:
        raise NotImplementedError("fake aiter: return_attn_probs is not modelled")

    # ---- metadata ----
    check(cu_seqlens_q.dim() == 1, "cu_seqlens_q must be 1-D", RuntimeError)
    bsz = cu_seqlens_q.shape[0] - 1
    _int32_vec("cu_seqlens_q", cu_seqlens_q)
    vllm_table = block_table is not None
    if vllm_table:
        check(block_table.dim() == 2 and block_table.dtype == torch.int32, "block_table must be int32 [B, pages]", RuntimeError)
        _int32_vec("seqlen_k", seqlen_k, bsz)
    else:
        _int32_vec("kv_indptr", kv_indptr, bsz + 1)
        _int32_vec("kv_page_indices", kv_page_indices)
        if page > 1:
            check(kv_last_page_lens is not None, "kv_last_page_lens is required when page_size > 1", RuntimeError)
            _int32_vec("kv_last_page_lens", kv_last_page_lens, bsz)
    if not vllm_table and _fake.PREFILL_READS_PAST_TABLE:
        _read_ahead(kv_page_indices, kv_indptr, bsz, num_pages)
    check(int(cu_seqlens_q[-1]) == total_q, f"cu_seqlens_q[-1]={int(cu_seqlens_q[-1])} != total_q {total_q}", RuntimeError)
    check(isinstance(window_size, (tuple, list)) and len(window_size) == 2, "window_size must be (left, right)", RuntimeError)

    out_dtype = torch.bfloat16 if q.dtype == fp8 else q.dtype
    if out is not None:
        check(tuple(out.shape) == (total_q, hq, dv), f"out shape {tuple(out.shape)} != {(total_q, hq, dv)}", RuntimeError)
        check(out.dtype == out_dtype, f"out dtype {out.dtype} != {out_dtype}", RuntimeError)

    # ---- float64 reference ----
    scale = float(softmax_scale) if softmax_scale is not None else 1.0 / math.sqrt(d)
    qd = q.to(torch.float64) * (float(q_descale.reshape(())) if q_descale is not None else 1.0)
    kd_scale = float(k_descale.reshape(())) if k_descale is not None else 1.0
    vd_scale = float(v_descale.reshape(())) if v_descale is not None else 1.0
    sink = sink_ptr.to(torch.float64).reshape(hq) if sink_ptr is not None else None
    left, right = int(window_size[0]), int(window_size[1])
    if left >= int(max_seqlen_k):
        left = -1
    cap = float(logits_soft_cap or 0.0)
    res = torch.empty(total_q, hq, dv, dtype=torch.float64)
    lse = torch.empty(hq, total_q, dtype=torch.float32)
    for b in range(bsz):
        q0, q1 = int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1])
        lq = q1 - q0
        check(lq <= int(max_seqlen_q), f"seq {b}: q length {lq} > max_seqlen_q", RuntimeError)
        kk, vv = _gather(k, v, mode, page, b, kv_indptr, kv_page_indices, kv_last_page_lens, block_table, seqlen_k)
        lk = kk.shape[0]
        check(lk <= int(max_seqlen_k), f"seq {b}: kv length {lk} > max_seqlen_k", RuntimeError)
        kk = kk.to(torch.float64) * kd_scale
        vv = vv.to(torch.float64) * vd_scale
        j = torch.arange(lk)
        for i in range(lq):
            qa = lk - lq + i  # bottom-right aligned
            keep = torch.ones(lk, dtype=torch.bool)
            if causal and int(max_seqlen_q) > 1:
                keep &= j <= qa
            win = torch.ones(lk, dtype=torch.bool)
            if left >= 0:
                win &= j >= qa - left
            if right >= 0:
                win &= j <= qa + right
            if sink_size and (left >= 0 or causal):
                win |= j < int(sink_size)
            keep &= win
            for h in range(hq):
                s = (kk[:, h // group, :] @ qd[q0 + i, h]) * scale
                if cap > 0:
                    s = cap * torch.tanh(s / cap)
                s = torch.where(keep, s, torch.tensor(-math.inf, dtype=torch.float64))
                m = s.max() if lk else torch.tensor(-math.inf, dtype=torch.float64)
                if sink is not None:
                    m = torch.maximum(m, sink[h])
                pw = torch.exp(s - m)
                den = pw.sum() + (torch.exp(sink[h] - m) if sink is not None else 0.0)
                res[q0 + i, h] = (pw[:, None] * vv[:, h // group, :]).sum(0) / den
                lse[h, q0 + i] = float(m + torch.log(den))
    if out is None:
        out = torch.empty(total_q, hq, dv, dtype=out_dtype, device=q.device)
    out.copy_(res.to(out_dtype))
    if return_lse:
        return out, lse
    return out


def _read_ahead(kv_page_indices, kv_indptr, bsz, num_pages):
    """CK's V prefetch reads ``page_idx[N]`` for a sequence of N pages (one past
    its last entry; ROCm/rocm-libraries#6932): entry ``kv_indptr[b + 1]`` of
    the table. It must exist and hold a valid page id, as on a GPU, where
    anything else is a memory access fault (or a wrong page)."""
    from aiter._fake import PageTableOverRead

    n = kv_page_indices.shape[0]
    for b in range(bsz):
        start, end = int(kv_indptr[b]), int(kv_indptr[b + 1])
        if end <= start:
            continue  # no pages: nothing is looked up
        if end >= n:
            raise PageTableOverRead(
                f"fake aiter: mha_batch_prefill_func reads kv_page_indices[{end}] (one past sequence {b}'s "
                f"last entry, CK's V prefetch) but kv_page_indices has {n} entries: on a GPU a memory access "
                "fault (ROCm/rocm-libraries#6932); pad the table past its last used entry with valid page ids"
            )
        page = int(kv_page_indices[end])
        if not 0 <= page < num_pages:
            raise PageTableOverRead(
                f"fake aiter: mha_batch_prefill_func reads kv_page_indices[{end}] = {page} (one past sequence "
                f"{b}'s last entry, CK's V prefetch), not a page id of the {num_pages}-page cache: on a GPU a "
                "memory access fault or a wrong page (ROCm/rocm-libraries#6932)"
            )


def _page_sizes():
    from aiter import _fake

    return set(_fake.PREFILL_PAGE_SIZES)


def _gather(k, v, mode, page, b, kv_indptr, kv_page_indices, kv_last_page_lens, block_table, seqlen_k):
    """Logical (Lk, Hkv, D) K and (Lk, Hkv, D_v) V of sequence ``b``."""
    if mode == "linear":
        toks = kv_page_indices[int(kv_indptr[b]) : int(kv_indptr[b + 1])].long()
        check(bool(((toks >= 0) & (toks < k.shape[0])).all()), "token index out of range", RuntimeError)
        return k[toks], v[toks]
    if block_table is not None:
        lk = int(seqlen_k[b])
        pages = block_table[b, : -(-lk // page)].long()
    else:
        pages = kv_page_indices[int(kv_indptr[b]) : int(kv_indptr[b + 1])].long()
        lk = (pages.numel() - 1) * page + int(kv_last_page_lens[b]) if pages.numel() else 0
    j = torch.arange(lk)
    blk, off = pages[j // page], j % page
    if mode == "paged4d":
        return k[blk, off], v[blk, off]
    x = k.shape[-1]
    kk = k[blk, :, :, off, :].reshape(lk, k.shape[1], -1)
    vv = v[blk, :, off // x, :, off % x]
    return kk, vv
