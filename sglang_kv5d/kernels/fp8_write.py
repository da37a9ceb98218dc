"""Fused FP8 KV-cache write: scale, saturate, round once, store, in ONE launch.

    write_kv_fp8(k, v, k_cache, v_cache, loc, k_scale, v_scale, *, fp8_dtype=None)

Replaces SGLang's unfused FP8 write (``k.div_(k_scale)`` in place on the caller's
tensor, ``.to(fp8)``, a view, then a per-token scatter: three to five launches,
the caller's tensors mutated, NaN instead of saturation on ``e4m3fnuz``).

Semantics, per element of K (V alike with ``v_scale``)::

    q = x.float() / k_scale            (fp32, rounded to nearest as IEEE division)
    q = clamp(q, -FMAX, +FMAX)         (FMAX = 448 e4m3fn, 240 e4m3fnuz; +/-inf too)
    cache[...] = fp8(q)                (round-to-nearest-even, once)

which is bit-identical to ``clamp(x.float() / s, -FMAX, FMAX).to(fp8_dtype)`` in
torch. NaN inputs stay NaN. ``k`` and ``v`` are only read.

Cache layouts (read from ranks and shapes; X = 16 for fp8):

    NHD         k_cache (slots, H, D_k)            v_cache (slots, H, D_v)
    SHUFFLE 5D  k_cache (blocks, H, D_k/X, page, X) v_cache (blocks, H, page/X, D_v, X)

with ``K5d[b, h, d//X, t, d%X] = K[b*page+t, h, d]`` and
``V5d[b, h, t//X, d, t%X] = V[b*page+t, h, d]``.

How the kernel is organised. The grid is (token windows, head blocks x row
chunks, {K, V}), or the same programs on a 1-D grid in token-major order
(the programs of one window next to each other). Every program reads ``loc``
for its window; inputs are loaded under the row mask only, so their loads do
not wait for ``loc`` (only the stores do). K rows (and NHD V rows) are written
per token: one token's head row is contiguous (NHD) or made of 16-byte vectors
(5D K). A 5D V row is not: one
token owns one byte of every 16-byte vector. Two ways to write it:

* bytes one by one (``groups`` off): each token stores its bytes; when a
  prefill run fills a group of 16 slots, the L2 cache merges the 16 bytes of
  each vector before they reach memory. Used for decode sizes, for D = 256
  below 8 MiB of V per call, and for D <= 128 up to 4096 tokens. Up to 2048
  tokens, how a store's lanes walk the bytes is chosen per window
  (``byte_tokens``): a window that starts and ends inside runs (prefill)
  stores the tile as loaded, where 16 lanes fill one vector; any other
  window (decode) stores with the lanes on 4 tokens, so that one store
  touches 4 cache lines instead of 16.
* whole vectors (``groups`` on): the V program checks *in the kernel* (no host
  sync, CUDA-graph safe) which tokens belong to a complete aligned group (X
  consecutive tokens whose slots are consecutive and start at a multiple of X).
  The program that owns the first token of such a group writes the whole group
  as whole 16-byte vectors (a (D_v, X) tile per head, contiguous in the cache);
  tokens outside complete groups (decode, run edges) are written byte by byte.
  At most one group starts in any X consecutive tokens, so a window of G*X
  tokens has at most G. Used for D <= 128 past 4096 tokens and for D = 256
  from 8 MiB of V per call. With 16-bit inputs (``v_words``) a group is
  transposed in registers: each thread reads one 32-bit word (two dims) of
  each of the X rows and stores the two vectors of those dims; other inputs
  go through a tile whose layout change Triton makes in shared memory (5-6%
  slower on the H200).

The launch configuration (window, heads per program, row chunks, groups,
launch order, warps) is picked on the host from shapes and the KernelTarget
only (``launch_config``): on NVIDIA and under the interpreter by H200 timing
(docs/benchmarks.md, "Decisions"), on AMD (gfx942, gfx950) from the compile
figures of ``lab/write_config_sweep.py`` (``_launch_config_amd``: registers,
spills, waves per SIMD; no group path there).

Division. On the GPU the quotient is computed as ``x * RN(1/s)`` followed by
two FMA residual corrections, which is the correctly rounded ``x / s``
(Markstein) for scales within about 2**-90 .. 2**90, and has no slow path (the
division instruction sequence has one, taken for zero numerators). It runs on
``|x|`` clamped to ``RN(FMAX * s)`` (a clamped quotient rounds to FMAX's
code, so saturation is unchanged); the encoders take that magnitude and the
sign of ``x``. Under the CPU interpreter plain IEEE division is used.

FP8 encoding. Where the target converts the format in hardware (e4m3fn on
NVIDIA sm_89+ and AMD gfx950, e4m3fnuz on AMD gfx942; round-to-nearest-even)
that conversion is used. Elsewhere (``e4m3fnuz`` on NVIDIA, e4m3fn on gfx942,
the Triton CPU interpreter) the kernel encodes the
byte itself with integer arithmetic on the fp32 bits (same result, a few more
instructions), and always stores bytes, so caches may be fp8-typed or uint8.

Scales. Python floats and scale tensors obey one rule, checked on the host
before anything is written, on every device: the float32 scale and its
float32 reciprocal are positive normal numbers (zero, negative, infinite, NaN
and subnormal scales raise ``ScaleError``). A tensor's value is read once per
tensor and version (``check_scale_tensor``), so the per-call path has no
device sync and stays CUDA-graph safe; inside a capture, a tensor never
checked before is refused (it cannot be read there).

Slot ids ``< 0`` are skipped; so are ids ``>= slots`` (a guard against
corrupting memory; callers must not rely on it). Duplicate slot ids in one call
are a race, as in every scatter.
"""

from __future__ import annotations

import functools
import math
import struct
import weakref
from types import MappingProxyType
from typing import Mapping, NamedTuple, Optional, Union

import torch
import triton
import triton.language as tl

from ..platform import KernelTarget, fp8_format, fp8_kv_dtypes, target_of

__all__ = ["write_kv_fp8", "launch_config", "FP8_MAX", "supported_fp8_dtypes", "ScaleError", "scale_problem",
           "check_scale_tensor"]

X_FP8 = 16  # elements per 16-byte vector for 1-byte elements

FP8_MAX = {dt: fp8_format(dt).max for dt in fp8_kv_dtypes()}  # torch dtype -> largest finite value


def supported_fp8_dtypes():
    return tuple(FP8_MAX)


_INPUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_INT32_LIMIT = 2**31 - 1


# --------------------------------------------------------------------------- #
# Triton                                                                      #
# --------------------------------------------------------------------------- #


@triton.jit
def _encode_native(q, FNUZ: tl.constexpr):
    """fp32 -> fp8 byte (uint8) by the hardware conversion, rounding to
    nearest even: e4m3fn on NVIDIA sm_89+ (``cvt.rn.satfinite.e4m3x2.f32``)
    and AMD gfx950, e4m3fnuz on AMD gfx942 (``v_cvt_pk_fp8_f32``).

    Saturation does not depend on the instruction: with ``FMA_DIV`` the
    quotient is clamped before it gets here (at most the format's max plus an
    fp32 ulp or two, which rounds to the max), and the only callers without
    ``FMA_DIV`` run on NVIDIA, whose conversion saturates (tests/gpu checks
    inf and NaN there)."""
    if FNUZ:
        return q.to(tl.float8e4b8).to(tl.uint8, bitcast=True)
    else:
        return q.to(tl.float8e4nv).to(tl.uint8, bitcast=True)


@triton.jit
def _encode_bits(a, sign, FNUZ: tl.constexpr):
    """fp8 byte (uint8) from a magnitude, by integer arithmetic on the fp32 bits.

    ``a``: fp32 magnitude: >= 0 and at most the format's max plus a few fp32
    ulps (they round down to the max; the caller clamps), or a NaN with the
    sign bit clear. ``sign``: 0x80 for negative inputs, else 0 (uint32).
    Rounds to nearest even, like the hardware conversion. NaN needs no test
    of its own: its bits are the largest, and one unsigned min turns them
    into the NaN code (0x7F | sign for e4m3fn, 0x80 for e4m3fnuz).
    """
    if FNUZ:
        MIN_NORMAL: tl.constexpr = 0.0078125  # 2**-7
        SUB_SCALE: tl.constexpr = 1024.0  # 1 / 2**-10, the subnormal step
        EXP_ADJ: tl.constexpr = (127 - 8) << 3
        NAN_MAG: tl.constexpr = 0x80
    else:
        MIN_NORMAL: tl.constexpr = 0.015625  # 2**-6
        SUB_SCALE: tl.constexpr = 512.0  # 1 / 2**-9
        EXP_ADJ: tl.constexpr = (127 - 7) << 3
        NAN_MAG: tl.constexpr = 0x7F
    u = a.to(tl.uint32, bitcast=True)
    # Normal range: keep 3 mantissa bits, round to nearest even on the rest
    # (unsigned: a NaN's bits cannot wrap and land at or above NAN_MAG).
    normal = tl.minimum(((u + 0x7FFFF + ((u >> 20) & 1)) >> 20) - EXP_ADJ, NAN_MAG)
    # Subnormal range: a / step is exact; adding 2**23 rounds it to an
    # integer (nearest even) in the fp32 adder; the low bits are the code.
    sub = (a * SUB_SCALE + 8388608.0).to(tl.uint32, bitcast=True) - 0x4B000000
    mag = tl.where(a < MIN_NORMAL, sub, normal)  # NaN: not < MIN_NORMAL
    if FNUZ:
        code = tl.where(mag == 0, 0, mag | sign)  # no negative zero in fnuz; NaN: 0x80
    else:
        code = mag | sign
    return code.to(tl.uint8)


@triton.jit
def _quantize(x, scale, rcp, FMA_DIV: tl.constexpr, FNUZ: tl.constexpr, NATIVE: tl.constexpr):
    """fp8 bytes (uint8) of x / scale, saturated to the format's max, the
    quotient rounded once to fp32 as IEEE division does."""
    xf = x.to(tl.float32)
    if FNUZ:
        FMAX: tl.constexpr = 240.0
    else:
        FMAX: tl.constexpr = 448.0
    if FMA_DIV:
        # Correctly rounded division without the slow path of div.rn: with
        # rcp = RN(1/scale), two residual corrections give RN(x/scale) exactly
        # (Markstein) whenever the residuals do not underflow, i.e. for scales
        # in about [2**-90, 2**90]. The chain runs on |x| clamped to
        # RN(FMAX * scale) (NaN kept): a clamped quotient is FMAX within an
        # fp32 ulp or two, which rounds to FMAX's code, and an input past the
        # clamp saturates to FMAX anyway; the residuals cannot overflow and
        # +/-inf saturate. The sign comes from x's bits, so -0 keeps its own
        # e4m3fn code (0x80) without a test. The residual x - q*s is written
        # fma(q, -s, x) with the scalar negated once (Triton writes -q as
        # 0 - q, which the compiler cannot fold into the FMA). Per element:
        # one min, one multiply, four FMAs, then the encoder.
        xa = tl.minimum(tl.abs(xf), FMAX * scale, propagate_nan=tl.PropagateNan.ALL)
        neg_scale = -scale
        q0 = xa * rcp
        e = tl.fma(q0, neg_scale, xa)
        q1 = tl.fma(e, rcp, q0)
        e = tl.fma(q1, neg_scale, xa)
        q2 = tl.fma(e, rcp, q1)  # |x| / scale, clamped; NaN for NaN
        xbits = xf.to(tl.int32, bitcast=True)
        if NATIVE:
            # the sign put back by one bit operation, then the hardware conversion
            sign = xbits & -2147483648
            if FNUZ:
                # e4m3fnuz has no negative zero (0x80 is its NaN): a magnitude
                # that rounds to 0 keeps no sign, whatever the instruction does
                sign = tl.where(q2 <= 0.00048828125, 0, sign)  # 2**-11, half the smallest subnormal, rounds to 0
            q = (q2.to(tl.int32, bitcast=True) | sign).to(tl.float32, bitcast=True)
            code = _encode_native(q, FNUZ)
        else:
            # the encoder takes the magnitude as it is: abs, clamp and sign
            # are not done a second time on the quotient
            code = _encode_bits(q2, (xbits.to(tl.uint32, bitcast=True) >> 24) & 0x80, FNUZ)
    else:
        q = xf / scale  # the interpreter divides with IEEE rounding
        if NATIVE:
            code = _encode_native(q, FNUZ)
        else:
            a = tl.minimum(tl.abs(q), FMAX, propagate_nan=tl.PropagateNan.ALL)
            code = _encode_bits(a, (q.to(tl.uint32, bitcast=True) >> 24) & 0x80, FNUZ)
    return code


@triton.jit
def _load_slots(loc_ptr, rows, T, stride_loc, n_slots, LARGE: tl.constexpr):
    """Slot ids of ``rows``: ``in_t`` is False past T, ``ok`` also for skipped slots.

    Inputs are loaded under ``in_t`` (not ``ok``) so that their loads do not wait
    for ``loc``; only the stores depend on it.
    """
    in_t = rows < T
    s_raw = tl.load(loc_ptr + rows * stride_loc, mask=in_t, other=-1)
    ok = in_t & (s_raw >= 0) & (s_raw < n_slots)
    if LARGE:
        s = tl.where(ok, s_raw, 0).to(tl.int64)
    else:
        s = tl.where(ok, s_raw, 0).to(tl.int32)
    return s, ok, in_t


@triton.jit
def _scale_and_rcp(scale, SCALE_PTR: tl.constexpr):
    if SCALE_PTR:
        sc = tl.load(scale)
    else:
        sc = scale
    return sc, tl.math.div_rn(1.0, sc)


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
    s, ok, in_t = _load_slots(loc_ptr, rows, T, stride_loc, n_slots, LARGE)
    ks, krcp = _scale_and_rcp(k_scale, K_SCALE_PTR)
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
        code = _quantize(x, ks, krcp, FMA_DIV, FNUZ, NATIVE)
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
        code = _quantize(x, ks, krcp, FMA_DIV, FNUZ, NATIVE)
        dst = (kc_ptr + (s * kc_stride_s)[:, None, None] + ((h0 + hh) * kc_stride_h)[None, :, None]
               + d[None, None, :])
        tl.store(dst, code, mask=sm)


@triton.jit
def _v_rows(src, load_t, d, DV: tl.constexpr, PADDED: tl.constexpr):
    """The input rows ``src`` (pointers, (BLOCK_T, HB, BDV)) of the tokens in
    ``load_t`` (``PADDED``: and the dims ``d`` < DV); 1.0 elsewhere."""
    m = load_t[:, None, None]
    if PADDED:
        m = m & (d < DV)[None, None, :]
    return tl.load(src, mask=m, other=1.0)


@triton.jit
def _v_slot_offsets(s, H: tl.constexpr, DV: tl.constexpr, PAGE: tl.constexpr, X: tl.constexpr):
    """Byte offset in a 5D V cache of head 0, dim 0 of slots ``s``:
    V5d[blk, 0, t // X, 0, t % X] with blk = s // PAGE, t = s % PAGE."""
    blk = s // PAGE
    in_page = s - blk * PAGE
    return blk * (H * DV * PAGE) + (in_page // X) * (DV * X) + (in_page % X)


@triton.jit
def _store_v_bytes(code, vc_ptr, s, heads, d, store_t,
                   H: tl.constexpr, HB: tl.constexpr, DV: tl.constexpr, BDV: tl.constexpr,
                   PADDED: tl.constexpr, PAGE: tl.constexpr, X: tl.constexpr, BLOCK_T: tl.constexpr,
                   FLAT: tl.constexpr, FLAT_OFFSETS: tl.constexpr):
    """5D V, token by token: one byte per (token, head, d), 16 bytes apart.

    ``code`` (BLOCK_T, HB, BDV) fp8 bytes; ``s`` (BLOCK_T,) the tokens' slots;
    ``store_t`` (BLOCK_T,) which tokens to store; ``heads`` (HB,) head ids;
    ``d`` (BDV,) dims (``PADDED``: mask d >= DV).

    The lanes of the store should walk tokens first: on a run, 16 lanes then
    fill one 16-byte vector (on scattered slots one store touches a cache
    line per token; ``_v_bytes_by_lanes`` is for those). With ``FLAT`` that
    order is explicit: the tile is stored as one 1-D tensor, tokens
    innermost. Without it the order is the tie-break of Triton's coalescing
    pass between axes of which none is contiguous: tokens first in Triton
    3.6, dims first from 3.7 (whole vectors then come from 16 stores). The
    bytes path stores flat (the same sm_90 SASS as the 3-D tile on Triton
    3.6); the group path, whose byte stores are only the edges of runs and
    decode tokens, keeps the 3-D tile (flat, it needs 56 registers instead
    of 50 for the Llama-like default on 3.6).

    ``FLAT_OFFSETS`` (AMD) flattens the integer offsets and adds them to the
    base pointer once: AMD's pointer canonicalisation (buffer ops, on by
    default from Triton 3.6) cannot legalise a reshape of a tensor of
    pointers. NVIDIA keeps the pointer reshape its timings were taken with.
    """
    vbase = _v_slot_offsets(s, H, DV, PAGE, X)
    if FLAT:
        N: tl.constexpr = HB * BDV * BLOCK_T
        m = store_t[None, None, :]
        if PADDED:
            m = m & (d < DV)[None, :, None]
        m = tl.reshape(tl.broadcast_to(m, (HB, BDV, BLOCK_T)), (N,))
        vals = tl.reshape(tl.permute(code, (1, 2, 0)), (N,))
        if FLAT_OFFSETS:
            off = vbase[None, None, :] + (heads * (DV * PAGE))[:, None, None] + (d * X)[None, :, None]
            tl.store(vc_ptr + tl.reshape(off, (N,)), vals, mask=m)
        else:
            dst = (vc_ptr + vbase[None, None, :] + (heads * (DV * PAGE))[:, None, None]
                   + (d * X)[None, :, None])
            tl.store(tl.reshape(dst, (N,)), vals, mask=m)
    else:
        dst = (vc_ptr + vbase[:, None, None] + (heads * (DV * PAGE))[None, :, None]
               + (d * X)[None, None, :])
        m = store_t[:, None, None]
        if PADDED:
            m = m & (d < DV)[None, None, :]
        tl.store(dst, code, mask=m)


@triton.jit
def _v_bytes_by_lanes(v_ptr, vc_ptr, i0, s, store_t, heads, d, stride_vt, vs, vrcp,
                      H: tl.constexpr, HB: tl.constexpr, DV: tl.constexpr, BDV: tl.constexpr,
                      PADDED: tl.constexpr, PAGE: tl.constexpr, X: tl.constexpr, BLOCK_T: tl.constexpr,
                      LT: tl.constexpr, FMA_DIV: tl.constexpr, FNUZ: tl.constexpr, NATIVE: tl.constexpr):
    """5D V of the tokens ``store_t`` (BLOCK_T,) of the window at token ``i0``
    (slots ``s``), loaded, quantised and stored as a (LT, BDV, HB, BLOCK_T / LT)
    tile (token t = g * LT + l at [l, d, h, g]), so that a store's adjacent
    lanes walk LT tokens, then dims: a store of scattered slots touches LT
    cache lines instead of one per lane. Lanes follow the axes in the order
    Triton's coalescing pass picks when no axis is contiguous (first to last
    in Triton 3.6, last to first in later versions); either way tokens, then
    dims. The rows are loaded here (Triton 3.6 loads them as 16-byte vectors
    and transposes them through shared memory), after the caller's decision,
    so this is for windows known to be scattered.
    """
    G: tl.constexpr = BLOCK_T // LT
    l = tl.arange(0, LT)[:, None, None, None]
    g = tl.arange(0, G)[None, None, None, :]
    dd = d[None, :, None, None]
    hh = heads[None, None, :, None]
    st = tl.permute(tl.reshape(store_t.to(tl.int32), (G, LT)), (1, 0))[:, None, None, :] != 0
    if PADDED:
        st = st & (dd < DV)
    src = v_ptr + (i0 + g * LT + l) * stride_vt + hh * DV + dd
    code = _quantize(tl.load(src, mask=st, other=1.0), vs, vrcp, FMA_DIV, FNUZ, NATIVE)
    vbase = _v_slot_offsets(s, H, DV, PAGE, X)
    vb = tl.permute(tl.reshape(vbase, (G, LT)), (1, 0))[:, None, None, :]
    tl.store(vc_ptr + vb + dd * X + hh * (DV * PAGE), code, mask=st)


@triton.jit
def _run_like(loc_ptr, i0, T, stride_loc, BLOCK_T: tl.constexpr):
    """Does the window of BLOCK_T tokens at ``i0`` start and end inside runs
    of consecutive slots (loc[i0 + 1] == loc[i0] + 1 and the same for its last
    two tokens)? Prefill windows do, with at most a run boundary inside;
    decode windows do not. Four scalar loads, no reduction. It decides only
    how V bytes are stored, never what is written."""
    last = i0 + (BLOCK_T - 1)
    full = last < T
    a0 = tl.load(loc_ptr + i0 * stride_loc, mask=full, other=0)
    a1 = tl.load(loc_ptr + (i0 + 1) * stride_loc, mask=full, other=0)
    b0 = tl.load(loc_ptr + (last - 1) * stride_loc, mask=full, other=0)
    b1 = tl.load(loc_ptr + last * stride_loc, mask=full, other=0)
    return (a1 - a0 == 1) & (b1 - b0 == 1)


@triton.jit
def _two_token_bytes(w0, w1, vs, vrcp, IN_BF16: tl.constexpr,
                     FMA_DIV: tl.constexpr, FNUZ: tl.constexpr, NATIVE: tl.constexpr):
    """fp8 bytes of two tokens' words ``w0``, ``w1`` (N int32 words of two
    16-bit elements, dims 2p and 2p+1): (even-dim bytes, odd-dim bytes), each
    (N, 2) = (word, token). Quantising two tokens together lets the hardware
    convert them with one packed instruction."""
    if IN_BF16:  # bf16 -> fp32 is a shift of the bits
        lo0 = (w0 << 16).to(tl.float32, bitcast=True)
        hi0 = (w0 & -65536).to(tl.float32, bitcast=True)
        lo1 = (w1 << 16).to(tl.float32, bitcast=True)
        hi1 = (w1 & -65536).to(tl.float32, bitcast=True)
    else:  # fp16
        lo0 = w0.to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
        hi0 = (w0 >> 16).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
        lo1 = w1.to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
        hi1 = (w1 >> 16).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
    even = _quantize(tl.join(lo0, lo1), vs, vrcp, FMA_DIV, FNUZ, NATIVE)
    odd = _quantize(tl.join(hi0, hi1), vs, vrcp, FMA_DIV, FNUZ, NATIVE)
    return even, odd


@triton.jit
def _sixteen_tokens(t0, t1, t2, t3, t4, t5, t6, t7, N: tl.constexpr):
    """Eight (N, 2) byte tiles (tokens 2k, 2k+1 in tile k) -> (N, 16), token-ordered.

    Joins keep every byte in the thread that quantised it (no shared memory).
    Each join appends an axis: after the three joins the axes are (N, token
    bit 0, bit 3, bit 2, bit 1); the permute puts them in token order."""
    u0 = tl.join(t0, t4)
    u1 = tl.join(t1, t5)
    u2 = tl.join(t2, t6)
    u3 = tl.join(t3, t7)
    v0 = tl.join(u0, u2)
    v1 = tl.join(u1, u3)
    w = tl.join(v0, v1)
    return tl.reshape(tl.permute(w, (0, 2, 3, 4, 1)), (N, 16))


@triton.jit
def _group_word_ids(c, h0, d0, H: tl.constexpr, DV: tl.constexpr, BDV: tl.constexpr,
                    PAGE: tl.constexpr, X: tl.constexpr, CHUNK: tl.constexpr):
    """Chunk ``c`` of a program's words: (input word offset in a row, mask of
    real dims, cache offset of the dim-2p vector within the group), each (CHUNK,)."""
    PW: tl.constexpr = BDV // 2  # words per head in this program
    w = c * CHUNK + tl.arange(0, CHUNK)
    h = h0 + w // PW
    p = d0 // 2 + w % PW
    return h * (DV // 2) + p, p < DV // 2, h * (DV * PAGE) + p * (2 * X)


@triton.jit
def _group_rows(wp, row, sw, w_off, m):
    """Words ``w_off`` of the 16 input rows ``row`` .. ``row + 15`` (16 tensors)."""
    return (tl.load(wp + (row + 0) * sw + w_off, mask=m, other=0),
            tl.load(wp + (row + 1) * sw + w_off, mask=m, other=0),
            tl.load(wp + (row + 2) * sw + w_off, mask=m, other=0),
            tl.load(wp + (row + 3) * sw + w_off, mask=m, other=0),
            tl.load(wp + (row + 4) * sw + w_off, mask=m, other=0),
            tl.load(wp + (row + 5) * sw + w_off, mask=m, other=0),
            tl.load(wp + (row + 6) * sw + w_off, mask=m, other=0),
            tl.load(wp + (row + 7) * sw + w_off, mask=m, other=0),
            tl.load(wp + (row + 8) * sw + w_off, mask=m, other=0),
            tl.load(wp + (row + 9) * sw + w_off, mask=m, other=0),
            tl.load(wp + (row + 10) * sw + w_off, mask=m, other=0),
            tl.load(wp + (row + 11) * sw + w_off, mask=m, other=0),
            tl.load(wp + (row + 12) * sw + w_off, mask=m, other=0),
            tl.load(wp + (row + 13) * sw + w_off, mask=m, other=0),
            tl.load(wp + (row + 14) * sw + w_off, mask=m, other=0),
            tl.load(wp + (row + 15) * sw + w_off, mask=m, other=0))


@triton.jit
def _store_group_rows(ws, vc_ptr, lslot, dst_off, m, vs, vrcp, H: tl.constexpr, DV: tl.constexpr,
                      PAGE: tl.constexpr, X: tl.constexpr, CHUNK: tl.constexpr,
                      IN_BF16: tl.constexpr, FMA_DIV: tl.constexpr, FNUZ: tl.constexpr,
                      NATIVE: tl.constexpr):
    """Quantise the 16 rows' words ``ws`` (``_group_rows``) and store the two
    16-byte vectors of dims 2p and 2p+1 (adjacent in the cache) of the group
    at slots ``lslot`` .. ``lslot + 15``: the transposition from rows to
    vectors happens in registers."""
    lblk = lslot // PAGE
    base = lblk * (H * DV * PAGE) + ((lslot - lblk * PAGE) // X) * (DV * X)
    e0, o0 = _two_token_bytes(ws[0], ws[1], vs, vrcp, IN_BF16, FMA_DIV, FNUZ, NATIVE)
    e1, o1 = _two_token_bytes(ws[2], ws[3], vs, vrcp, IN_BF16, FMA_DIV, FNUZ, NATIVE)
    e2, o2 = _two_token_bytes(ws[4], ws[5], vs, vrcp, IN_BF16, FMA_DIV, FNUZ, NATIVE)
    e3, o3 = _two_token_bytes(ws[6], ws[7], vs, vrcp, IN_BF16, FMA_DIV, FNUZ, NATIVE)
    e4, o4 = _two_token_bytes(ws[8], ws[9], vs, vrcp, IN_BF16, FMA_DIV, FNUZ, NATIVE)
    e5, o5 = _two_token_bytes(ws[10], ws[11], vs, vrcp, IN_BF16, FMA_DIV, FNUZ, NATIVE)
    e6, o6 = _two_token_bytes(ws[12], ws[13], vs, vrcp, IN_BF16, FMA_DIV, FNUZ, NATIVE)
    e7, o7 = _two_token_bytes(ws[14], ws[15], vs, vrcp, IN_BF16, FMA_DIV, FNUZ, NATIVE)
    even = _sixteen_tokens(e0, e1, e2, e3, e4, e5, e6, e7, CHUNK)
    odd = _sixteen_tokens(o0, o1, o2, o3, o4, o5, o6, o7, CHUNK)
    dst = vc_ptr + base + dst_off[:, None] + tl.arange(0, X)[None, :]
    tl.store(dst, even, mask=m[:, None])
    tl.store(dst + X, odd, mask=m[:, None])


@triton.jit
def _v_part(v_ptr, vc_ptr, loc_ptr, v_scale, i0, h0, d0, T, stride_vt, stride_loc, n_slots,
            vc_stride_s, vc_stride_h,
            H: tl.constexpr, HB: tl.constexpr, DV: tl.constexpr, BDV: tl.constexpr,
            D_SPLIT: tl.constexpr,
            PAGE: tl.constexpr, X: tl.constexpr, LAYOUT_5D: tl.constexpr, BLOCK_T: tl.constexpr,
            BYTE_TOKENS: tl.constexpr, V_SCALE_PTR: tl.constexpr, GROUPS: tl.constexpr, V_WORDS: tl.constexpr,
            V_SPEC: tl.constexpr,
            CHUNK: tl.constexpr, IN_BF16: tl.constexpr, FMA_DIV: tl.constexpr, FNUZ: tl.constexpr,
            NATIVE: tl.constexpr, LARGE: tl.constexpr, FLAT_OFFSETS: tl.constexpr):
    """V of HB heads, dims d0 .. d0+BDV, for a window of tokens (5D with GROUPS:
    whole 16-byte vectors where aligned groups of X slots are complete).
    ``i0`` is the window's first token."""
    rows = i0 + tl.arange(0, BLOCK_T)
    s, ok, in_t = _load_slots(loc_ptr, rows, T, stride_loc, n_slots, LARGE)
    vs, vrcp = _scale_and_rcp(v_scale, V_SCALE_PTR)
    hh = tl.arange(0, HB)
    d = d0 + tl.arange(0, BDV)
    src_rows = (v_ptr + (rows * stride_vt)[:, None, None] + ((h0 + hh) * DV)[None, :, None]
                + d[None, None, :])
    if not LAYOUT_5D:
        lm = in_t[:, None, None]  # loads: rows in range (not waiting for loc)
        sm = ok[:, None, None]  # stores: addressed slots
        if BDV * D_SPLIT != DV:  # padded head dim
            dm = (d < DV)[None, None, :]
            lm = lm & dm
            sm = sm & dm
        x = tl.load(src_rows, mask=lm, other=1.0)
        code = _quantize(x, vs, vrcp, FMA_DIV, FNUZ, NATIVE)
        dst = (vc_ptr + (s * vc_stride_s)[:, None, None] + ((h0 + hh) * vc_stride_h)[None, :, None]
               + d[None, None, :])
        tl.store(dst, code, mask=sm)
    elif not GROUPS:
        # Loaded and quantised before the slots are looked at (loads do not wait
        # for loc); only the way the bytes are stored depends on them: a window
        # inside runs as loaded (its bytes fill whole vectors), any other window
        # with the lanes on BYTE_TOKENS tokens (decode: fewer cache lines per store).
        x = _v_rows(src_rows, in_t, d, DV, BDV * D_SPLIT != DV)
        if BYTE_TOKENS == BLOCK_T:
            code = _quantize(x, vs, vrcp, FMA_DIV, FNUZ, NATIVE)
            _store_v_bytes(code, vc_ptr, s, h0 + hh, d, ok, H, HB, DV, BDV, BDV * D_SPLIT != DV, PAGE, X,
                           BLOCK_T, True, FLAT_OFFSETS)
        elif _run_like(loc_ptr, i0, T, stride_loc, BLOCK_T):
            code = _quantize(x, vs, vrcp, FMA_DIV, FNUZ, NATIVE)
            _store_v_bytes(code, vc_ptr, s, h0 + hh, d, ok, H, HB, DV, BDV, BDV * D_SPLIT != DV, PAGE, X,
                           BLOCK_T, True, FLAT_OFFSETS)
        else:
            _v_bytes_by_lanes(v_ptr, vc_ptr, i0, s, ok, h0 + hh, d, stride_vt, vs, vrcp, H, HB, DV, BDV,
                              BDV * D_SPLIT != DV, PAGE, X, BLOCK_T, BYTE_TOKENS, FMA_DIV, FNUZ, NATIVE)
    else:
        # Which tokens sit in a complete aligned group of X consecutive slots?
        # Token i with slot s and r = s % X belongs to the group that starts at
        # token g = i - r; it is complete when loc[g + j] == s - r + j for all j.
        r = s % X
        g = rows - r
        j = tl.arange(0, X)
        g_ok = ok & (g >= 0) & (g + (X - 1) < T)
        if V_WORDS:
            wp = v_ptr.to(tl.pointer_type(tl.int32), bitcast=True)
            sw = stride_vt // 2
        if V_SPEC:
            # (one X-block per window, one chunk of words) The only token that
            # can lead a complete group here is the window's last addressed
            # token with slot % X == 0: the X - 1 tokens after a leader carry
            # its group's other slots. Fetch that token's 16 rows now, while
            # the group is checked, instead of after the check.
            cand = tl.max(tl.where(ok & (r == 0), tl.arange(0, BLOCK_T), -1), axis=0)
            w_off, wm, dst_off = _group_word_ids(0, h0, d0, H, DV, BDV, PAGE, X, CHUNK)
            crow = i0 + cand
            ws = _group_rows(wp, crow, sw, w_off, wm & (cand >= 0) & (crow + (X - 1) < T))
        sg = tl.load(loc_ptr + (g[:, None] + j[None, :]) * stride_loc,
                     mask=g_ok[:, None], other=-1)
        same = (sg == (s - r)[:, None] + j[None, :]).to(tl.int32)
        covered = g_ok & (tl.min(same, axis=1) == 1)

        # Tokens outside complete groups: one byte per (token, head, d).
        scattered = ok & (covered == 0)
        if tl.sum(scattered.to(tl.int32), axis=0) > 0:
            # (loaded only now, for these tokens) Next to complete groups, the
            # bytes of a run's edges are stored as loaded; in a window without
            # any, with the lanes on BYTE_TOKENS tokens.
            if BYTE_TOKENS == BLOCK_T:
                code = _quantize(_v_rows(src_rows, scattered, d, DV, BDV * D_SPLIT != DV), vs, vrcp, FMA_DIV,
                                 FNUZ, NATIVE)
                _store_v_bytes(code, vc_ptr, s, h0 + hh, d, scattered, H, HB, DV, BDV, BDV * D_SPLIT != DV,
                               PAGE, X, BLOCK_T, False, FLAT_OFFSETS)
            elif tl.sum(covered.to(tl.int32), axis=0) > 0:
                code = _quantize(_v_rows(src_rows, scattered, d, DV, BDV * D_SPLIT != DV), vs, vrcp, FMA_DIV,
                                 FNUZ, NATIVE)
                _store_v_bytes(code, vc_ptr, s, h0 + hh, d, scattered, H, HB, DV, BDV, BDV * D_SPLIT != DV,
                               PAGE, X, BLOCK_T, False, FLAT_OFFSETS)
            else:
                _v_bytes_by_lanes(v_ptr, vc_ptr, i0, s, scattered, h0 + hh, d, stride_vt, vs, vrcp, H, HB, DV,
                                  BDV, BDV * D_SPLIT != DV, PAGE, X, BLOCK_T, BYTE_TOKENS, FMA_DIV, FNUZ, NATIVE)

        # Complete groups that start in this window (at most one per X tokens):
        # load the (X tokens, HB, D) tile, store it as HB*D vectors of X bytes.
        leader = covered & (r == 0)
        G: tl.constexpr = BLOCK_T // X
        if V_WORDS:
            # 16-bit inputs: one group per X-block of the window, transposed in
            # registers (_group_rows, _store_group_rows).
            # One reduction per X-block finds its leader: slot and offset in
            # the block packed as slot * X + offset + 1 (0: no group starts
            # there). It fits: without LARGE, n_slots * X <= the cache's bytes.
            # Each thread takes one word (dims 2p, 2p+1) of each of the group's
            # 16 rows, CHUNK words at a time (CHUNK = the program's threads, so
            # that the store needs no layout change).
            tok = tl.arange(0, BLOCK_T)
            for gi in tl.static_range(G):
                lead_g = leader & (tok // X == gi)
                packed = tl.sum(tl.where(lead_g, s * X + (tok % X) + 1, 0), axis=0)
                if packed > 0:
                    lslot = (packed - 1) // X
                    if V_SPEC:  # the leader is the candidate fetched above
                        _store_group_rows(ws, vc_ptr, lslot, dst_off, wm, vs, vrcp, H, DV, PAGE, X,
                                          CHUNK, IN_BF16, FMA_DIV, FNUZ, NATIVE)
                    else:
                        lrow = i0 + gi * X + (packed - 1) % X
                        for c in tl.static_range((HB * BDV // 2) // CHUNK):
                            w_off, wm, dst_off = _group_word_ids(c, h0, d0, H, DV, BDV, PAGE, X, CHUNK)
                            ws = _group_rows(wp, lrow, sw, w_off, wm)
                            _store_group_rows(ws, vc_ptr, lslot, dst_off, wm, vs, vrcp, H, DV, PAGE, X,
                                              CHUNK, IN_BF16, FMA_DIV, FNUZ, NATIVE)
        elif tl.sum(leader.to(tl.int32), axis=0) > 0:
            lead2 = tl.reshape(leader.to(tl.int32), (G, X)) != 0
            rows2 = tl.reshape(rows, (G, X))
            slot2 = tl.reshape(s, (G, X))
            has = tl.max(lead2.to(tl.int32), axis=1) > 0
            lrow = tl.sum(tl.where(lead2, rows2, 0), axis=1)
            # Recompute the group base from the leader's slot with constant
            # multipliers: then the compiler can prove 16-byte alignment and
            # emits 16-byte stores (it cannot see through a reduced base).
            lslot = tl.sum(tl.where(lead2, slot2, 0), axis=1)
            lblk = lslot // PAGE
            lbase = lblk * (H * DV * PAGE) + ((lslot - lblk * PAGE) // X) * (DV * X)
            # tile (group, head, d, token-in-group)
            m4 = has[:, None, None, None]
            if BDV * D_SPLIT != DV:
                m4 = m4 & (d < DV)[None, None, :, None]
            src = (v_ptr + ((lrow[:, None] + j[None, :]) * stride_vt)[:, None, None, :]
                   + ((h0 + hh) * DV)[None, :, None, None] + d[None, None, :, None])
            x = tl.load(src, mask=m4, other=1.0)
            code = _quantize(x, vs, vrcp, FMA_DIV, FNUZ, NATIVE)
            dst = (vc_ptr + lbase[:, None, None, None] + ((h0 + hh) * (DV * PAGE))[None, :, None, None]
                   + (d * X)[None, None, :, None] + j[None, None, None, :])
            tl.store(dst, code, mask=m4)


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
            _v_part(v_ptr, vc_ptr, loc_ptr, v_scale, i0, h0, dchunk * BDV, T, stride_vt,
                    stride_loc, n_slots, vc_stride_s, vc_stride_h, H, HB, DV, BDV, D_SPLIT, PAGE, X,
                    LAYOUT_5D, BLOCK_T, BYTE_TOKENS, V_SCALE_PTR, GROUPS, V_WORDS, V_SPEC, CHUNK, IN_BF16,
                    FMA_DIV, FNUZ, NATIVE, LARGE, FLAT_OFFSETS)
    else:
        _k_part(k_ptr, kc_ptr, loc_ptr, k_scale, rows, h0, dchunk * BDK, T, stride_kt,
                stride_loc, n_slots, kc_stride_s, kc_stride_h, H, HB, DK, BDK, D_SPLIT, PAGE, X,
                LAYOUT_5D, K_SCALE_PTR, FMA_DIV, FNUZ, NATIVE, LARGE)
        _v_part(v_ptr, vc_ptr, loc_ptr, v_scale, i0, h0, dchunk * BDV, T, stride_vt,
                stride_loc, n_slots, vc_stride_s, vc_stride_h, H, HB, DV, BDV, D_SPLIT, PAGE, X,
                LAYOUT_5D, BLOCK_T, BYTE_TOKENS, V_SCALE_PTR, GROUPS, V_WORDS, V_SPEC, CHUNK, IN_BF16,
                FMA_DIV, FNUZ, NATIVE, LARGE, FLAT_OFFSETS)


# --------------------------------------------------------------------------- #
# Host side                                                                   #
# --------------------------------------------------------------------------- #


class _Plan(NamedTuple):
    T: int
    H: int
    DK: int
    DV: int
    layout_5d: bool
    page: int
    n_slots: int
    fp8_dtype: torch.dtype
    kc_bytes: torch.Tensor
    vc_bytes: torch.Tensor


def _round_to_float32(value: float) -> float:
    """``value`` rounded to the nearest float32 (inf past the range), on the host
    without creating a tensor (this runs on every call with a float scale)."""
    try:
        return struct.unpack("f", struct.pack("f", value))[0]
    except OverflowError:
        return math.copysign(math.inf, value)


class ScaleError(ValueError):
    """A k_scale / v_scale the fused write does not take (zero, negative,
    infinite, NaN, subnormal, or with a subnormal / infinite float32
    reciprocal), or a tensor scale it could not check. Raised before anything
    is written, for Python floats and scale tensors alike, on every device."""


_TINY32 = 2.0 ** -126  # the smallest normal float32


def scale_problem(value: float) -> Optional[str]:
    """Why the float32 scale ``value`` (a Python float) is refused, or None.

    The kernel divides in float32 through the reciprocal (module docstring,
    "Division"): a subnormal scale is flushed to zero on GPUs and its
    reciprocal overflows; a reciprocal that is subnormal is flushed too; zero,
    negative, infinite and NaN scales are not scales (SGLang itself treats a
    non-positive checkpoint scale as absent). So the scale and its float32
    reciprocal must be positive normal float32 numbers (about 1.2e-38 .. 8.5e37).
    """
    as32 = _round_to_float32(value) if math.isfinite(value) else value
    if not math.isfinite(value) or not math.isfinite(as32) or not as32 > 0.0:
        return "expected a positive finite scale (also after rounding to float32)"
    rcp32 = _round_to_float32(1.0 / as32)
    if as32 < _TINY32 or not math.isfinite(rcp32) or rcp32 < _TINY32:
        return (f"{'subnormal' if as32 < _TINY32 else 'too large'} in float32 (its float32 value {as32!r}, "
                f"reciprocal {rcp32!r}); the scale and its reciprocal must be normal float32 numbers, "
                f"{_TINY32!r} .. {1.0 / _TINY32!r}")
    return None


# Tensor scales checked so far: (id(root tensor), data_ptr) -> (weakref to the root, version).
# A scale tensor is a model constant (a layer's k_scale parameter): its value is
# read on the host (one device sync) the first time it is seen and again only
# after it changed (its version counter moves with every in-place write, e.g.
# SGLang's copy_ of the loaded scale), never per call.
_CHECKED_SCALES: dict = {}


def _scale_root(t: torch.Tensor) -> torch.Tensor:
    """The tensor ``t`` is a view of (a fresh ``reshape(1)`` of a layer's
    parameter on every call finds the parameter), or ``t``."""
    base = t._base
    while base is not None:
        t, base = base, base._base
    return t


def _read_scale(scale: torch.Tensor) -> float:
    """The value of a one-element scale tensor, on the host (a device sync)."""
    return float(scale.detach().reshape(()).to("cpu", torch.float32))


def _capturing(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def check_scale_tensor(name: str, scale: torch.Tensor) -> None:
    """Check the value of a one-element float32 scale tensor once (ScaleError
    naming ``name`` and the value if :func:`scale_problem` refuses it).

    The check is remembered per tensor (the tensor a view was taken of, its
    version counter and its address), so later calls with the same unchanged
    tensor cost a dictionary lookup and no device sync. Inside a CUDA-graph
    capture a tensor not checked before cannot be read (a sync is not allowed
    there): ScaleError then asks for one write, or this call, before the
    capture. A scale changed in place after a graph was captured is read by
    the replay unchecked (replays run no Python); the next eager call checks it.
    """
    root = scale._base
    if root is None:
        root = scale
    elif root._base is not None:
        root = _scale_root(root)
    ptr = scale.data_ptr()
    key = (id(root), ptr)  # two scales viewed out of one tensor are two entries
    try:
        version = root._version
    except RuntimeError:  # an inference tensor has no version counter
        version = None
    entry = _CHECKED_SCALES.get(key)
    if entry is not None and entry[1] == version and entry[0]() is root:
        return
    if scale.is_meta:
        return  # compiling for another GPU (kernels/aot.py): no value, nothing runs
    if _capturing(scale.device):
        raise ScaleError(
            f"{name}: this scale tensor was not checked before the CUDA-graph capture, and reading its value "
            f"there would sync: write once outside the capture (SGLang's warm-up does), or call "
            f"sglang_kv5d.kernels.fp8_write.check_scale_tensor({name!r}, scale) before capturing"
        )
    value = _read_scale(scale)
    why = scale_problem(value)
    if why is not None:
        raise ScaleError(f"{name}: the scale tensor holds {value!r}: {why}; fix the checkpoint's {name} "
                         f"(or pass a calibrated scale)")
    _CHECKED_SCALES[key] = (weakref.ref(root, lambda _r, k=key: _CHECKED_SCALES.pop(k, None)), version)


def _check_scale(name: str, scale, device: torch.device):
    """Return (kernel argument, is_pointer); ScaleError for a refused value."""
    if isinstance(scale, torch.Tensor):
        if scale.numel() != 1:
            raise ValueError(
                f"{name}: expected a Python float or a one-element float32 tensor, "
                f"got a tensor with {scale.numel()} elements (shape {tuple(scale.shape)})"
            )
        if scale.dtype != torch.float32:
            raise TypeError(f"{name}: expected a float32 tensor, got {scale.dtype}")
        if scale.device != device:
            raise ValueError(
                f"{name}: expected the scale tensor on the cache's device {device}, "
                f"got {scale.device}"
            )
        check_scale_tensor(name, scale)
        return scale, True
    if isinstance(scale, bool) or not isinstance(scale, (float, int)):
        raise TypeError(
            f"{name}: expected a Python float or a one-element float32 tensor, "
            f"got {type(scale).__name__}"
        )
    value = float(scale)
    why = scale_problem(value)
    if why is not None:
        if why.startswith("expected"):
            raise ScaleError(f"{name}: {why}, got {scale!r}")
        raise ScaleError(f"{name}: {scale!r} is {why}: pass a calibrated scale in that range")
    return _round_to_float32(value), False


def _check_input(name: str, x) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in _INPUT_DTYPES:
        raise TypeError(f"{name}: expected dtype bfloat16, float16 or float32, got {x.dtype}")
    if x.dim() != 3:
        raise ValueError(f"{name}: expected shape (T, H, D), got {tuple(x.shape)}")
    T, H, D = x.shape
    if D > 1 and x.stride(2) != 1:
        raise ValueError(f"{name}: the head dim must be contiguous (stride(2) == 1), got strides {x.stride()}")
    if H > 1 and x.stride(1) != D:
        raise ValueError(
            f"{name}: heads must be contiguous (stride(1) == D == {D}), got strides {x.stride()}"
        )


def _cache_fp8_dtype(k_cache, v_cache, fp8_dtype) -> torch.dtype:
    for name, c in (("k_cache", k_cache), ("v_cache", v_cache)):
        if not isinstance(c, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(c).__name__}")
    if fp8_dtype is not None and fp8_dtype not in FP8_MAX:
        raise TypeError(
            f"fp8_dtype: expected torch.float8_e4m3fn or torch.float8_e4m3fnuz, got {fp8_dtype!r}"
        )
    if k_cache.dtype != v_cache.dtype:
        raise TypeError(
            f"k_cache/v_cache: expected the same dtype, got {k_cache.dtype} and {v_cache.dtype}"
        )
    dt = k_cache.dtype
    if dt == torch.uint8:
        if fp8_dtype is None:
            raise TypeError(
                "fp8_dtype: required when the caches are uint8 storage views "
                "(pass torch.float8_e4m3fn or torch.float8_e4m3fnuz)"
            )
        return fp8_dtype
    if dt in FP8_MAX:
        if fp8_dtype is not None and fp8_dtype != dt:
            raise ValueError(f"fp8_dtype: {fp8_dtype} disagrees with the caches' dtype {dt}")
        return dt
    raise TypeError(
        f"k_cache: expected a float8_e4m3fn / float8_e4m3fnuz cache or its uint8 storage "
        f"view, got {dt}"
    )


def _plan(k, v, k_cache, v_cache, loc, fp8_dtype) -> _Plan:
    _check_input("k", k)
    _check_input("v", v)
    dtype = _cache_fp8_dtype(k_cache, v_cache, fp8_dtype)
    T, H, DK = k.shape
    if v.shape[0] != T or v.shape[1] != H:
        raise ValueError(
            f"v: expected shape ({T}, {H}, D_v) to match k {tuple(k.shape)}, got {tuple(v.shape)}"
        )
    DV = v.shape[2]
    if not isinstance(loc, torch.Tensor):
        raise TypeError(f"loc: expected a 1-D int32/int64 tensor, got {type(loc).__name__}")
    if loc.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"loc: expected dtype int32 or int64, got {loc.dtype}")
    if loc.dim() != 1 or loc.shape[0] != T:
        raise ValueError(f"loc: expected a 1-D tensor of length T={T}, got shape {tuple(loc.shape)}")
    device = k_cache.device
    for name, t in (("k", k), ("v", v), ("v_cache", v_cache), ("loc", loc)):
        if t.device != device:
            raise ValueError(f"{name}: expected device {device} (the cache's), got {t.device}")

    if k_cache.dim() == 3 and v_cache.dim() == 3:
        layout_5d = False
        if tuple(k_cache.shape[1:]) != (H, DK):
            raise ValueError(
                f"k_cache: expected NHD shape (slots, {H}, {DK}), got {tuple(k_cache.shape)}"
            )
        if tuple(v_cache.shape[1:]) != (H, DV):
            raise ValueError(
                f"v_cache: expected NHD shape (slots, {H}, {DV}), got {tuple(v_cache.shape)}"
            )
        if v_cache.shape[0] != k_cache.shape[0]:
            raise ValueError(
                f"v_cache: expected {k_cache.shape[0]} slots like k_cache, got {v_cache.shape[0]}"
            )
        for name, c, D in (("k_cache", k_cache, DK), ("v_cache", v_cache, DV)):
            if c.stride(2) != 1:
                raise ValueError(f"{name}: the head dim must be contiguous, got strides {c.stride()}")
            if (c.shape[0] > 1 and c.stride(0) == 0) or (c.shape[1] > 1 and c.stride(1) == 0):
                raise ValueError(f"{name}: slots or heads share memory (an expanded view, strides {c.stride()}): "
                                 f"pass a cache whose slots and heads do not overlap")
        page = 1
        n_slots = k_cache.shape[0]
    elif k_cache.dim() == 5 and v_cache.dim() == 5:
        layout_5d = True
        X = X_FP8
        nb, kh, kdx, page, kx = k_cache.shape
        if kh != H or kx != X or kdx * X != DK:
            raise ValueError(
                f"k_cache: expected SHUFFLE 5D shape (blocks, {H}, {DK}/{X}, page, {X}) "
                f"(X = 16 for fp8), got {tuple(k_cache.shape)}"
            )
        vb, vh, vpx, vd, vx = v_cache.shape
        if vb != nb or vh != H or vx != X or vd != DV or vpx * X != page:
            raise ValueError(
                f"v_cache: expected SHUFFLE 5D shape ({nb}, {H}, {page}/{X}, {DV}, {X}) "
                f"to match k_cache {tuple(k_cache.shape)} (page divisible by X = 16), "
                f"got {tuple(v_cache.shape)}"
            )
        for name, c in (("k_cache", k_cache), ("v_cache", v_cache)):
            if not c.is_contiguous():
                raise ValueError(f"{name}: a SHUFFLE 5D cache must be contiguous")
        n_slots = nb * page
    else:
        raise ValueError(
            "k_cache/v_cache: expected both NHD (3-D: slots, H, D) or both SHUFFLE 5D "
            f"(5-D), got ranks {k_cache.dim()} and {v_cache.dim()}"
        )
    if DK % X_FP8 or DV % X_FP8:
        if layout_5d:
            raise ValueError(f"k/v: head dims must be multiples of {X_FP8}, got {DK} and {DV}")
    kc_bytes = k_cache if k_cache.dtype == torch.uint8 else k_cache.view(torch.uint8)
    vc_bytes = v_cache if v_cache.dtype == torch.uint8 else v_cache.view(torch.uint8)
    return _Plan(T, H, DK, DV, layout_5d, page, n_slots, dtype, kc_bytes, vc_bytes)


def _native_fp8_ok(device: torch.device, fp8_dtype: torch.dtype, target: Optional[KernelTarget] = None) -> bool:
    """Does the hardware of ``target`` (default: ``device``'s) convert fp32 to
    ``fp8_dtype``? e4m3fn on NVIDIA sm_89+ and AMD gfx950, e4m3fnuz on AMD gfx942;
    never under the interpreter."""
    return (target or target_of(device)).converts(fp8_dtype)


_CONFIG_KEYS = ("block_t", "heads_per_program", "d_split", "split_kv", "num_warps", "groups", "v_words",
                "parts", "maxnreg", "token_major", "v_spec", "byte_tokens")


# 5D V with D = 256: whole-vector groups once a call writes this many V bytes
# (T x H x D_v), bytes one by one below (H200, e4m3fn: groups 1-4% faster
# from 8 MiB of V, bytes faster below).
_GROUPS_MIN_V_BYTES_D256 = 1 << 23
# 5D V with D <= 128: whole-vector groups past this many tokens, bytes one by
# one up to it (H200: bytes one by one are 2-6% faster on prefill runs of 2048
# and 4096 tokens and 2-3x faster on decode batches of that size; groups win
# from 8192 tokens).
_GROUPS_MIN_T = 4096
# Bytes one by one: up to this many tokens, windows that are not inside runs
# (decode) store with the lanes on 4 tokens (byte_tokens 4: 22-33% faster on
# decode batches, 0-3.5% slower on prefill runs on the H200);
# past it prefill runs are the common case (5-10% slower with byte_tokens 4
# at 4096 and 8192 tokens) and decode batches that large are rare.
_DECODE_LANES_MAX_T = 2048


def _heads_per_program(H: int, D: int, elements: int) -> int:
    """The most heads (a power of two dividing H) whose rows fit in ``elements``."""
    hb = 1
    while hb < H and H % (hb * 2) == 0 and (hb * 2) * D <= elements:
        hb *= 2
    return hb


def _row_chunks(DK: int, DV: int) -> int:
    """Programs per 5D head row: a power of two, about 128 dims each, never
    less than one 16-byte vector of the narrower of K and V."""
    ds = 1
    while 2 * ds * 128 <= max(DK, DV) and triton.next_power_of_2(min(DK, DV)) // (2 * ds) >= X_FP8:
        ds *= 2
    return ds


def _v_words_ok(v: torch.Tensor) -> bool:
    """Can the V group path read ``v`` as 32-bit words of two dims? (16-bit
    elements, every row starting on a 4-byte boundary; dims are contiguous and
    5D head dims are multiples of 16.)"""
    return v.element_size() == 2 and v.data_ptr() % 4 == 0 and (v.shape[0] <= 1 or v.stride(0) % 2 == 0)


def _v_words_launch(words: int, num_warps: int, warp_size: int, warps_fixed: bool):
    """(CHUNK, num_warps) for the register group path, which wants one 32-bit
    word per thread (``words`` = heads x dims / 2 per program). With fewer words
    than threads, threads would repeat each other's loads and arithmetic (1.5-2x
    slower on the H200): unless the caller fixed ``num_warps``, warps are halved
    until the words fill them (this matters where a warp has 64 threads)."""
    if not warps_fixed:
        while num_warps > 1 and words < num_warps * warp_size:
            num_warps //= 2
    return min(words, num_warps * warp_size), num_warps


def _v_group_launch(cfg: Mapping, bdv: int, *, v_ok: bool, warp_size: int, warps_fixed: bool):
    """(V_WORDS, V_SPEC, CHUNK, num_warps) of a checked configuration: the
    register group path for inputs it can read (``v_ok``, ``_v_words_ok``),
    with CHUNK words at a time (``_v_words_launch``), and its rows fetched
    before the group check only with one X-block per window and one chunk."""
    num_warps = cfg["num_warps"]
    if not (cfg["groups"] and cfg["v_words"] and v_ok):
        return False, False, 1, num_warps
    words = cfg["heads_per_program"] * bdv // 2
    chunk, num_warps = _v_words_launch(words, num_warps, warp_size, warps_fixed)
    v_spec = bool(cfg["v_spec"]) and cfg["block_t"] == X_FP8 and chunk == words
    return True, v_spec, chunk, num_warps


def launch_config(T: int, H: int, DK: int, DV: int, layout_5d: bool, native_fp8: bool,
                  target: KernelTarget) -> dict:
    """Kernel configuration for ``target`` picked from shapes and the encoder
    only (never from loc contents). ``native_fp8``: the hardware FP8
    conversion is used (e4m3fn on NVIDIA sm_89+ and gfx950, e4m3fnuz on
    gfx942); False for the integer encoder (e4m3fnuz on NVIDIA, the CPU
    interpreter). NVIDIA and the interpreter (NVIDIA-shaped) take
    ``_launch_config_nvidia``, AMD (gfx942, gfx950) ``_launch_config_amd``.
    The keys are described at ``_launch_config_nvidia``.
    """
    if target.is_amd:
        return _launch_config_amd(T, H, DK, DV, layout_5d, native_fp8, target)
    return _launch_config_nvidia(T, H, DK, DV, layout_5d, native_fp8)


def _launch_config_nvidia(T: int, H: int, DK: int, DV: int, layout_5d: bool, native_fp8: bool) -> dict:
    """NVIDIA's (and the interpreter's) configuration, chosen by H200 timing.

    Keys: ``block_t`` tokens per program (a power of two; >= 16 with ``groups``),
    ``heads_per_program``, ``d_split`` programs per head row (each takes
    1/d_split of the dims), ``split_kv`` (K and V in separate programs),
    ``num_warps``, ``groups`` (5D V: detect complete aligned groups of 16 slots
    and store them as whole 16-byte vectors; without it every V byte is stored
    on its own and the L2 cache merges the bytes of a group), ``v_words``
    (with ``groups``: transpose a group in registers, one 32-bit word of two
    dims per thread and row, for 16-bit inputs whose rows are 4-byte aligned;
    other inputs take the tile path through shared memory), ``parts`` ("kv";
    "k" or "v" run one half alone, for benchmarks only), ``maxnreg`` (None, or
    a cap on registers per thread, passed to Triton on NVIDIA only),
    ``token_major`` (launch order: False runs every window of one head block
    and half before the next; True runs the programs of one token window, all
    head blocks, K and V, next to each other), ``v_spec`` (register group
    path with 16-token windows and one chunk of words: fetch the candidate
    leader's rows while the group is checked), ``byte_tokens`` (5D V bytes
    stored one by one, a power of two: below ``block_t``, a window that does
    not start and end inside runs (``_run_like``; in the group path: a window
    without complete groups) stores with the lanes of a store on
    ``byte_tokens`` tokens, then dims (``_v_bytes_by_lanes``); ``block_t`` or
    more stores every window as loaded).

    The rules, each with its H200 measurement (docs/benchmarks.md,
    "Decisions"): small windows for decode sizes (more programs, each one
    short: most SMs idle otherwise at T <= 128); for 5D, V bytes stored one by
    one (the L2 merges a vector's bytes) except for D <= 128 past 4096 tokens,
    where the group path wins, and rows of 256 dims split over two programs;
    for NHD, rows of up to 512 elements per program past 128 tokens. The
    token-major launch order for 5D with D <= 128 and with groups (2-3% faster
    at T >= 1024; slower for D = 256 with bytes one by one). Groups for D = 256
    (rows split over two programs) once a call writes at least 8 MiB of V
    (bytes one by one lose 1-4% from T x H = 32768 on). ``byte_tokens`` 4 on
    the bytes path up to 2048 tokens (windows that are not inside runs, i.e.
    decode, store with the lanes on 4 tokens). With the integer encoder
    (twice the registers per element) 5D V is stored as bytes one by one at
    every size, with whole rows of 256 dims from 8 MiB of V per call: on the
    H200 with e4m3fnuz that is 4% faster than the group path for D = 128 and
    26-34% faster for D = 256, where the group path's two-warp programs
    (which K shares) need 128 registers per thread.
    """
    D = max(DK, DV)
    cfg = {"block_t": 16, "heads_per_program": 1, "d_split": 1, "split_kv": True,
           "num_warps": 4, "groups": False, "v_words": True, "parts": "kv", "maxnreg": None,
           "token_major": False, "v_spec": False, "byte_tokens": 16}
    # 5D V bytes one by one
    v_bytes = dict(d_split=_row_chunks(DK, DV), block_t=4 if T <= 128 else 16, token_major=D < 256,
                   byte_tokens=4 if T <= _DECODE_LANES_MAX_T else 16)
    big_d256 = D == 256 and T * H * DV >= _GROUPS_MIN_V_BYTES_D256
    if layout_5d and not native_fp8:
        cfg.update(v_bytes)
        if big_d256:
            cfg["d_split"] = 1  # whole rows of 256 dims
    elif layout_5d:
        if T > _GROUPS_MIN_T and D < 256:
            cfg.update(groups=True, heads_per_program=_heads_per_program(H, D, 256), token_major=True,
                       v_spec=True)
        elif big_d256:
            cfg.update(groups=True, d_split=_row_chunks(DK, DV), token_major=True)
        else:
            cfg.update(v_bytes)
    elif T <= 128:
        cfg.update(block_t=4)
    else:
        hb = _heads_per_program(H, D, 512)
        block_t = 4 if T <= 2048 else (32 if hb * D >= 512 else 16)
        cfg.update(block_t=block_t, heads_per_program=hb)
    return cfg


# AMD: elements a lane quantises per program (the tile over the program's
# lanes). 16 keeps every serving shape at or under 64 VGPRs (8 waves per
# SIMD) with the fewest instructions per element; see _launch_config_amd.
_AMD_ELEMENTS_PER_LANE = 16


def _launch_config_amd(T: int, H: int, DK: int, DV: int, layout_5d: bool, native_fp8: bool,
                       target: KernelTarget) -> dict:
    """AMD (gfx942, gfx950): tiles chosen from the compile figures, not from
    timing. Speed on AMD hardware is unmeasured.

    Figures: ``lab/write_config_sweep.py``, each arch in its own process,
    Triton 3.5.1, 3.6.0, 3.7.0, 3.8.0 and 3.9.0, buffer ops on and off,
    caches under and over 2 GiB (LARGE), pages 16/32/64, tensor and float
    scales, Qwen3.5 TP8 (1 KV head, D=256), TP1 (2, 256) and a Llama-like
    layer (8, 128), T = 1, 16, 37, 2048, 32768 (4096 and 8192 compile to the
    32768 kernel). With these rules every one of those kernels compiles, has
    no spills and no scratch, uses the hardware conversion
    (``v_cvt_pk_fp8_f32``), takes at most 60 VGPRs and 56 SGPRs and 4 KiB of
    LDS, and runs 8 waves per SIMD.

    * 5D V bytes one by one at every size, never the group path. The H200's
      group path (past 4096 tokens at D=128, from 8 MiB of V at D=256) took
      106 SGPRs and spilled 6-26 of them on Triton 3.7-3.9 (3.8.0 gfx942,
      Qwen3.5 TP8, T=32768: 87 VGPRs, 18 spills, 4 waves; gfx950 with buffer
      ops: 126-145 VGPRs, 3-4 waves); on 3.5/3.6 it did not spill but held
      up to 142 VGPRs (3-8 waves, 4 on gfx942). With 4 waves per program it spilled 14 SGPRs
      for two heads, and with one head issued 2.8-3.4 wave instructions per
      element where the bytes path issues 0.73 (3.8.0 gfx942, T=32768).
    * 5D windows as on NVIDIA's bytes path (4 tokens up to T = 128, 16
      beyond; rows of 256 dims over two programs); NHD heads up to 512
      elements per program as on NVIDIA, and NHD windows past 128 tokens of
      4096 elements at every T (16 tokens of 256 dims, 8 of 512; NVIDIA
      takes 4 tokens up to 2048 and 16-32 beyond): the H200's 32 x 512 tile took
      141-147 VGPRs on gfx942 and 198-202 on gfx950 with buffer ops (Triton
      3.6-3.9; 3 and 2 waves); 8 x 512 takes 44 (3.8.0 gfx942).
    * ``num_warps`` such that each 64-lane wave quantises 16 elements per
      lane (1 to 4 waves per program): 16 per lane was the fewest wave
      instructions per element at 8 waves per SIMD (a 5D window of 16 x 128:
      0.73 against 0.90 with 8 per lane; the H200's 4-wave decode windows
      of 4 x 128, 2 per lane: 2.1, against 0.87 as one wave); 32 per lane
      took 78 VGPRs with buffer ops (6 waves). 5D windows that hold both V
      store paths (129-2048 tokens: windows inside runs stored as loaded,
      the others in the decode lane order) take 8 per lane: with 16, gfx950
      needed 73-74 VGPRs with buffer ops (6 waves), with 8 it needs 52.
    * ``byte_tokens`` and the launch order as on NVIDIA: they change which
      addresses a store covers, not the registers.

    The same rules serve the integer encoder (the format the arch does not
    convert: e4m3fn on gfx942, e4m3fnuz on gfx950): 8 waves, no spills
    (Triton 3.8.0 gfx942 with buffer ops, T = 1, 2048, 32768).
    """
    D = max(DK, DV)
    cfg = _launch_config_nvidia(T, H, DK, DV, layout_5d, native_fp8)
    cfg.update(groups=False, v_spec=False, maxnreg=None)
    if layout_5d:
        cfg.update(block_t=4 if T <= 128 else 16, heads_per_program=1, d_split=_row_chunks(DK, DV),
                   token_major=D < 256, byte_tokens=4 if T <= _DECODE_LANES_MAX_T else 16)
    elif T <= 128:
        cfg.update(block_t=4, heads_per_program=1)
    else:
        hb = _heads_per_program(H, D, 512)
        row = hb * triton.next_power_of_2(D)
        cfg.update(heads_per_program=hb, block_t=max(4, min(32, 4096 // row)))
    lanes = target.warp_size or 64
    per_lane = _AMD_ELEMENTS_PER_LANE
    if layout_5d and cfg["byte_tokens"] < cfg["block_t"]:
        per_lane //= 2  # two V store paths in one program (run windows, decode lanes)
    tile = cfg["block_t"] * cfg["heads_per_program"] * (triton.next_power_of_2(D) // cfg["d_split"])
    cfg["num_warps"] = max(1, min(4, tile // (lanes * per_lane)))
    return cfg


def _resolve_config(plan: "_Plan", override: Optional[dict], native: bool, target: KernelTarget) -> Mapping:
    """launch_config for the plan's shapes on ``target``, with ``override``
    applied and checked.

    Without an override the checked default is cached per shape and target:
    this runs on every write (every layer of every step), and building and
    checking the dict costs several microseconds of host time.
    """
    if not override:
        return _default_config(plan.T, plan.H, plan.DK, plan.DV, plan.layout_5d, native, target)
    cfg = launch_config(plan.T, plan.H, plan.DK, plan.DV, plan.layout_5d, native, target)
    unknown = set(override) - set(_CONFIG_KEYS)
    if unknown:
        raise ValueError(f"_config: unknown keys {sorted(unknown)}; known: {list(_CONFIG_KEYS)}")
    cfg.update(override)
    return _check_config(cfg, plan.H, plan.DK, plan.DV, plan.layout_5d)


@functools.lru_cache(maxsize=1024)
def _default_config(T: int, H: int, DK: int, DV: int, layout_5d: bool, native: bool,
                    target: KernelTarget) -> Mapping:
    return MappingProxyType(_check_config(launch_config(T, H, DK, DV, layout_5d, native, target), H, DK, DV,
                                          layout_5d))


def _check_config(cfg: dict, H: int, DK: int, DV: int, layout_5d: bool) -> dict:
    """``cfg`` checked against the shapes (ValueError naming the key), groups
    switched off for NHD."""
    groups = bool(cfg["groups"]) and layout_5d
    bt = cfg["block_t"]
    if bt < 1 or bt & (bt - 1) or (groups and bt < X_FP8):
        raise ValueError(
            f"_config block_t: expected a power of two{f' >= {X_FP8} with groups' if groups else ''}, got {bt}"
        )
    hb = cfg["heads_per_program"]
    if hb < 1 or H % hb or hb & (hb - 1):
        raise ValueError(f"_config heads_per_program: expected a power of two dividing H={H}, got {hb}")
    ds = cfg["d_split"]
    min_chunk = X_FP8 if layout_5d else 1
    if (ds < 1 or ds & (ds - 1) or triton.next_power_of_2(DK) // ds < min_chunk
            or triton.next_power_of_2(DV) // ds < min_chunk):
        raise ValueError(f"_config d_split: expected a power of two leaving >= {min_chunk} dims per program, got {ds}")
    if cfg["parts"] not in ("kv", "k", "v") or (cfg["parts"] != "kv" and not cfg["split_kv"]):
        raise ValueError(f"_config parts: expected 'kv', or 'k' / 'v' with split_kv, got {cfg['parts']!r}")
    cap = cfg["maxnreg"]
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or not 16 <= cap <= 255):
        raise ValueError(f"_config maxnreg: expected None or an int in 16..255, got {cap!r}")
    cfg["groups"] = groups
    cfg["v_words"] = bool(cfg["v_words"]) and groups
    cfg["v_spec"] = bool(cfg["v_spec"]) and cfg["v_words"]
    cfg["token_major"] = bool(cfg["token_major"])
    lt = cfg["byte_tokens"]
    if isinstance(lt, bool) or not isinstance(lt, int) or lt < 1 or lt & (lt - 1):
        raise ValueError(f"_config byte_tokens: expected a power of two, got {lt!r}")
    return cfg


def write_kv_fp8(
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    loc: torch.Tensor,
    k_scale: Union[float, torch.Tensor],
    v_scale: Union[float, torch.Tensor],
    *,
    fp8_dtype: Optional[torch.dtype] = None,
    _encoder: str = "auto",
    _config: Optional[dict] = None,
    _target: Optional[KernelTarget] = None,
) -> None:
    """Quantize ``k`` / ``v`` to FP8 and write them into one layer's caches, in one launch.

    Args:
        k, v: ``(T, H, D_k)`` and ``(T, H, D_v)``, bf16 / fp16 / fp32; any token
            stride, heads and dims contiguous. Never modified.
        k_cache, v_cache: NHD ``(slots, H, D)`` or SHUFFLE 5D (K
            ``(blocks, H, D_k/16, page, 16)``, V ``(blocks, H, page/16, D_v, 16)``),
            typed ``float8_e4m3fn`` / ``float8_e4m3fnuz`` or their ``uint8``
            storage views (then ``fp8_dtype`` is required).
        loc: ``(T,)`` int32/int64 destination slot per token; negative = skip.
        k_scale, v_scale: positive Python floats or one-element float32 tensors
            on the cache's device (read by the kernel). Both kinds must be
            normal float32 numbers with a normal reciprocal (``scale_problem``);
            a tensor's value is checked on the host once, when the tensor is
            first seen or after it changed in place (``check_scale_tensor``: one
            device sync per scale tensor and version, none per call).
        fp8_dtype: the FP8 format of uint8 caches (checked against typed caches).

    Raises TypeError / ValueError, before writing anything, on bad arguments
    (``ScaleError``, a ValueError, for a refused scale: the same on every device).
    The underscore arguments are for tests and benchmarks (``_config``
    overrides keys of ``launch_config``; ``_target`` compiles for another GPU
    than the caches' device, see ``kernels/aot.py``).
    """
    plan = _plan(k, v, k_cache, v_cache, loc, fp8_dtype)
    device = k_cache.device
    ks, ks_ptr = _check_scale("k_scale", k_scale, device)
    vs, vs_ptr = _check_scale("v_scale", v_scale, device)
    if plan.T == 0:
        return

    target = _target or target_of(device)
    if _encoder == "auto":
        native = _native_fp8_ok(device, plan.fp8_dtype, target)
    elif _encoder == "native":
        if fp8_format(plan.fp8_dtype).fnuz and not target.converts(plan.fp8_dtype):
            raise ValueError(f"_encoder='native': {target.arch or target.backend} has no hardware "
                             f"conversion to {plan.fp8_dtype}")
        native = True
    elif _encoder == "bits":
        native = False
    else:
        raise ValueError(f"_encoder: expected 'auto', 'native' or 'bits', got {_encoder!r}")

    T, H, DK, DV = plan.T, plan.H, plan.DK, plan.DV
    cfg = _resolve_config(plan, _config, native, target)
    block_t, hb, ds, split = cfg["block_t"], cfg["heads_per_program"], cfg["d_split"], cfg["split_kv"]
    kc, vc = plan.kc_bytes, plan.vc_bytes
    if plan.layout_5d:
        kc_s = kc_h = vc_s = vc_h = 0
    else:
        kc_s, kc_h = kc.stride(0), kc.stride(1)
        vc_s, vc_h = vc.stride(0), vc.stride(1)
    stride_kt, stride_vt = k.stride(0), v.stride(0)
    biggest = max(
        (T + block_t + X_FP8) * max(stride_kt, stride_vt, H * max(DK, DV)),
        kc.numel(),
        vc.numel(),
        plan.n_slots * max(kc_s, vc_s, 1),
        (T + block_t + X_FP8) * loc.stride(0),
    )
    large = biggest > _INT32_LIMIT
    bdv = triton.next_power_of_2(DV) // ds
    v_words, v_spec, chunk, num_warps = _v_group_launch(
        cfg, bdv, v_ok=_v_words_ok(v), warp_size=target.warp_size,
        warps_fixed=bool(_config) and "num_warps" in _config)
    n_kv = 2 if split and cfg["parts"] == "kv" else 1
    grid = (triton.cdiv(T, block_t), (H // hb) * ds, n_kv)
    token_major = cfg["token_major"] and grid[0] * grid[1] * n_kv <= _INT32_LIMIT
    if token_major:
        grid = (grid[0] * grid[1] * n_kv,)
    kwargs = {"num_warps": num_warps}
    if cfg["maxnreg"] is not None and target.is_nvidia:
        kwargs["maxnreg"] = cfg["maxnreg"]
    _write_kv_fp8_kernel[grid](
        k,
        v,
        kc,
        vc,
        loc,
        ks,
        vs,
        T,
        stride_kt,
        stride_vt,
        loc.stride(0),
        plan.n_slots,
        kc_s,
        kc_h,
        vc_s,
        vc_h,
        H=H,
        HB=hb,
        DK=DK,
        DV=DV,
        D_SPLIT=ds,
        BDK=triton.next_power_of_2(DK) // ds,
        BDV=bdv,
        PAGE=plan.page,
        X=X_FP8,
        LAYOUT_5D=plan.layout_5d,
        BLOCK_T=block_t,
        BYTE_TOKENS=min(cfg["byte_tokens"], block_t),
        SPLIT_KV=split,
        PART0=1 if cfg["parts"] == "v" else 0,
        GROUPS=cfg["groups"],
        V_WORDS=v_words,
        V_SPEC=v_spec,
        CHUNK=chunk,
        IN_BF16=v.dtype == torch.bfloat16,
        K_SCALE_PTR=ks_ptr,
        V_SCALE_PTR=vs_ptr,
        FMA_DIV=target.backend != "interpreter",
        FNUZ=fp8_format(plan.fp8_dtype).fnuz,
        NATIVE=native,
        LARGE=large,
        TOKEN_MAJOR=token_major,
        N_KV=n_kv,
        FLAT_OFFSETS=target.is_amd,
        **kwargs,
    )
