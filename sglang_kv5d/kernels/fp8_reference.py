"""Pure-torch references for the fused FP8 KV write (``fp8_write.write_kv_fp8``).

Two quantizers of the stated semantics, ``saturate(x / scale)`` rounded to the
nearest FP8 value (ties to even):

* :func:`quantize_fp8_f64` computes the quotient in float64 and rounds it onto the
  FP8 grid in float64 (one rounding, from the exact-ish quotient). This is the
  semantic reference; the kernel, which divides in fp32 first, may land one FP8
  step away on a tiny share of inputs (fp32 quotient exactly on an FP8 midpoint).
* :func:`quantize_fp8_fp32` divides in fp32 and lets torch's own ``.to(fp8)``
  round, after the clamp. The kernel is bit-identical to this one.

:func:`reference_write_kv_fp8` applies either quantizer and scatters the bytes
into copies of the caches (NHD or SHUFFLE 5D), without touching the inputs.
No triton here.
"""

from __future__ import annotations

from typing import Optional, Tuple, Union

import torch

from ..platform import fp8_format, fp8_kv_dtypes

__all__ = [
    "FP8_MAX",
    "fp8_values",
    "quantize_fp8_f64",
    "quantize_fp8_fp32",
    "reference_write_kv_fp8",
    "scale_as_float32",
    "fp8_step_distance",
    "make_input",
    "make_caches",
    "poison_like_shape",
    "addressed_masks",
    "bits",
    "loc_pattern",
]

FP8_MAX = {dt: fp8_format(dt).max for dt in fp8_kv_dtypes()}  # torch dtype -> largest finite value
_BIAS = {dt: fp8_format(dt).bias for dt in fp8_kv_dtypes()}
_MANTISSA_BITS = 3
X_FP8 = 16


def scale_as_float32(scale: Union[float, torch.Tensor]) -> float:
    """The scale the kernel divides by: the float32 value of a float or a tensor."""
    if isinstance(scale, torch.Tensor):
        return float(scale.detach().reshape(()).to("cpu", torch.float32))
    return float(torch.tensor(float(scale), dtype=torch.float32))


def fp8_values(fp8_dtype: torch.dtype) -> torch.Tensor:
    """float64 value of each of the 256 codes (NaN where the code is NaN)."""
    return torch.arange(256, dtype=torch.int32).to(torch.uint8).view(fp8_dtype).to(torch.float64)


def _positive_table(fp8_dtype: torch.dtype) -> torch.Tensor:
    """Values of codes 0 .. max_code (non-negative, strictly increasing)."""
    vals = fp8_values(fp8_dtype)[:128]
    finite = torch.isfinite(vals)
    last = int(finite.nonzero().max())
    return vals[: last + 1]


def _round_to_grid_f64(m: torch.Tensor, fp8_dtype: torch.dtype) -> torch.Tensor:
    """Round non-negative float64 magnitudes (<= max) to the FP8 grid, ties to even."""
    bias = _BIAS[fp8_dtype]
    _, e = torch.frexp(m)  # m = mant * 2**e, mant in [0.5, 1)
    exp = torch.clamp(e.to(torch.int64) - 1, min=1 - bias)
    # 2**(exp - 3) built from its bits: exact on every device (pow() need not be)
    quantum = ((exp - _MANTISSA_BITS + 1023) << 52).view(torch.float64)
    return torch.round(m / quantum) * quantum  # exact scaling; round() is half-to-even


def _encode(q_sign_negative: torch.Tensor, rounded: torch.Tensor, nan: torch.Tensor,
            fp8_dtype: torch.dtype) -> torch.Tensor:
    table = _positive_table(fp8_dtype).to(rounded.device)
    mag = torch.searchsorted(table, rounded.contiguous())
    exact = table[mag.clamp(max=table.numel() - 1)] == rounded
    assert bool(exact[~nan].all()), "value not on the FP8 grid"
    code = mag.to(torch.int32)
    if fp8_format(fp8_dtype).fnuz:
        code = torch.where(q_sign_negative & (code != 0), code | 0x80, code)
        code = torch.where(nan, torch.full_like(code, 0x80), code)
    else:
        code = torch.where(q_sign_negative, code | 0x80, code)
        code = torch.where(nan, torch.full_like(code, 0x7F) | (code & 0x80), code)
    return code.to(torch.uint8)


def quantize_fp8_f64(x: torch.Tensor, scale: Union[float, torch.Tensor],
                     fp8_dtype: torch.dtype) -> torch.Tensor:
    """uint8 codes of ``saturate(x / scale)`` computed in float64, rounded once."""
    s = scale_as_float32(scale)
    q = x.detach().to(torch.float64) / s
    nan = torch.isnan(q)
    neg = torch.signbit(q)
    m = torch.clamp(q.abs(), max=FP8_MAX[fp8_dtype])
    m = torch.where(nan, torch.zeros_like(m), m)
    return _encode(neg, _round_to_grid_f64(m, fp8_dtype), nan, fp8_dtype)


def quantize_fp8_fp32(x: torch.Tensor, scale: Union[float, torch.Tensor],
                      fp8_dtype: torch.dtype) -> torch.Tensor:
    """uint8 codes of ``clamp(x.float() / scale, -max, max).to(fp8)`` (torch's rounding)."""
    s = torch.tensor(scale_as_float32(scale), dtype=torch.float32, device=x.device)
    q = x.detach().to(torch.float32) / s
    fmax = FP8_MAX[fp8_dtype]
    q = torch.clamp(q, -fmax, fmax)
    return q.to(fp8_dtype).view(torch.uint8)


def fp8_step_distance(a: torch.Tensor, b: torch.Tensor, fp8_dtype: torch.dtype) -> torch.Tensor:
    """How many FP8 grid steps apart two uint8 code tensors are (sign-aware; NaN -> 0 if both NaN)."""
    table = _positive_table(fp8_dtype)
    n = table.numel()

    def ordinal(c):
        c = c.to(torch.int64)
        mag = c & 0x7F
        neg = (c & 0x80) != 0
        if fp8_format(fp8_dtype).fnuz:
            mag = torch.where(c == 0x80, torch.full_like(mag, n), mag)
            neg = neg & (c != 0x80)
        return torch.where(neg, -mag, mag)

    return (ordinal(a) - ordinal(b)).abs()


def _n_slots(cache: torch.Tensor) -> int:
    if cache.dim() == 3:
        return cache.shape[0]
    return cache.shape[0] * cache.shape[3]


def reference_write_kv_fp8(
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    loc: torch.Tensor,
    k_scale: Union[float, torch.Tensor],
    v_scale: Union[float, torch.Tensor],
    *,
    fp8_dtype: Optional[torch.dtype] = None,
    mode: str = "f64",
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Expected cache bytes after the write, as new uint8 tensors on the caches' device.

    ``mode="f64"`` uses :func:`quantize_fp8_f64`, ``mode="fp32"`` uses
    :func:`quantize_fp8_fp32`. Slots < 0 (and >= the cache size) are skipped.
    """
    if fp8_dtype is None:
        fp8_dtype = k_cache.dtype
    quant = {"f64": quantize_fp8_f64, "fp32": quantize_fp8_fp32}[mode]
    # computed on the caches' device (CPU or GPU), returned there
    kc = k_cache.detach().view(torch.uint8).clone()
    vc = v_cache.detach().view(torch.uint8).clone()
    loc = loc.detach().to(kc.device, torch.int64)
    keep = (loc >= 0) & (loc < _n_slots(kc))
    idx = keep.nonzero().flatten()
    slots = loc[idx]
    qk = quant(k.detach()[idx.to(k.device)], k_scale, fp8_dtype).to(kc.device)
    qv = quant(v.detach()[idx.to(v.device)], v_scale, fp8_dtype).to(kc.device)
    if kc.dim() == 3:
        kc[slots] = qk
        vc[slots] = qv
    else:
        page = kc.shape[3]
        x = kc.shape[4]
        b, t = slots // page, slots % page
        n, H, DK = qk.shape
        kc[b, :, :, t, :] = qk.reshape(n, H, DK // x, x)
        vc[b, :, t // x, :, t % x] = qv
    return kc, vc


# --------------------------------------------------------------------------- #
# Test and benchmark fixtures (pure torch): inputs, poisoned caches, slot ids. #
# --------------------------------------------------------------------------- #


def make_input(T, H, D, dtype, *, gen, device="cpu", token_pad=0, spread=True):
    """Random (T, H, D) input, never zero, magnitudes over many decades.

    ``gen`` is a torch.Generator on ``device``. ``token_pad`` > 0 makes the token
    stride H*D + token_pad (a slice of a wider buffer, like K/V sliced out of a
    fused QKV projection).
    """
    x = torch.randn(T, H * D + token_pad, generator=gen, dtype=torch.float32, device=device)
    if spread:
        # 10**[-4, 3): from the fp8 subnormal range to well past saturation (scale ~1).
        x *= torch.pow(10.0, torch.rand(x.shape, generator=gen, device=device) * 7.0 - 4.0)
    x = x.to(dtype)
    x = torch.where(x == 0, torch.full_like(x, 0.25), x)
    return x[:, : H * D].unflatten(1, (H, D))


def poison_like_shape(shape, *, gen, device="cpu"):
    """uint8 tensor filled with a pseudo-random sentinel byte pattern."""
    return torch.randint(0, 256, shape, generator=gen, dtype=torch.uint8, device=device)


def make_caches(layout, n_blocks, page, H, DK, DV, *, gen, device="cpu", typed=None):
    """Poisoned caches; ``typed`` = an fp8 dtype to return typed views, else uint8."""
    if layout == "nhd":
        kc = poison_like_shape((n_blocks * page, H, DK), gen=gen, device=device)
        vc = poison_like_shape((n_blocks * page, H, DV), gen=gen, device=device)
    else:
        kc = poison_like_shape((n_blocks, H, DK // X_FP8, page, X_FP8), gen=gen, device=device)
        vc = poison_like_shape((n_blocks, H, page // X_FP8, DV, X_FP8), gen=gen, device=device)
    if typed is not None:
        kc, vc = kc.view(typed), vc.view(typed)
    return kc, vc


def addressed_masks(layout, k_shape, v_shape, loc, H, DK, DV):
    """Boolean masks of the cache bytes a write of ``loc`` must touch.

    Computed with flat-index formulas, independently of the reference's
    advanced indexing, so the two cross-check each other.
    """
    loc = loc.detach().to("cpu", torch.int64)
    if layout == "nhd":
        n_slots = k_shape[0]
    else:
        n_slots = k_shape[0] * k_shape[3]
    s = loc[(loc >= 0) & (loc < n_slots)]
    km = torch.zeros(int(torch.tensor(k_shape).prod()), dtype=torch.bool)
    vm = torch.zeros(int(torch.tensor(v_shape).prod()), dtype=torch.bool)
    h = torch.arange(H)
    dk = torch.arange(DK)
    dv = torch.arange(DV)
    if layout == "nhd":
        kidx = (s[:, None, None] * H + h[None, :, None]) * DK + dk[None, None, :]
        vidx = (s[:, None, None] * H + h[None, :, None]) * DV + dv[None, None, :]
    else:
        page = k_shape[3]
        b, t = s // page, s % page
        kidx = ((((b[:, None, None] * H + h[None, :, None]) * (DK // X_FP8) + dk[None, None, :] // X_FP8)
                 * page + t[:, None, None]) * X_FP8 + dk[None, None, :] % X_FP8)
        vidx = ((((b[:, None, None] * H + h[None, :, None]) * (page // X_FP8) + t[:, None, None] // X_FP8)
                 * DV + dv[None, None, :]) * X_FP8 + t[:, None, None] % X_FP8)
    km[kidx.flatten()] = True
    vm[vidx.flatten()] = True
    return km.view(k_shape), vm.view(v_shape)


def bits(x: torch.Tensor) -> torch.Tensor:
    """Integer view, for bit-identity checks that also hold for NaN."""
    return x.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[x.element_size()]).clone()


def loc_pattern(kind, T, n_slots, page, *, gen):
    """Slot ids for T tokens.

    runs       prefill-like: runs of consecutive slots at random in-page offsets
    scattered  decode-like: distinct random slots
    mixed      runs, scattered slots and -1 skips interleaved
    tricky     groups that look complete but are not (swapped pair, a -1 inside,
               a run ending at T, a run crossing a page boundary)
    """
    perm = torch.randperm(n_slots, generator=gen)
    if kind == "scattered":
        return perm[:T].clone()
    out = []
    used = set()

    def run(start, length):
        r = [s for s in range(start, start + length) if 0 <= s < n_slots and s not in used]
        used.update(r)
        out.extend(r)

    n_pages = n_slots // page
    pages = torch.randperm(n_pages, generator=gen).tolist()
    if kind == "runs":
        while len(out) < T and pages:
            p = pages.pop()
            off = int(torch.randint(0, page, (1,), generator=gen))
            length = int(torch.randint(1, 3 * page, (1,), generator=gen))
            run(p * page + off, min(length, T - len(out)))
    elif kind == "mixed":
        while len(out) < T and pages:
            p = pages.pop()
            c = int(torch.randint(0, 3, (1,), generator=gen))
            if c == 0:
                run(p * page + int(torch.randint(0, page, (1,), generator=gen)),
                    int(torch.randint(1, 40, (1,), generator=gen)))
            elif c == 1:
                out.append(-1)
            else:
                s = p * page + int(torch.randint(0, page, (1,), generator=gen))
                if s not in used:
                    used.add(s)
                    out.append(s)
    elif kind == "tricky":
        p = pages
        # a complete group, then one with a swapped pair, then one with a hole (-1)
        run(p[0] * page, X_FP8)
        g = list(range(p[1] * page, p[1] * page + X_FP8))
        g[3], g[4] = g[4], g[3]
        out.extend(g)
        used.update(g)
        g = list(range(p[2] * page + X_FP8, p[2] * page + 2 * X_FP8))
        g[7] = -1
        out.extend(g)
        used.update(g)
        # a run crossing a page boundary, starting unaligned
        run(p[3] * page + page - 5, page + 9)
        # slots that are consecutive but the group start is not aligned
        run(p[4] * page + 3, X_FP8)
        # a run at the very end that stops one token short of a group
        run(p[5] * page + 2 * X_FP8, X_FP8 - 1)
    out = out[:T]
    while len(out) < T:
        out.append(-1)
    return torch.tensor(out, dtype=torch.int64)
