"""Kernel failures: remembered per configuration, logged once, checked before traffic.

A Triton kernel of the overlay can fail where SGLang's own code would not: a
compile error (``triton.compiler.errors.CompilationError``), too little shared
memory or too many registers (``triton.runtime.errors.OutOfResources``), a
driver error at load or launch (``RuntimeError``), the interpreter's
``InterpreterError``. The patched paths catch such failures, send the call to
the path that runs without the overlay, and record the failure in the leaf
:mod:`sglang_kv5d.kernel_failures` (re-exported here):

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

These take explicit shapes, dtypes and a device (``doctor`` can call them),
and read no SGLang object, patch or engine state (a core module: it sits
below the engine and the patches, tests/test_layers.py). The adapters that
read the shapes from SGLang's pool and backend objects are
``sglang_kv5d.patches.startup_checks`` (check_pool, check_backend), which
``patches/fail_closed.py`` calls when a 5D pool or the AITER backend is built.

    sglang_kv5d/kernel_failures.py  the records (FAILED, record_failure,
                        failure) and what a message states: Triton version,
                        target, error line, capture state, host-validation
                        errors (a leaf the hot paths import)
    __init__.py         re-exports, reset
    results.py          CheckResult, the results by (kernel, key), sync
    write_check.py      the FP8 write's key, shapes text and check
    attention_check.py  the portable attention check and the startup decision

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

from ..kernel_failures import DECODE, EXTEND, FAILED, FP8_WRITE, VERIFY, capturing, error_line, failure, failures
from ..kernel_failures import interpreting, is_host_validation, record_failure, reset_failures, target_text
from ..kernel_failures import triton_version
from .attention_check import DECODE_WIDE_TOKENS, AttentionDecision, attention_key, attention_shapes
from .attention_check import attention_startup, check_attention, check_verify, verify_refusal
from .results import CheckResult, check_results, forget_results
from .write_check import FP8_WRITE_FALLBACK, FP8_WRITE_TOKENS, FP8_WRITE_TOKENS_INTERPRETER
from .write_check import SCRATCH_BYTES_MAX, Fp8WriteKey, check_fp8_write, fp8_write_key, fp8_write_shapes


def reset() -> None:
    """Forget every failure record and check result (tests; a process never needs it)."""
    reset_failures()
    forget_results()


__all__ = [
    "DECODE", "DECODE_WIDE_TOKENS", "EXTEND", "VERIFY", "FAILED", "FP8_WRITE", "FP8_WRITE_FALLBACK", "FP8_WRITE_TOKENS",
    "FP8_WRITE_TOKENS_INTERPRETER", "SCRATCH_BYTES_MAX", "AttentionDecision", "CheckResult", "Fp8WriteKey",
    "attention_key", "attention_shapes", "attention_startup", "capturing", "check_attention", "check_results",
    "check_verify", "check_fp8_write", "error_line", "failure", "failures", "fp8_write_key", "fp8_write_shapes",
    "interpreting", "is_host_validation", "record_failure", "reset", "target_text", "triton_version", "verify_refusal",
]
