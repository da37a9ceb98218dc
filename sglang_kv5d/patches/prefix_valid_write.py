"""prefix-valid-write-5d: DFLASH / DSPARK commit writes into SHUFFLE 5D pools (defensive).

Defensive: in every tested SGLang from 0.5.16 on, every caller of
``set_kv_buffer_prefix_valid`` (DFLASH's worker, both its per-layer and its
fused path, and DSPARK's model) writes the *draft* model runner's pool, which
``draft-pool-nhd`` builds NHD; so in every configuration the support matrix
allows (sglang_kv5d/speculative/support.py) the wrapper hands the call to the
original. It is a safety net for a pool that is explicitly labelled 5D (an
explicit ``kv_cache_layout`` wins over draft-pool-nhd), where the original
would write out of bounds. No cell of the matrix needs it.

``MHATokenToKVPool.set_kv_buffer_prefix_valid`` (from SGLang 0.5.16) has
no 5D branch. On CUDA / HIP its Triton kernels copy one row of ``row_dim``
elements per committed token to ``buffer + loc * buffer.stride(0)``: right for
NHD (slots, H, D) buffers, but under ``vectorized_5d`` ``stride(0)`` is a
whole page, so each token's bytes land ``loc`` pages into the buffer (past
its end for most slots) and the addressed slot is never written. Elsewhere
it selects the committed rows and calls ``set_kv_buffer``.

This wrapper leaves every pool whose buffers are not SHUFFLE 5D (decided by
``sglang_kv5d.pools.is_vectorized_5d`` from the physical buffers, once per
pool) to the original. For a 5D pool it writes the committed rows
(sglang_kv5d.prefix_valid) with the bytes ``set_kv_buffer`` would write for
them:

    fp8 pool served by fp8-kv-write, other float input, scalar scales
        -> kernels.write_kv_fp8 once, with the slots of the rows that are not
           committed set to -1 (the kernel skips them): no host sync
    anything else (bf16 / fp16 pools, fp8 inputs, tensor scales the fused
    write does not take, fp8-kv-write not applied)
        -> the committed rows selected (one host sync) and handed to
           pool.set_kv_buffer, i.e. SGLang's own 5D writer (through the
           fp8-kv-write wrapper when it is applied)

The caller's ``cache_k`` / ``cache_v`` are never modified. A failure of the
fused kernel is recorded per configuration in sglang_kv5d.kernel_check (one
warning) and that call, and later ones, take the second route.
"""

from __future__ import annotations

import inspect
import logging

from ..versions import tested_from
from . import Binding, Patch

logger = logging.getLogger("sglang_kv5d")

_PLAN = "_kv5d_prefix_valid_plan"  # per-pool: (is 5D, fused write eligible)


def _pool_plan(pool, fp8_dtypes):
    plan = pool.__dict__.get(_PLAN)
    if plan is None:
        from ..pools import is_vectorized_5d
        from .fp8_kv_write import eligible, fp8_write_patched

        five = is_vectorized_5d(pool)
        fused = bool(five and fp8_write_patched(pool) and eligible(pool, fp8_dtypes))
        plan = pool.__dict__[_PLAN] = (five, fused)
    return plan


def _make(original):
    import torch

    from .. import kernel_check
    from .. import prefix_valid as core
    from ..platform import fp8_kv_dtypes
    from ..kernels import fp8_write

    sig = inspect.signature(original)
    fp8 = fp8_kv_dtypes()
    float_inputs = (torch.bfloat16, torch.float16, torch.float32)
    warned = set()

    def fused_scale(scale):
        """The scale as fp8-kv-write hands it to write_kv_fp8 (None means 1), or
        None when fp8-kv-write would not take it."""
        if scale is None:
            return 1.0
        if type(scale) is float or type(scale) is int:
            return scale
        if isinstance(scale, torch.Tensor) and scale.numel() == 1:
            return scale if scale.dim() == 1 else scale.reshape(1)
        return None

    def general(pool, layer, loc_2d, commit_lens, cache_k, cache_v, k_scale, v_scale, layer_id):
        rows = core.committed_rows(loc_2d, commit_lens)
        if rows.numel() == 0:
            return None
        if cache_k.dim() == 2:  # (rows, H * D): SGLang's 5D writer takes (rows, H, D)
            cache_k = cache_k.view(cache_k.shape[0], pool.head_num, -1)
            cache_v = cache_v.view(cache_v.shape[0], pool.head_num, -1)
        pool.set_kv_buffer(layer, loc_2d.reshape(-1).index_select(0, rows), cache_k.index_select(0, rows),
                           cache_v.index_select(0, rows), k_scale, v_scale, layer_id_override=layer_id)
        return None

    def prefix_valid(wrapped, pool, args, kwargs):
        five, fused = _pool_plan(pool, fp8)
        if not five:
            return wrapped(*args, **kwargs)
        a = sig.bind(pool, *args, **kwargs).arguments
        layer, loc_2d, commit_lens = a["layer"], a["loc_2d"], a["commit_lens"]
        cache_k, cache_v = a["cache_k"], a["cache_v"]
        k_scale, v_scale = a.get("k_scale"), a.get("v_scale")
        override = a.get("layer_id_override")
        layer_id = override if override is not None else layer.layer_id
        core.check_prefix_args(loc_2d, commit_lens, cache_k.shape[0], cache_v.shape[0])
        k_cache = pool.k_buffer[layer_id - pool.start_layer]
        v_cache = pool.v_buffer[layer_id - pool.start_layer]
        device = k_cache.device
        loc_2d = loc_2d.to(device=device, dtype=torch.int64, non_blocking=True)
        commit_lens = commit_lens.to(device=device, dtype=torch.int32, non_blocking=True)
        kd = cache_k.dtype
        if not (fused and kd != pool.dtype and kd in float_inputs and cache_v.dtype == kd):
            return general(pool, layer, loc_2d, commit_lens, cache_k, cache_v, k_scale, v_scale, layer_id)
        ks, vs = fused_scale(k_scale), fused_scale(v_scale)
        key = None
        if kernel_check.FAILED:
            key = kernel_check.fp8_write_key(kd, pool.dtype, k_cache, v_cache)
            if kernel_check.failure(kernel_check.FP8_WRITE, key) is not None:
                ks = None  # known not to compile / run here: logged once already
        if ks is None or vs is None:
            return general(pool, layer, loc_2d, commit_lens, cache_k, cache_v, k_scale, v_scale, layer_id)
        k, v = cache_k, cache_v
        if k.dim() == 2:
            k = k.view(k.shape[0], pool.head_num, -1)
            v = v.view(v.shape[0], pool.head_num, -1)
        try:
            fp8_write.write_kv_fp8(k, v, k_cache, v_cache, core.masked_slots(loc_2d, commit_lens), ks, vs,
                                   fp8_dtype=pool.dtype)
        except Exception as exc:  # a kernel failure has no one type (CompilationError, OutOfResources, driver RuntimeError, ...)
            if isinstance(exc, fp8_write.ScaleError):
                # A refused scale is a wrong model constant: every write path
                # (fp8-kv-write's too, which set_kv_buffer would reach) refuses
                # it, so stop here with the layer named; nothing was written.
                raise fp8_write.ScaleError(
                    f"sglang-kv5d prefix-valid-write-5d: layer {layer_id}: {exc}; nothing was written"
                ) from exc
            if kernel_check.is_host_validation(exc):
                what = (type(exc).__name__, str(exc).split(":", 1)[0])
                if what not in warned:
                    warned.add(what)
                    logger.warning("sglang-kv5d prefix-valid-write-5d: input not taken by the fused kernel "
                                   "(%s: %s); committing such rows through set_kv_buffer", type(exc).__name__, exc)
            else:  # the kernel failed (compile, resources, launch): one launch, nothing was written
                key = key or kernel_check.fp8_write_key(kd, pool.dtype, k_cache, v_cache)
                kernel_check.record_failure(kernel_check.FP8_WRITE, key, exc,
                                            shapes=kernel_check.fp8_write_shapes(key), device=device,
                                            fallback=kernel_check.FP8_WRITE_FALLBACK)
            return general(pool, layer, loc_2d, commit_lens, cache_k, cache_v, k_scale, v_scale, layer_id)
        return None

    return prefix_valid


PATCH = Patch(
    name="prefix-valid-write-5d",
    summary="(Defensive) DFLASH/DSPARK prefix-valid KV commits into a SHUFFLE 5D pool: the committed rows, 5D-addressed.",
    bindings=(Binding("memory_pool.MHATokenToKVPool.set_kv_buffer_prefix_valid", _make),),
    # Not required for 5D, and not needed by any cell of the support matrix:
    # its callers write draft pools, which draft-pool-nhd builds NHD (a safety
    # net for an explicitly 5D-labelled pool).
    required_for_5d=False,
    problem=(
        "(defensive) DFLASH/DSPARK's `set_kv_buffer_prefix_valid` addresses a SHUFFLE 5D buffer as if a slot were "
        "a row: the committed draft tokens would land whole pages away (mostly past the buffer's end); its callers "
        "write the draft pool, which `draft-pool-nhd` builds NHD, so this is a safety net for a pool explicitly "
        "labelled 5D"
    ),
    why=(
        "DFLASH and DSPARK commit the accepted tokens of a draft block with "
        "MHATokenToKVPool.set_kv_buffer_prefix_valid(layer, loc_2d, commit_lens, k, v): row b writes its first "
        "commit_lens[b] slots of loc_2d[b]. On CUDA and HIP its Triton kernels copy each row of row_dim elements "
        "to buffer + loc * buffer.stride(0). Under vectorized_5d stride(0) is a whole page, so the bytes land loc "
        "pages into the buffer (past its end for most slots) and the slot itself is never written. For a pool "
        "whose buffers are SHUFFLE 5D the wrapper writes the committed rows with the bytes set_kv_buffer writes "
        "for them: an fp8 pool served by fp8-kv-write with a float input and scalar scales in one launch of the "
        "fused FP8 write (rows not committed get slot -1, which it skips; no host sync); anything else by "
        "selecting the committed rows and calling set_kv_buffer, SGLang's own 5D writer. Pools that are not 5D "
        "reach the original unchanged. Defensive: in every tested SGLang from 0.5.16 on, every caller (DFLASH's worker, per "
        "layer and fused, and DSPARK's model) writes the draft model runner's pool, which draft-pool-nhd builds "
        "NHD, so in the configurations the support matrix allows the call reaches the original; the patch is a "
        "safety net for a pool explicitly labelled 5D (an explicit kv_cache_layout wins over draft-pool-nhd). "
        "Not required for 5D, and no cell of the matrix needs it."
    ),
    upstream="unfixed in every tested release from 0.5.16 on",
    removal="when set_kv_buffer_prefix_valid addresses SHUFFLE 5D buffers by (block, slot)",
    sglang=tested_from("0.5.16"),
    core=("sglang_kv5d.prefix_valid", "sglang_kv5d.kernels.fp8_write"),
)
