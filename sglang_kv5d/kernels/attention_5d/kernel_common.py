"""Triton code shared by the decode and extend kernels: tile loaders, the FP8
decode, the online-softmax steps (``@triton.jit`` only).

    FP8 modes (constexpr ``FP8_MODE``, chosen on the host by ``host.kv_format``):
        FP8_NONE               bf16 / fp16 caches
        FP8_NATIVE_E4M3FN      tl.float8e4nv (NVIDIA sm_89+, gfx950)
        FP8_NATIVE_E4M3FNUZ    tl.float8e4b8 (AMD gfx942)
        FP8_EMU_E4M3FN         integer decode, value * 2**-8
        FP8_EMU_E4M3FNUZ       integer decode, value * 2**-7
    tanh(x), fp8_to_f16(x, FP8_MODE), load_scale(ptr, val, IS_PTR), block_ok(blk, n_blocks)
    load_kv_tile(...)      a (BLOCK_N, BLOCK_D) K tile and V tile of the SHUFFLE 5D caches
                           (K ``(blocks, H_kv, D/X, page, X)``, V ``(blocks, H_kv, page/X, D, X)``)
    keep_if, softmax_step, softmax_step_rows   the online-softmax update (fp32 m, l, acc)
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["INT32_MAX", "FP8_NONE", "FP8_NATIVE_E4M3FN", "FP8_NATIVE_E4M3FNUZ", "FP8_EMU_E4M3FN", "FP8_EMU_E4M3FNUZ",
           "tanh", "fp8_to_f16", "load_scale", "block_ok", "load_kv_tile", "keep_if", "softmax_step",
           "softmax_step_rows"]

INT32_MAX = 2**31 - 1

# FP8 decode modes (constexpr FP8_MODE)
FP8_NONE = 0
FP8_NATIVE_E4M3FN = 1  # tl.float8e4nv
FP8_NATIVE_E4M3FNUZ = 2  # tl.float8e4b8 (AMD gfx942)
FP8_EMU_E4M3FN = 3  # integer decode, result is value * 2**-8
FP8_EMU_E4M3FNUZ = 4  # integer decode, result is value * 2**-7


@triton.jit
def tanh(x):
    # portable (interpreter, CUDA, HIP): tanh(x) = 2 * sigmoid(2x) - 1
    return 2.0 * tl.sigmoid(2.0 * x) - 1.0


@triton.jit
def fp8_to_f16(x, FP8_MODE: tl.constexpr):
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
def load_scale(ptr, val, IS_PTR: tl.constexpr):
    if IS_PTR:
        return tl.load(ptr).to(tl.float32)
    else:
        return val


@triton.jit
def block_ok(blk, n_blocks):
    """Block ids inside the cache (``0 <= blk < n_blocks``), and ``blk`` with
    every other id replaced by 0 (so that no address leaves the cache)."""
    ok = (blk >= 0) & (blk < n_blocks)
    return ok, tl.where(ok, blk, 0)


@triton.jit
def load_kv_tile(
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
            tile_ok, blk = block_ok(tl.load(bt_row + (n0 // PAGE) * stride_btn).to(tl.int64), n_blocks)
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
            tok_ok, blk = block_ok(
                tl.load(bt_row + (tok // PAGE) * stride_btn, mask=tok < ctx, other=0).to(tl.int64), n_blocks)
            tile_ok = n0 >= 0
            k_ptrs = k_head + (blk * stride_kb + (tok % PAGE) * X)[None, :, None] + k_off
            tokg = n0 + otc * X
            g_ok, blkg = block_ok(
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
            k3 = fp8_to_f16(k3, FP8_MODE)
            v3 = fp8_to_f16(v3, FP8_MODE)
        k = tl.reshape(tl.permute(k3.to(COMPUTE), (0, 2, 1)), (BLOCK_D, BLOCK_N))
        v = tl.reshape(tl.permute(v3.to(COMPUTE), (0, 2, 1)), (BLOCK_N, BLOCK_D))
    else:
        k_dpart = (offs_d[:, None] // X) * stride_kc + (offs_d[:, None] % X)
        v_dpart = offs_d[None, :] * X
        if PAGE_ALIGNED:
            tile_ok, blk = block_ok(tl.load(bt_row + (n0 // PAGE) * stride_btn).to(tl.int64), n_blocks)
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
            tok_ok, blk = block_ok(
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
            k = fp8_to_f16(k, FP8_MODE)
            v = fp8_to_f16(v, FP8_MODE)
        k = k.to(COMPUTE)
        v = v.to(COMPUTE)
    return k, v, tok_ok, tile_ok


@triton.jit
def keep_if(ok, new_m, new_l, new_acc, m_i, l_i, acc):
    """The online-softmax state after a tile, or before it when ``ok`` (a
    scalar) is False: a tile of a bad block id leaves no trace, NaN included."""
    return tl.where(ok, new_m, m_i), tl.where(ok, new_l, l_i), tl.where(ok, new_acc, acc)


@triton.jit
def softmax_step(
    q, k, v, m_i, l_i, acc, valid, qk_scale, logit_cap, bias,
    HAS_CAP: tl.constexpr, MASK_S: tl.constexpr, MASK_V: tl.constexpr,
):
    """One online-softmax step (log2 domain) over a K/V tile; ``valid`` is per
    key; ``bias`` (a scalar: 0, or -inf for a tile whose K and V loaded as
    zeros) is added to every score after the soft cap (which would turn -inf
    into -cap)."""
    s = tl.dot(q, k) * qk_scale
    if HAS_CAP:
        s = logit_cap * tanh(s / logit_cap)
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
def softmax_step_rows(q, k, v, m_i, l_i, acc, seen, v_ok, qk_scale, logit_cap, HAS_CAP: tl.constexpr):
    """:func:`softmax_step` with a per-row key mask ``seen`` ``[rows, BLOCK_N]``
    (packed speculative rows: each sees its own prefix) and ``v_ok`` ``[BLOCK_N]``
    (the V rows that hold written data; the others are zeroed, NaN included)."""
    s = tl.dot(q, k) * qk_scale
    if HAS_CAP:
        s = logit_cap * tanh(s / logit_cap)
    s = tl.where(seen, s * 1.4426950408889634, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp2(m_i - m_safe)
    p = tl.exp2(s - m_safe[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    v = tl.where(v_ok[:, None], v, 0.0)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
    return m_new, l_i, acc
