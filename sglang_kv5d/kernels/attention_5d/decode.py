"""The decode launcher: ``decode_attention_5d`` (one query token per sequence,
or N packed draft tokens for speculative verify), split-K with a reduce.

Shapes: q ``(B, H_q, D)``; K cache ``(blocks, H_kv, D/X, page, X)``, V cache
``(blocks, H_kv, page/X, D, X)``; block_tables ``(B / N, max_blocks)`` and
context_lens ``(B,)`` int32 / int64; returns ``(B, H_q, D)`` in q's dtype.
The checks shared with the extend are ``host``'s; tiles and splits ``config``'s.
"""

from __future__ import annotations

from typing import Optional

import torch
import triton

from ...platform import KernelTarget, target_of
from .config import decode_config, decode_resident, default_num_splits, mask_tile, pow2, use_pdl
from .decode_kernel import DECODE_KERNEL, DECODE_REDUCE_KERNEL
from .host import check_metadata, check_metadata_values, check_q, debug_bounds, kv_view, score_args, stride_or_1

__all__ = ["decode_attention_5d"]


def decode_attention_5d(
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
    num_splits: Optional[int] = None,
    out: Optional[torch.Tensor] = None,
    queries_per_seq: int = 1,
    _config: Optional[tuple] = None,
    _info: Optional[dict] = None,
    _target: Optional[KernelTarget] = None,
) -> torch.Tensor:
    """Paged decode attention over SHUFFLE 5D K/V caches.

    q ``(B, H_q, D)``; block_tables ``(B, max_blocks)`` int32/int64 physical
    block ids; context_lens ``(B,)`` int32/int64 KV length *including* the
    current token (already in the cache). Query head ``h`` reads KV head
    ``h // (H_q // H_kv)``. The decode token sits at position ``ctx - 1`` and,
    with ``sliding_window = W > 0``, sees keys ``ctx - 1 - W .. ctx - 1`` (W + 1
    keys; SGLang's exclusive ``sliding_window_size``; see the module docstring
    for how SGLang's own Triton decode and aiter differ). Returns ``out``
    ``(B, H_q, D)`` in q's dtype.

    ``queries_per_seq = N > 1``: query rows ``b*N .. b*N + N-1`` belong to one
    sequence and share ``block_tables[b]`` (speculative verify: row ``b*N + t``
    is draft token ``t``, its own ``context_lens`` entry ends at its position);
    block_tables then has ``B / N`` rows. The N x G rows of a sequence's KV
    head are packed into the head tile, so its K/V is read once for all of
    them (tiles as for a decode of N x G query heads per KV head).
    """
    check_q(q, "(B, H_q, D)")
    B, H_q, Dq = q.shape
    qps = int(queries_per_seq)
    if qps < 1 or B % qps:
        raise ValueError(f"queries_per_seq={queries_per_seq!r}: expected a positive divisor of the {B} query rows")
    check_metadata(q, B, block_tables, context_lens, "context_lens", sinks, H_q, out, q.shape, table_rows=B // qps)
    if out is None:
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
    if B == 0:
        return out
    target = _target or target_of(q.device)
    k, v, X, fp8_mode, fp8_mul, cdt, nb, H_kv, D, page, G, max_ctx = kv_view(
        q, k_cache, v_cache, block_tables, fp8_dtype, target)
    if debug_bounds(q.device):
        check_metadata_values(block_tables, context_lens, num_blocks=nb, page=page, batch=B, rows_per_table_row=qps)

    if _config is None:
        _config = decode_config(D, G * qps, page, X, fp8_mode > 0, target, packed=qps > 1)
    block_n, block_h, num_warps, num_stages, load3d, *rest = _config
    launch_opts = {"maxnreg": int(rest[0])} if rest and rest[0] and target.is_nvidia else {}
    head_tiles = -(-(G * qps) // block_h)
    seqs = B // qps
    kp, kval, kis, vp, vval, vis, window, has_cap, has_sink, sinks = score_args(
        q, k_scale, v_scale, sliding_window, logit_cap, sinks)
    BLOCK_D = pow2(D)
    has_window = window > 0

    def args(mid_o, mid_lse, splits):
        """The kernel's runtime arguments for ``splits`` (mid buffers unused when 1)."""
        sm = (mid_o.stride(0), mid_o.stride(1), mid_o.stride(2)) if splits > 1 else (0, 0, 0)
        return (
            q, k, v, block_tables, context_lens, sinks if has_sink else q, out, mid_o, mid_lse,
            kp if kis else q, vp if vis else q, kval, vval, float(sm_scale),
            float(logit_cap) if has_cap else 0.0, window, nb, max_ctx,
            q.stride(0), q.stride(1), k.stride(0), k.stride(1), k.stride(2),
            v.stride(0), v.stride(1), v.stride(2), block_tables.stride(0), stride_or_1(block_tables, 1),
            stride_or_1(q, 2), stride_or_1(context_lens, 0), stride_or_1(sinks, 0) if has_sink else 1,
            out.stride(0), out.stride(1), sm[0], sm[1], sm[2], splits,
        )

    def mid_buffers(splits):
        if splits == 1:
            return out, out
        return (torch.empty((B, H_q, splits, D), dtype=torch.float32, device=q.device),
                torch.empty((B, H_q, splits), dtype=torch.float32, device=q.device))

    def constexprs(direct, pdl):
        return dict(
            H_KV=H_kv, G=G, HEAD_TILES=head_tiles, D=D, BLOCK_D=BLOCK_D, BLOCK_H=block_h,
            BLOCK_N=block_n, PAGE=page, X=X, PAGE_ALIGNED=(page % block_n == 0),
            FP8_MODE=fp8_mode, FP8_MUL=fp8_mul, K_SCALE_PTR=kis, V_SCALE_PTR=vis,
            HAS_WINDOW=has_window, HAS_CAP=has_cap, HAS_SINK=has_sink, DIRECT=direct,
            COMPUTE=cdt, NUM_STAGES=num_stages, LOAD3D=bool(load3d), USE_PDL=pdl,
            MASK_TILE=mask_tile(target, BLOCK_D, fp8_mode > 0, block_h), PACK=qps,
            num_warps=num_warps, **launch_opts,
        )

    split_pdl = use_pdl(target)
    if num_splits is None:
        # everything the compiled kernel depends on, as a flat tuple (cheap to hash
        # on every call); the kernel is compiled (not launched) on the first miss
        key = (q.device, q.dtype, k.dtype, out.dtype, block_tables.dtype, context_lens.dtype,
               H_kv, G, head_tiles, D, block_n, block_h,
               num_warps, num_stages, bool(load3d), tuple(rest), page, X, fp8_mode, fp8_mul, kis, vis,
               has_window, has_cap, has_sink, split_pdl, qps)

        def warmup():
            mo, ml = mid_buffers(2)
            return DECODE_KERNEL.warmup(*args(mo, ml, 2), grid=(1, 2), **constexprs(False, split_pdl))

        num_splits = default_num_splits(
            seqs, H_kv, head_tiles, block_tables.shape[1] * page, q.device,
            resident=decode_resident(q.device, key, warmup, target), sms=target.compute_units,
        )
    num_splits = max(1, int(num_splits))
    direct = num_splits == 1
    if _info is not None:
        _info.update(num_splits=num_splits, config=tuple(_config))

    mid_o, mid_lse = mid_buffers(num_splits)
    pdl = (not direct) and split_pdl
    grid = (seqs * H_kv * head_tiles, num_splits)
    DECODE_KERNEL[grid](*args(mid_o, mid_lse, num_splits), **constexprs(direct, pdl))
    if not direct:
        block_dr = min(BLOCK_D, 64)
        extra = {"launch_pdl": True} if pdl else {}
        DECODE_REDUCE_KERNEL[(B * H_q, triton.cdiv(D, block_dr))](
            mid_o,
            mid_lse,
            sinks if has_sink else mid_o,
            out,
            mid_o.stride(0),
            mid_o.stride(1),
            mid_o.stride(2),
            out.stride(0),
            out.stride(1),
            stride_or_1(sinks, 0) if has_sink else 1,
            num_splits,
            H_Q=H_q,
            BLOCK_S=pow2(num_splits),
            D=D,
            BLOCK_DR=block_dr,
            HAS_SINK=has_sink,
            USE_PDL=pdl,
            num_warps=4,
            **extra,
        )
    return out
