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

from .. import surface
from ..versions import TESTED
from . import Binding, Patch

_REGISTER = "resolution_hooks.register_resolution_hook"  # surface rows this patch reads
_REGISTRY = "resolution_hooks._HOOKS"  # private: the only way to take the hook out again


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
    module, (register_name,) = surface.split_target(surface.SURFACES[_REGISTER].targets[0])
    _, (registry_name,) = surface.split_target(surface.SURFACES[_REGISTRY].targets[0])
    hooks = sys.modules.get(module)
    if hooks is None:
        try:  # a small module of SGLang's (0.5.20+); not imported by server_args itself
            hooks = importlib.import_module(module)
        except ImportError:
            return None  # older SGLang: check_server_args alone
    register = getattr(hooks, register_name, None)
    if not callable(register):
        return None
    register(surface.RESOLUTION_HOOK_STEP)(_resolution_hook)
    registry = getattr(hooks, registry_name, None)

    def undo():
        if isinstance(registry, dict):
            chain = registry.get(surface.RESOLUTION_HOOK_STEP, [])
            while _resolution_hook in chain:
                chain.remove(_resolution_hook)

    return undo


PATCH = Patch(
    name="server-args-guard",
    summary="Run the launch rules (KV5D001..KV5D012) inside SGLang's server-args validation.",
    bindings=(Binding("server_args.ServerArgs.check_server_args", _make),),
    after_install=_register_resolution_hook,
    # Required: without it nothing inside SGLang refuses a 5D launch the rules
    # refuse (unified memory, HiCache, a page size X does not divide, ...), so a
    # selection that leaves it out fails closed like one without the 5D fixes.
    required_for_5d=True,
    problem=(
        "nothing refuses incompatible launches (unified memory, speculative decoding, HiCache/LMCache, HND, "
        f"page size, non-aiter backends, missing `{surface.ENV_USE_AITER}`); `sglang-kv5d launch` / `check` refuse "
        "them before the exec, this patch inside SGLang"
    ),
    why=(
        "SGLang has no compatibility checks for the 5D layout: unified memory, speculative decoding, "
        f"HiCache/LMCache, {surface.ENV_USE_HND_KVCACHE}, a page size X does not divide, or a non-aiter backend all "
        "start and then fail or answer wrongly. `sglang-kv5d launch` checks them before exec; this patch "
        "runs the same rules inside SGLang (after check_server_args, and as a handle_other_validations "
        "resolution hook on 0.5.20+) so plain launch_server and sgl.Engine scripts get them. It only reads "
        "ServerArgs, never assigns to it. Required for 5D: a SGLANG_KV5D_PATCHES selection that leaves it out "
        "is refused when the first 5D KV pool or AITER backend is built (fail closed, naming it), and by "
        "KV5D011 at launch."
    ),
    upstream="SGLang validates none of these combinations in any release",
    removal="when SGLang validates the 5D layout's incompatibilities itself",
    sglang=f"{TESTED} (resolution hook from 0.5.20)",
    reads=("resolution_hooks.register_resolution_hook", "resolution_hooks._HOOKS", "arg_groups.resolving_view"),
    core=("sglang_kv5d.rules",),
)
