"""cpu-copy-5d: retraction's host copies of a SHUFFLE 5D pool, 5D-addressed;
fail-closed-decode-offload (internal): refuse the decode-side offload manager over 5D.

``MHATokenToKVPool.get_cpu_copy(indices)`` takes ``k_buffer[layer][indices]``
and ``load_cpu_copy`` assigns the same way (every tested SGLang).
That indexes the first dimension by token slot: right for NHD (slots, H, D)
buffers, but a SHUFFLE 5D buffer's first dimension is the block, so a slot id
picks a whole block (an IndexError / device assert once the slot is past the
block count, else whole wrong blocks), and the reload writes those blocks back
over other requests' tokens. PD decode servers reach it on every retraction
(``ScheduleBatch.release_req(..., offload_kv=True)`` -> ``Req.offload_kv_cache``
-> the allocator's get_cpu_copy -> the pool's); ``HybridLinearKVPool`` and
``SWAKVPool`` delegate to their inner MHA pools, so wrapping the MHA methods
covers them.

The wrappers send a pool whose buffers are SHUFFLE 5D (decided by
``sglang_kv5d.pools.is_vectorized_5d`` from the physical buffers, at each call:
retraction is rare and the check reads shapes only) to sglang_kv5d.cpu_copy,
which copies exactly the slots' bytes in 5D coordinates, chunked by the pool's
``cpu_offloading_chunk_size`` into SGLang's own offload format (so SWAKVPool's
re-chunking works unchanged); every other pool reaches the original.

The decode-side offload manager (``--disaggregation-decode-enable-offload-kvcache``)
copies through a HiCache host pool and HiCacheController transfers that index
the device buffers by token slot too, and shares pages with storage backends
keyed by NHD page layouts: not a small change. With 5D requested and the
manager built over a 5D pool, ``fail-closed-decode-offload`` refuses
(sglang_kv5d.activation.fail_closed: Kv5dNotReadyError, a warning with
strict off) before the manager allocates anything.
"""

from __future__ import annotations

import inspect

from .. import config
from ..versions import TESTED
from . import Binding, Patch

OFFLOAD_FLAG = "--disaggregation-decode-enable-offload-kvcache"


def _make_get(original):
    from .. import cpu_copy as core
    from ..pools import is_vectorized_5d

    sig = inspect.signature(original)

    def get_cpu_copy(wrapped, pool, args, kwargs):
        if not is_vectorized_5d(pool):
            return wrapped(*args, **kwargs)
        indices = sig.bind(pool, *args, **kwargs).arguments["indices"]
        n = pool.layer_num
        return core.get_cpu_copy_5d(pool.k_buffer[:n], pool.v_buffer[:n], indices, pool.cpu_offloading_chunk_size)

    return get_cpu_copy


def _make_load(original):
    from .. import cpu_copy as core
    from ..pools import is_vectorized_5d

    sig = inspect.signature(original)

    def load_cpu_copy(wrapped, pool, args, kwargs):
        if not is_vectorized_5d(pool):
            return wrapped(*args, **kwargs)
        a = sig.bind(pool, *args, **kwargs).arguments
        n = pool.layer_num
        core.load_cpu_copy_5d(pool.k_buffer[:n], pool.v_buffer[:n], a["kv_cache_cpu"], a["indices"],
                              pool.cpu_offloading_chunk_size)
        return None

    return load_cpu_copy


def offload_refusal(pool_description: str) -> str:
    """The message of fail-closed-decode-offload for a 5D pool (described)."""
    return (
        f"sglang-kv5d: {OFFLOAD_FLAG} cannot run over a SHUFFLE 5D KV pool ({config.LAYOUT}=vectorized_5d; "
        f"{pool_description}): the decode-side offload manager copies KV through a HiCache host pool whose "
        "transfers index the device buffers by token slot (NHD rows), so on 5D buffers it would offload whole "
        "blocks at slot offsets (wrong bytes) and write them back over other requests' tokens. "
        f"Fix: drop {OFFLOAD_FLAG} (retraction itself is 5D-aware through cpu-copy-5d), or unset the layout "
        "variable to serve NHD."
    )


def _make_offload_guard(original):
    from ..activation import fail_closed
    from ..pools import describe_layout, is_vectorized_5d

    sig = inspect.signature(original)

    def init(wrapped, instance, args, kwargs):
        if config.wants_5d():
            allocator = sig.bind_partial(instance, *args, **kwargs).arguments.get("token_to_kv_pool_allocator")
            get_kvcache = getattr(allocator, "get_kvcache", None)
            pool = get_kvcache() if callable(get_kvcache) else None
            if pool is not None and is_vectorized_5d(pool):
                fail_closed(offload_refusal(describe_layout(pool)))
        return wrapped(*args, **kwargs)

    return init


PATCH = Patch(
    name="cpu-copy-5d",
    summary="Retraction's host copy and reload (get_cpu_copy / load_cpu_copy) of SHUFFLE 5D pools, 5D-addressed.",
    bindings=(
        Binding("memory_pool.MHATokenToKVPool.get_cpu_copy", _make_get),
        Binding("memory_pool.MHATokenToKVPool.load_cpu_copy", _make_load),
    ),
    required_for_5d=True,
    problem=(
        "retraction's `get_cpu_copy` / `load_cpu_copy` index a SHUFFLE 5D buffer's blocks by token slot: the "
        "offload reads whole wrong blocks (or a slot past the block count: a device assert) and the reload "
        "writes them over other requests' tokens"
    ),
    why=(
        "A PD decode server retracts a request with ScheduleBatch.release_req(..., offload_kv=True): "
        "Req.offload_kv_cache saves its slots with the allocator's get_cpu_copy, which reaches "
        "MHATokenToKVPool.get_cpu_copy (HybridLinearKVPool and SWAKVPool delegate to their inner MHA pools), "
        "and Req.load_kv_cache writes them back with load_cpu_copy. Both index k_buffer[layer] / v_buffer[layer] "
        "by slot, right for NHD (slots, H, D) rows; a SHUFFLE 5D buffer's first dimension is the block, so a "
        "slot id selects a whole block: an out-of-range index (device assert) once the slot passes the block "
        "count, otherwise whole wrong blocks, which the reload assigns back over other requests' tokens while "
        "the request's own slots keep whatever they held. For a pool whose buffers are SHUFFLE 5D the wrappers "
        "gather exactly the slots' K and V in 5D coordinates (block s // page, position s % page) into "
        "SGLang's own per-token offload format, chunked by cpu_offloading_chunk_size, and scatter them back "
        "to the new slots, nothing else written; other pools reach the original unchanged."
    ),
    upstream="unfixed in every tested release",
    removal="when MHATokenToKVPool.get_cpu_copy / load_cpu_copy address SHUFFLE 5D buffers by (block, slot)",
    core=("sglang_kv5d.cpu_copy",),
)

OFFLOAD_GUARD = Patch(
    name="fail-closed-decode-offload",
    summary="Refuse to build the decode-side KV offload manager over a SHUFFLE 5D pool.",
    bindings=(Binding("decode_kvcache_offload_manager.DecodeKVCacheOffloadManager.init", _make_offload_guard),),
    internal=True,
    why=(
        f"{OFFLOAD_FLAG} builds DecodeKVCacheOffloadManager, which copies a decoding request's KV to a HiCache "
        "host pool (build_kv_host_pool / MHATokenToKVPoolHost and HiCacheController) whose transfers index "
        "the device buffers by token slot, and backs the pages up to storage in NHD page layouts. On a SHUFFLE "
        "5D pool those copies move whole blocks at slot offsets: wrong bytes offloaded, other requests' "
        f"tokens overwritten on reload. When {config.LAYOUT}=vectorized_5d and the allocator's pool is 5D, "
        "building the manager raises Kv5dNotReadyError naming the flag (a warning with "
        f"{config.STRICT}=0) before it allocates anything."
    ),
    upstream="unfixed in every tested release (HiCache transfers are NHD-only)",
    removal="when the decode offload manager's host pool and transfers address SHUFFLE 5D buffers",
    sglang=f"{TESTED} (also installed on refused versions, to refuse)",
)
