"""server-args-guard: the launch rules, enforced inside SGLang too.

Wraps ``ServerArgs.check_server_args`` (every supported version; it runs after
resolution) so ``python -m sglang.launch_server`` and ``sgl.Engine(...)``
scripts with the overlay active get the same findings as ``sglang-kv5d
check``. On 0.5.20+ it also registers a ``handle_other_validations``
resolution hook. It only reads ServerArgs (resolved values where SGLang
provides them) and never assigns to it. Errors raise one exception listing
every finding; warnings are logged once (sglang_kv5d.rules.guard_server_args).
"""

from __future__ import annotations

import importlib
import sys

from . import Binding, Patch

_RESOLUTION_HOOKS = "sglang.srt.arg_groups.resolution_hooks"
_HOOK_STEP = "handle_other_validations"


def _make(original):
    def check_server_args(wrapped, server_args, args, kwargs):
        result = wrapped(*args, **kwargs)
        from ..rules import guard_server_args

        guard_server_args(server_args)
        return result

    return check_server_args


def _resolution_hook(server_args, previous):
    previous(server_args)
    from ..rules import guard_server_args

    guard_server_args(server_args)


def _register_resolution_hook():
    """0.5.20+: add the guard to the resolution pipeline; returns the undo."""
    hooks = sys.modules.get(_RESOLUTION_HOOKS)
    if hooks is None:
        try:  # a small module of SGLang's (0.5.20+); not imported by server_args itself
            hooks = importlib.import_module(_RESOLUTION_HOOKS)
        except ImportError:
            return None  # older SGLang: check_server_args alone
    if not hasattr(hooks, "register_resolution_hook"):
        return None
    hooks.register_resolution_hook(_HOOK_STEP)(_resolution_hook)
    registry = getattr(hooks, "_HOOKS", None)

    def undo():
        if isinstance(registry, dict):
            chain = registry.get(_HOOK_STEP, [])
            while _resolution_hook in chain:
                chain.remove(_resolution_hook)

    return undo


PATCH = Patch(
    name="server-args-guard",
    summary="Run the launch rules (KV5D001..KV5D012) inside SGLang's server-args validation.",
    bindings=(Binding("server_args.ServerArgs.check_server_args", _make),),
    after_install=_register_resolution_hook,
)
