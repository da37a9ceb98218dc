"""The fused FP8 write's host side: argument and scale validation, the plan,
and the launch (``write_kv_fp8``).

    write_kv_fp8(k, v, k_cache, v_cache, loc, k_scale, v_scale, *, fp8_dtype=None)
    ScaleError, scale_problem(value), check_scale_tensor(name, scale)
    FP8_MAX                  {torch fp8 dtype: largest finite value} (platform.fp8_format)
    supported_fp8_dtypes()   the cache formats the write takes
    native_fp8_ok(device, fp8_dtype, target=None)   does the target convert the format in hardware

Shapes and dtypes: ``k`` ``(T, H, D_k)``, ``v`` ``(T, H, D_v)`` bf16 / fp16 /
fp32 (any token stride, heads and dims contiguous); caches NHD ``(slots, H,
D)`` or SHUFFLE 5D (K ``(blocks, H, D_k/16, page, 16)``, V ``(blocks, H,
page/16, D_v, 16)``), float8_e4m3fn / float8_e4m3fnuz typed or their uint8
views; ``loc`` ``(T,)`` int32 / int64; scales Python floats or one-element
float32 tensors on the caches' device. Every check runs before anything is
written; the semantics are in the package docstring.
"""

from __future__ import annotations

import math
import struct
import weakref
from typing import Mapping, NamedTuple, Optional, Union

import torch
import triton

from ...platform import KernelTarget, fp8_format, fp8_kv_dtypes, target_of
from .config import CONFIG_KEYS, X_FP8, check_config, default_config, launch_config, v_group_launch
from .kernel import WRITE_KERNEL

__all__ = ["write_kv_fp8", "FP8_MAX", "supported_fp8_dtypes", "ScaleError", "scale_problem", "check_scale_tensor",
           "native_fp8_ok"]

FP8_MAX = {dt: fp8_format(dt).max for dt in fp8_kv_dtypes()}  # torch dtype -> largest finite value


def supported_fp8_dtypes():
    return tuple(FP8_MAX)


_INPUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_INT32_LIMIT = 2**31 - 1


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


def native_fp8_ok(device: torch.device, fp8_dtype: torch.dtype, target: Optional[KernelTarget] = None) -> bool:
    """Does the hardware of ``target`` (default: ``device``'s) convert fp32 to
    ``fp8_dtype``? e4m3fn on NVIDIA sm_89+ and AMD gfx950, e4m3fnuz on AMD gfx942;
    never under the interpreter."""
    return (target or target_of(device)).converts(fp8_dtype)


def _v_words_ok(v: torch.Tensor) -> bool:
    """Can the V group path read ``v`` as 32-bit words of two dims? (16-bit
    elements, every row starting on a 4-byte boundary; dims are contiguous and
    5D head dims are multiples of 16.)"""
    return v.element_size() == 2 and v.data_ptr() % 4 == 0 and (v.shape[0] <= 1 or v.stride(0) % 2 == 0)


def _resolve_config(plan: "_Plan", override: Optional[dict], native: bool, target: KernelTarget) -> Mapping:
    """launch_config for the plan's shapes on ``target``, with ``override``
    applied and checked.

    Without an override the checked default is cached per shape and target:
    this runs on every write (every layer of every step), and building and
    checking the dict costs several microseconds of host time.
    """
    if not override:
        return default_config(plan.T, plan.H, plan.DK, plan.DV, plan.layout_5d, native, target)
    cfg = launch_config(plan.T, plan.H, plan.DK, plan.DV, plan.layout_5d, native, target)
    unknown = set(override) - set(CONFIG_KEYS)
    if unknown:
        raise ValueError(f"_config: unknown keys {sorted(unknown)}; known: {list(CONFIG_KEYS)}")
    cfg.update(override)
    return check_config(cfg, plan.H, plan.DK, plan.DV, plan.layout_5d)


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
        native = native_fp8_ok(device, plan.fp8_dtype, target)
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
    v_words, v_spec, chunk, num_warps = v_group_launch(
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
    WRITE_KERNEL[grid](
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
