"""Facts a kernel-failure message states, read without side effects.

The Triton version, the target a kernel compiles for, an error's first line,
whether a CUDA graph is being captured, and whether an exception came from
the overlay's own host checks (not a kernel failure).
"""

from __future__ import annotations

import os

from ..platform import device_arch, interpreting

# The package directory: an exception raised from a file under it comes from
# the overlay's own code.
_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

__all__ = ["capturing", "error_line", "interpreting", "is_host_validation", "sync", "target_text", "triton_version"]


def _dname(dtype) -> str:
    s = str(dtype)
    return s[6:] if s.startswith("torch.") else s


def triton_version() -> str:
    try:
        import triton

        return str(triton.__version__)
    except Exception as exc:  # a broken Triton install is itself the finding
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
    except Exception as exc:
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
    except Exception:
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



def sync(device) -> None:
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)
