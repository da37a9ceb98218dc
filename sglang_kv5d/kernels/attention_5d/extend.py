"""The chunked-prefill launcher: ``extend_attention_5d`` (several new tokens
per sequence over a cached prefix, causal or not, sliding window optional).

Shapes: q ``(total_q, H_q, D)``; the 5D caches as for the decode; block_tables
``(B, max_blocks)``, qo_indptr ``(B + 1,)`` and kv_lens ``(B,)`` int32 /
int64; returns ``(total_q, H_q, D)`` in q's dtype. The checks shared with the
decode are ``host``'s; tiles ``config``'s.
"""

from __future__ import annotations

import math
from typing import Optional

import torch

from ...platform import KernelTarget, target_of
from .config import extend_config, pow2
from .extend_kernel import EXTEND_KERNEL
from .host import (INDEX_DTYPES, check_metadata, check_metadata_values, check_q, debug_bounds, kv_view, score_args,
                   stride_or_1)

__all__ = ["extend_attention_5d"]


def extend_attention_5d(
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
    out: Optional[torch.Tensor] = None,
    _config: Optional[tuple] = None,
    _target: Optional[KernelTarget] = None,
) -> torch.Tensor:
    """Chunked-prefill attention over SHUFFLE 5D K/V caches.

    q ``(total_q, H_q, D)``; qo_indptr ``(B+1,)``; kv_lens ``(B,)`` total KV length
    (cached prefix + new tokens, all already in the cache). New token ``i`` of
    sequence ``b`` sits at ``p = kv_lens[b] - len_b + i`` and (causal) sees keys
    ``0 .. p``, or with ``sliding_window = W > 0`` keys ``p - W .. p``. With
    ``causal=False`` every key ``< kv_lens[b]`` is visible (``|p - k| <= W`` with a
    window). Returns ``out`` ``(total_q, H_q, D)`` in q's dtype.
    """
    check_q(q, "(total_q, H_q, D)")
    T, H_q, Dq = q.shape
    if (not isinstance(qo_indptr, torch.Tensor) or qo_indptr.dtype not in INDEX_DTYPES
            or qo_indptr.dim() != 1 or qo_indptr.device != q.device):
        raise TypeError(f"qo_indptr: expected a 1-D int32/int64 tensor on {q.device}, got "
                        f"{getattr(qo_indptr, 'dtype', type(qo_indptr).__name__)} "
                        f"{tuple(getattr(qo_indptr, 'shape', ()))}")
    B = qo_indptr.shape[0] - 1
    check_metadata(q, max(B, 0), block_tables, kv_lens, "kv_lens", sinks, H_q, out, q.shape)
    if out is None:
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
    if T == 0 or B <= 0:
        return out
    target = _target or target_of(q.device)
    k, v, X, fp8_mode, fp8_mul, cdt, nb, H_kv, D, page, G, max_ctx = kv_view(
        q, k_cache, v_cache, block_tables, fp8_dtype, target)
    if debug_bounds(q.device):
        check_metadata_values(block_tables, kv_lens, num_blocks=nb, page=page, batch=B, qo_indptr=qo_indptr,
                              total_q=T, lens_name="kv_lens")

    BLOCK_D = pow2(D)
    block_m, block_n, ext_warps = _config or extend_config(D, G, page, X, fp8_mode > 0, target)
    # entries clamped to [0, T] and made non-decreasing on the device (no
    # sync): tiles and rows then never leave q / out (the kernel clamps too)
    qo_indptr = torch.cummax(qo_indptr.clamp(0, T), 0).values
    qlens = (qo_indptr[1:] - qo_indptr[:-1]).to(torch.int32)
    tiles = torch.div(qlens + (block_m - 1), block_m, rounding_mode="floor")
    tile_indptr = torch.zeros(B + 1, dtype=torch.int32, device=q.device)
    tile_indptr[1:] = torch.cumsum(tiles, 0)
    max_tiles = -(-T // block_m) + B  # upper bound, no host sync
    log_b = max(1, math.ceil(math.log2(B + 1)))

    kp, kval, kis, vp, vval, vis, window, has_cap, has_sink, sinks = score_args(
        q, k_scale, v_scale, sliding_window, logit_cap, sinks)

    EXTEND_KERNEL[(max_tiles, H_q)](
        q,
        k,
        v,
        block_tables,
        qo_indptr,
        kv_lens,
        tile_indptr,
        sinks if has_sink else q,
        out,
        kp if kis else q,
        vp if vis else q,
        kval,
        vval,
        float(sm_scale),
        float(logit_cap) if has_cap else 0.0,
        window,
        nb,
        max_ctx,
        T,
        q.stride(0),
        q.stride(1),
        k.stride(0),
        k.stride(1),
        k.stride(2),
        v.stride(0),
        v.stride(1),
        v.stride(2),
        block_tables.stride(0),
        stride_or_1(block_tables, 1),
        stride_or_1(q, 2),
        stride_or_1(kv_lens, 0),
        stride_or_1(sinks, 0) if has_sink else 1,
        out.stride(0),
        out.stride(1),
        B,
        LOG_B=log_b,
        G=G,
        D=D,
        BLOCK_D=BLOCK_D,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        PAGE=page,
        X=X,
        FP8_MODE=fp8_mode,
        FP8_MUL=fp8_mul,
        K_SCALE_PTR=kis,
        V_SCALE_PTR=vis,
        CAUSAL=bool(causal),
        HAS_WINDOW=window > 0,
        HAS_CAP=has_cap,
        HAS_SINK=has_sink,
        COMPUTE=cdt,
        LOAD3D=True,
        num_warps=ext_warps,
    )
    return out
