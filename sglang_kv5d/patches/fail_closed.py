"""fail-closed-pool / fail-closed-backend (internal): refuse to build 5D state without the needed patches.

SGLang logs and swallows exceptions raised by plugins, so a patch that cannot
apply would otherwise leave a server running with silently wrong 5D attention.
This guard runs before ``MHATokenToKVPool.__init__`` and
``AiterAttnBackend.__init__``: when ``SGLANG_AITER_KV_CACHE_LAYOUT`` asks for
``vectorized_5d`` and a 5D-required patch is failed, skipped or disabled, it
raises :class:`sglang_kv5d.activation.Kv5dNotReadyError` naming the patch, the
reason and the fix (a warning instead with ``SGLANG_KV5D_STRICT=0``).
The check is one environment lookup when 5D is not requested.
"""

from __future__ import annotations

from .. import config
from . import Binding, Patch


def _guard(where: str):
    def make(original):
        def wrapper(wrapped, instance, args, kwargs):
            if config.wants_5d():
                from ..activation import enforce_5d_ready

                enforce_5d_ready(f"{where} ({type(instance).__name__})")
            return wrapped(*args, **kwargs)

        return wrapper

    return make


POOL_GUARD = Patch(
    name="fail-closed-pool",
    summary="Refuse to build a 5D KV pool when a patch 5D needs is not applied.",
    bindings=(Binding("memory_pool.MHATokenToKVPool.__init__", _guard("a KV pool"), check_signature=False),),
    internal=True,
)

BACKEND_GUARD = Patch(
    name="fail-closed-backend",
    summary="Refuse to build the AITER attention backend for 5D when a patch 5D needs is not applied.",
    bindings=(Binding("aiter_backend.init", _guard("the AITER attention backend"), check_signature=False),),
    internal=True,
)
