"""draft-pool-nhd: KV pools built for a speculative draft worker are NHD; the target stays 5D.

``KVCacheConfigurator.configure`` of a draft model runner (``is_draft_worker``)
runs inside a draft scope (sglang_kv5d.speculative.draft_scope); every
``MHATokenToKVPool`` constructed there without an explicit ``kv_cache_layout``
(plain, hybrid-linear inner, SWA inner pools alike) gets ``"nhd"``. The pool
layout detection then answers per runner from the physical buffers. Needs the
``kv_cache_layout`` constructor parameter (SGLang 0.5.15.post1 and later).
"""

from __future__ import annotations

import inspect
from typing import Optional

from .. import config
from ..versions import tested_from
from . import Binding, Patch

_CONFIGURE = "kv_cache_configurator.KVCacheConfigurator.configure"
_POOL_INIT = "memory_pool.MHATokenToKVPool.__init__"


def _layout_index(init) -> Optional[int]:
    """Position of ``kv_cache_layout`` among the constructor's parameters after self."""
    from ..speculative.draft_scope import LAYOUT_PARAM

    try:
        params = list(inspect.signature(init).parameters.values())
    except (TypeError, ValueError):
        return None
    for i, p in enumerate(params[1:]):
        if p.name == LAYOUT_PARAM:
            return i if p.kind == p.POSITIONAL_OR_KEYWORD else len(params)
    return None


def _scope(original):
    def configure(wrapped, instance, args, kwargs):
        from ..speculative.draft_scope import draft_pool_scope

        with draft_pool_scope(bool(getattr(instance, "is_draft_worker", False))):
            return wrapped(*args, **kwargs)

    return configure


def _label(original):
    index = _layout_index(original)

    def init(wrapped, instance, args, kwargs):
        from ..speculative.draft_scope import LAYOUT_PARAM, draft_layout

        layout = draft_layout(kwargs, len(args), index, wants_5d=config.wants_5d())
        if layout is not None:
            kwargs = dict(kwargs, **{LAYOUT_PARAM: layout})
        return wrapped(*args, **kwargs)

    return init


def _applies(originals) -> Optional[str]:
    if _layout_index(originals[_POOL_INIT]) is None:
        return "MHATokenToKVPool.__init__ has no kv_cache_layout parameter (SGLang before 0.5.15.post1)"
    return None


PATCH = Patch(
    name="draft-pool-nhd",
    summary="KV pools of speculative draft workers are built NHD while the target pool stays 5D.",
    bindings=(
        Binding(_CONFIGURE, _scope),
        Binding(_POOL_INIT, _label, check_signature=False),
    ),
    applies=_applies,
    problem=(
        "speculative draft pools are built 5D too under the process-wide layout variable, and the draft "
        "attention paths (triton on ROCm, AITER's draft paths) cannot read a 5D cache"
    ),
    why=(
        "DFLASH and EAGLE/NEXTN drafts get their own KV pool, built without a layout argument, so under "
        f"{config.LAYOUT}=vectorized_5d (process-wide) the draft pool and the inner pools of a "
        "hybrid or SWA draft pool are 5D too. DFLASH's draft backend is triton on ROCm, whose kernels raise "
        "\"unexpected KV buffer ndim=5\"; the AITER draft paths view the cache as NHD. The patch runs a draft "
        "worker's KVCacheConfigurator.configure (where every KV pool of a model runner is built; a draft "
        "worker's configurator has is_draft_worker=True) in a draft scope and passes kv_cache_layout=\"nhd\" to every "
        "MHATokenToKVPool built there without an explicit label (an explicit label wins). The target's pools "
        "stay 5D, and the pool layout detection answers per runner from the physical buffers."
    ),
    upstream="unfixed in every tested release from 0.5.16 on",
    removal="when draft pools take their layout from the draft attention backend",
    sglang=tested_from("0.5.16"),
    core=("sglang_kv5d.speculative.draft_scope",),
)
