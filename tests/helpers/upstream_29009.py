"""A synthetic SGLang carrying sglang#29009's surface, on the real installed classes.

sglang#29009 (an open pull request, in no release up to 0.5.23) adds a
``kv_cache_layout`` property to ``HybridLinearKVPool`` and a hybrid-pool branch
to ``aiter_utils.forward_extend_vectorized_5d``. :func:`add_property` and
:func:`add_hybrid_extend_branch` put both onto the real modules, to be called
in a fresh interpreter before the overlay activates (the probes read the
loaded objects when the patches install). The function lives in this file
because the probe reads its source (``inspect.getsource``).
"""

from __future__ import annotations

import importlib


def add_property(returns=None):
    """``HybridLinearKVPool.kv_cache_layout``: the full-attention pool's label
    (what the pull request reports), or ``returns`` when given (a lying label)."""
    mp = importlib.import_module("sglang.srt.mem_cache.memory_pool")

    def kv_cache_layout(self):
        return returns if returns is not None else getattr(self.full_kv_pool, "kv_cache_layout", "nhd")

    mp.HybridLinearKVPool.kv_cache_layout = property(kv_cache_layout)
    return mp.HybridLinearKVPool


def add_hybrid_extend_branch():
    """Replace upstream's 5D extend (same parameters) by one with a hybrid branch, in
    ``aiter_utils`` and in the copy ``aiter_backend`` imported."""
    au = importlib.import_module("sglang.srt.layers.attention.aiter_utils")
    ab = importlib.import_module("sglang.srt.layers.attention.aiter_backend")
    original = au.forward_extend_vectorized_5d

    def forward_extend_vectorized_5d(backend, q, k, v, layer, forward_batch, bs0, window_size, sinks):
        pool = backend.token_to_kv_pool
        if hasattr(pool, "full_attention_layer_id_mapping"):  # the hybrid branch
            raise NotImplementedError("synthetic upstream: never run in these tests")
        return original(backend, q, k, v, layer, forward_batch, bs0, window_size, sinks)

    au.forward_extend_vectorized_5d = forward_extend_vectorized_5d
    if getattr(ab, "forward_extend_vectorized_5d", None) is original:
        ab.forward_extend_vectorized_5d = forward_extend_vectorized_5d
    return forward_extend_vectorized_5d
