"""aiter's kernels as benchmark peers, on ROCm only.

On an MI300/MI355 the first question is whether the portable kernels are
slower than aiter's own. ``sglang-kv5d bench`` therefore times, when aiter
imports there:

    pa_decode_gluon          decode on the same SHUFFLE 5D cache, with the
                             arguments the overlay's aiter path passes and its
                             split rule (``get_recommended_splits`` for the
                             batch and KV heads, ``ps=True``)
    mha_batch_prefill_func   extend in the layout the overlay uses: K/V
                             gathered from the 5D cache into linear 3D rows
                             (page size 1; aiter has no page-64 instance), an
                             fp8 query quantized per tensor for fp8 caches
    reshape_and_cache        aiter's 5D writer (``asm_layout=True``) with
                             ``kv_cache_dtype="fp8"`` and per-tensor scales,
                             against the fused FP8 write

Each peer is used when it imports; otherwise the result names why (the import
error, a missing function). On CUDA (no ROCm) no aiter peer is loaded and the
tables are as they were.

The argument builders (``decode_kwargs``, ``extend_kwargs``, ``write_kwargs``)
are pure and work on CPU tensors: tests/test_aiter_contract.py binds what they
build to aiter's real signatures (:func:`example_calls`).
"""

from __future__ import annotations

import importlib
from typing import Callable, Dict, Optional, Tuple, Union

#: peer name -> (module, functions it needs)
PEERS = {
    "pa_decode_gluon": ("aiter.ops.triton.gluon.pa_decode_gluon", ("pa_decode_gluon", "get_recommended_splits")),
    "mha_batch_prefill_func": ("aiter", ("mha_batch_prefill_func",)),
    "reshape_and_cache": ("aiter", ("reshape_and_cache",)),
}

#: ``pa_decode_gluon``'s partition size (the overlay's CONTEXT_PARTITION_SIZE).
CONTEXT_PARTITION_SIZE = 256

Peers = Dict[str, Union[str, Dict[str, Callable]]]


def is_rocm() -> bool:
    try:
        import torch
    except (ImportError, OSError):  # not installed, or its shared libraries do not load
        return False
    return bool(getattr(torch.version, "hip", None))


def error_line(exc: BaseException) -> str:
    """Type and last non-empty line of an exception's message, at most 200 characters."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {lines[-1][:200] if lines else ''}"


def load(*, rocm: Optional[bool] = None, importer: Callable = importlib.import_module) -> Peers:
    """{} off ROCm; on ROCm {peer: {function: callable}} or {peer: "unavailable: why"}."""
    if not (is_rocm() if rocm is None else rocm):
        return {}
    peers: Peers = {}
    for name, (module, fns) in PEERS.items():
        try:
            mod = importer(module)
        except Exception as exc:  # noqa: BLE001 - ImportError, or RuntimeError from rocminfo / no driver
            peers[name] = f"unavailable: import {module} failed: {error_line(exc)}"
            continue
        found = {f: getattr(mod, f, None) for f in fns}
        missing = [f for f, v in found.items() if not callable(v)]
        if missing:
            peers[name] = f"unavailable: {module} has no {', '.join(missing)}"
        else:
            found["module"] = module
            peers[name] = found
    return peers


def describe(peers: Peers, name: str) -> str:
    """One line for a result: where the peer came from, or why it is not there."""
    if not peers:
        return "none (not ROCm)"
    p = peers.get(name, "unavailable: not looked up")
    return p if isinstance(p, str) else f"{p['module']}.{name}"


def available(peers: Optional[Peers], name: str) -> bool:
    return bool(peers) and not isinstance(peers.get(name, ""), str)


# --------------------------------------------------------------------------
# Argument builders (pure)


def decode_kwargs(q, k_cache, v_cache, block_tables, context_lens, out, *, sm_scale: float, splits: int,
                  k_scale=None, v_scale=None, sinks=None, sliding_window: int = 0) -> dict:
    """``pa_decode_gluon``'s keywords as the overlay's aiter path builds them
    (all by keyword; ``query_scale`` None; scales only for an fp8 cache)."""
    import torch

    bs, hq, d = q.shape
    hkv = k_cache.shape[1]
    group = hq // hkv
    fp8 = k_cache.element_size() == 1
    exp_sums = torch.empty((bs, hkv, splits, group), dtype=torch.float32, device=q.device)
    return dict(
        output=out, query=q, key_cache=k_cache, value_cache=v_cache,
        context_lengths=context_lens.to(torch.int32), block_tables=block_tables.to(torch.int32),
        softmax_scale=float(sm_scale), query_length=1, max_context_partition_num=int(splits),
        context_partition_size=CONTEXT_PARTITION_SIZE,
        compute_type=torch.float16 if out.dtype == torch.float16 else torch.bfloat16,
        query_scale=None, key_scale=k_scale if fp8 else None, value_scale=v_scale if fp8 else None,
        exp_sums=exp_sums, max_logits=torch.empty_like(exp_sums),
        temporary_output=torch.empty((bs, hkv, splits, group, d), dtype=out.dtype, device=q.device),
        alibi_slopes=None, sinks=sinks, sliding_window=int(sliding_window), ps=True,
    )


def extend_kwargs(q, k_lin, v_lin, qo_indptr, kv_indptr, *, sm_scale: float, max_q: int, max_kv: int,
                  q_descale=None, k_descale=None, v_descale=None, window=(-1, -1)) -> dict:
    """``mha_batch_prefill_func``'s keywords in the overlay's layout: linear 3D
    K/V rows (page size 1), ``kv_page_indices`` = arange padded for CK's
    read-ahead (sglang_kv5d.attention.page_indices), causal."""
    import torch

    from ..attention.page_indices import linear_page_indices

    kw = dict(
        q=q, k=k_lin, v=v_lin, cu_seqlens_q=qo_indptr.to(torch.int32), kv_indptr=kv_indptr.to(torch.int32),
        kv_page_indices=linear_page_indices(k_lin.shape[0], q.device, torch),
        max_seqlen_q=int(max_q), max_seqlen_k=int(max_kv), dropout_p=0.0, softmax_scale=float(sm_scale),
        logits_soft_cap=0.0, causal=True, window_size=tuple(window), alibi_slopes=None, deterministic=False,
        return_lse=False, return_attn_probs=False, out=None, sink_ptr=None,
    )
    if q_descale is not None:
        kw.update(q_descale=q_descale, k_descale=k_descale, v_descale=v_descale)
    return kw


def write_kwargs(k, v, k_cache, v_cache, loc, *, k_scale, v_scale) -> dict:
    """``reshape_and_cache``'s keywords for an fp8 SHUFFLE 5D write with per-tensor scales."""
    return dict(key=k, value=v, key_cache=k_cache, value_cache=v_cache, slot_mapping=loc, kv_cache_dtype="fp8",
                k_scale=k_scale, v_scale=v_scale, asm_layout=True)


def aiter_fp8():
    """aiter's fp8 type (arch-dependent: e4m3fnuz on gfx942, e4m3fn on gfx950), or None."""
    try:
        return importlib.import_module("aiter").dtypes.fp8
    except Exception:  # noqa: BLE001 - aiter's import queries the device and fails with any error: no aiter
        return None


# --------------------------------------------------------------------------
# Callables for the timing loops (need the real aiter on a GPU)


def decode_callable(peers: Peers, q, k_cache, v_cache, block_tables, context_lens, out, *, sm_scale: float,
                    k_scale=None, v_scale=None) -> Tuple[Callable, int, bool]:
    """(call, splits, reinterpreted): ``pa_decode_gluon`` over the given cache.

    ``reinterpreted`` is True when the fp8 cache's type is not aiter's fp8 and
    its bytes were viewed as aiter's (same timing, different numbers).
    """
    fns = peers["pa_decode_gluon"]
    bs, hkv = q.shape[0], k_cache.shape[1]
    splits = int(fns["get_recommended_splits"](num_sequences=bs, num_kv_heads=hkv))
    reinterpreted = False
    if k_cache.element_size() == 1:
        want = aiter_fp8()
        if want is not None and k_cache.dtype != want:
            k_cache, v_cache, reinterpreted = k_cache.view(want), v_cache.view(want), True
    kw = decode_kwargs(q, k_cache, v_cache, block_tables, context_lens, out, sm_scale=sm_scale, splits=splits,
                       k_scale=k_scale, v_scale=v_scale)
    pa = fns["pa_decode_gluon"]
    return (lambda: pa(**kw)), splits, reinterpreted


def write_callable(peers: Peers, k, v, k_cache_u8, v_cache_u8, loc, *, k_scale, v_scale) -> Callable:
    fn = peers["reshape_and_cache"]["reshape_and_cache"]
    kw = write_kwargs(k, v, k_cache_u8, v_cache_u8, loc, k_scale=k_scale, v_scale=v_scale)
    return lambda: fn(**kw)


def extend_callable(peers: Peers, q, k5, v5, slots, page: int, qo_indptr, kv_indptr, *, sm_scale: float,
                    max_q: int, max_kv: int, fp8_dtype=None, k_scale=None, v_scale=None) -> Callable:
    """What the overlay's aiter extend path does per call: gather the request
    tokens from the 5D cache into linear rows, quantize q for fp8, call
    ``mha_batch_prefill_func``."""
    from sglang_kv5d.attention import gather_5d_to_linear, quantize_per_tensor

    fn = peers["mha_batch_prefill_func"]["mha_batch_prefill_func"]

    def call():
        k_lin, v_lin = gather_5d_to_linear(k5, v5, slots, page)
        if fp8_dtype is not None:
            q_in, q_descale = quantize_per_tensor(q, fp8_dtype)
            kw = extend_kwargs(q_in, k_lin, v_lin, qo_indptr, kv_indptr, sm_scale=sm_scale, max_q=max_q,
                               max_kv=max_kv, q_descale=q_descale, k_descale=k_scale, v_descale=v_scale)
        else:
            kw = extend_kwargs(q, k_lin, v_lin, qo_indptr, kv_indptr, sm_scale=sm_scale, max_q=max_q, max_kv=max_kv)
        return fn(**kw)

    return call


def example_calls():
    """[(function, kwargs)] as the builders make them, on small CPU tensors
    (bf16 and fp8; 4/1 heads, D=256, page 64), for the contract test."""
    import torch

    from ..platform import FP8_E4M3FN, fp8_torch_dtype

    fp8 = fp8_torch_dtype(FP8_E4M3FN)
    hq, hkv, d, page, bs, nb = 4, 1, 256, 64, 2, 4
    calls = []
    for dt, x in ((torch.bfloat16, 8), (fp8, 16)):
        k5 = torch.zeros(nb, hkv, d // x, page, x, dtype=dt)
        v5 = torch.zeros(nb, hkv, page // x, d, x, dtype=dt)
        q = torch.zeros(bs, hq, d, dtype=torch.bfloat16)
        one = torch.ones(1, dtype=torch.float32)
        calls.append(("pa_decode_gluon", decode_kwargs(
            q, k5, v5, torch.tensor([[0, 1], [2, 3]]), torch.tensor([70, 100]), torch.empty_like(q),
            sm_scale=d ** -0.5, splits=8, k_scale=one, v_scale=one)))
        t = 10
        lin = torch.zeros(t, hkv, d, dtype=dt)
        qq = torch.zeros(t, hq, d, dtype=dt)
        ind = torch.tensor([0, 4, t])
        desc = dict(q_descale=one, k_descale=one, v_descale=one) if dt == fp8 else {}
        calls.append(("mha_batch_prefill_func", extend_kwargs(qq, lin, lin, ind, ind, sm_scale=d ** -0.5, max_q=6,
                                                              max_kv=6, **desc)))
    kin = torch.zeros(3, hkv, d, dtype=torch.bfloat16)
    calls.append(("reshape_and_cache", write_kwargs(
        kin, kin, torch.zeros(nb, hkv, d // 16, page, 16, dtype=torch.uint8),
        torch.zeros(nb, hkv, page // 16, d, 16, dtype=torch.uint8), torch.tensor([0, 5, 77]),
        k_scale=torch.ones(1), v_scale=torch.ones(1))))
    calls.append(("get_recommended_splits", dict(num_sequences=bs, num_kv_heads=hkv)))
    return calls
