"""Shapes from SGLang's objects: the checks run when a 5D pool or the AITER backend is built.

Called by the fail-closed guards (sglang_kv5d/patches/fail_closed.py);
everything SGLang-specific about the checks is here (the pool's buffers, the
backend, the engine's patch states), the checks themselves
(sglang_kv5d.kernel_check) take explicit shapes, dtypes and a device. Not a
patch: a helper module of the patches.
"""

from __future__ import annotations

import logging
from typing import Iterable, List, Optional

from ..kernel_check import AttentionDecision, CheckResult, attention_startup, check_attention, check_fp8_write
from ..kernel_check import check_verify, verify_refusal

logger = logging.getLogger("sglang_kv5d")


def check_pool(pool, in_dtypes: Iterable = None) -> List[CheckResult]:
    """Check the FP8 write for one leaf MHA pool the fused write serves."""
    import torch

    from ..platform import fp8_kv_dtypes
    from .fp8_kv_write import eligible, fp8_write_patched

    if not fp8_write_patched(pool) or not eligible(pool, fp8_kv_dtypes()):
        return []
    k0, v0 = pool.k_buffer[0], pool.v_buffer[0]
    layout_5d = k0.dim() == 5
    if layout_5d:
        heads, head_dim, page, v_head_dim = k0.shape[1], k0.shape[2] * k0.shape[4], k0.shape[3], v0.shape[3]
    else:
        heads, head_dim, page, v_head_dim = k0.shape[1], k0.shape[2], 1, v0.shape[2]
    out = []
    for in_dtype in in_dtypes or (torch.bfloat16,):
        out.append(check_fp8_write(in_dtype=in_dtype, fp8_dtype=pool.dtype, cache_dtype=k0.dtype, heads=int(heads),
                                   head_dim=int(head_dim), v_head_dim=int(v_head_dim), page=int(page),
                                   layout_5d=layout_5d, device=k0.device))
    return out


def check_backend(backend, model_runner) -> Optional[AttentionDecision]:
    """At AiterAttnBackend build for a 5D pool: the FP8 write in the model's
    dtype for every leaf pool, then the attention decision (None when the pool
    is not 5D), then, for a speculative target with target-verify-5d applied,
    the packed verify kernel for its draft count (aiter present or not).
    Raises Kv5dNotReadyError (strict) when no attention path works or the
    verify kernel fails."""
    from .. import attention
    from ..pools import is_vectorized_5d, iter_leaf_pools

    pool = getattr(model_runner, "token_to_kv_pool", None)
    if pool is None or getattr(backend, "use_mla", False) or not is_vectorized_5d(pool):
        return None
    q_dtype = getattr(backend, "input_dtype", None) or getattr(model_runner, "dtype", None)
    leaves = [leaf for leaf in iter_leaf_pools(pool) if getattr(leaf, "k_buffer", None)]
    for leaf in leaves:
        check_pool(leaf, in_dtypes=(q_dtype,) if q_dtype is not None else None)
    if not leaves or q_dtype is None:
        return None
    from ..activation import status

    st = status()
    if _state(st, "attention-dispatch-5d") != "applied":
        return None  # the fail-closed guard has reported it
    leaf = leaves[0]
    k0, v0 = leaf.k_buffer[0], leaf.v_buffer[0]
    q_heads = getattr(backend, "num_head", None)
    if q_heads is None:
        return None
    window = getattr(model_runner, "sliding_window_size", None) is not None

    def check(fallback):
        results = []
        for w in ((False, True) if window else (False,)):
            results += check_attention(
                q_dtype=q_dtype, kv_dtype=leaf.dtype, cache_dtype=k0.dtype, page=int(k0.shape[3]),
                x=int(k0.shape[4]), q_heads=int(q_heads), kv_heads=int(k0.shape[1]),
                head_dim=int(k0.shape[2] * k0.shape[4]), v_head_dim=int(v0.shape[3]), device=k0.device,
                window=w, fallback=fallback)
        return results

    decision = attention_startup(impl=attention.selected_impl(), aiter_problem=attention.aiter_problem(),
                                 check=check)
    if decision.path == "none":
        from ..activation import fail_closed

        fail_closed(decision.message)
    else:
        logger.info("sglang-kv5d: 5D attention: %s", decision.message)
    drafts = verify_drafts(backend, model_runner)
    if drafts and _state(st, "target-verify-5d") == "applied":
        results = [check_verify(q_dtype=q_dtype, kv_dtype=leaf.dtype, cache_dtype=k0.dtype, page=int(k0.shape[3]),
                                x=int(k0.shape[4]), q_heads=int(q_heads), kv_heads=int(k0.shape[1]),
                                head_dim=int(k0.shape[2] * k0.shape[4]), v_head_dim=int(v0.shape[3]),
                                device=k0.device, num_drafts=drafts, window=w)
                   for w in ((False, True) if window else (False,))]
        refusal = verify_refusal(results)
        if refusal:
            from ..activation import fail_closed

            fail_closed(refusal)
    return decision


def _state(st, name: str) -> Optional[str]:
    try:
        return st.patch(name).state
    except KeyError:  # Status.patch: no patch of that name in this process
        return None


def verify_drafts(backend, model_runner) -> int:
    """Draft tokens per request a speculative 5D target verifies (0: not a speculative target)."""
    spec = getattr(model_runner, "spec_algorithm", None)
    if spec is None or (callable(getattr(spec, "is_none", None)) and spec.is_none()):
        return 0
    if getattr(model_runner, "is_draft_worker", False):
        return 0
    return int(getattr(backend, "num_draft_tokens", None) or 0)
