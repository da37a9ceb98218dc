"""The activation engine: apply and revert patches, once per process.

Every activation route ends in :func:`activate`:

    1. SGLang's plugin loader calls the ``kv5d`` entry point
       (sglang_kv5d._sglang_plugin.register) in processes that load plugins;
    2. the env-gated ``.pth`` bootstrap (sglang_kv5d._bootstrap) activates on
       the first ``import sglang`` in every interpreter that inherits
       ``SGLANG_KV5D=1`` (spawn children, versions whose children never load
       plugins);
    3. ``sglang_kv5d.activate()`` from custom scripts.

    patch_type.py the patch type (Patch, Binding, ProvidedUpstream, StillNeeded)
                  and the built-in patch table, whose modules are loaded by name
    registry.py   which patches exist (built-in, entry points), the gate
                  (version refused, not selected), probing them all
    install.py    one patch: resolve, check, build, install, restore; all or nothing
    lifecycle.py  the per-process engine: activate, import hooks, deactivate,
                  status, fork, the status line and status files
    guard.py      fail closed: enforce_5d_ready, fail_closed, Kv5dNotReadyError
                  (the exception types live in the leaf sglang_kv5d.errors)

Layering (tests/test_layers.py): the engine sits above the core and below
the patches; it never imports a patch module (only names them).

Importing this package imports neither SGLang, torch nor wrapt.
"""

from .guard import Kv5dError, Kv5dNotReadyError, enforce_5d_ready, fail_closed
from .install import patch_marker, resolve_loaded
from .lifecycle import activate, deactivate, patch_state, status, strict_mode
from .registry import PatchProbe, probe_patches

__all__ = [
    "Kv5dError",
    "Kv5dNotReadyError",
    "PatchProbe",
    "activate",
    "deactivate",
    "enforce_5d_ready",
    "fail_closed",
    "patch_marker",
    "patch_state",
    "probe_patches",
    "resolve_loaded",
    "status",
    "strict_mode",
]
