"""What the checks before traffic found: one :class:`CheckResult` per (kernel, key).

The results live here behind one lock and are reached through functions:
:func:`checked` (a result already found, so a second pool of the same shapes
costs nothing), :func:`remember`, :func:`check_results` (a copy; doctor and
tests read it) and :func:`forget_results`. :func:`sync` waits for a check's
launches before it reports.
"""

from __future__ import annotations

import threading
from typing import Any, Dict, Hashable, NamedTuple, Optional, Tuple


class CheckResult(NamedTuple):
    kernel: str
    key: Hashable
    ok: bool
    error: Optional[str]  # the recorded reason when not ok
    seconds: float  # wall time of the check (compiles included)
    variants: Tuple[Any, ...]  # what was launched (token counts, or a description)


_results: Dict[Tuple[str, Hashable], CheckResult] = {}
_lock = threading.Lock()


def checked(kernel: str, key: Hashable) -> Optional[CheckResult]:
    """The result of an earlier check of (kernel, key) in this process, or None."""
    with _lock:
        return _results.get((kernel, key))


def remember(result: CheckResult) -> None:
    with _lock:
        _results[(result.kernel, result.key)] = result


def check_results() -> Dict[Tuple[str, Hashable], CheckResult]:
    """Every check's result so far, by (kernel, key) (a copy)."""
    with _lock:
        return dict(_results)


def forget_results() -> None:
    with _lock:
        _results.clear()


def sync(device) -> None:
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)
