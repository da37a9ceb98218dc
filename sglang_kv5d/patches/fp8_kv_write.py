"""fp8-kv-write: one fused kernel for FP8 writes in MHATokenToKVPool.set_kv_buffer.

Upstream casts with 3-5 kernels and divides the caller's k/v IN PLACE by the
scale (corrupting the fresh-prompt extend that attends over them afterwards);
on e4m3fnuz an out-of-range value becomes NaN. This wrapper sends eligible
calls to sglang_kv5d.kernels.write_kv_fp8 (scale, saturate, cast and write K
and V in one launch, inputs untouched) and everything else to the original:

    eligible = input dtype != pool dtype, pool dtype is fp8, physical layout is
               NHD (3-D buffers) or SHUFFLE 5D (5-D buffers) and not HND /
               page-major / FP4 / quantized-recipe, no dcp_kv_mask, scalar scales,
               heads and dims contiguous, and a device Triton can run on.

SWA and hybrid pools reach it through their inner MHA pools. Both call forms
(``loc`` on 0.5.13.post1, ``loc_info``/KVWriteLoc later) are handled.
"""

from __future__ import annotations

import inspect
import os

from . import Binding, Patch


def _fp8_dtypes():
    import torch

    return tuple(getattr(torch, n) for n in ("float8_e4m3fn", "float8_e4m3fnuz") if hasattr(torch, n))


def _make(original):
    import torch

    from ..kernels import write_kv_fp8

    names = list(inspect.signature(original).parameters)[1:]  # drop self
    index = {n: i for i, n in enumerate(names)}
    loc_name = "loc_info" if "loc_info" in index else "loc"
    unwrap = original.__globals__.get("unwrap_write_loc") if loc_name == "loc_info" else None
    fp8 = _fp8_dtypes()
    float_inputs = (torch.bfloat16, torch.float16, torch.float32)

    def arg(name, args, kwargs, default=None):
        i = index.get(name)
        if i is not None and i < len(args):
            return args[i]
        return kwargs.get(name, default)

    def scalar_scale(scale, device):
        if scale is None:
            return 1.0
        if isinstance(scale, (float, int)):
            return float(scale)
        if isinstance(scale, torch.Tensor) and scale.numel() == 1 and scale.dtype == torch.float32 and scale.device == device:
            return scale if scale.dim() == 1 else scale.reshape(1)
        return None

    def set_kv_buffer(wrapped, pool, args, kwargs):
        cache_k = arg("cache_k", args, kwargs)
        cache_v = arg("cache_v", args, kwargs)
        dtype = pool.dtype
        if (
            dtype not in fp8
            or cache_k.dtype == dtype
            or cache_k.dtype not in float_inputs
            or cache_v.dtype != cache_k.dtype
            or arg("dcp_kv_mask", args, kwargs) is not None
            or getattr(pool, "is_quantized_kv_cache", False)
            or getattr(pool, "use_hnd", False)
            or getattr(pool, "kv_cache_layout", "nhd") not in ("nhd", "vectorized_5d")
        ):
            return wrapped(*args, **kwargs)
        device = cache_k.device
        if device.type == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
            return wrapped(*args, **kwargs)
        k_scale = scalar_scale(arg("k_scale", args, kwargs), device)
        v_scale = scalar_scale(arg("v_scale", args, kwargs), device)
        if k_scale is None or v_scale is None:
            return wrapped(*args, **kwargs)
        layer = arg("layer", args, kwargs)
        override = arg("layer_id_override", args, kwargs)
        layer_id = override if override is not None else layer.layer_id
        idx = layer_id - pool.start_layer
        k_buf = pool.k_buffer[idx]
        v_buf = pool.v_buffer[idx]
        if k_buf.dim() not in (3, 5) or k_buf.dim() != v_buf.dim():
            return wrapped(*args, **kwargs)
        if cache_k.dim() == 2:
            cache_k = cache_k.view(cache_k.shape[0], pool.head_num, -1)
        if cache_v.dim() == 2:
            cache_v = cache_v.view(cache_v.shape[0], pool.head_num, -1)
        if cache_k.stride(-1) != 1 or cache_v.stride(-1) != 1:
            return wrapped(*args, **kwargs)
        loc_info = arg(loc_name, args, kwargs)
        loc = unwrap(loc_info)[0] if unwrap is not None else loc_info
        check = getattr(pool, "_check_physical_write_loc", None)
        if check is not None:
            check(loc_info, "set_kv_buffer (MHA)")
        write_kv_fp8(cache_k, cache_v, k_buf, v_buf, loc, k_scale, v_scale, fp8_dtype=dtype)
        return None

    return set_kv_buffer


PATCH = Patch(
    name="fp8-kv-write",
    summary="Fused, out-of-place, saturating FP8 KV write for NHD and SHUFFLE 5D pools (one kernel).",
    bindings=(Binding("memory_pool.MHATokenToKVPool.set_kv_buffer", _make),),
    required_for_5d=True,
)
