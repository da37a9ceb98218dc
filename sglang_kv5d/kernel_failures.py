"""Kernel failures on the hot paths: remembered per configuration, warned once.

A leaf (it imports only :mod:`sglang_kv5d.platform`): the patched write, the
5D attention routing and the verify page tables record a Triton kernel that
fails here and read the records before each launch, without importing the
checks before traffic (sglang_kv5d.kernel_check, which re-exports these names).

    record_failure(kernel, key, exc, ...)   remember (kernel, key); ONE warning
                                            naming the kernel, the shapes, the
                                            Triton version, the target and the
                                            error's first line
    failure(kernel, key)                    the recorded reason, or None
    FAILED                                  the same records (a dict; empty in
                                            a healthy process, so the hot paths
                                            test it for truth before anything)
    is_host_validation(exc)                 a TypeError / ValueError of the
                                            overlay's own host checks: not a
                                            kernel failure

and the facts a record states, read without side effects: the Triton
version, the target a kernel compiles for, an error's first line, whether a
CUDA graph is being captured (read through this module's globals, so tests
replace ``capturing`` here), a dtype's short name.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Dict, Hashable, Optional, Tuple

from .platform import device_arch, interpreting

logger = logging.getLogger("sglang_kv5d")

FP8_WRITE = "write_kv_fp8"
DECODE = "decode_attention_5d"
EXTEND = "extend_attention_5d"
VERIFY = "verify_attention_5d"  # decode_attention_5d with queries_per_seq = N (speculative target verify)

#: (kernel, key) -> reason (the error's type and first line). Read it, never write it.
FAILED: Dict[Tuple[str, Hashable], str] = {}
_lock = threading.Lock()

# The package directory: an exception raised from a file under it comes from
# the overlay's own code.
_PKG_DIR = os.path.dirname(os.path.abspath(__file__))

__all__ = [
    "DECODE", "EXTEND", "FAILED", "FP8_WRITE", "VERIFY", "capturing", "dtype_name", "error_line", "failure",
    "failures", "interpreting", "is_host_validation", "record_failure", "reset_failures", "target_text",
    "triton_version",
]


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


def reset_failures() -> None:
    """Forget every record (tests, through kernel_check.reset; a process never needs it)."""
    with _lock:
        FAILED.clear()


def dtype_name(dtype) -> str:
    """``torch.float8_e4m3fn`` -> ``float8_e4m3fn`` (any other object: its str)."""
    s = str(dtype)
    return s[6:] if s.startswith("torch.") else s


def triton_version() -> str:
    try:
        import triton

        return str(triton.__version__)
    except Exception as exc:  # a broken Triton install (any error at its import) is itself the finding
        return f"unknown ({type(exc).__name__})"


def target_text(device) -> str:
    """The device a kernel compiles for, in words: name and arch, or the interpreter."""
    try:
        import torch

        dev = torch.device(device)
        if interpreting() or dev.type != "cuda":
            return f"Triton CPU interpreter ({dev})" if interpreting() else str(dev)
        idx = dev.index if dev.index is not None else torch.cuda.current_device()
        arch = (device_arch(idx) or "").split(":", 1)[0]
        return f"{torch.cuda.get_device_properties(idx).name} ({arch}, cuda:{idx})"
    except Exception as exc:  # text for a warning about a failure already caught: the driver may raise anything
        return f"{device} (target unknown: {type(exc).__name__})"


def error_line(exc: BaseException) -> str:
    """``Type: first line`` of an error; for Triton's CompilationError the
    message itself (its text starts with the source location and excerpt)."""
    text = getattr(exc, "error_message", None) if type(exc).__name__ == "CompilationError" else None
    if not text:
        text = str(exc)
    line = next((ln.strip() for ln in str(text).splitlines() if ln.strip()), "")
    if len(line) > 300:
        line = line[:297] + "..."
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__


def capturing() -> bool:
    """Is the current CUDA stream capturing a graph? (False without CUDA.)"""
    try:
        import torch

        return bool(torch.cuda.is_available() and torch.cuda.is_current_stream_capturing())
    except Exception:  # asked while recording a failure: a broken driver must not hide the record
        return False


def is_host_validation(exc: BaseException) -> bool:
    """A TypeError / ValueError raised by the overlay's own code (a host check
    that runs before anything is written), not by Triton or the driver."""
    if not isinstance(exc, (TypeError, ValueError)):
        return False
    tb = exc.__traceback__
    if tb is None:
        return True
    while tb.tb_next is not None:
        tb = tb.tb_next
    filename = os.path.abspath(tb.tb_frame.f_code.co_filename)
    return filename.startswith(_PKG_DIR + os.sep)
