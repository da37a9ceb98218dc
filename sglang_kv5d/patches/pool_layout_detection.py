"""pool-layout-detection: make AiterAttnBackend see 5D through composite pools.

After ``AiterAttnBackend.__init__`` this patch recomputes
``kv_cache_is_vectorized_5d`` from the physical buffers
(sglang_kv5d.pools.is_vectorized_5d) and then the decode page-table flag that
follows from it. Why upstream needs it: ``PATCH.why`` below, the one place
for the reason (patches/pool-layout-detection.toml is generated from it).
Where SGLang has sglang#29009's surface it stands down (sglang_kv5d.upstream).
"""

from __future__ import annotations

from ..upstream import upstream_detects_layout
from . import Binding, Patch


def apply_layout_flags(backend, is_5d: bool) -> None:
    """Set the backend's layout flags for a pool that is (or is not) 5D.

    From 0.5.23 SGLang keys every decode metadata / CUDA-graph site on
    ``decode_uses_page_table``; recompute it. Before 0.5.23 the 2-D decode page
    table that pa_decode_gluon needs exists only when
    ``use_triton_unified_attention`` is set, so set it for 5D, and keep
    ``_use_unified_verify`` off (verify views the cache as NHD: not 5D-safe).
    """
    backend.kv_cache_is_vectorized_5d = bool(is_5d)
    if hasattr(backend, "decode_uses_page_table"):
        backend.decode_uses_page_table = bool(backend.use_triton_unified_attention or is_5d)
    elif is_5d and not getattr(backend, "use_mla", False):
        backend.use_triton_unified_attention = True
        if hasattr(backend, "_use_unified_verify"):
            backend._use_unified_verify = False


def _make(original):
    def after_init(wrapped, instance, args, kwargs):
        result = wrapped(*args, **kwargs)
        model_runner = args[0] if args else kwargs["model_runner"]
        from ..pools import is_vectorized_5d

        apply_layout_flags(instance, is_vectorized_5d(model_runner.token_to_kv_pool))
        return result

    return after_init


PATCH = Patch(
    name="pool-layout-detection",
    summary="AiterAttnBackend recognises SHUFFLE 5D KV pools inside HybridLinearKVPool, SWA and nested pools.",
    bindings=(Binding("aiter_backend.init", _make),),
    required_for_5d=True,
    problem=(
        "`AiterAttnBackend` only recognises 5D inside `SWAKVPool`: a `HybridLinearKVPool` (Qwen3.5) with 5D "
        "buffers is treated as NHD, so NHD kernels `.view()` 5D memory and attention is silently wrong"
    ),
    why=(
        "AiterAttnBackend.__init__ decides whether the KV pool is 5D with a closure that only looks inside "
        "SWAKVPool. Qwen3.5's HybridLinearKVPool holds an inner MHATokenToKVPool with real 5D buffers but "
        "has no kv_cache_layout attribute, so the backend reports NHD, runs NHD kernels and .view()s over 5D "
        "memory: the views succeed and attention is silently wrong. After __init__ this patch recomputes "
        "kv_cache_is_vectorized_5d from the physical buffers (a pool labelled 5D whose buffers are 4-D/3-D "
        "unified-memory views does not count), then decode_uses_page_table (from 0.5.23) or "
        "use_triton_unified_attention (older, with _use_unified_verify kept off). Where the loaded "
        "HybridLinearKVPool has a kv_cache_layout property (sglang#29009) and AiterAttnBackend.__init__ reads "
        "it and sets decode_uses_page_table, the patch stands down (state upstream); the fail-closed backend "
        "guard then re-checks each AITER backend built under 5D against the physical buffers and refuses "
        "on a disagreement."
    ),
    applies=upstream_detects_layout,
    upstream="unfixed in every tested release",
    removal="when AiterAttnBackend detects 5D through composite pools itself",
    reads=("swa_memory_pool.SWAKVPool", "memory_pool.HybridLinearKVPool",
           "memory_pool.HybridLinearKVPool.kv_cache_layout"),
    core=("sglang_kv5d.pools", "sglang_kv5d.upstream"),
)
