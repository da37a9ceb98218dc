"""Which 5D attention implementation serves a call: aiter or the portable kernels.

``SGLANG_KV5D_ATTN_IMPL`` (auto | aiter | triton), aiter discovery, and the
fallback bookkeeping: a configuration aiter cannot run is remembered and sent
to the portable kernels (one warning each); a portable kernel that fails is
rescued by aiter where it can serve the call, else Kv5dNotReadyError.
"""

from __future__ import annotations

import importlib
import logging
import threading
from typing import Any, Dict, NamedTuple, Optional, Tuple

from ..aiter_pages import PA_DECODE_PAGES, decode_page_unsupported  # noqa: F401 - re-exported
from ..surface_names import ENV_KV_CACHE_LAYOUT
from ..errors import Kv5dNotReadyError
from .. import kernel_failures
from .common import clear_scale_cache

logger = logging.getLogger("sglang_kv5d.attention")


IMPLS = ("auto", "aiter", "triton")


CONTEXT_PARTITION_SIZE = 256


NO_KERNEL_MARK = "no matching kernel"


DECODE_FNS = ("pa_decode_gluon", "get_recommended_splits")


EXTEND_FNS = ("mha_batch_prefill_func",)


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
        clear_scale_cache()
        _aiter_import_error = None


def aiter_import_error() -> Optional[str]:
    """The remembered failure to import aiter (``Type: message``), or None."""
    return _aiter_import_error


def aiter_functions(names) -> Tuple[Dict[str, Any], Optional[str]]:
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
        fn = getattr(pa, n, None) if n in DECODE_FNS else getattr(top, n, None)
        if callable(fn):
            found[n] = fn
    return found, None


def _aiter_fp8_dtype():
    mod = importlib.import_module("aiter")
    return getattr(getattr(mod, "dtypes", None), "fp8", None)


def remember_fallback(key: Any, reason: str) -> None:
    with _lock:
        if key in _fallbacks:
            return
        _fallbacks[key] = reason
    logger.warning(
        "sglang-kv5d: aiter cannot run %s (%s); using the portable Triton 5D path "
        "for this configuration from now on",
        key_text(key),
        reason,
    )


def key_text(key: Any) -> str:
    if isinstance(key, ConfigKey):
        return (
            f"{key.function} [q {key.q_dtype}, kv {key.kv_dtype}, page {key.page_size}, "
            f"head_dim {key.head_dim}/{key.v_head_dim}, heads {key.q_heads}/{key.kv_heads}, "
            f"window {'on' if key.window else 'off'}, sinks {'on' if key.sinks else 'off'}, "
            f"logit_cap {'on' if key.logit_cap else 'off'}]"
        )
    return str(key)


def route(key: ConfigKey, names, unsupported) -> Tuple[str, Dict[str, Any]]:
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
    fns, err = aiter_functions(names)
    missing = [n for n in names if n not in fns]
    if err is not None or missing:
        if impl == "auto":
            return "triton", {}
        why = f"aiter is not importable ({err})" if err else f"aiter has no {', '.join(missing)}"
        remember_fallback(key, why)
        return "triton", {}
    why = unsupported() if unsupported is not None else None
    if why:
        remember_fallback(key, why)
        return "triton", {}
    return "aiter", fns


def is_no_kernel(e: BaseException) -> bool:
    return NO_KERNEL_MARK in str(e)


def aiter_problem() -> Optional[str]:
    """Why aiter cannot serve 5D attention in this process (None when it can):
    not importable, or without pa_decode_gluon / mha_batch_prefill_func."""
    fns, err = aiter_functions(DECODE_FNS + EXTEND_FNS)
    if err is not None:
        return f"aiter is not importable ({err})"
    missing = [n for n in DECODE_FNS + EXTEND_FNS if n not in fns]
    return f"aiter has no {', '.join(missing)}" if missing else None


def _aiter_rescue(key: ConfigKey, names, unsupported) -> Tuple[Optional[Dict[str, Any]], Optional[str]]:
    """(aiter functions, None) when aiter can serve ``key`` after the portable
    kernel failed, else (None, why not)."""
    with _lock:
        known = _fallbacks.get(key)
    if known is not None:
        return None, known
    fns, err = aiter_functions(names)
    if err is not None:
        return None, f"aiter is not importable ({err})"
    missing = [n for n in names if n not in fns]
    if missing:
        return None, f"aiter has no {', '.join(missing)}"
    why = unsupported() if unsupported is not None else None
    if why:
        return None, why
    return fns, None


def run_portable(key: ConfigKey, names, unsupported, run_aiter, device, launch):
    """Launch a portable kernel (returns None), or, when it fails or is known
    to fail for this configuration, return ``run_aiter(fns)`` where aiter can
    serve it; else raise Kv5dNotReadyError naming both causes and the fix.

    The host checks' TypeError / ValueError propagate as before. A kernel
    failure is recorded once per configuration (sglang_kv5d.kernel_failures),
    so a failing compile is not retried, inside a CUDA-graph capture neither.
    """
    kernel = kernel_failures.DECODE if names is DECODE_FNS else kernel_failures.EXTEND
    pkey = key._replace(function=kernel)
    failed = kernel_failures.FAILED
    reason = failed.get((kernel, pkey)) if failed else None
    error = None
    if reason is None:
        try:
            launch()
            return None
        except Exception as e:  # a kernel failure has no one type (CompilationError, OutOfResources, driver RuntimeError, ...)
            if kernel_failures.is_host_validation(e):
                raise
            error = e
    fns, why = _aiter_rescue(key, names, unsupported)
    if error is not None:
        fallback = ("aiter serves it" if fns is not None else
                    f"No other 5D attention path ({why}): such calls raise Kv5dNotReadyError")
        reason = kernel_failures.record_failure(kernel, pkey, error, shapes=key_text(pkey), device=device,
                                                fallback=fallback)
    if fns is not None:
        return run_aiter(fns)
    exc = Kv5dNotReadyError(
        f"sglang-kv5d: no working 5D attention path for {key_text(pkey)}: the portable kernel failed "
        f"({reason}) and aiter cannot serve it ({why}). Fix: install an aiter build that serves this "
        f"configuration, or a Triton that compiles the portable kernels (`sglang-kv5d doctor`), or unset "
        f"{ENV_KV_CACHE_LAYOUT} to serve with the NHD layout"
    )
    if error is not None:
        raise exc from error
    raise exc


def aiter_fp8_dtype():
    """aiter's fp8 dtype (``aiter.dtypes.fp8``), or None when aiter does not import."""
    try:
        return _aiter_fp8_dtype()
    except Exception:  # importing aiter runs rocminfo / driver queries: anything may come out
        return None
