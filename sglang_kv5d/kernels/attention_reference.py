"""The float64 attention reference of the project (kernels, dispatch tests, selftest).

:func:`attention_ref` is attention written the plain way over linear K/V:
score matrix, soft cap, mask, softmax with sinks in the denominator, times V.
The 5D references read the same SHUFFLE 5D caches as
:mod:`sglang_kv5d.kernels.attention_5d` (dequantising fp8 with the per-tensor
scales), gather each sequence's tokens through its block table and call it.
Slow but obviously right.

Rules (the kernels' and SGLang's ``sliding_window_size`` convention): a query at
absolute position ``p`` sees key ``k`` iff ``k <= p`` (causal) and, with a
window ``W > 0``, ``p - W <= k``; ``W <= 0`` (or None) is no window.
"""

from __future__ import annotations

from typing import Optional

import torch

__all__ = [
    "attention_ref",
    "gather_kv_5d",
    "decode_attention_5d_ref",
    "extend_attention_5d_ref",
    "nhd_to_5d",
]

from ..platform import fp8_kv_dtypes

_FP8 = fp8_kv_dtypes()


def _dequant(x: torch.Tensor, fp8_dtype, scale) -> torch.Tensor:
    if x.dtype == torch.uint8:
        if fp8_dtype is None:
            raise ValueError("uint8 caches need fp8_dtype")
        x = x.view(fp8_dtype)
    y = x.to(torch.float64)
    if x.dtype in _FP8 and scale is not None:
        s = float(scale.item()) if isinstance(scale, torch.Tensor) else float(scale)
        y = y * s
    return y


def gather_kv_5d(
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_ids: torch.Tensor,
    length: int,
    *,
    k_scale=None,
    v_scale=None,
    fp8_dtype=None,
):
    """Tokens ``0 .. length-1`` of one sequence as float64 ``(length, H_kv, D)`` K and V."""
    nb, H, DX, P, X = k_cache.shape
    D, Dv = DX * X, v_cache.shape[3]
    n_pages = -(-length // P)
    ids = block_ids[:n_pages].long().to(k_cache.device)
    k = _dequant(k_cache[ids], fp8_dtype, k_scale)  # (n, H, D/X, P, X)
    v = _dequant(v_cache[ids], fp8_dtype, v_scale)  # (n, H, P/X, Dv, X)
    k = k.permute(0, 3, 1, 2, 4).reshape(n_pages * P, H, D)
    v = v.permute(0, 2, 4, 1, 3).reshape(n_pages * P, H, Dv)
    return k[:length], v[:length]


def nhd_to_5d(k: torch.Tensor, v: torch.Tensor, X: int):
    """Paged NHD ``(num_blocks, page, H, D)`` K/V to the SHUFFLE 5D layout."""
    nb, P, H, D = k.shape
    k5 = k.reshape(nb, P, H, D // X, X).permute(0, 2, 3, 1, 4).contiguous()
    v5 = v.reshape(nb, P // X, X, H, D).permute(0, 3, 1, 4, 2).contiguous()
    return k5, v5


def _attend(q, k, v, mask, sm_scale, logit_cap, sinks):
    """q (M, Hq, D), k/v (N, Hkv, D), mask (M, N) bool -> (M, Hq, D) float64."""
    Hq = q.shape[1]
    Hkv = k.shape[1]
    G = Hq // Hkv
    kk = k.repeat_interleave(G, dim=1)  # (N, Hq, D)
    vv = v.repeat_interleave(G, dim=1)
    s = torch.einsum("mhd,nhd->hmn", q, kk) * sm_scale
    if logit_cap and logit_cap > 0:
        s = logit_cap * torch.tanh(s / logit_cap)
    s = s.masked_fill(~mask[None], float("-inf"))
    m = s.amax(dim=-1, keepdim=True)
    if sinks is not None:
        sk = sinks.to(torch.float64).reshape(Hq, 1, 1).to(s.device)
        m = torch.maximum(m, sk)
    m = torch.where(torch.isinf(m) & (m < 0), torch.zeros_like(m), m)
    p = torch.exp(s - m)
    den = p.sum(-1, keepdim=True)
    if sinks is not None:
        den = den + torch.exp(sk - m)
    den = torch.where(den == 0, torch.ones_like(den), den)
    o = torch.einsum("hmn,nhd->mhd", p / den, vv)
    return o


def attention_ref(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_positions,
    *,
    sm_scale: float,
    causal: bool = True,
    sliding_window: Optional[int] = -1,
    sinks: Optional[torch.Tensor] = None,
    logit_cap: float = 0.0,
) -> torch.Tensor:
    """float64 ``(M, H_q, D_v)`` attention of one sequence.

    q ``(M, H_q, D)`` at absolute ``q_positions`` (M of them); k ``(L, H_kv, D)``
    and v ``(L, H_kv, D_v)`` are the sequence's tokens ``0 .. L-1`` (a prefix
    and the new tokens alike; H_q a multiple of H_kv). Causal unless told;
    ``sliding_window`` W > 0 keeps keys ``p - W .. p`` (``p - W .. p + W`` when
    not causal); ``sinks`` ``(H_q,)`` add ``exp(sink)`` to the denominator;
    ``logit_cap`` > 0 applies ``cap * tanh(s / cap)`` before the mask.
    """
    qpos = torch.as_tensor(q_positions, dtype=torch.long, device=q.device).reshape(-1, 1)
    kpos = torch.arange(k.shape[0], device=q.device)[None, :]
    mask = torch.ones((qpos.shape[0], k.shape[0]), dtype=torch.bool, device=q.device)
    if causal:
        mask &= kpos <= qpos
    W = sliding_window if sliding_window is not None else -1
    if W > 0:
        mask &= kpos >= qpos - W
        if not causal:
            mask &= kpos <= qpos + W
    f64 = torch.float64
    return _attend(q.to(f64), k.to(f64), v.to(f64), mask, sm_scale, logit_cap, sinks)


def decode_attention_5d_ref(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    *,
    sm_scale: float,
    k_scale=None,
    v_scale=None,
    fp8_dtype: Optional[torch.dtype] = None,
    sliding_window: int = -1,
    sinks: Optional[torch.Tensor] = None,
    logit_cap: float = 0.0,
) -> torch.Tensor:
    """float64 ``(B, H_q, D_v)``; the decode token sits at ``ctx - 1``."""
    B, Hq, _ = q.shape
    out = torch.zeros((B, Hq, v_cache.shape[3]), dtype=torch.float64, device=q.device)
    lens = context_lens.tolist()
    for b in range(B):
        L = int(lens[b])
        if L <= 0:
            continue
        k, v = gather_kv_5d(
            k_cache, v_cache, block_tables[b], L, k_scale=k_scale, v_scale=v_scale, fp8_dtype=fp8_dtype
        )
        out[b] = attention_ref(q[b : b + 1], k, v, [L - 1], sm_scale=sm_scale, sliding_window=sliding_window,
                               sinks=sinks, logit_cap=logit_cap)[0]
    return out


def extend_attention_5d_ref(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    qo_indptr: torch.Tensor,
    kv_lens: torch.Tensor,
    *,
    sm_scale: float,
    causal: bool = True,
    k_scale=None,
    v_scale=None,
    fp8_dtype: Optional[torch.dtype] = None,
    sliding_window: int = -1,
    sinks: Optional[torch.Tensor] = None,
    logit_cap: float = 0.0,
) -> torch.Tensor:
    """float64 ``(total_q, H_q, D_v)``; new token i of b sits at ``kv_len - len_b + i``
    (the first ``kv_len - len_b`` tokens are the sequence's prefix)."""
    T, Hq, _ = q.shape
    out = torch.zeros((T, Hq, v_cache.shape[3]), dtype=torch.float64, device=q.device)
    ind = qo_indptr.tolist()
    lens = kv_lens.tolist()
    for b in range(len(ind) - 1):
        q0, q1 = int(ind[b]), int(ind[b + 1])
        L = int(lens[b])
        n = q1 - q0
        if n <= 0 or L <= 0:
            continue
        k, v = gather_kv_5d(
            k_cache, v_cache, block_tables[b], L, k_scale=k_scale, v_scale=v_scale, fp8_dtype=fp8_dtype
        )
        out[q0:q1] = attention_ref(q[q0:q1], k, v, torch.arange(L - n, L), sm_scale=sm_scale, causal=causal,
                                   sliding_window=sliding_window, sinks=sinks, logit_cap=logit_cap)
    return out
