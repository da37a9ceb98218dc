"""The fused FP8 write's Triton helpers that K and V share: the fp32 -> fp8
byte encoders, the quantisation (scale, saturate, round once), the slot load
and the scale (``@triton.jit`` only).

    quantize(x, scale, rcp, FMA_DIV, FNUZ, NATIVE) -> uint8 codes of saturate(x / scale)
    load_slots(loc_ptr, rows, T, stride_loc, n_slots, LARGE) -> (slot ids, valid)
    scale_and_rcp(scale, SCALE_PTR) -> (scale, its float32 reciprocal)

``x`` is an fp32 tile; the codes are e4m3fn (``FNUZ`` False) or e4m3fnuz,
by the hardware conversion (``NATIVE``) or integer arithmetic on the bits.
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["quantize", "load_slots", "scale_and_rcp"]


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
def quantize(x, scale, rcp, FMA_DIV: tl.constexpr, FNUZ: tl.constexpr, NATIVE: tl.constexpr):
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
def load_slots(loc_ptr, rows, T, stride_loc, n_slots, LARGE: tl.constexpr):
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
def scale_and_rcp(scale, SCALE_PTR: tl.constexpr):
    if SCALE_PTR:
        sc = tl.load(scale)
    else:
        sc = scale
    return sc, tl.math.div_rn(1.0, sc)
