"""Where the installed SGLang fixes what a patch fixes: the probes, and the re-check.

sglang#29009 (an open pull request, in no tested release) adds a
``kv_cache_layout`` property to ``HybridLinearKVPool`` and a hybrid-pool branch
to ``aiter_utils.forward_extend_vectorized_5d``. The probes read the loaded
objects, never a version number:

:func:`layout_property`
    the loaded ``HybridLinearKVPool`` (or a base class) defines
    ``kv_cache_layout`` as a property (``inspect.getattr_static``; an instance
    attribute would not show, and no tested release has one).
:func:`upstream_detects_layout` (pool-layout-detection's ``applies``)
    the property, and the source of ``AiterAttnBackend.__init__`` reads
    ``kv_cache_layout`` from its pool and sets ``decode_uses_page_table`` (the
    flag chain from 0.5.23: the 5D flag, then the 2-D decode page table). Then the
    patch stands down (``ProvidedUpstream``, state ``upstream``), and under 5D
    the fail-closed backend guard re-checks every AITER backend built
    (:func:`layout_disagreement`): upstream's flag against the physical
    buffers, which is what the patch computes (a pool nested in another, or
    labelled 5D over 4-D/3-D buffers, is where a label-based check can differ).
:func:`upstream_extend_resolves_hybrid` (attention-dispatch-5d's ``applies``)
    the property, and the source of ``forward_extend_vectorized_5d`` names a
    hybrid pool's own layer resolution (``full_attention_layer_id_mapping`` or
    ``_transfer_full_attention_id``). The patch is installed anyway
    (``StillNeeded``): the hybrid branch is one of the things it fixes, and
    upstream's 5D extend and decode also lack the layer wait, the padded CK
    page table, the fp8 query's own scale, the keyword ``pa_decode_gluon`` call
    with ``query_scale`` and the portable fallback, none of which a probe can
    confirm. Its state's reason says that the branch is provided upstream.

A source that cannot be read counts as "not provided": the patch installs.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Mapping, Optional

from .activation.patch_type import ProvidedUpstream, StillNeeded
from .surface import attr_name, find_loaded

PR = "sglang#29009"
_HYBRID = "memory_pool.HybridLinearKVPool"
_PROPERTY = attr_name("memory_pool.HybridLinearKVPool.kv_cache_layout")
_HYBRID_RESOLUTION = ("full_attention_layer_id_mapping", "_transfer_full_attention_id")


def layout_property(hybrid_cls: Any = None) -> bool:
    """Does ``HybridLinearKVPool`` (the loaded class unless given) define
    ``kv_cache_layout`` as a property?"""
    cls = find_loaded(_HYBRID) if hybrid_cls is None else hybrid_cls
    if not isinstance(cls, type):
        return False
    attr = inspect.getattr_static(cls, _PROPERTY, None)
    return isinstance(attr, (property, functools.cached_property))


def _source(fn: Any) -> str:
    try:
        return inspect.getsource(inspect.unwrap(fn))
    except (OSError, TypeError, ValueError):
        return ""


def upstream_detects_layout(originals: Mapping[str, Any]) -> Optional[str]:
    """pool-layout-detection's ``applies``: ProvidedUpstream when SGLang detects
    a hybrid pool's 5D itself, else None (install)."""
    init = originals.get("aiter_backend.init")
    src = _source(init)
    if layout_property() and _PROPERTY in src and "decode_uses_page_table" in src:
        return ProvidedUpstream(
            f"HybridLinearKVPool.{_PROPERTY} ({PR}) and AiterAttnBackend.__init__ reading it; "
            "each AITER backend built under 5D is re-checked against the physical buffers"
        )
    return None


def upstream_extend_resolves_hybrid(originals: Mapping[str, Any]) -> Optional[str]:
    """attention-dispatch-5d's ``applies``: StillNeeded (install, with a note)
    when upstream's 5D extend resolves hybrid pools, else None (install)."""
    src = _source(originals.get("aiter_utils.forward_extend_vectorized_5d"))
    if layout_property() and any(name in src for name in _HYBRID_RESOLUTION):
        return StillNeeded(
            f"the hybrid-pool branch of forward_extend_vectorized_5d is provided upstream ({PR}); still "
            "installed for what upstream's 5D paths lack (layer wait, padded CK page table, fp8 query "
            "scale, keyword pa_decode_gluon with query_scale, portable fallback)"
        )
    return None


def layout_disagreement(backend: Any, pool: Any) -> Optional[str]:
    """Why the AITER backend's own 5D flags (pool-layout-detection stood down)
    contradict ``pool``'s physical buffers, or None when they agree."""
    from .pools import PoolLayoutError, describe_layout, is_vectorized_5d

    try:
        want = is_vectorized_5d(pool)
    except PoolLayoutError as exc:
        return f"the pool's layout is contradictory ({exc})"
    got = bool(getattr(backend, "kv_cache_is_vectorized_5d", False))
    if got != want:
        return (f"AiterAttnBackend reports kv_cache_is_vectorized_5d={got} but the buffers say {want}: "
                f"{describe_layout(pool)}")
    if want and hasattr(backend, "decode_uses_page_table") and not backend.decode_uses_page_table:
        return "AiterAttnBackend detects 5D but leaves decode_uses_page_table off (pa_decode_gluon needs it)"
    return None
