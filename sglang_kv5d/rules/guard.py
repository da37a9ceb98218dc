"""Inside SGLang: the server-args guard.

:func:`guard_server_args` runs the rules on a ``ServerArgs``; the
``server-args-guard`` patch calls it from ``ServerArgs.check_server_args`` and
(0.5.20+) a resolution hook, so ``python -m sglang.launch_server`` and
``sgl.Engine(...)`` scripts get the same findings as ``sglang-kv5d check``.
The SGLang object it reads (``resolving_view``) is a row of the surface table.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from typing import Any, Mapping, Optional, Sequence, Tuple

from .. import platform as _platform
from .. import surface as _surface
from .context import make_context
from .registry import WARNING, Finding, errors, evaluate
from .scan import sglang_env_names

logger = logging.getLogger("sglang_kv5d.rules")

# SGLang's read view of resolved ServerArgs values (0.5.19+); its row lists where it lives.
RESOLVING_VIEW = "arg_groups.resolving_view"


class Kv5dConfigError(ValueError):
    """One or more KV5D rules failed for a ServerArgs; lists every error finding."""

    def __init__(self, findings: Sequence[Finding]):
        self.findings = list(findings)
        lines = [f"sglang-kv5d: {len(self.findings)} launch rule(s) failed for this configuration:"]
        for f in self.findings:
            lines.append(f"  {f.id}: {f.message}\n    fix: {f.fix}")
        lines.append("  (sglang-kv5d check --explain KV5Dnnn explains a rule)")
        super().__init__("\n".join(lines))


_WARNED: set = set()


def resolved_view(server_args: Any) -> Any:
    """SGLang's read view of resolved values (0.5.19+), else the record itself.

    The guard reads it, and so does readiness at backend build (the model
    runner's ``server_args``, sglang_kv5d/patches/fail_closed.py)."""
    for target in _surface.SURFACES[RESOLVING_VIEW].targets:
        module, path = _surface.split_target(target)
        m = sys.modules.get(module)
        if m is None:
            try:
                m = importlib.import_module(module)
            except Exception:  # importing an SGLang module may fail in any way: try the next candidate
                continue
        fn = getattr(m, path[-1], None)
        if callable(fn):
            try:
                return fn(server_args)
            except Exception:  # SGLang's resolver on a record it may not expect can raise anything: read the record
                break
    return server_args


_resolved_view = resolved_view


def _platform_in_process() -> str:
    """The platform of this SGLang process: its own torch decides (what runs the kernels)."""
    return _platform.detect_platform(in_process=True)[0]


def guard_server_args(
    server_args: Any,
    environ: Mapping[str, str] = os.environ,
    *,
    platform: Optional[str] = None,
    patch_problems: Optional[Sequence[Tuple[str, str]]] = None,
    sglang_version: Optional[str] = None,
) -> None:
    """Run the rules on a ``ServerArgs`` inside SGLang.

    Reads resolved values through ``resolving_view(server_args)`` where SGLang
    has it (0.5.19+) and raw fields otherwise; never assigns to
    ``server_args``. Warnings are logged once per process; every error is
    raised together as one :class:`Kv5dConfigError`.

    ``patch_problems`` defaults to None (KV5D011's probe part silent): inside
    SGLang the activation itself fails closed on a patch that cannot apply. The
    selection part of KV5D011 runs here too (the required and known patch names
    come from the patch registry), so a ``SGLANG_KV5D_PATCHES`` that leaves a
    required patch out is refused at server-args validation, before the weights
    load, not only at the first 5D pool build.
    """
    from ..activation.registry import known_patch_names, required_patch_names
    from ..versions import installed_sglang_version

    view = _resolved_view(server_args)
    ctx = make_context(
        env=dict(environ),
        args=view,
        sglang_version=sglang_version or installed_sglang_version(),
        platform=platform or _platform_in_process(),
        patch_problems=patch_problems,
        known_env=sglang_env_names(),
        in_sglang=True,
        known_patches=known_patch_names(),
        required_patches=required_patch_names(),
    )
    found = evaluate(ctx)
    pid = os.getpid()
    for f in found:
        if f.severity == WARNING:
            key = (pid, f.id, f.message)
            if key not in _WARNED:
                _WARNED.add(key)
                logger.warning("sglang-kv5d %s: %s (fix: %s)", f.id, f.message, f.fix)
    errs = errors(found)
    if errs:
        raise Kv5dConfigError(errs)
