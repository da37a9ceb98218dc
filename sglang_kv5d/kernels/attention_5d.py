"""Portable Triton attention that reads the SHUFFLE 5D ("vectorized_5d") KV layout.

Layout, with ``X = 16 // element_bytes`` (8 for bf16/fp16, 16 for fp8)::

    K cache: (num_blocks, H_kv, D // X, page, X)   K5d[b, h, d // X, t, d % X] = K[b, t, h, d]
    V cache: (num_blocks, H_kv, page // X, D, X)   V5d[b, h, t // X, d, t % X] = V[b, t, h, d]

Both ``(page, X)`` (K) and ``(D, X)`` (V) tails must be contiguous; block, head and
chunk strides may be anything (views of a larger pool are fine). The query and
every metadata tensor (block tables, context / kv lengths, ``qo_indptr``, sinks)
may be any view: the kernels read them through their strides (stride 0 and
storage offsets included) and the host copies none of them (the extend's
``qo_indptr`` is clamped by device ops into a fresh tensor, as it always was).
Strides equal to 1 are specialised by
Triton, so contiguous metadata compiles to the code it always did. ``out``
needs a contiguous last dim and rows that do not share memory.

Two entry points:

* :func:`decode_attention_5d`: one query token per sequence, split-K over the
  context with a second reduce kernel when more than one split is used. The
  split count is chosen on the host from shapes only (batch, KV heads, SM count,
  block-table width) and, on NVIDIA, the compiled kernel's resident CTAs per SM
  (registers and shared memory, read once per configuration), so the launch is a
  fixed grid with no host syncs and can be captured in a CUDA graph.
* :func:`extend_attention_5d`: several new tokens per sequence (chunked prefill
  with prefix reuse). The new tokens must already be written into the cache.

FP8 caches (``torch.float8_e4m3fn`` / ``torch.float8_e4m3fnuz`` typed, or ``uint8``
storage with ``fp8_dtype=``) are decoded in-kernel. Where the hardware converts the
format natively (e4m3fn on NVIDIA sm_89+ and gfx950, e4m3fnuz on gfx942) the
native conversion is used; everywhere else (the Triton CPU interpreter, e4m3fnuz
on NVIDIA) the bits are decoded with integer arithmetic into fp16, bit-exact
(NaN codes included). Scales are per-tensor *dequantisation* multipliers
(real = stored * scale), either Python floats or one-element fp32 device tensors
read inside the kernel (no host sync).

Window semantics (``sliding_window``), SGLang's ``sliding_window_size``
convention, which is "exclusive" (models store ``config.sliding_window - 1``):

    a query at absolute position p sees key k  iff  p - W <= k <= p   (W + 1 keys)

This is what SGLang 0.5.23's Triton *extend* kernel does
(``kernels/ops/attention/extend_attention.py``: keep ``q <= k + SLIDING_WINDOW_SIZE``),
as do its torch-native backend (``k_pos >= q_pos - sliding_window_size``), its
FlashAttention backend (``window_size=(sliding_window_size, 0)``) and aiter's
``mha_batch_prefill_func`` (``window_size=(W, 0)``). SGLang's Triton *decode* path is
one key narrower: ``triton_backend.update_sliding_window_buffer`` builds the window
KV list with ``min(seq_lens, sliding_window_size)`` entries, i.e. keys
``ctx - W .. ctx - 1`` (W keys, the current token included) for the decode token
at ``p = ctx - 1``. We follow the extend / torch-native convention for both
kernels so decode and prefill agree; pass ``sliding_window=W - 1`` to reproduce the
Triton decode kernel exactly. aiter's ``pa_decode_gluon`` keeps keys
``c >= ctx - sliding_window + 1`` (W' - 1 keys), so to match this module it needs
``sliding_window = W + 2``. ``sliding_window <= 0`` disables the window.

Logit soft cap: ``s = cap * tanh(s / cap)`` applied to the scaled score
``s = sm_scale * k_scale * (q . k)`` when ``logit_cap > 0`` (SGLang's convention:
the cap is applied after ``sm_scale``). Sinks: ``[H_q]`` fp32 logits in natural
units (not multiplied by ``sm_scale``), added only to the softmax denominator
(gpt-oss style).
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

import torch
import triton
import triton.language as tl

from ..platform import KernelTarget, fp8_format, fp8_kv_dtypes, target_of

__all__ = ["decode_attention_5d", "extend_attention_5d", "decode_config", "extend_config", "check_metadata_values"]

_LOG2E = 1.4426950408889634
_INT32_MAX = 2**31 - 1

# FP8 decode modes (constexpr FP8_MODE)
_FP8_NONE = 0
_FP8_NATIVE_E4M3FN = 1  # tl.float8e4nv
_FP8_NATIVE_E4M3FNUZ = 2  # tl.float8e4b8 (AMD gfx942)
_FP8_EMU_E4M3FN = 3  # integer decode, result is value * 2**-8
_FP8_EMU_E4M3FNUZ = 4  # integer decode, result is value * 2**-7


# --------------------------------------------------------------------------- helpers


@triton.jit
def _tanh(x):
    # portable (interpreter, CUDA, HIP): tanh(x) = 2 * sigmoid(2x) - 1
    return 2.0 * tl.sigmoid(2.0 * x) - 1.0


@triton.jit
def _fp8_to_f16(x, FP8_MODE: tl.constexpr):
    """uint8 fp8 bits -> fp16. Emulated modes return value * 2**-8 (fn) / 2**-7 (fnuz)."""
    if FP8_MODE == 1:
        return x.to(tl.float8e4nv, bitcast=True).to(tl.float16)
    elif FP8_MODE == 2:
        return x.to(tl.float8e4b8, bitcast=True).to(tl.float16)
    else:
        # Sign-extend the byte; shifting left by 7 puts the 4 exponent bits and the 3
        # mantissa bits of e4m3 into the low exponent / high mantissa bits of fp16 and
        # the sign into bit 15 (0xBF80 keeps bits 15 and 7..13). fp16 subnormals carry
        # e4m3 subnormals exactly, so only the exponent bias differs (fixed by the
        # caller's scale).
        xi = x.to(tl.int8, bitcast=True).to(tl.int32)
        bits = ((xi << 7) & 0xBF80).to(tl.int16)
        val = bits.to(tl.float16, bitcast=True)
        if FP8_MODE == 3:
            is_nan = (xi & 0x7F) == 0x7F
        else:
            is_nan = xi == -128
        return tl.where(is_nan, float("nan"), val)


@triton.jit
def _load_scale(ptr, val, IS_PTR: tl.constexpr):
    if IS_PTR:
        return tl.load(ptr).to(tl.float32)
    else:
        return val


@triton.jit
def _block_ok(blk, n_blocks):
    """Block ids inside the cache (``0 <= blk < n_blocks``), and ``blk`` with
    every other id replaced by 0 (so that no address leaves the cache)."""
    ok = (blk >= 0) & (blk < n_blocks)
    return ok, tl.where(ok, blk, 0)


@triton.jit
def _load_kv_tile(
    k_head,
    v_head,
    bt_row,
    stride_btn,
    n0,
    ctx,
    n_blocks,
    stride_kb,
    stride_kc,
    stride_vb,
    stride_vc,
    D: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_N: tl.constexpr,
    PAGE: tl.constexpr,
    X: tl.constexpr,
    PAGE_ALIGNED: tl.constexpr,
    LOAD3D: tl.constexpr,
    FP8_MODE: tl.constexpr,
    COMPUTE: tl.constexpr,
    MASK_TILE: tl.constexpr,
):
    """K^T tile ``[BLOCK_D, BLOCK_N]``, V tile ``[BLOCK_N, BLOCK_D]`` (COMPUTE
    dtype), ``tok_ok`` ``[BLOCK_N]`` and ``tile_ok`` (scalar) for tokens
    ``n0 .. n0 + BLOCK_N - 1`` of one sequence / KV head.

    Block ids outside ``[0, n_blocks)`` never address memory: they are
    replaced by block 0. With ``PAGE_ALIGNED`` the tile is one block:
    ``tile_ok`` is False when its id was bad; with ``MASK_TILE`` its K and V
    load as zeros (callers add -inf to its scores), else the tile holds block
    0's values (anything, NaN included) and callers discard the tile's whole
    update (a scalar select on the accumulators). Either leaves the pipelined
    loop as it is: a per-key score mask there doubled the shared memory of
    the sm_90 decode. Otherwise ``tok_ok`` is False for the tokens of bad blocks, whose
    K and V load as zeros, and callers mask their scores. Tokens past ``ctx``
    read block 0 too (callers mask them). ``ctx`` never exceeds the block
    table's width x PAGE, so table reads stay in the row. ``n0`` is a multiple
    of BLOCK_N (a multiple of X), so every X-group of tokens lies in one page
    at consecutive offsets.
    """
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    if LOAD3D:
        # Load in the memory's own order (16 contiguous bytes per (chunk, token) for K,
        # per (token group, dim) for V, neighbouring lanes on neighbouring 16-byte
        # vectors), then permute to the dot operands.
        BLOCK_C: tl.constexpr = BLOCK_D // X
        TC: tl.constexpr = BLOCK_N // X
        oc = tl.arange(0, BLOCK_C)
        ox = tl.arange(0, X)
        otc = tl.arange(0, TC)
        if PAGE_ALIGNED:
            # The tile's tokens are consecutive offsets of one page: per K chunk
            # (and per V token group) BLOCK_N*X (D*X) elements are contiguous.
            # Address them as one flat axis so that the compiler sees that
            # contiguity and lays neighbouring lanes on neighbouring 16-byte
            # vectors (a 3-D tile leaves the lane order to a tie-break that
            # put the lanes of K on 32 different chunks: every sector was
            # fetched twice, half by each of two loads).
            tile_ok, blk = _block_ok(tl.load(bt_row + (n0 // PAGE) * stride_btn).to(tl.int64), n_blocks)
            tok_ok = offs_n >= 0
            t0 = n0 % PAGE
            okx = tl.arange(0, BLOCK_N * X)
            odx = tl.arange(0, BLOCK_D * X)
            k_ptrs = (k_head + blk * stride_kb + t0 * X + (oc * stride_kc)[:, None]
                      + okx[None, :])
            v_ptrs = (v_head + blk * stride_vb + ((t0 // X + otc) * stride_vc)[:, None]
                      + odx[None, :])
            if MASK_TILE:
                km = (oc < D // X)[:, None] & tile_ok
                vm = (odx < D * X)[None, :] & tile_ok
                k2 = tl.load(k_ptrs, mask=km, other=0)
                v2 = tl.load(v_ptrs, mask=vm, other=0)
            elif BLOCK_D == D:
                k2 = tl.load(k_ptrs)
                v2 = tl.load(v_ptrs)
            else:
                k2 = tl.load(k_ptrs, mask=(oc < D // X)[:, None], other=0)
                v2 = tl.load(v_ptrs, mask=(odx < D * X)[None, :], other=0)
            k3 = tl.reshape(k2, (BLOCK_C, BLOCK_N, X))
            v3 = tl.reshape(v2, (TC, BLOCK_D, X))
        else:
            k_off = oc[:, None, None] * stride_kc + ox[None, None, :]  # [C, 1, X]
            v_off = offs_d[None, :, None] * X + ox[None, None, :]  # [1, BLOCK_D, X]
            tok = n0 + offs_n
            tok_ok, blk = _block_ok(
                tl.load(bt_row + (tok // PAGE) * stride_btn, mask=tok < ctx, other=0).to(tl.int64), n_blocks)
            tile_ok = n0 >= 0
            k_ptrs = k_head + (blk * stride_kb + (tok % PAGE) * X)[None, :, None] + k_off
            tokg = n0 + otc * X
            g_ok, blkg = _block_ok(
                tl.load(bt_row + (tokg // PAGE) * stride_btn, mask=tokg < ctx, other=0).to(tl.int64), n_blocks)
            v_ptrs = (
                v_head
                + (blkg * stride_vb + ((tokg % PAGE) // X) * stride_vc)[:, None, None]
                + v_off
            )
            km = tok_ok[None, :, None]
            vm = g_ok[:, None, None]
            if BLOCK_D != D:
                km = km & (oc < D // X)[:, None, None]
                vm = vm & (offs_d < D)[None, :, None]
            k3 = tl.load(k_ptrs, mask=km, other=0)
            v3 = tl.load(v_ptrs, mask=vm, other=0)
        if FP8_MODE > 0:
            k3 = _fp8_to_f16(k3, FP8_MODE)
            v3 = _fp8_to_f16(v3, FP8_MODE)
        k = tl.reshape(tl.permute(k3.to(COMPUTE), (0, 2, 1)), (BLOCK_D, BLOCK_N))
        v = tl.reshape(tl.permute(v3.to(COMPUTE), (0, 2, 1)), (BLOCK_N, BLOCK_D))
    else:
        k_dpart = (offs_d[:, None] // X) * stride_kc + (offs_d[:, None] % X)
        v_dpart = offs_d[None, :] * X
        if PAGE_ALIGNED:
            tile_ok, blk = _block_ok(tl.load(bt_row + (n0 // PAGE) * stride_btn).to(tl.int64), n_blocks)
            tok_ok = offs_n >= 0
            t0 = n0 % PAGE
            k_ptrs = k_head + blk * stride_kb + t0 * X + (offs_n * X)[None, :] + k_dpart
            v_ptrs = (
                v_head
                + blk * stride_vb
                + (t0 // X) * stride_vc
                + ((offs_n // X) * stride_vc + (offs_n % X))[:, None]
                + v_dpart
            )
        else:
            tok = n0 + offs_n
            tok_ok, blk = _block_ok(
                tl.load(bt_row + (tok // PAGE) * stride_btn, mask=tok < ctx, other=0).to(tl.int64), n_blocks)
            tile_ok = n0 >= 0
            t = tok % PAGE
            k_ptrs = k_head + (blk * stride_kb + t * X)[None, :] + k_dpart
            v_ptrs = (
                v_head + (blk * stride_vb + (t // X) * stride_vc + (t % X))[:, None] + v_dpart
            )
        if PAGE_ALIGNED and MASK_TILE:
            k = tl.load(k_ptrs, mask=(offs_d < D)[:, None] & tile_ok, other=0)
            v = tl.load(v_ptrs, mask=(offs_d < D)[None, :] & tile_ok, other=0)
        elif PAGE_ALIGNED:
            if BLOCK_D == D:
                k = tl.load(k_ptrs)
                v = tl.load(v_ptrs)
            else:
                k = tl.load(k_ptrs, mask=(offs_d < D)[:, None], other=0)
                v = tl.load(v_ptrs, mask=(offs_d < D)[None, :], other=0)
        else:
            km = tok_ok[None, :]
            vm = tok_ok[:, None]
            if BLOCK_D != D:
                km = km & (offs_d < D)[:, None]
                vm = vm & (offs_d < D)[None, :]
            k = tl.load(k_ptrs, mask=km, other=0)
            v = tl.load(v_ptrs, mask=vm, other=0)
        if FP8_MODE > 0:
            k = _fp8_to_f16(k, FP8_MODE)
            v = _fp8_to_f16(v, FP8_MODE)
        k = k.to(COMPUTE)
        v = v.to(COMPUTE)
    return k, v, tok_ok, tile_ok


@triton.jit
def _keep_if(ok, new_m, new_l, new_acc, m_i, l_i, acc):
    """The online-softmax state after a tile, or before it when ``ok`` (a
    scalar) is False: a tile of a bad block id leaves no trace, NaN included."""
    return tl.where(ok, new_m, m_i), tl.where(ok, new_l, l_i), tl.where(ok, new_acc, acc)


@triton.jit
def _softmax_step(
    q, k, v, m_i, l_i, acc, valid, qk_scale, logit_cap, bias,
    HAS_CAP: tl.constexpr, MASK_S: tl.constexpr, MASK_V: tl.constexpr,
):
    """One online-softmax step (log2 domain) over a K/V tile; ``valid`` is per
    key; ``bias`` (a scalar: 0, or -inf for a tile whose K and V loaded as
    zeros) is added to every score after the soft cap (which would turn -inf
    into -cap)."""
    s = tl.dot(q, k) * qk_scale
    if HAS_CAP:
        s = logit_cap * _tanh(s / logit_cap)
    s = s * 1.4426950408889634 + bias
    if MASK_S:
        s = tl.where(valid[None, :], s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp2(m_i - m_safe)
    p = tl.exp2(s - m_safe[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    if MASK_V:
        # slots past the context may hold anything (NaN included): 0 * NaN = NaN
        v = tl.where(valid[:, None], v, 0.0)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
    return m_new, l_i, acc


@triton.jit
def _softmax_step_rows(q, k, v, m_i, l_i, acc, seen, v_ok, qk_scale, logit_cap, HAS_CAP: tl.constexpr):
    """:func:`_softmax_step` with a per-row key mask ``seen`` ``[rows, BLOCK_N]``
    (packed speculative rows: each sees its own prefix) and ``v_ok`` ``[BLOCK_N]``
    (the V rows that hold written data; the others are zeroed, NaN included)."""
    s = tl.dot(q, k) * qk_scale
    if HAS_CAP:
        s = logit_cap * _tanh(s / logit_cap)
    s = tl.where(seen, s * 1.4426950408889634, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp2(m_i - m_safe)
    p = tl.exp2(s - m_safe[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    v = tl.where(v_ok[:, None], v, 0.0)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
    return m_new, l_i, acc


# --------------------------------------------------------------------------- decode


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

    k_scale = _load_scale(k_scale_ptr, k_scale_val, K_SCALE_PTR)
    v_scale = _load_scale(v_scale_ptr, v_scale_val, V_SCALE_PTR)
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
    # window. The host picks which (``_mask_tile``).
    for n0 in tl.range(start, full_end, BLOCK_N, num_stages=NUM_STAGES):
        k, v, tok_ok, tile_ok = _load_kv_tile(
            k_head, v_head, bt_row, stride_btn, n0, ctx, n_blocks, stride_kb, stride_kc, stride_vb, stride_vc,
            D, BLOCK_D, BLOCK_N, PAGE, X, PAGE_ALIGNED, LOAD3D, FP8_MODE, COMPUTE, MASK_TILE,
        )
        if PAGE_ALIGNED and MASK_TILE:
            m_i, l_i, acc = _softmax_step(
                q, k, v, m_i, l_i, acc, n0 + offs_n >= lo, qk_scale, logit_cap,
                tl.where(tile_ok, 0.0, float("-inf")), HAS_CAP, HAS_WINDOW, False
            )
        elif PAGE_ALIGNED:
            m_n, l_n, acc_n = _softmax_step(
                q, k, v, m_i, l_i, acc, n0 + offs_n >= lo, qk_scale, logit_cap, 0.0, HAS_CAP, HAS_WINDOW, False
            )
            m_i, l_i, acc = _keep_if(tile_ok, m_n, l_n, acc_n, m_i, l_i, acc)
        else:
            m_i, l_i, acc = _softmax_step(
                q, k, v, m_i, l_i, acc, (n0 + offs_n >= lo) & tok_ok, qk_scale, logit_cap, 0.0, HAS_CAP, True, False
            )
    tail = tl.maximum(full_end, start)
    if PACK > 1:
        for n0 in tl.range(tail, end, BLOCK_N):
            tok = n0 + offs_n
            k, v, tok_ok, tile_ok = _load_kv_tile(
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
                m_i, l_i, acc = _softmax_step_rows(
                    q, k, v, m_i, l_i, acc, seen, ok, qk_scale, logit_cap, HAS_CAP
                )
            else:
                seen = (tok[None, :] < ctx_r[:, None]) & (tok[None, :] >= lo_r[:, None]) & tok_ok[None, :]
                m_n, l_n, acc_n = _softmax_step_rows(
                    q, k, v, m_i, l_i, acc, seen, (tok < ctx) & tok_ok, qk_scale, logit_cap, HAS_CAP
                )
                m_i, l_i, acc = _keep_if(tile_ok, m_n, l_n, acc_n, m_i, l_i, acc)
    elif tail < end:
        tok = tail + offs_n
        k, v, tok_ok, tile_ok = _load_kv_tile(
            k_head, v_head, bt_row, stride_btn, tail, ctx, n_blocks, stride_kb, stride_kc, stride_vb, stride_vc,
            D, BLOCK_D, BLOCK_N, PAGE, X, PAGE_ALIGNED, LOAD3D, FP8_MODE, COMPUTE, MASK_TILE,
        )
        m_n, l_n, acc_n = _softmax_step(
            q, k, v, m_i, l_i, acc, (tok < ctx) & (tok >= lo) & tok_ok, qk_scale, logit_cap, 0.0, HAS_CAP, True, True
        )
        m_i, l_i, acc = _keep_if(tile_ok, m_n, l_n, acc_n, m_i, l_i, acc)

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


# --------------------------------------------------------------------------- extend


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

        k_scale = _load_scale(k_scale_ptr, k_scale_val, K_SCALE_PTR)
        v_scale = _load_scale(v_scale_ptr, v_scale_val, V_SCALE_PTR)
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
            k, v, tok_ok, tile_ok = _load_kv_tile(
                k_head, v_head, bt_row, stride_btn, n0, kv_len, n_blocks, stride_kb, stride_kc, stride_vb, stride_vc,
                D, BLOCK_D, BLOCK_N, PAGE, X, PAGE % BLOCK_N == 0, LOAD3D, FP8_MODE, COMPUTE, False,
            )
            # one block per tile (PAGE % BLOCK_N == 0): a bad id discards the
            # tile's update below (tok_ok is all True); else per token
            kv_ok = in_ctx & tok_ok
            s = tl.dot(q, k) * qk_scale
            if HAS_CAP:
                s = logit_cap * _tanh(s / logit_cap)
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
            m_i, l_i, acc = _keep_if(tile_ok, m_new, l_new, acc_new, m_i, l_i, acc)

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


# --------------------------------------------------------------------------- host side

_FP8_DTYPES = fp8_kv_dtypes()


def _sm_count(device: torch.device, target: Optional[KernelTarget] = None) -> int:
    """SMs / CUs of the device (8 under the interpreter and on the CPU)."""
    return (target or target_of(device)).compute_units


def _native_fp8_mode(fp8_dtype: torch.dtype, target: KernelTarget) -> Optional[int]:
    """The hardware conversion mode of ``target`` for ``fp8_dtype`` (e4m3fn on
    NVIDIA sm_89+ and gfx950, e4m3fnuz on gfx942), or None to decode with integers."""
    if not target.converts(fp8_dtype):
        return None
    return _FP8_NATIVE_E4M3FNUZ if fp8_format(fp8_dtype).fnuz else _FP8_NATIVE_E4M3FN


def _kv_format(k_cache: torch.Tensor, v_cache: torch.Tensor, fp8_dtype, target: KernelTarget):
    """(k_view, v_view, X, fp8_mode, fp8_mul, compute tl dtype)."""
    if k_cache.dtype != v_cache.dtype:
        raise ValueError(f"K/V cache dtypes differ: {k_cache.dtype} vs {v_cache.dtype}")
    dt = k_cache.dtype
    if dt in _FP8_DTYPES or dt == torch.uint8:
        if dt == torch.uint8:
            if fp8_dtype is None:
                raise ValueError("uint8 KV caches need fp8_dtype= (float8_e4m3fn or float8_e4m3fnuz)")
            fdt = fp8_dtype
        else:
            if fp8_dtype is not None and fp8_dtype != dt:
                raise ValueError(f"fp8_dtype={fp8_dtype} contradicts the cache dtype {dt}")
            fdt = dt
        if fdt not in _FP8_DTYPES:
            raise ValueError(f"unsupported fp8 dtype {fdt}")
        mode = _native_fp8_mode(fdt, target)
        if mode is None:
            if not fp8_format(fdt).fnuz:
                mode, mul = _FP8_EMU_E4M3FN, 256.0
            else:
                mode, mul = _FP8_EMU_E4M3FNUZ, 128.0
        else:
            mul = 1.0
        return k_cache.view(torch.uint8), v_cache.view(torch.uint8), 16, mode, mul, tl.float16
    if dt in (torch.bfloat16, torch.float16):
        cdt = tl.bfloat16 if dt == torch.bfloat16 else tl.float16
        if dt == torch.bfloat16 and target.backend == "interpreter":
            # the Triton CPU interpreter computes bf16 tl.dot wrongly (triton 3.8);
            # upcast to fp32 there (exact for bf16 inputs)
            cdt = tl.float32
        return k_cache, v_cache, 8, _FP8_NONE, 1.0, cdt
    raise ValueError(f"unsupported KV cache dtype {dt}")


def _check_layout(k, v, X: int) -> Tuple[int, int, int, int]:
    """Validate 5D shapes/strides; return (num_blocks, H_kv, D, page)."""
    if k.dim() != 5 or v.dim() != 5:
        raise ValueError(f"expected 5D K/V caches, got {tuple(k.shape)} / {tuple(v.shape)}")
    nb, hkv, dx, page, xk = k.shape
    if xk != X:
        raise ValueError(f"K cache last dim {xk} != X={X} for this dtype")
    D = dx * X
    if tuple(v.shape) != (nb, hkv, page // X, D, X) or page % X:
        raise ValueError(
            f"V cache shape {tuple(v.shape)} does not match K {tuple(k.shape)}: expected "
            f"{(nb, hkv, page // X, D, X)} with page % X == 0"
        )
    if k.stride(4) != 1 or k.stride(3) != X or v.stride(4) != 1 or v.stride(3) != X:
        raise ValueError("5D caches need contiguous (page, X) / (D, X) tails")
    return nb, hkv, D, page


_FLOAT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_INDEX_DTYPES = (torch.int32, torch.int64)


def _stride(t, dim: int) -> int:
    """``t.stride(dim)``, or 1 where that dimension has at most one element (its
    stride is never used: one specialisation of the kernel for such views)."""
    return t.stride(dim) if t.shape[dim] > 1 else 1


def _span(t) -> int:
    """Elements between the first and the last element of the view ``t``."""
    return sum((n - 1) * st for n, st in zip(t.shape, t.stride()) if n > 1)


def _check_metadata(q, batch: int, block_tables, lens, lens_name: str, sinks, H_q: int, out, out_shape,
                    table_rows: Optional[int] = None) -> None:
    """The shape and dtype mistakes the host sees without a sync (TypeError /
    ValueError naming the argument). Values (block ids, lengths, indptr
    entries) are the kernels' to clamp: reading them would sync.

    Strides: the kernels take every view of ``block_tables``, the lengths and
    ``sinks`` as it is (its strides, stride 0 and storage offset honoured; no
    copy, so nothing is allocated inside a CUDA-graph capture), within 32-bit
    element offsets (a view spanning 2**31 elements or more is refused). ``out``
    must not have rows that share memory (a stride 0 over several rows)."""
    if q.dtype not in _FLOAT_DTYPES:
        raise TypeError(f"q: expected bfloat16, float16 or float32, got {q.dtype}")
    for name, t in (("block_tables", block_tables), (lens_name, lens)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
        if t.dtype not in _INDEX_DTYPES:
            raise TypeError(f"{name}: expected int32 or int64, got {t.dtype}")
        if t.device != q.device:
            raise ValueError(f"{name}: expected device {q.device} (q's), got {t.device}")
    rows = batch if table_rows is None else table_rows
    if block_tables.dim() != 2 or block_tables.shape[0] < rows:
        raise ValueError(f"block_tables: expected ({rows}, max_blocks), got shape {tuple(block_tables.shape)}")
    if lens.dim() != 1 or lens.shape[0] < batch:
        raise ValueError(f"{lens_name}: expected (batch={batch},), got shape {tuple(lens.shape)}")
    if sinks is not None:
        if not isinstance(sinks, torch.Tensor) or not sinks.is_floating_point():
            raise TypeError(f"sinks: expected a floating-point tensor of H_q={H_q} logits, got {sinks!r:.80}")
        if sinks.dim() != 1 or sinks.shape[0] < H_q or sinks.device != q.device:
            raise ValueError(f"sinks: expected ({H_q},) on {q.device}, got shape {tuple(sinks.shape)} on {sinks.device}")
    for name, t in (("block_tables", block_tables), (lens_name, lens), ("sinks", sinks)):
        if t is not None and _span(t) > _INT32_MAX:
            raise ValueError(f"{name}: a view of shape {tuple(t.shape)} with strides {t.stride()} spans "
                             f"{_span(t)} elements, past the kernels' 32-bit metadata offsets: pass "
                             f"{name}.contiguous()")
    if out is not None and (tuple(out.shape) != tuple(out_shape) or out.stride(-1) != 1):
        raise ValueError(f"out: expected shape {tuple(out_shape)} with a contiguous last dim, got "
                         f"{tuple(out.shape)} strides {out.stride()}")
    if out is not None and any(n > 1 and st == 0 for n, st in zip(out.shape, out.stride())):
        raise ValueError(f"out: rows share memory (shape {tuple(out.shape)}, strides {out.stride()}): "
                         f"pass an output whose rows and heads do not overlap, or out=None")


def check_metadata_values(block_tables, lens, *, num_blocks: int, page: int, batch: int,
                          qo_indptr=None, total_q: Optional[int] = None, lens_name: str = "context_lens",
                          rows_per_table_row: int = 1) -> None:
    """Raise ValueError naming every value the kernels would clamp or mask:
    block ids outside ``[0, num_blocks)`` within a sequence's length, lengths
    outside ``[0, block_tables.shape[1] * page]``, and
    ``qo_indptr`` entries outside ``[0, total_q]`` or decreasing. Reads the
    tensors on the host (a device sync): for debugging
    (``SGLANG_KV5D_DEBUG_BOUNDS=1``) and tests, never on the serving path."""
    width = block_tables.shape[1]
    ls = lens[:batch].tolist()
    problems = []
    for b, n in enumerate(ls):
        if not 0 <= n <= width * page:
            problems.append(f"{lens_name}[{b}]={n} outside [0, {width * page}] "
                            f"(block table width {width} x page {page})")
        used = -(-max(0, min(n, width * page)) // page)
        if used:
            tb = b // rows_per_table_row
            row = block_tables[tb, :used]
            bad = ((row < 0) | (row >= num_blocks)).nonzero().flatten().tolist()
            if bad:
                problems.append(f"block_tables[{tb}, {bad[0]}]={int(row[bad[0]])} outside [0, {num_blocks})"
                                + (f" (and {len(bad) - 1} more in that row)" if len(bad) > 1 else ""))
    if qo_indptr is not None:
        ind = qo_indptr.tolist()
        for i, x in enumerate(ind):
            if not 0 <= x <= total_q or (i and x < ind[i - 1]):
                problems.append(f"qo_indptr[{i}]={x}: entries must be non-decreasing in [0, {total_q}]")
                break
    if problems:
        raise ValueError("5D attention metadata out of range (SGLANG_KV5D_DEBUG_BOUNDS): " + "; ".join(problems[:8])
                         + (f"; {len(problems) - 8} more" if len(problems) > 8 else ""))


def _debug_bounds(device) -> bool:
    """SGLANG_KV5D_DEBUG_BOUNDS on, and not inside a CUDA-graph capture (where a sync is not allowed)."""
    from .. import config

    if not config.value(config.DEBUG_BOUNDS):
        return False
    return not (device.type == "cuda" and torch.cuda.is_current_stream_capturing())


def _scale_args(scale, device):
    """(pointer tensor, float value, is_ptr)."""
    if scale is None:
        return None, 1.0, False
    if isinstance(scale, torch.Tensor):
        if scale.numel() != 1:
            raise ValueError("fp8 scales must be per-tensor (one element)")
        if scale.device != device:
            # a CPU scalar given for a GPU cache: one small copy (not inside a graph)
            scale = scale.to(device)
        return scale.reshape(1), 1.0, True
    return None, float(scale), False


def _pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def decode_config(D: int, G: int, page: int, X: int, fp8: bool, target: KernelTarget, *, packed: bool = False):
    """(BLOCK_N, BLOCK_H, num_warps, num_stages, LOAD3D[, maxnreg]) of the decode
    kernel on ``target``: the H200's tiles on NVIDIA and under the
    interpreter (``_decode_config``), ``_decode_config_amd`` on AMD. ``G``
    is the query rows per KV head of a sequence (drafts x heads when
    ``packed``: speculative verify, ``queries_per_seq > 1``)."""
    if target.is_amd:
        return _decode_config_amd(D, G, page, X, fp8, target)
    return _decode_config(D, G, page, X, fp8, packed=packed)


def extend_config(D: int, G: int, page: int, X: int, fp8: bool, target: KernelTarget):
    """(BLOCK_M, BLOCK_N, num_warps) of the extend kernel on ``target``."""
    if target.is_amd:
        return _extend_config_amd(D, G, page, X, fp8, target)
    BD = _pow2(D)
    return (32 if BD <= 128 else 16), 32, (4 if BD <= 128 else 8)


def _decode_config_amd(D: int, G: int, page: int, X: int, fp8: bool, target: KernelTarget):
    """AMD (gfx942, gfx950): the tiles stay small enough for registers.

    The H200's 64-token tiles with a 3-stage pipeline need 72 KiB of LDS for
    bf16 at D=256 on gfx942 (over its 64 KiB) and all 512 registers for fp8,
    and the flat page-aligned addressing (LOAD3D) runs out of SGPRs (106)
    and spills 165-430 of them. Compiled for gfx942 / gfx950 with Triton
    3.5-3.9 (tests/test_amd_gate.py, docs/benchmarks.md): 16-token tiles at
    D=256 and 32-token tiles at D<=128, one stage (the other waves of the CU
    hide the latency), the per-token addressing, 4 waves of 64 lanes: no
    spills, 8-24 KiB of LDS, 2 waves per SIMD for fp8 and 4 for bf16 at
    D=256. Speed on AMD hardware is unmeasured.
    """
    block_h = max(16, min(64, _pow2(G)))
    BD = _pow2(D)
    block_n = 16 if BD >= 256 else 32
    while page % block_n and block_n > 16:
        block_n //= 2
    num_warps = 8 if block_h >= 64 else 4
    if block_h >= 32 and BD < 256:
        # 32 or more query rows at D<=128 (a GQA group of 32, or packed
        # speculative drafts: Llama-like 4 query heads per KV head x 8 drafts
        # = 32, x 16 = 64) take 16-token tiles. 64 rows: 8 waves and 16-token tiles
        # take 103-130 VGPRs, 3-4 waves per SIMD; 32-token tiles needed 193-209
        # VGPRs and spilled 1-10 SGPRs (gfx942 / gfx950, Triton 3.5-3.9). 32
        # rows, 4 waves (gfx942, Triton 3.8.0, buffer ops on, caches under and
        # over 2 GiB): 16-token tiles take 122-132 VGPRs and 64-80 SGPRs, no
        # spills, 3-4 waves per SIMD; 32-token tiles took 193-200 VGPRs and
        # 105-106 SGPRs, spilled 2 (bf16) and 28 (fp8) SGPRs, 2 waves. Every
        # Triton and both archs: tests/test_amd_gate.py.
        block_n = 16
    return block_n, block_h, num_warps, 1, False


def _extend_config_amd(D: int, G: int, page: int, X: int, fp8: bool, target: KernelTarget):
    """AMD: 8 waves per program; at D=256 tiles of 16 query rows x 16 keys
    instead of the H200's 16 x 32. Compiled for gfx942 (Triton 3.8 / 3.9,
    buffer ops on and off): 16 x 32 takes 169 VGPRs for fp8 (2 waves per
    SIMD); 32 x 16 takes 158-169, on the edge of 3 waves (3.9 without buffer
    ops: 2); 16 x 16 takes 106-125 (4 waves) and 12-16 KiB of LDS. At D<=128,
    32 x 32 with 8 waves instead of 4 takes 157-168 VGPRs over twice the
    lanes (3 waves instead of 2). Static figures per Triton:
    tests/test_amd_gate.py; speed on AMD is unmeasured."""
    if _pow2(D) >= 256:
        return 16, 16, 8
    return 32, 32, 8


def _decode_config(D: int, G: int, page: int, X: int, fp8: bool, *, packed: bool = False):
    """(BLOCK_N, BLOCK_H, num_warps, num_stages, LOAD3D[, maxnreg]) for the decode kernel.

    ``maxnreg`` (NVIDIA only, ignored elsewhere; none of the defaults set it)
    caps the registers per thread.

    Measured on the H200 (docs/benchmarks.md, "Decisions and what was
    tried"): small tiles with a deep cp.async pipeline stream best; 64-token
    tiles with 3 stages wherever pages allow. With page-aligned tiles loaded as
    one flat axis (every sector fetched once), 64-token tiles beat 32-token
    tiles on every bf16 D=256 shape measured, by 2-20%.
    """
    block_h = max(16, min(64, _pow2(G)))
    BD = _pow2(D)
    if page % 64 == 0:
        # H200: 64-token tiles, 3 stages beat 32x3 by 26-37% (bf16)
        # and 64x2 (fp8) at D=128/256.
        block_n, num_stages = 64, 3
    elif fp8 and BD >= 256:
        block_n, num_stages = 64, 2
    else:
        block_n, num_stages = 32, 3
    if page % block_n:
        block_n = 16 if page % 16 == 0 and page < block_n else block_n
    num_warps = 8 if block_h >= 64 and BD >= 256 else 4
    if packed and BD >= 256 and _pow2(G) >= 128:
        # 128 or more packed verify rows at D=256 (16 drafts x 8 heads): one
        # 128-row tile, each of the 8 warps' two warpgroups on its own 64 rows
        # (two 64-row tiles read every K/V tile twice and split the columns of
        # each product between the warpgroups), 32-token tiles, 2 stages.
        # H200, 16/2 (docs/benchmarks.md): 0.67-0.91x the time of two 64-row
        # tiles for bf16, 0.70-0.90x for fp8. sm_90 (Triton 3.6): bf16 no
        # stack; fp8 48-104 B (16-token tiles had none but took 1.07-1.19x the
        # two 64-row tiles' time, which had 288-320 B)
        block_h, num_warps, num_stages = 128, 8, 2
        block_n = min(block_n, 32)
    return block_n, block_h, num_warps, num_stages, True


def default_num_splits(
    batch: int, num_kv_heads: int, head_tiles: int, max_tokens: int, device, resident: Optional[int] = None,
    *, sms: Optional[int] = None,
) -> int:
    """Split count from shapes only (no host sync).

    With ``resident`` (CTAs of the compiled kernel that fit on one SM at once,
    see ``resident_ctas_per_sm``): the most splits whose CTAs still fit in one
    wave, ``resident * SMs // work``; where that is one split filling under 90%
    of the wave and two would overflow it, the fewest splits (up to 4) whose
    waves are at least 90% full. Without it (ROCm, the interpreter, or
    when the compiled kernel cannot be inspected): about two waves of one CTA
    per SM, ``ceil(2 * SMs / work)``. Either way at most 256, and splits of at
    least 64 tokens (``max_tokens`` is the block-table capacity), or of at
    least 32 tokens while that still fills no more than one wave of one CTA per SM.

    On the H200 (docs/benchmarks.md) a wave that is only partly filled costs a
    whole wave. bf16 D=256, bs 32, 4/1, ctx 8k, 3 resident CTAs:
    12 splits (384 CTAs in 396 slots) 102.8 us, 9 splits (the two-wave rule)
    121.0 us, 13 splits 133.6 us; fp8 with 2 resident: 8 splits 51.0 us, 9
    splits 63.7 us. The token floor (bs=1 ctx 1k, 4/1 bf16: 7.5 us at 32
    splits against 12.4 us at 8; ctx 8k: 11.5 us at 128 against 13.7 us at 64)
    sets the token floor.
    """
    work = max(1, batch * num_kv_heads * head_tiles)
    sms = sms or _sm_count(device)
    floor = max(max_tokens // 64, min(-(-sms // work), max_tokens // 32))
    if resident:
        slots = int(resident) * sms
        target = max(1, slots // work)
        if 2 * work > slots >= work and 10 * work < 9 * slots:
            # one split per tile fits one wave but fills under 90% of its slots
            # and two overflow it: the fewest splits (up to 4) whose waves are
            # at least 90% full. H200, fp8 32/8 D=128 bs 32 (256 CTAs, 396
            # slots): 3 splits 162.8 us against 199.8 at 1 (ctx 8k), 611.7
            # against 777.1 (ctx 32k); 2 splits 218.1 (a 29% full second wave)
            for s in range(2, 5):
                waves = -(-work * s // slots)
                if 10 * work * s >= 9 * waves * slots:
                    target = s
                    break
    else:
        target = -(-2 * sms // work)
    return max(1, min(target, floor, 256))


def resident_ctas_per_sm(
    n_regs: int,
    num_warps: int,
    shared_bytes: int,
    *,
    regs_per_sm: int = 65536,
    smem_per_sm: int = 233472,
    threads_per_sm: int = 2048,
    max_ctas: int = 32,
) -> int:
    """CTAs of one compiled kernel that an NVIDIA SM holds at once.

    Registers are allocated per warp in units of 256; each CTA also reserves
    1 KiB of shared memory. Defaults are the sm_90 limits.
    """
    per_warp = -(-max(1, n_regs) * 32 // 256) * 256
    by_regs = regs_per_sm // (per_warp * num_warps)
    by_smem = smem_per_sm // (shared_bytes + 1024)
    by_threads = threads_per_sm // (32 * num_warps)
    return max(1, min(by_regs, by_smem, by_threads, max_ctas))


_RESIDENT = {}


def _decode_resident(device: torch.device, key: tuple, warmup, target: KernelTarget) -> Optional[int]:
    """Resident CTAs per SM of the split (non-direct) decode kernel for ``key``,
    compiled once through ``warmup()`` (compiles, does not launch); None where
    that cannot be known (ROCm, the interpreter, an inspection failure)."""
    if not target.is_nvidia or device.type != "cuda":
        return None
    if key in _RESIDENT:
        return _RESIDENT[key]
    resident = None
    try:
        ck = warmup()
        ck.run  # noqa: B018 - loads the binary, which fills n_regs
        resident = resident_ctas_of(ck, device)
    except Exception:  # noqa: BLE001 - the two-wave rule stays available
        resident = None
    _RESIDENT[key] = resident
    return resident


def resident_ctas_of(compiled, device: torch.device) -> int:
    """``resident_ctas_per_sm`` for a loaded Triton CompiledKernel (registers,
    warps, shared memory) on ``device``'s SM limits."""
    props = torch.cuda.get_device_properties(device)
    return resident_ctas_per_sm(
        int(compiled.n_regs),
        int(compiled.metadata.num_warps),
        int(compiled.metadata.shared),
        regs_per_sm=int(getattr(props, "regs_per_multiprocessor", 65536) or 65536),
        smem_per_sm=int(getattr(props, "shared_memory_per_multiprocessor", 233472) or 233472),
        threads_per_sm=int(getattr(props, "max_threads_per_multi_processor", 2048) or 2048),
    )


def _mask_tile(target: KernelTarget, block_d: int, fp8: bool, rows: int = 16) -> bool:
    """How the decode kernel drops a page-aligned tile of a bad block id:
    masked loads and -inf scores (True) or a select on the softmax state
    (False). From compiles against the kernel without bounds checks: on
    sm_90 (Triton 3.6 / 3.8) fp8 at D = 256 takes the select (238-253
    registers, no stack; masked loads needed 255 and spilled) and the rest
    masks (registers as without bounds: D = 128 fp8 154/128 and bf16
    168/167 on 3.8, bf16 D = 256 with 0-40 B of stack on 3.6, as without them; the
    select cost D = 128 a resident CTA and bf16 D = 256 up to 80 B of
    stack). On gfx950 masking spilled 3-5 SGPRs in the fp8 D = 128 split
    decode: AMD takes the select everywhere (tests/test_amd_gate.py).
    Tiles of 128 packed verify rows (``rows``) mask on NVIDIA, fp8 included:
    the select keeps a second [128, 256] fp32 accumulator live, 128 more
    registers per thread (sm_90, Triton 3.6, fp8 32-token tiles: 656-704 B
    of stack with the select, 48-64 B masked)."""
    return not target.is_amd and (block_d <= 128 or not fp8 or rows >= 128)


def _use_pdl(target: KernelTarget) -> bool:
    """Programmatic dependent launch of the reduce kernel: NVIDIA sm_90+ only,
    unless ``SGLANG_KV5D_ATTN_PDL`` turns it off (the switch registry parses it)."""
    if not target.is_nvidia or not target.arch.startswith("sm_") or int(target.arch[3:5]) < 90:
        return False
    from .. import config

    return bool(config.value(config.ATTN_PDL))


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
    if not isinstance(q, torch.Tensor) or q.dim() != 3:
        raise ValueError(f"q must be (B, H_q, D), got {getattr(q, 'shape', type(q).__name__)}")
    B, H_q, Dq = q.shape
    qps = int(queries_per_seq)
    if qps < 1 or B % qps:
        raise ValueError(f"queries_per_seq={queries_per_seq!r}: expected a positive divisor of the {B} query rows")
    _check_metadata(q, B, block_tables, context_lens, "context_lens", sinks, H_q, out, q.shape, table_rows=B // qps)
    if out is None:
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
    if B == 0:
        return out
    target = _target or target_of(q.device)
    k, v, X, fp8_mode, fp8_mul, cdt = _kv_format(k_cache, v_cache, fp8_dtype, target)
    nb, H_kv, D, page = _check_layout(k, v, X)
    if Dq != D:
        raise ValueError(f"q head dim {Dq} != cache head dim {D}")
    if H_q % H_kv:
        raise ValueError(f"H_q={H_q} is not a multiple of H_kv={H_kv}")
    G = H_q // H_kv
    max_ctx = min(block_tables.shape[1] * page, _INT32_MAX)
    if _debug_bounds(q.device):
        check_metadata_values(block_tables, context_lens, num_blocks=nb, page=page, batch=B, rows_per_table_row=qps)

    if _config is None:
        _config = decode_config(D, G * qps, page, X, fp8_mode > 0, target, packed=qps > 1)
    block_n, block_h, num_warps, num_stages, load3d, *rest = _config
    launch_opts = {"maxnreg": int(rest[0])} if rest and rest[0] and target.is_nvidia else {}
    head_tiles = -(-(G * qps) // block_h)
    seqs = B // qps
    kp, kval, kis = _scale_args(k_scale, q.device)
    vp, vval, vis = _scale_args(v_scale, q.device)
    BLOCK_D = _pow2(D)
    window = int(sliding_window) if sliding_window is not None else -1
    has_window = window > 0
    has_cap = logit_cap is not None and float(logit_cap) > 0
    has_sink = sinks is not None
    if has_sink and sinks.dtype != torch.float32:
        sinks = sinks.float()

    def args(mid_o, mid_lse, splits):
        """The kernel's runtime arguments for ``splits`` (mid buffers unused when 1)."""
        sm = (mid_o.stride(0), mid_o.stride(1), mid_o.stride(2)) if splits > 1 else (0, 0, 0)
        return (
            q, k, v, block_tables, context_lens, sinks if has_sink else q, out, mid_o, mid_lse,
            kp if kis else q, vp if vis else q, kval, vval, float(sm_scale),
            float(logit_cap) if has_cap else 0.0, window, nb, max_ctx,
            q.stride(0), q.stride(1), k.stride(0), k.stride(1), k.stride(2),
            v.stride(0), v.stride(1), v.stride(2), block_tables.stride(0), _stride(block_tables, 1),
            _stride(q, 2), _stride(context_lens, 0), _stride(sinks, 0) if has_sink else 1,
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
            MASK_TILE=_mask_tile(target, BLOCK_D, fp8_mode > 0, block_h), PACK=qps,
            num_warps=num_warps, **launch_opts,
        )

    split_pdl = _use_pdl(target)
    if num_splits is None:
        # everything the compiled kernel depends on, as a flat tuple (cheap to hash
        # on every call); the kernel is compiled (not launched) on the first miss
        key = (q.device, q.dtype, k.dtype, out.dtype, block_tables.dtype, context_lens.dtype,
               H_kv, G, head_tiles, D, block_n, block_h,
               num_warps, num_stages, bool(load3d), tuple(rest), page, X, fp8_mode, fp8_mul, kis, vis,
               has_window, has_cap, has_sink, split_pdl, qps)

        def warmup():
            mo, ml = mid_buffers(2)
            return _decode_5d_kernel.warmup(*args(mo, ml, 2), grid=(1, 2), **constexprs(False, split_pdl))

        num_splits = default_num_splits(
            seqs, H_kv, head_tiles, block_tables.shape[1] * page, q.device,
            resident=_decode_resident(q.device, key, warmup, target), sms=target.compute_units,
        )
    num_splits = max(1, int(num_splits))
    direct = num_splits == 1
    if _info is not None:
        _info.update(num_splits=num_splits, config=tuple(_config))

    mid_o, mid_lse = mid_buffers(num_splits)
    pdl = (not direct) and split_pdl
    grid = (seqs * H_kv * head_tiles, num_splits)
    _decode_5d_kernel[grid](*args(mid_o, mid_lse, num_splits), **constexprs(direct, pdl))
    if not direct:
        block_dr = min(BLOCK_D, 64)
        extra = {"launch_pdl": True} if pdl else {}
        _decode_reduce_kernel[(B * H_q, triton.cdiv(D, block_dr))](
            mid_o,
            mid_lse,
            sinks if has_sink else mid_o,
            out,
            mid_o.stride(0),
            mid_o.stride(1),
            mid_o.stride(2),
            out.stride(0),
            out.stride(1),
            _stride(sinks, 0) if has_sink else 1,
            num_splits,
            H_Q=H_q,
            BLOCK_S=_pow2(num_splits),
            D=D,
            BLOCK_DR=block_dr,
            HAS_SINK=has_sink,
            USE_PDL=pdl,
            num_warps=4,
            **extra,
        )
    return out


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
    if not isinstance(q, torch.Tensor) or q.dim() != 3:
        raise ValueError(f"q must be (total_q, H_q, D), got {getattr(q, 'shape', type(q).__name__)}")
    T, H_q, Dq = q.shape
    if (not isinstance(qo_indptr, torch.Tensor) or qo_indptr.dtype not in _INDEX_DTYPES
            or qo_indptr.dim() != 1 or qo_indptr.device != q.device):
        raise TypeError(f"qo_indptr: expected a 1-D int32/int64 tensor on {q.device}, got "
                        f"{getattr(qo_indptr, 'dtype', type(qo_indptr).__name__)} "
                        f"{tuple(getattr(qo_indptr, 'shape', ()))}")
    B = qo_indptr.shape[0] - 1
    _check_metadata(q, max(B, 0), block_tables, kv_lens, "kv_lens", sinks, H_q, out, q.shape)
    if out is None:
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
    if T == 0 or B <= 0:
        return out
    target = _target or target_of(q.device)
    k, v, X, fp8_mode, fp8_mul, cdt = _kv_format(k_cache, v_cache, fp8_dtype, target)
    nb, H_kv, D, page = _check_layout(k, v, X)
    if Dq != D:
        raise ValueError(f"q head dim {Dq} != cache head dim {D}")
    if H_q % H_kv:
        raise ValueError(f"H_q={H_q} is not a multiple of H_kv={H_kv}")
    G = H_q // H_kv
    max_ctx = min(block_tables.shape[1] * page, _INT32_MAX)
    if _debug_bounds(q.device):
        check_metadata_values(block_tables, kv_lens, num_blocks=nb, page=page, batch=B, qo_indptr=qo_indptr,
                              total_q=T, lens_name="kv_lens")

    BLOCK_D = _pow2(D)
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

    kp, kval, kis = _scale_args(k_scale, q.device)
    vp, vval, vis = _scale_args(v_scale, q.device)
    window = int(sliding_window) if sliding_window is not None else -1
    has_cap = logit_cap is not None and float(logit_cap) > 0
    has_sink = sinks is not None
    if has_sink and sinks.dtype != torch.float32:
        sinks = sinks.float()

    _extend_5d_kernel[(max_tiles, H_q)](
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
        _stride(block_tables, 1),
        _stride(q, 2),
        _stride(kv_lens, 0),
        _stride(sinks, 0) if has_sink else 1,
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
