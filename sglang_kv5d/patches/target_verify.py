"""target-verify-5d: TARGET_VERIFY over a 5D target cache with the overlay's packed decode kernel.

Upstream's ``AiterAttnBackend.forward_extend`` handles target verify before its
5D dispatch, viewing the 5D cache as NHD. This patch:

* after ``AiterAttnBackend.__init__`` on a 5D, non-MLA backend with topk 1,
  turns on SGLang's own unified-verify metadata (``_use_unified_verify``): a
  fixed-width 2-D page table, built eagerly and for CUDA-graph capture/replay;
* in ``forward_extend``, for such a backend in TARGET_VERIFY mode, writes the
  drafts' K/V with the pool's 5D write and runs
  sglang_kv5d.speculative.verify.forward_target_verify_5d (no host reads).

Every other mode, MLA, topk > 1 and NHD backends go to the original unchanged.
The page-table flag it needs exists from SGLang 0.5.23 (``decode_uses_page_table``);
older backends are left alone and rule KV5D005 refuses speculative decoding there.
"""

from __future__ import annotations

import functools

from .. import surface
from . import Binding, Patch

FLAG = "_kv5d_target_verify_5d"
_WRITE_LOC = "memory_pool.KVWriteLoc.for_layer"


def enable_verify(backend) -> bool:
    """Turn on unified-verify metadata for a 5D, non-MLA, topk-1 backend; returns whether it did."""
    from ..speculative.readiness import verify_problem

    is_5d = bool(getattr(backend, "kv_cache_is_vectorized_5d", False))
    ok = is_5d and verify_problem(backend, is_5d) is None
    setattr(backend, FLAG, ok)
    if ok:
        backend._use_unified_verify = True
    return ok


def _after_init(original):
    def init(wrapped, instance, args, kwargs):
        result = wrapped(*args, **kwargs)
        enable_verify(instance)
        return result

    return init


@functools.lru_cache(maxsize=1)
def _write_loc_cls():
    """SGLang's KVWriteLoc (for_layer is its classmethod), resolved once: verify calls this per layer."""
    from ..activation import resolve_loaded

    return resolve_loaded(surface.SURFACES[_WRITE_LOC]).owner


def _verify(original):
    def forward_extend(wrapped, instance, args, kwargs):
        if not getattr(instance, FLAG, False):
            return wrapped(*args, **kwargs)
        bound = _bind(args, kwargs)
        if bound is None:
            return wrapped(*args, **kwargs)
        q, k, v, layer, forward_batch, save_kv_cache, sinks = bound
        mode = getattr(forward_batch, "forward_mode", None)
        if (mode is None or not mode.is_target_verify() or getattr(forward_batch, "attn_attend_prefix_cache", False)
                or getattr(layer, "is_cross_attention", False)):
            return wrapped(*args, **kwargs)
        from ..speculative.verify import forward_target_verify_5d, write_verify_kv

        if k is not None and save_kv_cache:
            write_verify_kv(instance, layer, forward_batch, k, v, _write_loc_cls())
        return forward_target_verify_5d(instance, q, layer, forward_batch, sinks)

    return forward_extend


_NAMES = ("q", "k", "v", "layer", "forward_batch", "save_kv_cache", "sinks")


def _bind(args, kwargs):
    """(q, k, v, layer, forward_batch, save_kv_cache, sinks) from a forward_extend call, or None."""
    values = dict(zip(_NAMES, args))
    for name in _NAMES:
        if name in kwargs:
            if name in values:
                return None
            values[name] = kwargs[name]
    if any(n not in values for n in _NAMES[:5]):
        return None
    return (values["q"], values["k"], values["v"], values["layer"], values["forward_batch"],
            values.get("save_kv_cache", True), values.get("sinks"))


PATCH = Patch(
    name="target-verify-5d",
    summary="Speculative target verify over a 5D cache: SGLang's fixed-width verify page table, the 5D write, the overlay's packed decode kernel (CUDA-graph safe).",
    bindings=(
        Binding("aiter_backend.init", _after_init, check_signature=False),
        Binding("aiter_backend.forward_extend", _verify),
    ),
    problem=(
        "speculative target verify views a 5D cache as NHD in `unified_attention` (silently wrong attention) "
        "or raises in the triton `extend_attention_fwd`"
    ),
    why=(
        "AiterAttnBackend.forward_extend handles TARGET_VERIFY before its 5D dispatch: unified_attention "
        "over k_cache.view(-1, page, H, D), a 5D buffer viewed as NHD (silently wrong attention), or the "
        "triton extend_attention_fwd (which raises on 5-D buffers). For a 5D, non-MLA backend with topk 1 "
        "the patch turns on SGLang's own unified-verify metadata after __init__ (a fixed-width 2-D page "
        "table over prefix and drafts, built eagerly and for CUDA-graph capture and replay), and in "
        "forward_extend writes the drafts with the pool's 5D write and runs the overlay's 5D decode kernel "
        "with the drafts of a request packed into its head tile (each draft row sees its own prefix, every "
        "K/V tile is read once) over that table with device-side lengths: no host reads, so the step "
        "captures and replays. "
        "Other modes, MLA, topk > 1 and NHD backends reach the original unchanged. The page-table flag it "
        "relies on (decode_uses_page_table) exists from 0.5.23; on older releases the backend hook leaves "
        "verify alone and rule KV5D005 refuses speculative decoding."
    ),
    upstream="unfixed in every release from 0.5.13.post1 to 0.5.23",
    removal="when AiterAttnBackend's target_verify branch dispatches 5D caches to a 5D kernel",
    sglang="0.5.23",
    reads=("memory_pool.KVWriteLoc.for_layer",),
    core=("sglang_kv5d.speculative.verify",),
)
