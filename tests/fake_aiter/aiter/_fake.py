"""Call recording, strict mode and error injection shared by the fake aiter.

Test-only. Every fake entry point is wrapped by :func:`recorded`, which appends a
:class:`Call` to :data:`CALLS` *before* validating, so rejected calls are
recorded too.

Strict mode (``set_strict(True)``, the :func:`strict` context manager, or
``FAKE_AITER_STRICT=1`` in the environment) makes every recorded function raise
``TypeError`` when called with any positional argument: the project's own calls
must be keyword-only.

:class:`SilentGarbage` marks calls the real aiter would *accept* but answer with
wrong numbers (fp8 cache without scales, a truncating partition count, block ids
out of range): the fake refuses them loudly instead.
"""

from __future__ import annotations

import contextlib
import functools
import os
from typing import Any, Callable, Dict, List, NamedTuple, Optional

import torch


class Call(NamedTuple):
    name: str
    args: tuple
    kwargs: dict


#: Every call to a recorded fake function, in order (tests clear it).
CALLS: List[Call] = []

_STRICT = os.environ.get("FAKE_AITER_STRICT", "") not in ("", "0", "false", "False")
_INJECT: Dict[str, List[Any]] = {}

#: Compute units reported to get_recommended_splits (MI300X has 304).
NUM_CU = 304

#: Page sizes with a compiled paged batch-prefill instance (CK, aiter HEAD).
PREFILL_PAGE_SIZES = {1, 16, 1024}

#: Does the batch-prefill JIT build a sink kernel for per-head sink logits
#: (``sink_ptr``) without sink tokens (``sink_size``)? False, as at aiter
#: e4048607: "no matching kernel". ROCm/aiter#4976 (2026-08-25) makes it True.
PREFILL_SINK_PTR_KERNELS = False

#: Does batch prefill read ``kv_page_indices`` one entry past each sequence's
#: last page, as CK's V prefetch does before ROCm/rocm-libraries#6932 (clamped
#: there; aiter took it in ROCm/aiter#3032)? True: an exactly sized table faults
#: (:class:`PageTableOverRead`). False models a build with the fix.
PREFILL_READS_PAST_TABLE = True

#: The block sizes ``pa_decode_gluon``'s wrapper asserts (``kv_block_size in [16,
#: 64, 1024]``, AssertionError), or None where it asserts none. None as at main
#: e4048607 and every release from v0.1.14 (the list is only in the docstring
#: there); ``(16, 64, 1024)`` models v0.1.10 .. v0.1.13.post1.
PA_DECODE_BLOCK_SIZES = None

#: The GPU architecture pa_decode_gluon sees (it asserts gfx942 or gfx950).
ARCH = "gfx942" if os.environ.get("FAKE_AITER_FP8") == "e4m3fnuz" else "gfx950"

#: Is Triton's Gluon importable (pa_decode_gluon raises RuntimeError if not)?
GLUON = True


class SilentGarbage(AssertionError):
    """The real aiter would accept this call and return garbage."""


class PageTableOverRead(IndexError):
    """Batch prefill read a page-index entry past the table, or an entry that is
    no valid page id: on a GPU a memory access fault (or a wrong page)."""


def reset() -> None:
    CALLS.clear()
    _INJECT.clear()


def set_strict(on: bool = True) -> None:
    global _STRICT
    _STRICT = bool(on)


def is_strict() -> bool:
    return _STRICT


@contextlib.contextmanager
def strict(on: bool = True):
    old = _STRICT
    set_strict(on)
    try:
        yield
    finally:
        set_strict(old)


def inject_error(name: str, exc: BaseException, times: Optional[int] = None) -> None:
    """Make the fake ``name`` raise ``exc`` (``times`` calls, or every call)."""
    _INJECT[name] = [exc, times]


def calls(name: Optional[str] = None) -> List[Call]:
    return [c for c in CALLS if name is None or c.name == name]


def recorded(name: str) -> Callable:
    def deco(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            CALLS.append(Call(name, args, dict(kwargs)))
            if _STRICT and args:
                raise TypeError(
                    f"fake aiter (strict): {name}() called with {len(args)} positional "
                    "argument(s); pass every argument by keyword"
                )
            inj = _INJECT.get(name)
            if inj is not None:
                exc, times = inj
                if times is not None:
                    inj[1] = times - 1
                    if inj[1] <= 0:
                        del _INJECT[name]
                raise exc
            return fn(*args, **kwargs)

        wrapper.__fake_aiter__ = True
        return wrapper

    return deco


def unimplemented(name: str) -> Callable:
    """A recorded placeholder for an aiter entry point the fake does not model."""

    @recorded(name)
    def stub(*args, **kwargs):
        raise NotImplementedError(f"fake aiter: {name} is not implemented (test double)")

    stub.__name__ = stub.__qualname__ = name.rsplit(".", 1)[-1]
    return stub


def fp8_dtype() -> torch.dtype:
    from aiter import dtypes

    return dtypes.fp8


def check(cond: bool, msg: str, exc=AssertionError) -> None:
    if not cond:
        raise exc(msg)
