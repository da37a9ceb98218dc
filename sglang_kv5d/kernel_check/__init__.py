"""Kernel failures: remembered per configuration, logged once, checked before traffic.

A Triton kernel of the overlay can fail where SGLang's own code would not: a
compile error (``triton.compiler.errors.CompilationError``), too little shared
memory or too many registers (``triton.runtime.errors.OutOfResources``), a
driver error at load or launch (``RuntimeError``), the interpreter's
``InterpreterError``. The patched paths catch such failures, send the call to
the path that runs without the overlay, and record the failure here:

    record_failure(kernel, key, exc, ...)   remember (kernel, key); ONE warning
                                            naming the kernel, the shapes, the
                                            Triton version, the target and the
                                            error's first line
    failure(kernel, key)                    the recorded reason, or None; the
                                            patched paths route a known-bad
                                            configuration to the fallback
                                            without trying the kernel again
    FAILED                                  the same records (a dict; empty in
                                            a healthy process, so the hot paths
                                            test it for truth before anything)

``key`` is the configuration a compile depends on, without the token count
(``Fp8WriteKey``; ``sglang_kv5d.attention.ConfigKey`` for attention): one
failing variant sends every call of that configuration to the fallback, so a
broken compiler is not asked again for each new batch size.

What is not a kernel failure: ``TypeError`` / ``ValueError`` raised by the
overlay's own host checks (:func:`is_host_validation`), which run before
anything is written; the callers handle those as before.

Writes and partial results. The fused FP8 write is one kernel launch: when
its compile or launch raises, no program ran and the caches are as they were;
the fallback (SGLang's own write) then writes every slot of the call anyway.
The portable attention kernels write only their output tensor, which the
fallback writes whole. A fault *inside* a running kernel (an illegal address)
is reported by the device asynchronously, later, and is not caught here.

CUDA graphs. Nothing here compiles or retries during a capture: a known-bad
configuration goes to the fallback; a first failure inside a capture is
recorded and that call falls back (the capture itself may then be unusable;
SGLang reports that). The check before traffic exists so that compiles happen
before capture:

    check_fp8_write(...)       compile and run the FP8 write for a pool's real
                               shapes and dtypes on scratch tensors (never the
                               real caches), for the token counts of decode
                               batches and prefill chunks (each is its own
                               Triton variant)
    check_attention(...)       the same for the portable decode / extend kernels
    check_verify(...)          the same for the packed verify kernel of a
                               speculative 5D target (aiter present or not)
    attention_startup(...)     which 5D attention path the process will take,
                               and the Kv5dNotReadyError message when none works

These take explicit shapes, dtypes and a device (``doctor`` can call them).
The adapters read those from SGLang's pool and backend objects;
``patches/fail_closed.py`` calls them when a 5D pool or the AITER backend is
built.

    __init__.py         the records (FAILED, record_failure, failure, reset)
    facts.py            what a message states: Triton version, target, error
                        line, capture state, host-validation errors
    write_check.py      the FP8 write's key, shapes text and check
    attention_check.py  the portable attention check and the startup decision
    adapters.py         check_pool / check_backend from SGLang's objects

Cost: the check's time is the compile time of the variants it covers,
which the process would otherwise pay at its first requests or inside
CUDA-graph capture, plus scratch launches of milliseconds; Triton caches the
compiled kernels on disk, so a restart pays only the load. Variants the check
does not cover (other integer specialisations of the token count, tensor
scales, int64 addressing of caches over 2**31 bytes) compile at first use and
are still covered by the run-time fallback.

Measured compile times (2-core shared CPU, cold Triton cache, compiled for
the arch without a GPU through ``kernels.aot.compiling_for``, 8 KV heads of
128 dims, page 16, Triton 3.8.0): the FP8 write's seven token counts took
4.4 s for sm_90 and 4.7 s for gfx942 (0.3-1.2 s each); decode (direct,
split and reduction kernels) plus extend 1.5-3.7 s (sm_90) and 1.5-2.8 s
(gfx942) per KV dtype. Not measured on a GPU in this form; there the check
adds module loads and launches of scratch tensors of at most a few MiB.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Dict, Hashable, NamedTuple, Optional, Tuple

# Read through this module's globals by record_failure (tests replace capturing here).
from .facts import capturing, error_line, interpreting, is_host_validation, target_text, triton_version

logger = logging.getLogger("sglang_kv5d")

FP8_WRITE = "write_kv_fp8"
DECODE = "decode_attention_5d"
EXTEND = "extend_attention_5d"
VERIFY = "verify_attention_5d"  # decode_attention_5d with queries_per_seq = N (speculative target verify)

#: (kernel, key) -> reason (the error's type and first line). Read it, never write it.
FAILED: Dict[Tuple[str, Hashable], str] = {}
_checked: Dict[Tuple[str, Hashable], "CheckResult"] = {}
_lock = threading.Lock()


class CheckResult(NamedTuple):
    kernel: str
    key: Hashable
    ok: bool
    error: Optional[str]  # the recorded reason when not ok
    seconds: float  # wall time of the check (compiles included)
    variants: Tuple[Any, ...]  # what was launched (token counts, or a description)


def failure(kernel: str, key: Hashable) -> Optional[str]:
    """Why (kernel, key) is known not to work in this process, or None."""
    return FAILED.get((kernel, key))


def failures() -> Dict[Tuple[str, Hashable], str]:
    with _lock:
        return dict(FAILED)


def record_failure(kernel: str, key: Hashable, exc: BaseException, *, shapes: str, device,
                   fallback: str, when: str = "at run time") -> str:
    """Remember that ``kernel`` fails for ``key`` and warn once for it; returns the reason."""
    reason = error_line(exc)
    if capturing():
        when += ", inside a CUDA-graph capture"
    with _lock:
        if (kernel, key) in FAILED:
            return FAILED[(kernel, key)]
        FAILED[(kernel, key)] = reason
    logger.warning(
        "sglang-kv5d: kernel %s failed %s for %s (Triton %s, target %s): %s. %s for this "
        "configuration from now on; run `sglang-kv5d doctor` on this machine for the details",
        kernel, when, shapes, triton_version(), target_text(device), reason, fallback,
    )
    return reason


def reset() -> None:
    """Forget every record and check result (tests; a process never needs it)."""
    with _lock:
        FAILED.clear()
        _checked.clear()


# The checks; imported last, they use the records above.
from .attention_check import DECODE_WIDE_TOKENS, AttentionDecision, attention_key, attention_shapes  # noqa: E402
from .attention_check import attention_startup, check_attention, check_verify, verify_refusal  # noqa: E402
from .write_check import FP8_WRITE_FALLBACK, FP8_WRITE_TOKENS, FP8_WRITE_TOKENS_INTERPRETER  # noqa: E402
from .write_check import SCRATCH_BYTES_MAX, Fp8WriteKey, check_fp8_write, fp8_write_key, fp8_write_shapes  # noqa: E402
from .adapters import _fp8_write_patched, check_backend, check_pool  # noqa: E402,F401

__all__ = [
    "DECODE", "DECODE_WIDE_TOKENS", "EXTEND", "VERIFY", "FAILED", "FP8_WRITE", "FP8_WRITE_FALLBACK", "FP8_WRITE_TOKENS",
    "FP8_WRITE_TOKENS_INTERPRETER", "SCRATCH_BYTES_MAX", "AttentionDecision", "CheckResult", "Fp8WriteKey",
    "attention_key", "attention_shapes", "attention_startup", "capturing", "check_attention", "check_backend", "check_verify",
    "check_fp8_write", "check_pool", "error_line", "failure", "failures", "fp8_write_key", "fp8_write_shapes",
    "interpreting", "is_host_validation", "record_failure", "reset", "target_text", "triton_version", "verify_refusal",
]
