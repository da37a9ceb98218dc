"""attention-dispatch-5d: 5D extend/decode that resolve hybrid pools and wait.

Replaces ``aiter_utils.forward_extend_vectorized_5d`` and
``forward_decode_vectorized_5d`` (same parameters) with
sglang_kv5d.attention's versions, and rebinds the from-import copies that
``aiter_backend`` holds. The core resolves the layer's buffers through hybrid,
SWA and nested pools (waiting for the layer first), then runs aiter (every
argument by keyword, with query_scale) or the portable Triton path.
"""

from __future__ import annotations

import functools

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
)
