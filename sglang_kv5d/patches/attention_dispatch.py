"""attention-dispatch-5d: 5D extend/decode that resolve hybrid pools and wait.

Replaces ``aiter_utils.forward_extend_vectorized_5d`` and
``forward_decode_vectorized_5d`` (same parameters) with
sglang_kv5d.attention's versions, and rebinds the from-import copies that
``aiter_backend`` holds. The core resolves the layer's buffers through hybrid,
SWA and nested pools (waiting for the layer first), then runs aiter (every
argument by keyword, with query_scale) or the portable Triton path. Where
SGLang's extend resolves hybrid pools itself (sglang#29009) it is installed
anyway and says so (sglang_kv5d.upstream).
"""

from __future__ import annotations

import functools

from ..upstream import upstream_extend_resolves_hybrid
from . import Binding, Patch


def _replacement(core_name: str):
    def make(original):
        from .. import attention

        core = getattr(attention, core_name)

        @functools.wraps(original)
        def replacement(*args, **kwargs):
            return core(*args, **kwargs)

        return replacement

    return make


PATCH = Patch(
    name="attention-dispatch-5d",
    summary="5D extend/decode through hybrid/SWA/nested pools with the layer wait; keyword-only aiter calls; portable Triton path.",
    bindings=(
        Binding("aiter_utils.forward_extend_vectorized_5d", _replacement("forward_extend_vectorized_5d")),
        Binding("aiter_utils.forward_decode_vectorized_5d", _replacement("forward_decode_vectorized_5d")),
    ),
    required_for_5d=True,
    problem=(
        "the 5D extend path resolves sub-pools only through `layers_mapping` (crashes on hybrid pools) and "
        "skips the layer-transfer wait; decode never passes `query_scale` and calls `pa_decode_gluon` "
        "positionally (breaks on aiter v0.1.10 .. v0.1.13); no way out when aiter has no kernel (no page-64 "
        "batch-prefill kernel exists)"
    ),
    why=(
        "Upstream forward_extend_vectorized_5d resolves sub-pools only through layers_mapping (SWA) and "
        "raises on a HybridLinearKVPool; it reads raw buffers without _wait_for_layer, which layer-wise "
        "HiCache/LMCache loading relies on. forward_decode_vectorized_5d never passes query_scale and calls "
        "pa_decode_gluon in a form that raises on aiter v0.1.10 .. v0.1.13. Neither has a way out when aiter "
        "has no kernel (there is no page-64 batch-prefill kernel). The replacements keep the upstream "
        "parameters, are rebound in aiter_backend (which from-imports both), resolve the layer's buffers "
        "through any composite pool after waiting for the layer, and run aiter (every argument by keyword) "
        "or the portable Triton path (SGLANG_KV5D_ATTN_IMPL, automatic fallback on \"no matching kernel\"). "
        "Where the loaded HybridLinearKVPool has a kv_cache_layout property and the upstream extend resolves "
        "hybrid pools (sglang#29009), the patch still installs, its state saying so: the other defects remain "
        "as far as any probe can tell."
    ),
    applies=upstream_extend_resolves_hybrid,
    upstream="unfixed in every tested release",
    removal="when upstream resolves composite pools, waits for the layer and calls aiter by keyword with query_scale",
    reads=(
        "kernels.launch_gather_shuffle_5d_to_linear",
        "kernels.fp8_dtype",
        "memory_pool.HybridLinearKVPool._wait_for_layer",
        "memory_pool.HybridLinearKVPool.kv_cache_layout",
        "swa_memory_pool.SWAKVPool",
    ),
    core=("sglang_kv5d.attention", "sglang_kv5d.kernels.attention_5d", "sglang_kv5d.upstream"),
)
