"""The portable 5D attention kernels, checked before traffic, and the startup decision.

:func:`check_attention` compiles and runs the portable decode (direct, split
and reduction kernels) and extend kernels on scratch caches;
:func:`check_verify` does the same for the packed speculative-verify variant
of the decode kernel (``queries_per_seq=N``), which serves every 5D target
verify whether aiter is present or not;
:func:`attention_startup` decides which path serves 5D attention (aiter, the
portable kernels, or none: then the Kv5dNotReadyError message).
"""

from __future__ import annotations

import logging
import time
from typing import List, NamedTuple, Optional, Tuple

from .. import config
from ..kernel_failures import DECODE, EXTEND, VERIFY, dtype_name, record_failure, target_text, triton_version
from .results import CheckResult, checked, remember, sync

logger = logging.getLogger("sglang_kv5d")

#: Decode is also checked with a block table this many tokens wide (split
#: kernel and reduction; the split count follows from the table's width).
DECODE_WIDE_TOKENS = 4096


def attention_key(kernel: str, *, q_dtype, kv_dtype, page: int, q_heads: int, kv_heads: int, head_dim: int,
                  v_head_dim: int, window: bool, sinks: bool = False, logit_cap: bool = False):
    from ..attention import ConfigKey

    return ConfigKey(kernel, dtype_name(q_dtype), dtype_name(kv_dtype), int(page), int(head_dim), int(v_head_dim),
                     int(q_heads), int(kv_heads), bool(window), bool(sinks), bool(logit_cap))


def attention_shapes(key) -> str:
    from ..attention import key_text

    return key_text(key)


def _scratch(*, kv_dtype, cache_dtype, page: int, x: int, kv_heads: int, head_dim: int, v_head_dim: int, device,
             window: bool):
    """Two zeroed 5D blocks (K ``(2, H, D/x, page, x)``, V ``(2, H, page/x, Dv, x)``, viewed as
    ``kv_dtype``) and the keyword arguments every scratch kernel call takes."""
    import torch

    fp8 = kv_dtype != cache_dtype or dtype_name(kv_dtype).startswith("float8")
    kc = torch.zeros((2, kv_heads, head_dim // x, page, x), dtype=cache_dtype, device=device)
    vc = torch.zeros((2, kv_heads, page // x, v_head_dim, x), dtype=cache_dtype, device=device)
    if kc.dtype != kv_dtype:
        kc, vc = kc.view(kv_dtype), vc.view(kv_dtype)
    scale = torch.ones((1,), dtype=torch.float32, device=device) if fp8 else None
    common = dict(sm_scale=head_dim ** -0.5, k_scale=scale, v_scale=scale, fp8_dtype=kv_dtype if fp8 else None,
                  sliding_window=page // 2 if window else -1, sinks=None, logit_cap=0.0)
    return kc, vc, common


def check_attention(*, q_dtype, kv_dtype, cache_dtype, page: int, x: int, q_heads: int, kv_heads: int,
                    head_dim: int, v_head_dim: int, device, window: bool = False,
                    fallback: str = "", when: str = "in the check before traffic") -> List[CheckResult]:
    """Compile and run the portable decode and extend kernels on scratch caches
    (two blocks of ``page`` tokens, the pool's element layout ``x``)."""
    import torch

    from .. import kernels

    dev = torch.device(device)
    results = []
    for kernel in (DECODE, EXTEND):
        key = attention_key(kernel, q_dtype=q_dtype, kv_dtype=kv_dtype, page=page, q_heads=q_heads,
                            kv_heads=kv_heads, head_dim=head_dim, v_head_dim=v_head_dim, window=window)
        done = checked(kernel, key)
        if done is not None:
            results.append(done)
            continue
        start = time.perf_counter()
        error = None
        try:
            kc, vc, common = _scratch(kv_dtype=kv_dtype, cache_dtype=cache_dtype, page=page, x=x,
                                      kv_heads=kv_heads, head_dim=head_dim, v_head_dim=v_head_dim, device=dev,
                                      window=window)
            table = torch.tensor([[0, 1]], dtype=torch.int32, device=dev)
            n = page + 3
            if kernel == DECODE:
                q = torch.zeros((1, q_heads, head_dim), dtype=q_dtype, device=dev)
                out = torch.empty((1, q_heads, v_head_dim), dtype=q_dtype, device=dev)
                lens = torch.tensor([n], dtype=torch.int64, device=dev)  # SGLang's seq_lens dtype
                # a short table (one split: the direct kernel) and a wide one
                # (several splits: the split kernel and its reduction); the
                # split count follows from the table's width, the extra
                # entries point at block 0
                wide = torch.zeros((1, DECODE_WIDE_TOKENS // page), dtype=torch.int32, device=dev)
                wide[0, 1] = 1
                for t in (table, wide):
                    kernels.decode_attention_5d(q, kc, vc, t, lens, num_splits=None, out=out, **common)
            else:
                q = torch.zeros((3, q_heads, head_dim), dtype=q_dtype, device=dev)
                out = torch.empty((3, q_heads, v_head_dim), dtype=q_dtype, device=dev)
                qo = torch.tensor([0, 3], dtype=torch.int32, device=dev)
                lens = torch.tensor([n], dtype=torch.int32, device=dev)
                kernels.extend_attention_5d(q, kc, vc, table, qo, lens, causal=True, out=out, **common)
            sync(dev)
        except Exception as exc:  # a kernel failure has no one type (CompilationError, OutOfResources, driver RuntimeError, ...)
            error = record_failure(kernel, key, exc, shapes=attention_shapes(key), device=dev,
                                   fallback=fallback or "no other 5D attention path", when=when)
        wide_entries = DECODE_WIDE_TOKENS // page
        variants = (f"2 and {wide_entries} table entries",) if kernel == DECODE else ("2 table entries",)
        result = CheckResult(kernel, key, error is None, error, time.perf_counter() - start, variants)
        remember(result)
        if error is None:
            logger.info("sglang-kv5d: kernel check: %s ran for %s in %.2f s (Triton %s, target %s)", kernel,
                        attention_shapes(key), result.seconds, triton_version(), target_text(dev))
        results.append(result)
    return results


def check_verify(*, q_dtype, kv_dtype, cache_dtype, page: int, x: int, q_heads: int, kv_heads: int,
                 head_dim: int, v_head_dim: int, device, num_drafts: int, window: bool = False,
                 when: str = "in the check before traffic") -> CheckResult:
    """Compile and run the packed verify kernel (``decode_attention_5d(...,
    queries_per_seq=num_drafts)``) on scratch caches, as the target-verify path
    calls it: ``(num_drafts, q_heads, head_dim)`` queries of one request, int32
    per-row lengths, a short table (the direct kernel) and a wide one (split
    kernel and reduction). There is no fallback: SGLang's own verify is wrong
    on a 5D cache, so a failure here is the reason the backend refuses."""
    import torch

    from .. import kernels

    n = int(num_drafts)
    shape_key = attention_key(VERIFY, q_dtype=q_dtype, kv_dtype=kv_dtype, page=page, q_heads=q_heads,
                              kv_heads=kv_heads, head_dim=head_dim, v_head_dim=v_head_dim, window=window)
    key = (shape_key, n)  # each draft count is its own compiled variant (PACK constexpr)
    done = checked(VERIFY, key)
    if done is not None:
        return done
    dev = torch.device(device)
    wide_entries = DECODE_WIDE_TOKENS // page
    start = time.perf_counter()
    error = None
    try:
        kc, vc, common = _scratch(kv_dtype=kv_dtype, cache_dtype=cache_dtype, page=page, x=x, kv_heads=kv_heads,
                                  head_dim=head_dim, v_head_dim=v_head_dim, device=dev, window=window)
        q = torch.zeros((n, q_heads, head_dim), dtype=q_dtype, device=dev)
        out = torch.empty((n, q_heads, v_head_dim), dtype=q_dtype, device=dev)
        lens = torch.arange(page + 1, page + 1 + n, dtype=torch.int32, device=dev)  # draft t sees prefix + t + 1
        short = torch.tensor([[0, 1]], dtype=torch.int32, device=dev)
        wide = torch.zeros((1, wide_entries), dtype=torch.int32, device=dev)
        wide[0, 1] = 1
        for table in (short, wide):
            kernels.decode_attention_5d(q, kc, vc, table, lens, out=out, queries_per_seq=n, **common)
        sync(dev)
    except Exception as exc:  # a kernel failure has no one type (CompilationError, OutOfResources, driver RuntimeError, ...)
        error = record_failure(VERIFY, key, exc, shapes=f"{attention_shapes(shape_key)}, {n} drafts per request",
                               device=dev, fallback="no other 5D verify path (SGLang's is wrong on 5D)", when=when)
    result = CheckResult(VERIFY, key, error is None, error, time.perf_counter() - start,
                         (f"{n} drafts, 2 and {wide_entries} table entries",))
    remember(result)
    if error is None:
        logger.info("sglang-kv5d: kernel check: the packed verify kernel ran for %s, %d drafts, in %.2f s "
                    "(Triton %s, target %s)", attention_shapes(shape_key), n, result.seconds, triton_version(),
                    target_text(dev))
    return result


def verify_refusal(results) -> Optional[str]:
    """The Kv5dNotReadyError text when a verify check failed, else None."""
    bad = [r for r in results if not r.ok]
    if not bad:
        return None
    causes = "; ".join(r.error or "" for r in bad)
    return ("sglang-kv5d: target-verify-5d cannot serve speculative verify over the 5D cache: the packed verify "
            f"kernel (decode_attention_5d with queries_per_seq) failed in the check before traffic ({causes}; "
            f"Triton {triton_version()}); SGLang's own verify is wrong on a 5D cache, so there is no fallback. "
            "Fix: a Triton that compiles the kernel (`sglang-kv5d doctor` shows which kernels compile here), "
            f"or serve without --speculative-algorithm, or unset {config.LAYOUT} to serve with the NHD layout.")


class AttentionDecision(NamedTuple):
    path: str  # "aiter", "portable" or "none"
    message: str  # what is logged; for "none" the Kv5dNotReadyError text
    results: Tuple[CheckResult, ...]


def attention_startup(*, impl: str, aiter_problem: Optional[str], check) -> AttentionDecision:
    """Which path serves 5D attention, given SGLANG_KV5D_ATTN_IMPL (``impl``),
    why aiter cannot serve it (``aiter_problem``, None when it can) and a
    ``check(fallback)`` callable that runs :func:`check_attention`.

    The portable kernels are checked only when they are the main path (impl
    "triton", or aiter unusable): with aiter they run only for configurations
    aiter cannot serve, and compile on first use.
    """
    if impl != "triton" and aiter_problem is None:
        return AttentionDecision("aiter", "aiter serves 5D attention (portable kernels compile on first use, "
                                          "for configurations aiter cannot run)", ())
    rescue = "aiter serves 5D attention" if aiter_problem is None else ""
    results = tuple(check(rescue))
    bad = [r for r in results if not r.ok]
    if not bad:
        return AttentionDecision("portable", "the portable Triton kernels serve 5D attention", results)
    if aiter_problem is None:
        return AttentionDecision("aiter", "the portable kernels failed; aiter serves 5D attention", results)
    causes = "; ".join(f"{r.kernel}: {r.error}" for r in bad)
    message = (
        "sglang-kv5d: no working 5D attention path: the portable Triton kernels failed (" + causes
        + f"; Triton {triton_version()}) and aiter cannot be used ({aiter_problem}). Fix: install an aiter "
        f"build with pa_decode_gluon and mha_batch_prefill_func (and leave {config.ATTN_IMPL} unset), or a "
        "Triton that compiles the portable kernels (`sglang-kv5d doctor` shows which compile), or unset "
        f"{config.LAYOUT} to serve with the NHD layout."
    )
    return AttentionDecision("none", message, results)
