"""The fused FP8 write's Triton code (``@triton.jit`` only; no host logic).

    WRITE_KERNEL = _write_kv_fp8_kernel   the one kernel ``host.write_kv_fp8`` launches

Arguments (``host.write_kv_fp8`` fills them): ``k`` ``(T, H, D_k)`` and ``v``
``(T, H, D_v)`` bf16 / fp16 / fp32 rows (token stride ``stride_kt`` /
``stride_vt``, heads and dims contiguous); the caches as uint8 bytes, NHD
``(slots, H, D)`` (slot and head strides passed) or SHUFFLE 5D (K ``(blocks,
H, D_k/X, PAGE, X)``, V ``(blocks, H, PAGE/X, D_v, X)``, contiguous, strides
implied by the constexprs); ``loc`` ``(T,)`` int32 / int64 slot ids (stride
``stride_loc``, ids < 0 or >= ``n_slots`` skipped); the scales as float32
values or one-element float32 tensors (``K_SCALE_PTR`` / ``V_SCALE_PTR``).
The constexprs are ``config.launch_config``'s keys plus the shapes, the
format (``FNUZ``), the encoder (``NATIVE``), 64-bit offsets (``LARGE``) and
the AMD flat addressing (``FLAT_OFFSETS``). How the kernel is organised: the
package docstring (``sglang_kv5d.kernels.fp8_write``).

The kernel keeps its function name ``_write_kv_fp8_kernel``: the kernel
report, the AMD gate's table and the AOT tests name compiled kernels by it.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .quantize import load_slots, quantize, scale_and_rcp
from .v_store import v_part

__all__ = ["WRITE_KERNEL"]


@triton.jit
def _k_part(k_ptr, kc_ptr, loc_ptr, k_scale, rows, h0, d0, T, stride_kt, stride_loc, n_slots,
            kc_stride_s, kc_stride_h,
            H: tl.constexpr, HB: tl.constexpr, DK: tl.constexpr, BDK: tl.constexpr,
            D_SPLIT: tl.constexpr,
            PAGE: tl.constexpr, X: tl.constexpr, LAYOUT_5D: tl.constexpr,
            K_SCALE_PTR: tl.constexpr, FMA_DIV: tl.constexpr, FNUZ: tl.constexpr,
            NATIVE: tl.constexpr, LARGE: tl.constexpr):
    """K of HB heads, dims d0 .. d0+BDK, for a window of tokens: contiguous rows
    (NHD) or 16-byte vectors (5D)."""
    s, ok, in_t = load_slots(loc_ptr, rows, T, stride_loc, n_slots, LARGE)
    ks, krcp = scale_and_rcp(k_scale, K_SCALE_PTR)
    hh = tl.arange(0, HB)
    if LAYOUT_5D:
        # tile (token, head, d // X, d % X): the last axis is one 16-byte vector
        c = d0 // X + tl.arange(0, BDK // X)
        e = tl.arange(0, X)
        lm = in_t[:, None, None, None]
        sm = ok[:, None, None, None]
        if BDK * D_SPLIT != DK:  # padded head dim: mask the dims past DK
            dm = (c * X < DK)[None, None, :, None]
            lm = lm & dm
            sm = sm & dm
        src = (k_ptr + (rows * stride_kt)[:, None, None, None]
               + ((h0 + hh) * DK)[None, :, None, None]
               + (c * X)[None, None, :, None] + e[None, None, None, :])
        x = tl.load(src, mask=lm, other=1.0)
        code = quantize(x, ks, krcp, FMA_DIV, FNUZ, NATIVE)
        blk = s // PAGE
        base = blk * (H * DK * PAGE) + (s - blk * PAGE) * X
        dst = (kc_ptr + base[:, None, None, None] + ((h0 + hh) * (DK * PAGE))[None, :, None, None]
               + (c * (PAGE * X))[None, None, :, None] + e[None, None, None, :])
        tl.store(dst, code, mask=sm)
    else:
        d = d0 + tl.arange(0, BDK)
        lm = in_t[:, None, None]
        sm = ok[:, None, None]
        if BDK * D_SPLIT != DK:
            dm = (d < DK)[None, None, :]
            lm = lm & dm
            sm = sm & dm
        src = (k_ptr + (rows * stride_kt)[:, None, None] + ((h0 + hh) * DK)[None, :, None]
               + d[None, None, :])
        x = tl.load(src, mask=lm, other=1.0)
        code = quantize(x, ks, krcp, FMA_DIV, FNUZ, NATIVE)
        dst = (kc_ptr + (s * kc_stride_s)[:, None, None] + ((h0 + hh) * kc_stride_h)[None, :, None]
               + d[None, None, :])
        tl.store(dst, code, mask=sm)


@triton.jit
def _write_kv_fp8_kernel(
    k_ptr,
    v_ptr,
    kc_ptr,
    vc_ptr,
    loc_ptr,
    k_scale,
    v_scale,
    T,
    stride_kt,
    stride_vt,
    stride_loc,
    n_slots,
    kc_stride_s,
    kc_stride_h,
    vc_stride_s,
    vc_stride_h,
    H: tl.constexpr,
    HB: tl.constexpr,
    DK: tl.constexpr,
    DV: tl.constexpr,
    D_SPLIT: tl.constexpr,
    BDK: tl.constexpr,
    BDV: tl.constexpr,
    PAGE: tl.constexpr,
    X: tl.constexpr,
    LAYOUT_5D: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BYTE_TOKENS: tl.constexpr,
    SPLIT_KV: tl.constexpr,
    PART0: tl.constexpr,
    GROUPS: tl.constexpr,
    V_WORDS: tl.constexpr,
    V_SPEC: tl.constexpr,
    CHUNK: tl.constexpr,
    IN_BF16: tl.constexpr,
    K_SCALE_PTR: tl.constexpr,
    V_SCALE_PTR: tl.constexpr,
    FMA_DIV: tl.constexpr,
    FNUZ: tl.constexpr,
    NATIVE: tl.constexpr,
    LARGE: tl.constexpr,
    TOKEN_MAJOR: tl.constexpr,
    N_KV: tl.constexpr,
    FLAT_OFFSETS: tl.constexpr,
):
    # grid: (token windows, (H // HB) * D_SPLIT, N_KV) with N_KV = 2 when
    # SPLIT_KV (0 = K, 1 = V) else 1; with TOKEN_MAJOR the same programs on a
    # 1-D grid, ordered (window, head block, K/V) so that the programs of one
    # window run next to each other and read whole input rows together.
    # PART0 = 1 with N_KV = 1 runs V alone (benchmarks only).
    if TOKEN_MAJOR:
        N_HD: tl.constexpr = (H // HB) * D_SPLIT
        pid = tl.program_id(0)
        pid_kv = pid % N_KV
        pid_hd = (pid // N_KV) % N_HD
        pid_t = pid // (N_KV * N_HD)
    else:
        pid_t = tl.program_id(0)
        pid_hd = tl.program_id(1)
        pid_kv = tl.program_id(2)
    h0 = (pid_hd // D_SPLIT) * HB
    dchunk = pid_hd % D_SPLIT
    if LARGE:
        i0 = pid_t.to(tl.int64) * BLOCK_T
    else:
        i0 = pid_t * BLOCK_T
    rows = i0 + tl.arange(0, BLOCK_T)
    if SPLIT_KV:
        if pid_kv + PART0 == 0:
            _k_part(k_ptr, kc_ptr, loc_ptr, k_scale, rows, h0, dchunk * BDK, T, stride_kt,
                    stride_loc, n_slots, kc_stride_s, kc_stride_h, H, HB, DK, BDK, D_SPLIT, PAGE, X,
                    LAYOUT_5D, K_SCALE_PTR, FMA_DIV, FNUZ, NATIVE, LARGE)
        else:
            v_part(v_ptr, vc_ptr, loc_ptr, v_scale, i0, h0, dchunk * BDV, T, stride_vt,
                    stride_loc, n_slots, vc_stride_s, vc_stride_h, H, HB, DV, BDV, D_SPLIT, PAGE, X,
                    LAYOUT_5D, BLOCK_T, BYTE_TOKENS, V_SCALE_PTR, GROUPS, V_WORDS, V_SPEC, CHUNK, IN_BF16,
                    FMA_DIV, FNUZ, NATIVE, LARGE, FLAT_OFFSETS)
    else:
        _k_part(k_ptr, kc_ptr, loc_ptr, k_scale, rows, h0, dchunk * BDK, T, stride_kt,
                stride_loc, n_slots, kc_stride_s, kc_stride_h, H, HB, DK, BDK, D_SPLIT, PAGE, X,
                LAYOUT_5D, K_SCALE_PTR, FMA_DIV, FNUZ, NATIVE, LARGE)
        v_part(v_ptr, vc_ptr, loc_ptr, v_scale, i0, h0, dchunk * BDV, T, stride_vt,
                stride_loc, n_slots, vc_stride_s, vc_stride_h, H, HB, DV, BDV, D_SPLIT, PAGE, X,
                LAYOUT_5D, BLOCK_T, BYTE_TOKENS, V_SCALE_PTR, GROUPS, V_WORDS, V_SPEC, CHUNK, IN_BF16,
                FMA_DIV, FNUZ, NATIVE, LARGE, FLAT_OFFSETS)


#: The kernel under a public name (its function name stays ``_write_kv_fp8_kernel``).
WRITE_KERNEL = _write_kv_fp8_kernel
