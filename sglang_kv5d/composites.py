"""Composite KV pools under 5D: the classes the overlay has checked, and a refusal for the rest.

The overlay's 5D paths (pools.py, attention/, the patches) are checked on two
composite classes, ``HybridLinearKVPool`` and ``SWAKVPool``, and on their
nesting. Any other composite, a subclass of these included, may serve its
layers through readers of its own that address a 5D buffer as NHD, so under 5D
the fail-closed backend guard calls :func:`unchecked_5d_composite` before
``AiterAttnBackend.__init__`` and refuses (Kv5dNotReadyError, strict policy)
naming the class.

``QSATokenToKVPool`` (from SGLang 0.5.23, a ``HybridLinearKVPool`` subclass for
the QSA sparse-attention models) is refused, not allowed: it stores the
full-attention KV exactly as its base does (the inherited getters and setters,
``full_kv_pool``, ``full_attention_layer_id_mapping``), but SGLang's hybrid
attention wrapper replaces the AITER backend for those layers with
``QwenSparseAttnBackend``, which reads ``get_key_buffer(layer)`` as a
token-slot-major tensor (``index_select(0, slots)`` on it), and its QSA
indexer caches are NHD only. On a 5D buffer those reads take token slots for
block ids: wrong bytes, or out of range. (The AITER backend is still built
first, over this pool, which is where the guard refuses.)

A composite is refused only when 5D buffers are reachable through it (or its
layout is contradictory): over NHD buffers no 5D code runs.
"""

from __future__ import annotations

from typing import Any, Optional

from . import config
from .surface import find_loaded

#: Surface rows of the composite pool classes checked under 5D (exact classes).
CHECKED = ("memory_pool.HybridLinearKVPool", "swa_memory_pool.SWAKVPool")


def _qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def unchecked_5d_composite(pool: Any) -> Optional[str]:
    """Why an AITER backend must not be built over ``pool`` under 5D, or None.

    None unless the pool tree holds a composite whose exact class is not a
    checked one (:data:`CHECKED`, the classes loaded in this process) and 5D
    buffers are reachable through it."""
    from .pools import PoolLayoutError, is_vectorized_5d, unchecked_composites

    if pool is None:
        return None
    checked = [c for c in (find_loaded(row) for row in CHECKED) if isinstance(c, type)]
    for path, node in unchecked_composites(pool, checked):
        try:
            holds = is_vectorized_5d(node)
            detail = "it holds SHUFFLE 5D buffers"
        except PoolLayoutError as exc:
            holds, detail = True, f"its layout is contradictory ({exc})"
        if not holds:
            continue
        where = f"{type(pool).__name__}.{path}" if path else "the model runner's token_to_kv_pool"
        return (
            f"sglang-kv5d: the SHUFFLE 5D KV layout was requested ({config.LAYOUT}=vectorized_5d) and the "
            f"AITER attention backend is being built over {where}, a {_qualname(type(node))}: a composite KV "
            f"pool sglang-kv5d has not checked under 5D ({detail}; checked: "
            f"{', '.join(c.__name__ for c in checked) or 'none loaded'}, exact classes only). Its own readers "
            f"may address the 5D memory as NHD and attention can be silently wrong. Fix: unset {config.LAYOUT} "
            "(or set it to nhd) for this model"
        )
    return None
