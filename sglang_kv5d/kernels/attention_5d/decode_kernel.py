"""The split-K decode kernel and its reduce (``@triton.jit`` only).

    DECODE_KERNEL = _decode_5d_kernel          grid (sequences x H_kv x head tiles, splits)
    DECODE_REDUCE_KERNEL = _decode_reduce_kernel   grid (B x H_q, D chunks), when splits > 1

Arguments: ``decode.decode_attention_5d`` fills them (q ``(B, H_q, D)``, the
5D caches, block tables ``(B / PACK, max_blocks)``, context lengths ``(B,)``,
fp32 mid buffers ``(B, H_q, splits, D)`` / ``(B, H_q, splits)``). The kernels
keep their function names: the kernel report, the AMD gate's table and the
AOT tests name compiled kernels by them.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .kernel_common import keep_if, load_kv_tile, load_scale, softmax_step, softmax_step_rows

__all__ = ["DECODE_KERNEL", "DECODE_REDUCE_KERNEL"]


@triton.jit
def _decode_5d_kernel(
    Q,
    K,
    V,
    BT,
    CTX,
    SINKS,
    OUT,
    MID_O,
    MID_LSE,
    k_scale_ptr,
    v_scale_ptr,
    k_scale_val,
    v_scale_val,
    sm_scale,
    logit_cap,
    window,
    n_blocks,
    max_ctx,
    stride_qb,
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
    stride_ctx,
    stride_sink,
    stride_ob,
    stride_oh,
    stride_mb,
    stride_mh,
    stride_ms,
    NUM_SPLITS,
    H_KV: tl.constexpr,
    G: tl.constexpr,
    HEAD_TILES: tl.constexpr,
    D: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr,
    PAGE: tl.constexpr,
    X: tl.constexpr,
    PAGE_ALIGNED: tl.constexpr,
    FP8_MODE: tl.constexpr,
    FP8_MUL: tl.constexpr,
    K_SCALE_PTR: tl.constexpr,
    V_SCALE_PTR: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    HAS_CAP: tl.constexpr,
    HAS_SINK: tl.constexpr,
    DIRECT: tl.constexpr,
    COMPUTE: tl.constexpr,
    NUM_STAGES: tl.constexpr,
    LOAD3D: tl.constexpr,
    USE_PDL: tl.constexpr,
    MASK_TILE: tl.constexpr,
    PACK: tl.constexpr = 1,
):
    pid = tl.program_id(0)
    split = tl.program_id(1)
    ht = pid % HEAD_TILES
    bh = pid // HEAD_TILES
    kvh = bh % H_KV
    b = (bh // H_KV).to(tl.int64)

    offs_h = tl.arange(0, BLOCK_H)
    offs_d = tl.arange(0, BLOCK_D)
    mask_d = offs_d < D
    offs_n = tl.arange(0, BLOCK_N)
    if PACK > 1:
        # PACK query rows of sequence b (speculative drafts), each with its own
        # length, share the tile with the G heads of the KV head: row r is
        # draft r // G, head r % G. K/V tiles are read once for all of them.
        r = ht * BLOCK_H + offs_h
        mask_h = r < PACK * G
        g_idx = r % G
        qrow = b * PACK + (r // G)
        ctx_r = tl.load(CTX + qrow * stride_ctx, mask=mask_h, other=0).to(tl.int32)
        ctx_r = tl.minimum(tl.maximum(ctx_r, 0), max_ctx)
        ctx = tl.max(ctx_r, 0)
        ctx_lo = tl.min(tl.where(mask_h, ctx_r, max_ctx), 0)  # keys below it are every row's
        lo_r = tl.zeros([BLOCK_H], tl.int32)
        if HAS_WINDOW:
            lo_r = tl.maximum(ctx_r - 1 - window, 0)
        lo = tl.min(tl.where(mask_h, lo_r, max_ctx), 0)
        lo = tl.minimum(lo, ctx)
    else:
        g_idx = ht * BLOCK_H + offs_h
        mask_h = g_idx < G
        # lengths outside [0, what the block table covers] are clamped: nothing is
        # read past the table row or the caches (a length <= 0 gives zeros)
        ctx = tl.minimum(tl.maximum(tl.load(CTX + b * stride_ctx).to(tl.int32), 0), max_ctx)
        lo = 0
        if HAS_WINDOW:
            lo = tl.maximum(ctx - 1 - window, 0)
    head = kvh * G + g_idx
    lo_al = (lo // BLOCK_N) * BLOCK_N
    n_tiles = tl.cdiv(ctx - lo_al, BLOCK_N)
    tiles_per_split = tl.cdiv(n_tiles, NUM_SPLITS)
    start = lo_al + split * tiles_per_split * BLOCK_N
    end = tl.minimum(start + tiles_per_split * BLOCK_N, ctx)

    k_scale = load_scale(k_scale_ptr, k_scale_val, K_SCALE_PTR)
    v_scale = load_scale(v_scale_ptr, v_scale_val, V_SCALE_PTR)
    qk_scale = sm_scale * k_scale * FP8_MUL
    v_mul = v_scale * FP8_MUL

    if PACK > 1:
        q = tl.load(
            Q + (qrow * stride_qb + head * stride_qh)[:, None] + offs_d[None, :] * stride_qd,
            mask=mask_h[:, None] & mask_d[None, :],
            other=0.0,
        ).to(COMPUTE)
    else:
        q = tl.load(
            Q + b * stride_qb + head[:, None] * stride_qh + offs_d[None, :] * stride_qd,
            mask=mask_h[:, None] & mask_d[None, :],
            other=0.0,
        ).to(COMPUTE)

    k_head = K + kvh.to(tl.int64) * stride_kh
    v_head = V + kvh.to(tl.int64) * stride_vh
    bt_row = BT + b * stride_btb

    m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, BLOCK_D], tl.float32)

    # Tiles entirely inside the context need no V masking (their slots hold written
    # data); only the sequence's last, partial tile does, so it is peeled off.
    full_end = tl.minimum(end, (ctx // BLOCK_N) * BLOCK_N)
    if PACK > 1:
        # packed rows: only tiles below every row's length (and, with a window,
        # none) are free of per-row masks
        if HAS_WINDOW:
            full_end = start
        else:
            full_end = tl.minimum(end, (ctx_lo // BLOCK_N) * BLOCK_N)
    # A tile of a block id outside the cache leaves the state as it was
    # (PAGE_ALIGNED: zeros and -inf scores with MASK_TILE, else a select on
    # the state); otherwise such tokens are masked like tokens outside the
    # window. The host picks which (``config.mask_tile``).
    for n0 in tl.range(start, full_end, BLOCK_N, num_stages=NUM_STAGES):
        k, v, tok_ok, tile_ok = load_kv_tile(
            k_head, v_head, bt_row, stride_btn, n0, ctx, n_blocks, stride_kb, stride_kc, stride_vb, stride_vc,
            D, BLOCK_D, BLOCK_N, PAGE, X, PAGE_ALIGNED, LOAD3D, FP8_MODE, COMPUTE, MASK_TILE,
        )
        if PAGE_ALIGNED and MASK_TILE:
            m_i, l_i, acc = softmax_step(
                q, k, v, m_i, l_i, acc, n0 + offs_n >= lo, qk_scale, logit_cap,
                tl.where(tile_ok, 0.0, float("-inf")), HAS_CAP, HAS_WINDOW, False
            )
        elif PAGE_ALIGNED:
            m_n, l_n, acc_n = softmax_step(
                q, k, v, m_i, l_i, acc, n0 + offs_n >= lo, qk_scale, logit_cap, 0.0, HAS_CAP, HAS_WINDOW, False
            )
            m_i, l_i, acc = keep_if(tile_ok, m_n, l_n, acc_n, m_i, l_i, acc)
        else:
            m_i, l_i, acc = softmax_step(
                q, k, v, m_i, l_i, acc, (n0 + offs_n >= lo) & tok_ok, qk_scale, logit_cap, 0.0, HAS_CAP, True, False
            )
    tail = tl.maximum(full_end, start)
    if PACK > 1:
        for n0 in tl.range(tail, end, BLOCK_N):
            tok = n0 + offs_n
            k, v, tok_ok, tile_ok = load_kv_tile(
                k_head, v_head, bt_row, stride_btn, n0, ctx, n_blocks, stride_kb, stride_kc, stride_vb, stride_vc,
                D, BLOCK_D, BLOCK_N, PAGE, X, PAGE_ALIGNED, LOAD3D, FP8_MODE, COMPUTE, MASK_TILE,
            )
            if BLOCK_H >= 128:
                # these tiles mask per key anyway: a bad block id (tile_ok
                # False) joins the key masks (scores -inf, V rows zeroed, NaN
                # included), which leaves the state exactly as it was. A
                # select on the state would keep a second [128, D] accumulator
                # live (sm_90, D=256: 672-680 B of stack); smaller tiles keep
                # the select (on sm_90 the masks moved their stack both ways)
                ok = (tok < ctx) & tok_ok & tile_ok
                seen = (tok[None, :] < ctx_r[:, None]) & (tok[None, :] >= lo_r[:, None]) & ok[None, :]
                m_i, l_i, acc = softmax_step_rows(
                    q, k, v, m_i, l_i, acc, seen, ok, qk_scale, logit_cap, HAS_CAP
                )
            else:
                seen = (tok[None, :] < ctx_r[:, None]) & (tok[None, :] >= lo_r[:, None]) & tok_ok[None, :]
                m_n, l_n, acc_n = softmax_step_rows(
                    q, k, v, m_i, l_i, acc, seen, (tok < ctx) & tok_ok, qk_scale, logit_cap, HAS_CAP
                )
                m_i, l_i, acc = keep_if(tile_ok, m_n, l_n, acc_n, m_i, l_i, acc)
    elif tail < end:
        tok = tail + offs_n
        k, v, tok_ok, tile_ok = load_kv_tile(
            k_head, v_head, bt_row, stride_btn, tail, ctx, n_blocks, stride_kb, stride_kc, stride_vb, stride_vc,
            D, BLOCK_D, BLOCK_N, PAGE, X, PAGE_ALIGNED, LOAD3D, FP8_MODE, COMPUTE, MASK_TILE,
        )
        m_n, l_n, acc_n = softmax_step(
            q, k, v, m_i, l_i, acc, (tok < ctx) & (tok >= lo) & tok_ok, qk_scale, logit_cap, 0.0, HAS_CAP, True, True
        )
        m_i, l_i, acc = keep_if(tile_ok, m_n, l_n, acc_n, m_i, l_i, acc)

    if DIRECT:
        if HAS_SINK:
            sink = tl.load(SINKS + head * stride_sink, mask=mask_h, other=float("-inf")).to(tl.float32)
            sink2 = sink * 1.4426950408889634
            m_fin = tl.maximum(m_i, sink2)
            m_fin = tl.where(m_fin == float("-inf"), 0.0, m_fin)
            l_fin = l_i * tl.exp2(m_i - m_fin) + tl.exp2(sink2 - m_fin)
            acc = acc * tl.exp2(m_i - m_fin)[:, None]
        else:
            l_fin = l_i
        l_fin = tl.where(l_fin == 0.0, 1.0, l_fin)
        o = acc / l_fin[:, None] * v_mul
        if PACK > 1:
            o_ptrs = OUT + (qrow * stride_ob + head * stride_oh)[:, None] + offs_d[None, :]
        else:
            o_ptrs = OUT + b * stride_ob + head[:, None] * stride_oh + offs_d[None, :]
        tl.store(o_ptrs, o.to(OUT.dtype.element_ty), mask=mask_h[:, None] & mask_d[None, :])
    else:
        l_safe = tl.where(l_i == 0.0, 1.0, l_i)
        o = acc / l_safe[:, None] * v_mul
        lse = tl.where(l_i == 0.0, float("-inf"), m_i + tl.log2(l_safe))
        if PACK > 1:
            mid = MID_O + qrow * stride_mb + head * stride_mh + split * stride_ms
            lse_ptrs = MID_LSE + (qrow * (H_KV * G) + head) * NUM_SPLITS + split
        else:
            mid = MID_O + b * stride_mb + head * stride_mh + split * stride_ms
            lse_ptrs = MID_LSE + (b * (H_KV * G) + head) * NUM_SPLITS + split
        tl.store(
            mid[:, None] + offs_d[None, :], o, mask=mask_h[:, None] & mask_d[None, :]
        )
        tl.store(lse_ptrs, lse, mask=mask_h)
    if USE_PDL:
        tl.extra.cuda.gdc_launch_dependents()


@triton.jit
def _decode_reduce_kernel(
    MID_O,
    MID_LSE,
    SINKS,
    OUT,
    stride_mb,
    stride_mh,
    stride_ms,
    stride_ob,
    stride_oh,
    stride_sink,
    NUM_SPLITS,
    H_Q: tl.constexpr,
    BLOCK_S: tl.constexpr,
    D: tl.constexpr,
    BLOCK_DR: tl.constexpr,
    HAS_SINK: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    pid = tl.program_id(0)
    dblk = tl.program_id(1)
    if USE_PDL:
        tl.extra.cuda.gdc_wait()
    b = (pid // H_Q).to(tl.int64)
    h = pid % H_Q
    offs_s = tl.arange(0, BLOCK_S)
    mask_s = offs_s < NUM_SPLITS
    offs_d = dblk * BLOCK_DR + tl.arange(0, BLOCK_DR)
    mask_d = offs_d < D
    lse = tl.load(
        MID_LSE + (b * H_Q + h) * NUM_SPLITS + offs_s, mask=mask_s, other=float("-inf")
    )
    m = tl.max(lse, 0)
    if HAS_SINK:
        sink2 = tl.load(SINKS + h * stride_sink).to(tl.float32) * 1.4426950408889634
        m = tl.maximum(m, sink2)
    m = tl.where(m == float("-inf"), 0.0, m)
    w = tl.exp2(lse - m)
    denom = tl.sum(w, 0)
    if HAS_SINK:
        denom += tl.exp2(sink2 - m)
    o = tl.load(
        MID_O
        + b * stride_mb
        + h * stride_mh
        + offs_s[:, None] * stride_ms
        + offs_d[None, :],
        mask=mask_s[:, None] & mask_d[None, :] & (w[:, None] > 0.0),
        other=0.0,
    )
    res = tl.sum(o * w[:, None], 0)
    denom = tl.where(denom == 0.0, 1.0, denom)
    res = res / denom
    tl.store(
        OUT + b * stride_ob + h * stride_oh + offs_d,
        res.to(OUT.dtype.element_ty),
        mask=mask_d,
    )


DECODE_KERNEL = _decode_5d_kernel
DECODE_REDUCE_KERNEL = _decode_reduce_kernel
