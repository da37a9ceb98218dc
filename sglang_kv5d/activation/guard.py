"""Fail closed: 5D refuses to start without the patches and kernels it needs.

SGLang logs and swallows plugin exceptions, so activation itself cannot stop
a server. The internal patches ``fail-closed-pool`` / ``fail-closed-backend``
(sglang_kv5d/patches/fail_closed.py) call :func:`enforce_5d_ready` when a 5D
KV pool or AITER backend is built, and sglang_kv5d.kernel_check calls
:func:`fail_closed` when no 5D attention kernel works. Strict (the default,
``SGLANG_KV5D_STRICT``): raise :class:`Kv5dNotReadyError` naming each problem,
its reason and its fix. Non-strict: log each problem once as a warning.
"""

from __future__ import annotations

import logging

from .. import config
from .. import versions as _versions
from ..errors import Kv5dError, Kv5dNotReadyError  # noqa: F401 - re-exported by sglang_kv5d.activation
from ..state import DISABLED, SATISFIED, SKIPPED
from .lifecycle import Record, engine

logger = logging.getLogger("sglang_kv5d")


def enforce_5d_ready(where: str) -> None:
    """Called by the fail-closed guard when a 5D pool / AITER backend is built.

    Strict: raise Kv5dNotReadyError naming every 5D-required patch that is not
    applied, pending or provided upstream (state ``upstream``), why, and the
    fix. Non-strict: log each problem once as a warning.
    """
    eng = engine
    with eng.lock:
        problems = [(name, rec.state, rec.reason, _fix_for(rec)) for name, rec in eng.records.items()
                    if rec.patch.required_for_5d and rec.state not in SATISFIED]
        if not problems:
            return
        lines = [
            f"sglang-kv5d: the SHUFFLE 5D KV layout was requested ({config.LAYOUT}=vectorized_5d) "
            f"but building {where} would run without patch(es) it needs:"
        ]
        for name, state, reason, fix in problems:
            lines.append(f"  - {name} is {state}: {reason}. Fix: {fix}")
        lines.append(
            f"Without them attention on a 5D pool can be silently wrong. Set {config.STRICT}=0 to "
            "continue anyway (not recommended), or unset the layout variable to use NHD."
        )
        message = "\n".join(lines)
        if eng.strict:
            raise Kv5dNotReadyError(message)
        key = tuple(p[0] for p in problems)
        if key not in eng.warned_5d:
            eng.warned_5d.add(key)
            logger.warning("%s", message)


def fail_closed(message: str) -> None:
    """The fail-closed policy for a 5D problem found at startup outside the
    patch table (sglang_kv5d.kernel_check: no working attention kernel).
    Strict: raise Kv5dNotReadyError(message). Non-strict: log it once."""
    eng = engine
    with eng.lock:
        if eng.strict:
            raise Kv5dNotReadyError(message)
        if message not in eng.warned_5d:
            eng.warned_5d.add(message)
            logger.warning("%s (continuing: %s=0)", message, config.STRICT)


def _fix_for(rec: Record) -> str:
    if rec.state == DISABLED:
        return f"add {rec.patch.name} to {config.PATCHES} (or unset it to select every patch)"
    if rec.state == SKIPPED:
        return (
            f"use a supported SGLang ({_versions.SUPPORTED_RANGE[0]} .. {_versions.SUPPORTED_RANGE[1]}), "
            f"or set {config.ALLOW_UNTESTED}=1 for a newer one at your own risk"
        )
    return (
        "this SGLang build differs from what sglang-kv5d was tested against; run `sglang-kv5d doctor` "
        "and upgrade sglang-kv5d or use a tested SGLang release"
    )
