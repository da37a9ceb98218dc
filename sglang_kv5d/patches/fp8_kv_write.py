"""fp8-kv-write: one fused kernel for FP8 writes in MHATokenToKVPool.set_kv_buffer.

This wrapper sends eligible calls to sglang_kv5d.kernels.write_kv_fp8 (scale,
saturate, cast and write K and V in one launch, inputs untouched) and
everything else to the original (why upstream's write needs replacing:
``PATCH.why`` below, the one place for the reason):

    eligible = input dtype != pool dtype, pool dtype is fp8, physical layout is
               NHD (3-D buffers) or SHUFFLE 5D (5-D buffers) and not HND /
               page-major / FP4 / quantized-recipe, no dcp_kv_mask, scalar scales,
               and a device Triton can run on. The pool-level part is computed
               once per pool; write_kv_fp8 validates shapes and strides before
               writing anything, and an input it refuses goes to the original.

Scales. The kernel's rule for k_scale / v_scale is one for floats and
tensors, on every device (fp8_write.scale_problem): a zero, negative,
infinite, NaN or subnormal scale is refused (fp8_write.ScaleError, a host
check before anything is written) and the ScaleError is raised to the caller,
naming the layer: SGLang's own write would divide by the same scale and fill
the cache with NaN or inf, so there is no safe fallback. (Other inputs the
kernel refuses go to SGLang's write with one warning.) A
scale tensor (the layer's k_scale parameter: a model constant) is read on the
host once, at the layer's first write after loading, and again only if it
changes in place (fp8_write.check_scale_tensor, keyed by the tensor and its
version counter): no sync per call, and SGLang's eager warm-up checks every
layer before a CUDA graph is captured.

SWA and hybrid pools reach it through their inner MHA pools. Both call forms
(``loc`` on 0.5.13.post1, ``loc_info``/KVWriteLoc later) are handled.

A failure of the kernel itself (a Triton compile or resource error, a driver
error at launch: anything but the host checks' TypeError/ValueError) also
sends the call to the original, which writes every slot of the call (the
fused write is one launch: when it raises, nothing of it ran). The failure is
recorded per configuration in sglang_kv5d.kernel_check with one warning, and
later calls of that configuration go to the original without trying the
kernel again (inside a CUDA-graph capture too). ``startup_checks.check_pool``
runs the kernel for a pool's shapes when the pool is built (patches/fail_closed.py).
"""

from __future__ import annotations

import inspect
import logging

from .. import kernel_check
from ..platform import fp8_kv_dtypes as _fp8_dtypes
from ..platform import interpreting as _interpreting
from ..surface import attr_name, find_loaded
from . import Binding, Patch

logger = logging.getLogger("sglang_kv5d")

_UNWRAP_LOC = "memory_pool.unwrap_write_loc"  # 0.5.16+: KVWriteLoc -> slots
_CHECK_LOC = attr_name("memory_pool.KVCache._check_physical_write_loc")  # SGLang's own check, from 0.5.23


_PLAN = "_kv5d_fp8_write_plan"  # per-pool cache of the static eligibility


def eligible(pool, fp8_dtypes) -> bool:
    """Static eligibility of one pool (not cached: see pool_plan).

    fp8 dtype; not an FP4 / quantized-recipe pool; not HND; labelled NHD or
    vectorized_5d (page-major / unified-memory pools are not); physical
    buffers 3-D (NHD) or 5-D (SHUFFLE); a device Triton can run on.
    """
    k0 = pool.k_buffer[0] if getattr(pool, "k_buffer", None) else None
    device = str(getattr(pool, "device", "cpu"))
    return bool(
        pool.dtype in fp8_dtypes
        and not getattr(pool, "is_quantized_kv_cache", False)
        and not getattr(pool, "use_hnd", False)
        and getattr(pool, "kv_cache_layout", "nhd") in ("nhd", "vectorized_5d")
        and k0 is not None
        and k0.dim() in (3, 5)
        and k0.dim() == pool.v_buffer[0].dim()
        and (not device.startswith("cpu") or _interpreting())
    )


def pool_plan(pool, fp8_dtypes) -> bool:
    """:func:`eligible`, computed once per pool and cached on it (at the first
    write, when the pool and any subclass's constructor are done)."""
    plan = pool.__dict__.get(_PLAN)
    if plan is None:
        plan = eligible(pool, fp8_dtypes)
        pool.__dict__[_PLAN] = plan
    return plan


def fp8_write_patched(pool) -> bool:
    """Does this pool's class write through this patch (its ``set_kv_buffer``
    as found on the MRO carries the fp8-kv-write marker)?"""
    from ..activation import patch_marker

    raw = None
    for cls in type(pool).__mro__:
        if "set_kv_buffer" in cls.__dict__:
            raw = cls.__dict__["set_kv_buffer"]
            break
    return patch_marker(raw) == "fp8-kv-write"


_KEYS = "_kv5d_fp8_write_keys"  # per-pool {input dtype: kernel_check.Fp8WriteKey}


def _key(pool, in_dtype):
    keys = pool.__dict__.get(_KEYS)
    if keys is None:
        keys = pool.__dict__[_KEYS] = {}
    key = keys.get(in_dtype)
    if key is None:
        key = keys[in_dtype] = kernel_check.fp8_write_key(in_dtype, pool.dtype, pool.k_buffer[0], pool.v_buffer[0])
    return key


def _make(original):
    import torch

    from ..kernels import fp8_write

    names = list(inspect.signature(original).parameters)[1:]  # drop self
    index = {n: i for i, n in enumerate(names)}
    loc_name = "loc_info" if "loc_info" in index else "loc"
    unwrap = find_loaded(_UNWRAP_LOC) if loc_name == "loc_info" else None
    fp8 = _fp8_dtypes()
    float_inputs = (torch.bfloat16, torch.float16, torch.float32)
    tensor = torch.Tensor
    fallbacks_seen = set()
    failed = kernel_check.FAILED  # the same dict object for the process: empty unless a kernel failed
    FP8_WRITE = kernel_check.FP8_WRITE

    def arg(name, args, kwargs):
        i = index.get(name)
        if i is not None and i < len(args):
            return args[i]
        return kwargs.get(name)

    def scalar(scale):
        """A scale the kernel takes as is (None means 1, as upstream), else None."""
        if scale is None:
            return 1.0
        if type(scale) is float or type(scale) is int:
            return scale
        if isinstance(scale, tensor) and scale.numel() == 1:
            return scale if scale.dim() == 1 else scale.reshape(1)
        return None

    def set_kv_buffer(wrapped, pool, args, kwargs):
        if len(args) >= 4:
            layer, loc_info, cache_k, cache_v = args[0], args[1], args[2], args[3]
        else:
            layer, loc_info = arg("layer", args, kwargs), arg(loc_name, args, kwargs)
            cache_k, cache_v = arg("cache_k", args, kwargs), arg("cache_v", args, kwargs)
        dtype = pool.dtype
        kd = cache_k.dtype
        if kd == dtype or kd not in float_inputs or cache_v.dtype != kd or not pool_plan(pool, fp8):
            return wrapped(*args, **kwargs)
        if kwargs and kwargs.get("dcp_kv_mask") is not None:
            return wrapped(*args, **kwargs)
        k_scale = scalar(args[4] if len(args) > 4 else kwargs.get("k_scale"))
        v_scale = scalar(args[5] if len(args) > 5 else kwargs.get("v_scale"))
        if k_scale is None or v_scale is None:
            return wrapped(*args, **kwargs)
        override = kwargs.get("layer_id_override") if len(args) <= 6 else args[6]
        idx = (override if override is not None else layer.layer_id) - pool.start_layer
        loc = unwrap(loc_info)[0] if unwrap is not None else loc_info
        check = getattr(pool, _CHECK_LOC, None)
        if check is not None:
            check(loc_info, "set_kv_buffer (MHA)")
        if cache_k.dim() == 2:
            cache_k = cache_k.view(cache_k.shape[0], pool.head_num, -1)
            cache_v = cache_v.view(cache_v.shape[0], pool.head_num, -1)
        if failed and (FP8_WRITE, _key(pool, kd)) in failed:
            return wrapped(*args, **kwargs)  # known not to compile / run here: logged once already
        try:
            fp8_write.write_kv_fp8(cache_k, cache_v, pool.k_buffer[idx], pool.v_buffer[idx], loc, k_scale, v_scale,
                                   fp8_dtype=dtype)
        except Exception as exc:  # a kernel failure has no one type (CompilationError, OutOfResources, driver RuntimeError, ...)
            if not kernel_check.is_host_validation(exc):
                # The kernel itself failed (compile, resources, launch): one
                # launch, so nothing was written; remember it for this
                # configuration and let SGLang write the whole call.
                key = _key(pool, kd)
                kernel_check.record_failure(FP8_WRITE, key, exc, shapes=kernel_check.fp8_write_shapes(key),
                                            device=pool.k_buffer[idx].device,
                                            fallback=kernel_check.FP8_WRITE_FALLBACK)
                return wrapped(*args, **kwargs)
            if isinstance(exc, fp8_write.ScaleError):
                # A refused scale is a model constant that is wrong: SGLang's
                # own write would divide by it and fill the layer's cache with
                # NaN / inf. Nothing was written; stop with the layer named.
                raise fp8_write.ScaleError(
                    f"sglang-kv5d fp8-kv-write: layer {idx + pool.start_layer}: {exc}; nothing was written. "
                    "A zero, negative, infinite, NaN or subnormal KV scale would poison this layer's FP8 cache "
                    "on any write path, so the overlay refuses it instead of handing it to SGLang's write"
                ) from exc
            # write_kv_fp8 validates before writing anything: hand the call to
            # upstream, and say so once per kind of input.
            reason = f"{type(exc).__name__}: {exc}"
            key = (type(exc).__name__, str(exc).split(":", 1)[0])  # exception type + argument name
            if key not in fallbacks_seen:
                fallbacks_seen.add(key)
                logger.warning("sglang-kv5d fp8-kv-write: input not taken by the fused kernel (%s); "
                               "using SGLang's own write for such calls", reason)
            return wrapped(*args, **kwargs)
        return None

    return set_kv_buffer


PATCH = Patch(
    name="fp8-kv-write",
    summary="Fused, out-of-place, saturating FP8 KV write for NHD and SHUFFLE 5D pools (one kernel).",
    bindings=(Binding("memory_pool.MHATokenToKVPool.set_kv_buffer", _make),),
    required_for_5d=True,
    problem=(
        "the FP8 KV write divides the caller's `k`/`v` **in place** (corrupting the fresh-prompt extend that "
        "attends over them next), turns out-of-range values into NaN on e4m3fnuz, and takes 3-5 kernels"
    ),
    why=(
        "MHATokenToKVPool.set_kv_buffer writes an FP8 cache with 3 to 5 kernels: cache_k.div_(k_scale) IN "
        "PLACE on the caller's tensor, .to(fp8), a view, a scatter. The in-place divide corrupts the "
        "fresh-prompt extend path, which attends over the same k/v right after the write, whenever k_scale "
        "!= 1; on gfx942 (float8_e4m3fnuz) an out-of-range value becomes NaN. The wrapper sends eligible "
        "calls (fp8 pool, other input dtype, NHD or 5D buffers, scalar scales, no dcp_kv_mask, not an "
        "FP4/quantized-recipe pool) to one Triton kernel that scales in fp32, saturates, rounds once and "
        "writes K and V without touching its inputs; every other call reaches the original unchanged. A "
        "failure of the kernel itself (Triton compile or resource error, driver error at launch) also goes "
        "to the original, with one warning per configuration, and that configuration is not tried again "
        "(sglang_kv5d.kernel_check)."
    ),
    upstream="unfixed in every tested release",
    removal="when upstream quantizes out of place, saturating, in one kernel for both layouts",
    reads=(
        "kernels.launch_reshape_and_cache_shuffle_5d",
        "memory_pool.unwrap_write_loc",
        "memory_pool.KVCache._check_physical_write_loc",
    ),
    core=("sglang_kv5d.kernels.fp8_write",),
)
