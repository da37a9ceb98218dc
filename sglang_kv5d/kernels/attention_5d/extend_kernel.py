"""The chunked-prefill (extend) kernel (``@triton.jit`` only).

    EXTEND_KERNEL = _extend_5d_kernel   grid (query tiles over all sequences (upper bound), H_q)

Arguments: ``extend.extend_attention_5d`` fills them (q ``(total_q, H_q, D)``,
the 5D caches, block tables ``(B, max_blocks)``, ``qo_indptr`` ``(B + 1,)``
clamped on the device, kv lengths ``(B,)``, the tile index ``(B + 1,)``
int32). The kernel keeps its function name (the kernel report and the AMD
gate's table name it).
"""

from __future__ import annotations

import triton
import triton.language as tl

from .kernel_common import keep_if, load_kv_tile, load_scale, tanh

__all__ = ["EXTEND_KERNEL"]


@triton.jit
def _extend_5d_kernel(
    Q,
    K,
    V,
    BT,
    QO_INDPTR,
    KV_LENS,
    TILE_INDPTR,
    SINKS,
    OUT,
    k_scale_ptr,
    v_scale_ptr,
    k_scale_val,
    v_scale_val,
    sm_scale,
    logit_cap,
    window,
    n_blocks,
    max_ctx,
    T,
    stride_qt,
    stride_qh,
    stride_kb,
    stride_kh,
    stride_kc,
    stride_vb,
    stride_vh,
    stride_vc,
    stride_btb,
    stride_btn,
    stride_qd,
    stride_kvl,
    stride_sink,
    stride_ot,
    stride_oh,
    B,
    LOG_B: tl.constexpr,
    G: tl.constexpr,
    D: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    PAGE: tl.constexpr,
    X: tl.constexpr,
    FP8_MODE: tl.constexpr,
    FP8_MUL: tl.constexpr,
    K_SCALE_PTR: tl.constexpr,
    V_SCALE_PTR: tl.constexpr,
    CAUSAL: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    HAS_CAP: tl.constexpr,
    HAS_SINK: tl.constexpr,
    COMPUTE: tl.constexpr,
    LOAD3D: tl.constexpr,
):
    tile = tl.program_id(0)
    hq = tl.program_id(1)
    kvh = hq // G
    total_tiles = tl.load(TILE_INDPTR + B)
    if tile < total_tiles:
        # find the sequence: largest b with TILE_INDPTR[b] <= tile (binary search)
        lo_b = 0
        hi_b = B
        for _ in range(LOG_B):
            mid = (lo_b + hi_b) // 2
            go_right = tl.load(TILE_INDPTR + mid) <= tile
            lo_b = tl.where(go_right, mid, lo_b)
            hi_b = tl.where(go_right, hi_b, mid)
        b = lo_b
        m_blk = tile - tl.load(TILE_INDPTR + b)
        # indptr entries are clamped to [0, T] and made non-decreasing, lengths
        # to [0, what the block table covers]: no row of q / out outside
        # [0, T) and no key past the table row is touched
        q_start = tl.minimum(tl.maximum(tl.load(QO_INDPTR + b), 0), T)
        q_end = tl.minimum(tl.maximum(tl.load(QO_INDPTR + b + 1), q_start), T)
        q_len = q_end - q_start
        kv_len = tl.minimum(tl.maximum(tl.load(KV_LENS + b * stride_kvl), 0), max_ctx)
        prefix = kv_len - q_len

        offs_m = m_blk * BLOCK_M + tl.arange(0, BLOCK_M)
        mask_m = offs_m < q_len
        pos = prefix + offs_m  # absolute positions of the query rows
        offs_d = tl.arange(0, BLOCK_D)
        mask_d = offs_d < D
        offs_n = tl.arange(0, BLOCK_N)

        k_scale = load_scale(k_scale_ptr, k_scale_val, K_SCALE_PTR)
        v_scale = load_scale(v_scale_ptr, v_scale_val, V_SCALE_PTR)
        qk_scale = sm_scale * k_scale * FP8_MUL
        v_mul = v_scale * FP8_MUL

        row = (q_start + offs_m).to(tl.int64)
        q = tl.load(
            Q + row[:, None] * stride_qt + hq * stride_qh + offs_d[None, :] * stride_qd,
            mask=mask_m[:, None] & mask_d[None, :],
            other=0.0,
        ).to(COMPUTE)

        pos_first = prefix + m_blk * BLOCK_M
        pos_last = tl.minimum(pos_first + BLOCK_M, kv_len) - 1
        if CAUSAL:
            hi = pos_last + 1
        else:
            hi = kv_len
            if HAS_WINDOW:
                hi = tl.minimum(kv_len, pos_last + 1 + window)
        lo = 0
        if HAS_WINDOW:
            lo = tl.maximum(pos_first - window, 0)
        lo = (lo // BLOCK_N) * BLOCK_N

        k_head = K + kvh.to(tl.int64) * stride_kh
        v_head = V + kvh.to(tl.int64) * stride_vh
        bt_row = BT + b.to(tl.int64) * stride_btb

        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
        for n0 in range(lo, hi, BLOCK_N):
            tok = n0 + offs_n
            in_ctx = tok < kv_len
            k, v, tok_ok, tile_ok = load_kv_tile(
                k_head, v_head, bt_row, stride_btn, n0, kv_len, n_blocks, stride_kb, stride_kc, stride_vb, stride_vc,
                D, BLOCK_D, BLOCK_N, PAGE, X, PAGE % BLOCK_N == 0, LOAD3D, FP8_MODE, COMPUTE, False,
            )
            # one block per tile (PAGE % BLOCK_N == 0): a bad id discards the
            # tile's update below (tok_ok is all True); else per token
            kv_ok = in_ctx & tok_ok
            s = tl.dot(q, k) * qk_scale
            if HAS_CAP:
                s = logit_cap * tanh(s / logit_cap)
            valid = kv_ok[None, :] & mask_m[:, None]
            if CAUSAL:
                valid = valid & (tok[None, :] <= pos[:, None])
            if HAS_WINDOW:
                valid = valid & (tok[None, :] >= pos[:, None] - window)
                if not CAUSAL:
                    valid = valid & (tok[None, :] <= pos[:, None] + window)
            s = tl.where(valid, s * 1.4426950408889634, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
            alpha = tl.exp2(m_i - m_safe)
            p = tl.exp2(s - m_safe[:, None])
            v = tl.where(kv_ok[:, None], v, 0.0)
            acc_new = acc * alpha[:, None] + tl.dot(p.to(COMPUTE), v)
            l_new = l_i * alpha + tl.sum(p, 1)
            m_i, l_i, acc = keep_if(tile_ok, m_new, l_new, acc_new, m_i, l_i, acc)

        if HAS_SINK:
            sink2 = tl.load(SINKS + hq * stride_sink).to(tl.float32) * 1.4426950408889634
            m_fin = tl.maximum(m_i, sink2)
            m_fin = tl.where(m_fin == float("-inf"), 0.0, m_fin)
            corr = tl.exp2(m_i - m_fin)
            l_i = l_i * corr + tl.exp2(sink2 - m_fin)
            acc = acc * corr[:, None]
        l_i = tl.where(l_i == 0.0, 1.0, l_i)
        o = acc / l_i[:, None] * v_mul
        tl.store(
            OUT + row[:, None] * stride_ot + hq * stride_oh + offs_d[None, :],
            o.to(OUT.dtype.element_ty),
            mask=mask_m[:, None] & mask_d[None, :],
        )


EXTEND_KERNEL = _extend_5d_kernel
