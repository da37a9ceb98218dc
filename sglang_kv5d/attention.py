"""Attention over SHUFFLE 5D ("vectorized_5d") KV caches: aiter or portable.

Drop-in replacements for SGLang's ``aiter_utils.forward_extend_vectorized_5d``
and ``forward_decode_vectorized_5d`` (same signatures; the patch adapters rebind
them in ``aiter_backend``). This module imports neither SGLang nor aiter at
import time; torch is imported lazily.

What they read (SGLang 0.5.13.post1 .. 0.5.23):

    backend        token_to_kv_pool, forward_metadata (kv_indptr, kv_indices,
                   qo_indptr, max_q_len, max_kv_len, swa_page_table),
                   qo_indptr (<= 0.5.22 fallback), input_dtype, k_scale, v_scale
    forward_batch  batch_size, seq_lens, seq_lens_sum, seq_lens_cpu,
                   extend_prefix_lens_cpu
    layer          layer_id, tp_q_head_num, tp_k_head_num, tp_v_head_num,
                   qk_head_dim, v_head_dim, scaling, logit_cap,
                   sliding_window_size, k_scale, v_scale

Differences from upstream, on purpose:

* The layer's buffers are found with :func:`sglang_kv5d.pools.resolve_kv_subpool`
  (hybrid, SWA and nested pools), which waits for layer-wise loading first.
* ``pa_decode_gluon`` gets every argument by keyword, including
  ``query_scale`` (None for a bf16/fp16 query), ``compute_type`` (bf16, or fp16
  for an fp16 model) and ``ps=True``; fp8 caches always get fp32 ``[1]``
  ``key_scale``/``value_scale`` on the query's device (1.0 when the layer has
  none), because without them the kernel assumes X=8 and reads garbage.
* Sliding window for ``pa_decode_gluon``: aiter keeps key ``c`` iff
  ``c >= ctx - W + 1`` (W - 1 keys with ``ctx`` counting the current token),
  SGLang expects ``sliding_window_size + 1`` keys, so W = sliding_window_size + 2.
  (Inferred from aiter's kernel and reference code; see
  shared/research/aiter-api.md section 1.7. Not yet confirmed on gfx942/gfx950.)
  ``mha_batch_prefill_func``'s ``window_size=(L, -1)`` already means L + 1 keys,
  so extend passes ``(sliding_window_size, -1)`` unchanged.
* Extend passes ``softmax_scale=layer.scaling`` (upstream relies on aiter's
  1/sqrt(D) default) and, for fp8 caches, quantizes the query with its own
  per-tensor scale (amax / fp8 max, kept on the device) and passes that as
  ``q_descale`` (upstream casts q unscaled and passes ``k_scale`` as q_descale).
* Logit soft-capping has no ``pa_decode_gluon`` parameter; such layers use the
  portable path (upstream drops the cap silently).

Implementation choice: ``SGLANG_KV5D_ATTN_IMPL`` = ``auto`` (default: aiter when
it imports and has the needed functions, else portable), ``aiter`` or
``triton`` (portable only). A configuration aiter cannot run (an error whose
message contains "no matching kernel", a missing function, a shape the kernel
does not support) falls back to the portable kernels from
``sglang_kv5d.kernels`` with one warning per configuration, and the choice is
remembered for the process (:func:`fallback_configs`, :func:`reset_state`).
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from typing import Any, Dict, NamedTuple, Optional, Tuple

from sglang_kv5d.pools import PoolLayoutError, resolve_kv_subpool

__all__ = [
    "ENV_IMPL",
    "IMPLS",
    "forward_extend_vectorized_5d",
    "forward_decode_vectorized_5d",
    "selected_impl",
    "fallback_configs",
    "reset_state",
    "decode_sliding_window_arg",
    "block_table_from_token_slots",
    "gather_5d_to_linear",
    "quantize_per_tensor",
    "ConfigKey",
]

logger = logging.getLogger(__name__)

ENV_IMPL = "SGLANG_KV5D_ATTN_IMPL"
IMPLS = ("auto", "aiter", "triton")

#: ``pa_decode_gluon`` partition size (the only value every kernel variant takes).
CONTEXT_PARTITION_SIZE = 256
#: Marker in aiter's error when no compiled kernel instance matches.
NO_KERNEL_MARK = "no matching kernel"

_DECODE_FNS = ("pa_decode_gluon", "get_recommended_splits")
_EXTEND_FNS = ("mha_batch_prefill_func",)

#: Why extend layers with per-head sink logits skip aiter. Read from aiter's
#: source (tests/test_aiter_contract.py holds it): the batch-prefill JIT builds
#: ``_sink`` kernels only for sink *tokens* (``sink_size > 0`` under a mask,
#: ``cmdGenFunc_mha_batch_prefill``, v0.1.14 .. main e4048607), never for
#: ``sink_ptr`` alone; the C++ side then picks a kernel that ignores the sink
#: logits (``has_sink = sink_size > 0``, v0.1.14 .. v0.1.18) or finds none
#: (``|| sink_ptr != nullptr``, v0.1.19 .. e4048607). Passing ``sink_size`` is
#: no way out: it also makes the first tokens always visible under a window.
#: ROCm/aiter#4976 (2026-08-25) fixes the JIT filter; no build with it has been
#: read or run yet. Decode keeps aiter: ``pa_decode_gluon`` takes ``sinks``.
EXTEND_SINKS_UNSUPPORTED = (
    "mha_batch_prefill_func builds no kernel for per-head sink logits (sink_ptr) without sink "
    "tokens in aiter up to main e4048607 (ROCm/aiter#4976)"
)
_PA_MODULE = "aiter.ops.triton.gluon.pa_decode_gluon"


class ConfigKey(NamedTuple):
    """What a fallback decision is remembered for."""

    function: str
    q_dtype: str
    kv_dtype: str
    page_size: int
    head_dim: int
    v_head_dim: int
    q_heads: int
    kv_heads: int
    window: bool
    sinks: bool
    logit_cap: bool


_lock = threading.Lock()
_fallbacks: Dict[Any, str] = {}
_aiter_import_error: Optional[str] = None
_scale_cache: Dict[Tuple[float, str], Any] = {}


def selected_impl() -> str:
    """``SGLANG_KV5D_ATTN_IMPL`` through the switch registry (auto | aiter | triton).

    An invalid value means ``auto``, with one warning naming it (activation and
    ``check`` report it too): never an error in the middle of serving.
    """
    from sglang_kv5d import config

    value, problem = config.read(config.ATTN_IMPL)
    if problem is not None and problem.value not in _warned_impl:
        _warned_impl.add(problem.value)
        logger.warning("sglang-kv5d: %s", problem.activation_warning())
    return value


_warned_impl: set = set()


def fallback_configs() -> Dict[Any, str]:
    """Configurations routed to the portable path after an aiter failure, with the reason."""
    with _lock:
        return dict(_fallbacks)


def reset_state() -> None:
    """Forget fallbacks and the cached aiter import failure (tests)."""
    global _aiter_import_error
    with _lock:
        _fallbacks.clear()
        _scale_cache.clear()
        _aiter_import_error = None


# --------------------------------------------------------------------------
# aiter discovery and fallback bookkeeping
# --------------------------------------------------------------------------


def _aiter_functions(names) -> Tuple[Dict[str, Any], Optional[str]]:
    """The aiter callables ``names`` (missing ones absent) and an import error, if any.

    Looked up on every call (a dict lookup once imported), so a replaced module
    or function is honoured. A failed import is remembered until reset_state().
    """
    global _aiter_import_error
    if _aiter_import_error is not None:
        return {}, _aiter_import_error
    try:
        top = importlib.import_module("aiter")
        pa = importlib.import_module(_PA_MODULE)
    except Exception as e:  # ImportError, or RuntimeError from rocminfo / no GPU driver
        with _lock:
            _aiter_import_error = f"{type(e).__name__}: {e}"
        return {}, _aiter_import_error
    found = {}
    for n in names:
        fn = getattr(pa, n, None) if n in _DECODE_FNS else getattr(top, n, None)
        if callable(fn):
            found[n] = fn
    return found, None


def _aiter_fp8_dtype():
    mod = importlib.import_module("aiter")
    return getattr(getattr(mod, "dtypes", None), "fp8", None)


def _remember(key: Any, reason: str) -> None:
    with _lock:
        if key in _fallbacks:
            return
        _fallbacks[key] = reason
    logger.warning(
        "sglang-kv5d: aiter cannot run %s (%s); using the portable Triton 5D path "
        "for this configuration from now on",
        _key_text(key),
        reason,
    )


def _key_text(key: Any) -> str:
    if isinstance(key, ConfigKey):
        return (
            f"{key.function} [q {key.q_dtype}, kv {key.kv_dtype}, page {key.page_size}, "
            f"head_dim {key.head_dim}/{key.v_head_dim}, heads {key.q_heads}/{key.kv_heads}, "
            f"window {'on' if key.window else 'off'}, sinks {'on' if key.sinks else 'off'}, "
            f"logit_cap {'on' if key.logit_cap else 'off'}]"
        )
    return str(key)


def _route(key: ConfigKey, names, unsupported) -> Tuple[str, Dict[str, Any]]:
    """('aiter', functions) or ('triton', {}) for one call.

    ``unsupported`` is a callable returning why aiter cannot serve this
    configuration (or None); it runs only when aiter is otherwise usable.
    """
    impl = selected_impl()
    if impl == "triton":
        return "triton", {}
    with _lock:
        if key in _fallbacks:
            return "triton", {}
    fns, err = _aiter_functions(names)
    missing = [n for n in names if n not in fns]
    if err is not None or missing:
        if impl == "auto":
            return "triton", {}
        why = f"aiter is not importable ({err})" if err else f"aiter has no {', '.join(missing)}"
        _remember(key, why)
        return "triton", {}
    why = unsupported() if unsupported is not None else None
    if why:
        _remember(key, why)
        return "triton", {}
    return "aiter", fns


def _is_no_kernel(e: BaseException) -> bool:
    return NO_KERNEL_MARK in str(e)


def aiter_problem() -> Optional[str]:
    """Why aiter cannot serve 5D attention in this process (None when it can):
    not importable, or without pa_decode_gluon / mha_batch_prefill_func."""
    fns, err = _aiter_functions(_DECODE_FNS + _EXTEND_FNS)
    if err is not None:
        return f"aiter is not importable ({err})"
    missing = [n for n in _DECODE_FNS + _EXTEND_FNS if n not in fns]
    return f"aiter has no {', '.join(missing)}" if missing else None


def _aiter_rescue(key: ConfigKey, names, unsupported) -> Tuple[Optional[Dict[str, Any]], Optional[str]]:
    """(aiter functions, None) when aiter can serve ``key`` after the portable
    kernel failed, else (None, why not)."""
    with _lock:
        known = _fallbacks.get(key)
    if known is not None:
        return None, known
    fns, err = _aiter_functions(names)
    if err is not None:
        return None, f"aiter is not importable ({err})"
    missing = [n for n in names if n not in fns]
    if missing:
        return None, f"aiter has no {', '.join(missing)}"
    why = unsupported() if unsupported is not None else None
    if why:
        return None, why
    return fns, None


def _run_portable(key: ConfigKey, names, unsupported, run_aiter, device, launch):
    """Launch a portable kernel (returns None), or, when it fails or is known
    to fail for this configuration, return ``run_aiter(fns)`` where aiter can
    serve it; else raise Kv5dNotReadyError naming both causes and the fix.

    The host checks' TypeError / ValueError propagate as before. A kernel
    failure is recorded once per configuration (sglang_kv5d.kernel_check),
    so a failing compile is not retried, inside a CUDA-graph capture neither.
    """
    from sglang_kv5d import kernel_check

    kernel = kernel_check.DECODE if names is _DECODE_FNS else kernel_check.EXTEND
    pkey = key._replace(function=kernel)
    failed = kernel_check.FAILED
    reason = failed.get((kernel, pkey)) if failed else None
    error = None
    if reason is None:
        try:
            launch()
            return None
        except Exception as e:
            if kernel_check.is_host_validation(e):
                raise
            error = e
    fns, why = _aiter_rescue(key, names, unsupported)
    if error is not None:
        fallback = ("aiter serves it" if fns is not None else
                    f"No other 5D attention path ({why}): such calls raise Kv5dNotReadyError")
        reason = kernel_check.record_failure(kernel, pkey, error, shapes=_key_text(pkey), device=device,
                                             fallback=fallback)
    if fns is not None:
        return run_aiter(fns)
    from sglang_kv5d.activation import Kv5dNotReadyError

    exc = Kv5dNotReadyError(
        f"sglang-kv5d: no working 5D attention path for {_key_text(pkey)}: the portable kernel failed "
        f"({reason}) and aiter cannot serve it ({why}). Fix: install an aiter build that serves this "
        "configuration, or a Triton that compiles the portable kernels (`sglang-kv5d doctor`), or unset "
        "SGLANG_AITER_KV_CACHE_LAYOUT to serve with the NHD layout"
    )
    if error is not None:
        raise exc from error
    raise exc


# --------------------------------------------------------------------------
# Small pure helpers
# --------------------------------------------------------------------------


def _torch():
    import torch

    return torch


def _fp8_dtypes():
    torch = _torch()
    return tuple(
        getattr(torch, n)
        for n in ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")
        if hasattr(torch, n)
    )


def _is_fp8(dtype) -> bool:
    return dtype in _fp8_dtypes()


def _dname(dtype) -> str:
    s = str(dtype)
    return s[6:] if s.startswith("torch.") else s


def decode_sliding_window_arg(sliding_window_size: Optional[int]) -> int:
    """``pa_decode_gluon``'s ``sliding_window`` for SGLang's ``sliding_window_size``.

    SGLang: ``sliding_window_size + 1`` visible keys (current token included);
    aiter: keys ``c >= ctx - W + 1``, i.e. W - 1 keys. So W = size + 2; 0 = off.
    """
    if sliding_window_size is None or sliding_window_size < 0:
        return 0
    return int(sliding_window_size) + 2


def _layer_window(layer) -> int:
    w = getattr(layer, "sliding_window_size", None)
    return int(w) if w is not None and w > -1 else -1


def _scale_tensor(value, device):
    """A per-tensor dequant scale as an fp32 ``[1]`` tensor on ``device``."""
    torch = _torch()
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"expected a per-tensor scale, got shape {tuple(value.shape)}")
        t = value.detach()
        if t.dtype != torch.float32 or t.device != device:
            t = t.to(device=device, dtype=torch.float32)
        return t.reshape(1)
    v = 1.0 if value is None else float(value)
    key = (v, str(device))
    t = _scale_cache.get(key)
    if t is None:
        t = torch.full((1,), v, dtype=torch.float32, device=device)
        _scale_cache[key] = t
    return t


def _kv_scales(layer, backend, device):
    k = getattr(layer, "k_scale", None)
    v = getattr(layer, "v_scale", None)
    if k is None:
        k = getattr(backend, "k_scale", None)
    if v is None:
        v = getattr(backend, "v_scale", None)
    return _scale_tensor(k, device), _scale_tensor(v, device)


def quantize_per_tensor(x, fp8_dtype):
    """(x_fp8, scale): saturating per-tensor quantization, scale = amax / fp8 max.

    ``scale`` is an fp32 ``[1]`` tensor on x's device (no host sync); it is the
    dequantization multiplier (x ~= x_fp8 * scale).
    """
    torch = _torch()
    fmax = torch.finfo(fp8_dtype).max
    xf = x.float()
    scale = (xf.abs().amax() / fmax).clamp(min=1e-12).reshape(1)
    xq = (xf / scale).clamp(-fmax, fmax).to(fp8_dtype)
    return xq, scale


def gather_5d_to_linear(k_cache, v_cache, slots, page_size: int):
    """Token rows of a SHUFFLE 5D cache: (T, H, D) K and (T, H, D_v) V at ``slots``.

    Works on any element type (pass the storage view, e.g. uint8 for fp8).
    """
    torch = _torch()
    slots = slots.to(torch.long)
    blk = torch.div(slots, page_size, rounding_mode="floor")
    off = slots - blk * page_size
    x = k_cache.shape[-1]
    t = slots.shape[0]
    k_lin = k_cache[blk, :, :, off, :].reshape(t, k_cache.shape[1], -1)
    v_lin = v_cache[blk, :, torch.div(off, x, rounding_mode="floor"), :, off % x]
    return k_lin, v_lin


def block_table_from_token_slots(kv_indptr, token_slots, page_size: int, batch_size: int, max_len: int):
    """(B, cdiv(max_len, page)) int32 page ids from SGLang's flat per-token slots.

    Row ``b`` covers ``token_slots[kv_indptr[b]:kv_indptr[b+1]]``; page ``j`` of
    it is ``token_slots[kv_indptr[b] + j * page] // page`` (SGLang's paged
    allocator keeps a request's tokens page-aligned). Entries past a row's
    length are 0 and never read. Pure device ops, no host sync.
    """
    torch = _torch()
    device = token_slots.device
    width = max(1, -(-int(max_len) // page_size))
    starts = kv_indptr[:batch_size].to(torch.long)
    lens = kv_indptr[1 : batch_size + 1].to(torch.long) - starts
    offs = torch.arange(width, device=device, dtype=torch.long) * page_size
    valid = offs[None, :] < lens[:, None]
    pos = torch.where(valid, starts[:, None] + offs[None, :], torch.zeros_like(starts)[:, None])
    n = token_slots.shape[0]
    if n == 0:
        return torch.zeros(batch_size, width, dtype=torch.int32, device=device)
    pos = pos.clamp(max=n - 1)
    pages = torch.div(token_slots.to(torch.long)[pos], page_size, rounding_mode="floor")
    return torch.where(valid, pages, torch.zeros_like(pages)).to(torch.int32)


def _page_table_2d(table, batch_size: int):
    """The first ``batch_size`` rows of a 2-D page table, in its own integer
    dtype (the Triton kernels read int32 and int64; the aiter path casts)."""
    t = table[:batch_size]
    if t.stride(-1) != 1:
        t = t.contiguous()
    return t


def _qo_indptr(backend):
    meta = getattr(backend, "forward_metadata", None)
    qo = getattr(meta, "qo_indptr", None)
    if qo is None:
        qo = getattr(backend, "qo_indptr", None)  # SGLang <= 0.5.22 reads this one
    if qo is None:
        raise AttributeError("backend has neither forward_metadata.qo_indptr nor qo_indptr")
    return qo


def _max_kv_len(backend, forward_batch, fallback_len: int) -> int:
    meta = backend.forward_metadata
    v = getattr(meta, "max_kv_len", None)
    if v is not None:
        return int(v)
    cpu = getattr(forward_batch, "seq_lens_cpu", None)
    if cpu is not None and len(cpu):
        return int(cpu.max())
    return int(fallback_len)


def _layer_cache(backend, layer, k_cache=None, v_cache=None):
    """Resolve (and wait for) the layer's sub-pool; its K/V views in the logical dtype."""
    sub, local = resolve_kv_subpool(backend.token_to_kv_pool, layer.layer_id)
    k_store = sub.k_buffer[local]
    v_store = sub.v_buffer[local]
    if k_store.dim() != 5 or v_store.dim() != 5:
        raise PoolLayoutError(
            f"layer {layer.layer_id}: {type(sub).__name__} buffers are "
            f"{k_store.dim()}-D/{v_store.dim()}-D, not SHUFFLE 5D; the vectorized_5d "
            "attention path cannot read them"
        )
    dtype = getattr(sub, "dtype", k_store.dtype)
    if k_cache is None:
        k_cache = k_store if k_store.dtype == dtype else k_store.view(dtype)
    if v_cache is None:
        v_cache = v_store if v_store.dtype == dtype else v_store.view(dtype)
    if tuple(k_cache.shape) != tuple(k_store.shape) or tuple(v_cache.shape) != tuple(v_store.shape):
        raise PoolLayoutError(
            f"layer {layer.layer_id}: the caller's K/V caches {tuple(k_cache.shape)}/"
            f"{tuple(v_cache.shape)} are not the layer's buffers {tuple(k_store.shape)}/"
            f"{tuple(v_store.shape)} in {type(sub).__name__}"
        )
    page = int(getattr(sub, "page_size", k_store.shape[3]))
    return sub, k_cache, v_cache, k_store, v_store, dtype, page


def _kernels():
    return importlib.import_module("sglang_kv5d.kernels")


# --------------------------------------------------------------------------
# Decode
# --------------------------------------------------------------------------


def forward_decode_vectorized_5d(backend, q, layer, forward_batch, k_cache, v_cache, o, sinks):
    """Decode attention (one query token per request) over a SHUFFLE 5D cache.

    Writes into ``o`` (``(bs, Hq * D_v)``) and returns None, like upstream.
    """
    torch = _torch()
    _, k_cache, v_cache, _, _, kv_dtype, page = _layer_cache(backend, layer, k_cache, v_cache)
    meta = backend.forward_metadata
    bs = int(forward_batch.batch_size)
    hq, hkv = int(layer.tp_q_head_num), int(layer.tp_k_head_num)
    d, dv = int(layer.qk_head_dim), int(layer.v_head_dim)
    window = _layer_window(layer)
    cap = float(getattr(layer, "logit_cap", 0.0) or 0.0)
    fp8 = _is_fp8(kv_dtype)
    q3 = q.view(-1, hq, d)
    o3 = o.view(-1, hq, dv)

    table = meta.kv_indices
    if window >= 0 and getattr(meta, "swa_page_table", None) is not None:
        table = meta.swa_page_table
    if table.dim() == 2:
        block_tables = _page_table_2d(table, bs)
    else:  # flat per-token slots + kv_indptr (decode without a page table)
        max_len = _max_kv_len(backend, forward_batch, table.shape[0])
        block_tables = block_table_from_token_slots(meta.kv_indptr, table, page, bs, max_len)
    # SGLang keeps seq_lens as int64. aiter takes int32 lengths and page
    # tables (cast below, on its path only); the Triton kernel reads either,
    # so the portable path launches no cast kernel per layer.
    context_lens = forward_batch.seq_lens[:bs]

    key = ConfigKey(
        "pa_decode_gluon", _dname(q.dtype), _dname(kv_dtype), page, d, dv, hq, hkv,
        window >= 0, sinks is not None, cap > 0,
    )
    unsupported = lambda: _decode_unsupported(q3, o3, kv_dtype, hq, hkv, d, dv, cap)  # noqa: E731
    impl, fns = _route(key, _DECODE_FNS, unsupported)

    def run_aiter(fns):
        lens = context_lens if context_lens.dtype == torch.int32 else context_lens.to(torch.int32)
        table = block_tables if block_tables.dtype == torch.int32 else block_tables.to(torch.int32)
        _decode_aiter(
            fns, backend, layer, q3, o3, k_cache, v_cache, table, lens,
            bs, hq, hkv, d, fp8, window, sinks,
        )

    if impl == "aiter":
        try:
            run_aiter(fns)
            return None
        except Exception as e:
            if not _is_no_kernel(e):
                raise
            _remember(key, f"{type(e).__name__}: {e}")

    k_scale = v_scale = None
    if fp8:
        k_scale, v_scale = _kv_scales(layer, backend, q.device)
    _run_portable(key, _DECODE_FNS, unsupported, run_aiter, q.device, lambda: _kernels().decode_attention_5d(
        q3,
        k_cache,
        v_cache,
        block_tables,
        context_lens,
        sm_scale=float(layer.scaling),
        k_scale=k_scale,
        v_scale=v_scale,
        fp8_dtype=kv_dtype if fp8 else None,
        sliding_window=window,
        sinks=sinks,
        logit_cap=cap,
        num_splits=None,
        out=o3,
    ))
    return None


def _decode_unsupported(q3, o3, kv_dtype, hq, hkv, d, dv, cap) -> Optional[str]:
    """Why pa_decode_gluon cannot serve this layer, or None."""
    torch = _torch()
    if cap > 0:
        return "pa_decode_gluon has no logit soft-cap"
    if d != dv:
        return f"pa_decode_gluon needs equal QK and V head dims (got {d} and {dv})"
    if hq % hkv or hq // hkv > 64:
        return f"GQA group {hq}/{hkv} unsupported (at most 64 per KV head)"
    if o3.dtype not in (torch.bfloat16, torch.float16):
        return f"output dtype {o3.dtype} unsupported"
    if _is_fp8(kv_dtype):
        aiter_fp8 = _aiter_fp8_dtype_safe()
        if aiter_fp8 is not None and aiter_fp8 != kv_dtype:
            return f"KV cache is {_dname(kv_dtype)} but this aiter build's fp8 is {_dname(aiter_fp8)}"
    return None


def _aiter_fp8_dtype_safe():
    try:
        return _aiter_fp8_dtype()
    except Exception:
        return None


def _decode_aiter(fns, backend, layer, q3, o3, k_cache, v_cache, block_tables, context_lens,
                  bs, hq, hkv, d, fp8, window, sinks):
    torch = _torch()
    device = q3.device
    group = hq // hkv
    if window >= 0:
        splits = 1
    else:
        splits = int(fns["get_recommended_splits"](num_sequences=bs, num_kv_heads=hkv))
    key_scale = value_scale = None
    if fp8:
        key_scale, value_scale = _kv_scales(layer, backend, device)
    query_scale = None
    if _is_fp8(q3.dtype):
        qs = getattr(layer, "q_scale", None)
        if qs is None:
            qs = getattr(backend, "q_scale", None)
        query_scale = _scale_tensor(qs, device)
    compute_type = torch.float16 if o3.dtype == torch.float16 else torch.bfloat16
    exp_sums = torch.empty((bs, hkv, splits, group), dtype=torch.float32, device=device)
    max_logits = torch.empty_like(exp_sums)
    temporary_output = torch.empty((bs, hkv, splits, group, d), dtype=o3.dtype, device=device)
    fns["pa_decode_gluon"](
        output=o3,
        query=q3,
        key_cache=k_cache,
        value_cache=v_cache,
        context_lengths=context_lens,
        block_tables=block_tables,
        softmax_scale=float(layer.scaling),
        query_length=1,
        max_context_partition_num=splits,
        context_partition_size=CONTEXT_PARTITION_SIZE,
        compute_type=compute_type,
        query_scale=query_scale,
        key_scale=key_scale,
        value_scale=value_scale,
        exp_sums=exp_sums,
        max_logits=max_logits,
        temporary_output=temporary_output,
        alibi_slopes=None,
        sinks=sinks,
        sliding_window=decode_sliding_window_arg(window),
        ps=True,
    )


# --------------------------------------------------------------------------
# Extend (prefill / chunked prefill)
# --------------------------------------------------------------------------


def forward_extend_vectorized_5d(backend, q, k, v, layer, forward_batch, bs0, window_size, sinks):
    """Extend attention over a SHUFFLE 5D cache; returns ``(T, Hq * D_v)``.

    ``k``/``v`` are the new tokens' keys and values, already written to the
    cache by the caller; ``bs0`` is batch size + 1; ``window_size`` is the
    caller's aiter-style ``(left, right)`` (``(sliding_window_size, -1)`` or
    ``(-1, -1)``).
    """
    torch = _torch()
    _, k_cache, v_cache, k_store, v_store, kv_dtype, page = _layer_cache(backend, layer)
    meta = backend.forward_metadata
    bs = int(bs0) - 1
    hq, hkv, hkv_v = int(layer.tp_q_head_num), int(layer.tp_k_head_num), int(layer.tp_v_head_num)
    d, dv = int(layer.qk_head_dim), int(layer.v_head_dim)
    window = _layer_window(layer)
    if window_size is not None and len(window_size) == 2 and int(window_size[0]) >= 0:
        window = int(window_size[0])
    aiter_window = tuple(window_size) if window_size is not None else ((window, -1) if window >= 0 else (-1, -1))
    cap = float(getattr(layer, "logit_cap", 0.0) or 0.0)
    fp8 = _is_fp8(kv_dtype)
    out_dtype = getattr(backend, "input_dtype", None) or q.dtype
    q3 = q.reshape(-1, hq, d)
    qo_indptr = _qo_indptr(backend)[: bs + 1]

    use_swa_table = window >= 0 and getattr(meta, "swa_page_table", None) is not None
    slots = meta.swa_page_table if use_swa_table else meta.kv_indices

    key = ConfigKey(
        "mha_batch_prefill_func", _dname(q.dtype), _dname(kv_dtype), page, d, dv, hq, hkv,
        window >= 0, sinks is not None, cap > 0,
    )
    def unsupported() -> Optional[str]:
        if sinks is not None:
            return EXTEND_SINKS_UNSUPPORTED
        if d > 256 or dv > 256:
            return f"head dims {d}/{dv} exceed 256"
        if fp8:
            aiter_fp8 = _aiter_fp8_dtype_safe()
            if aiter_fp8 is not None and aiter_fp8 != kv_dtype:
                return f"KV cache is {_dname(kv_dtype)} but this aiter build's fp8 is {_dname(aiter_fp8)}"
        return None

    impl, fns = _route(key, _EXTEND_FNS, unsupported)

    def run_aiter(fns):
        o = _extend_aiter(
            fns["mha_batch_prefill_func"], backend, layer, forward_batch, q3, k, v,
            k_store, v_store, kv_dtype, page, slots, qo_indptr, bs, hq, hkv, hkv_v, d, dv,
            fp8, aiter_window, cap, sinks,
        )
        if o.dtype != out_dtype:
            o = o.to(out_dtype)
        return o.reshape(-1, hq * dv)

    if impl == "aiter":
        try:
            return run_aiter(fns)
        except Exception as e:
            if not _is_no_kernel(e):
                raise
            _remember(key, f"{type(e).__name__}: {e}")

    total_kv = int(forward_batch.seq_lens_sum)
    max_len = _max_kv_len(backend, forward_batch, total_kv)
    block_tables = block_table_from_token_slots(meta.kv_indptr, slots[:total_kv], page, bs, max_len)
    kv_lens = forward_batch.seq_lens[:bs]
    if kv_lens.dtype != torch.int32:
        kv_lens = kv_lens.to(torch.int32)
    if qo_indptr.dtype != torch.int32:
        qo_indptr = qo_indptr.to(torch.int32)
    k_scale = v_scale = None
    if fp8:
        k_scale, v_scale = _kv_scales(layer, backend, q.device)
    out = torch.empty((q3.shape[0], hq, dv), dtype=out_dtype, device=q.device)
    rescued = _run_portable(key, _EXTEND_FNS, unsupported, run_aiter, q.device, lambda: _kernels().extend_attention_5d(
        q3,
        k_cache,
        v_cache,
        block_tables,
        qo_indptr,
        kv_lens,
        sm_scale=float(layer.scaling),
        causal=True,
        k_scale=k_scale,
        v_scale=v_scale,
        fp8_dtype=kv_dtype if fp8 else None,
        sliding_window=window,
        sinks=sinks,
        logit_cap=cap,
        out=out,
    ))
    if rescued is not None:  # aiter's result (the portable kernel failed)
        return rescued
    return out.reshape(-1, hq * dv)


def _extend_aiter(mha, backend, layer, forward_batch, q3, k, v, k_store, v_store, kv_dtype, page,
                  slots, qo_indptr, bs, hq, hkv, hkv_v, d, dv, fp8, window_size, cap, sinks):
    torch = _torch()
    meta = backend.forward_metadata
    device = q3.device
    prefix = getattr(forward_batch, "extend_prefix_lens_cpu", None)
    fresh = prefix is not None and not any(prefix)
    common = dict(
        dropout_p=0.0,
        softmax_scale=float(layer.scaling),
        logits_soft_cap=cap,
        causal=True,
        window_size=window_size,
        alibi_slopes=None,
        deterministic=False,
        return_lse=False,
        return_attn_probs=False,
        out=None,
        sink_ptr=sinks,
    )
    if fresh:
        # Every request starts from an empty prefix: the new k/v are the whole
        # KV stream. No cache read, no descales (k/v are in the model dtype).
        k_lin = k.reshape(-1, hkv, d)
        v_lin = v.reshape(-1, hkv_v, dv)
        if not k_lin.is_contiguous():
            k_lin = k_lin.contiguous()
        if not v_lin.is_contiguous():
            v_lin = v_lin.contiguous()
        max_q = int(meta.max_q_len)
        return mha(
            q=q3 if q3.is_contiguous() else q3.contiguous(),
            k=k_lin,
            v=v_lin,
            cu_seqlens_q=qo_indptr,
            kv_indptr=qo_indptr,
            kv_page_indices=torch.arange(k_lin.shape[0], dtype=torch.int32, device=device),
            max_seqlen_q=max_q,
            max_seqlen_k=max_q,
            **common,
        )

    total_kv = int(forward_batch.seq_lens_sum)
    k_lin, v_lin = gather_5d_to_linear(k_store, v_store, slots[:total_kv], page)
    if k_lin.dtype != kv_dtype:
        k_lin = k_lin.view(kv_dtype)
        v_lin = v_lin.view(kv_dtype)
    descales = {}
    q_in = q3
    if fp8:
        q_in, q_descale = quantize_per_tensor(q3, kv_dtype)
        k_descale, v_descale = _kv_scales(layer, backend, device)
        descales = dict(q_descale=q_descale, k_descale=k_descale, v_descale=v_descale)
    kv_indptr = meta.kv_indptr[: bs + 1]
    max_kv = _max_kv_len(backend, forward_batch, total_kv)
    return mha(
        q=q_in if q_in.is_contiguous() else q_in.contiguous(),
        k=k_lin,
        v=v_lin,
        cu_seqlens_q=qo_indptr,
        kv_indptr=kv_indptr,
        kv_page_indices=torch.arange(total_kv, dtype=torch.int32, device=device),
        max_seqlen_q=int(meta.max_q_len),
        max_seqlen_k=max_kv,
        **common,
        **descales,
    )
