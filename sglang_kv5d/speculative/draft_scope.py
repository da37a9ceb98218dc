"""Draft-worker pool scope: draft KV pools are built NHD while the target stays 5D.

SGLang builds every KV pool of a model runner inside
``KVCacheConfigurator.configure``; a speculative draft worker has its own
configurator with ``is_draft_worker=True``. ``SGLANG_AITER_KV_CACHE_LAYOUT`` is
process-wide, so without a scope the draft's pools (and the inner pools of a
hybrid or SWA draft pool) are 5D too, and the draft's attention backend
(triton for DFLASH on ROCm, or the AITER NHD draft paths) cannot read them.

The configure wrapper marks the scope; the pool-constructor wrapper asks
:func:`draft_layout` which label to pass. The scope is a context variable, so
concurrent configurators in other threads or tasks do not see it.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Any, Iterator, Mapping, Optional

DRAFT_LAYOUT = "nhd"
LAYOUT_PARAM = "kv_cache_layout"

_IN_DRAFT = contextvars.ContextVar("sglang_kv5d_draft_pool_scope", default=False)


@contextlib.contextmanager
def draft_pool_scope(is_draft_worker: bool) -> Iterator[None]:
    """Within this block, pools are built for a draft worker iff ``is_draft_worker``.

    A target configurator nested inside a draft scope (not seen in SGLang) resets
    the scope for its own duration.
    """
    token = _IN_DRAFT.set(bool(is_draft_worker))
    try:
        yield
    finally:
        _IN_DRAFT.reset(token)


def in_draft_scope() -> bool:
    return _IN_DRAFT.get()


def draft_layout(kwargs: Mapping[str, Any], positional_count: int, layout_index: Optional[int],
                 *, wants_5d: bool) -> Optional[str]:
    """The ``kv_cache_layout`` to inject into a pool constructor call, or None to leave it.

    ``kwargs``: the call's keyword arguments; ``positional_count``: how many
    positional arguments it has (self excluded); ``layout_index``: the position of
    ``kv_cache_layout`` among the positional parameters (self excluded), None when
    the constructor has no such parameter. An explicit label (a keyword other than
    None, or any positional value) always wins; outside a draft scope, or when 5D is not
    requested, nothing is injected.
    """
    if not wants_5d or not in_draft_scope() or layout_index is None:
        return None
    if kwargs.get(LAYOUT_PARAM) is not None:
        return None
    if positional_count > layout_index:
        return None
    return DRAFT_LAYOUT
