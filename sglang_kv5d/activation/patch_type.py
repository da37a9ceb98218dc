"""The patch type and the built-in patch table: what the engine installs.

A patch module (sglang_kv5d/patches/, or a third party's through the
``sglang_kv5d.patches`` entry-point group) builds a :class:`Patch` of
:class:`Binding` objects; its ``applies`` may answer :class:`ProvidedUpstream`
or :class:`StillNeeded`. The engine loads the built-in patch modules BY NAME
from :data:`BUILTIN_PATCH_MODULES` (:func:`load_builtin`, through importlib),
so nothing below the patches imports them. Imports only the surface table.
``sglang_kv5d.patches`` re-exports these names, the public spelling for
patch authors.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from ..surface import Surface

# wrapper(wrapped, instance, args, kwargs) for WRAP surfaces; a plain function
# with the original's parameters for REPLACE surfaces.
MakeReplacement = Callable[[Any], Any]


class ProvidedUpstream(str):
    """An ``applies`` verdict: the installed SGLang has this patch's fix itself.

    The engine installs nothing and records state ``upstream`` ("provided
    upstream: <text>"); the fail-closed guard and the launch probes count it as
    satisfied, like ``applied``. A plain string from ``applies`` is a skip
    (state ``skipped``), which a 5D-required patch cannot afford.
    """


class StillNeeded(str):
    """An ``applies`` verdict: upstream provides part of the fix, the patch is
    installed anyway, and this text is added to its state's reason."""


@dataclass(frozen=True)
class Binding:
    """One surface a patch changes and how to build its replacement.

    ``make(original)`` returns a wrapt-style wrapper function
    ``(wrapped, instance, args, kwargs)`` when the surface's action is WRAP, or
    the replacement function when it is REPLACE.
    """

    surface: str
    make: MakeReplacement
    check_signature: bool = True


@dataclass(frozen=True)
class Patch:
    name: str
    summary: str
    bindings: Tuple[Binding, ...]
    # Needed for a correct 5D deployment: the fail-closed guard refuses to build
    # a 5D pool / AITER backend when such a patch is not applied.
    required_for_5d: bool = False
    # Optional: given {surface id: live original}, return None to install, a
    # ProvidedUpstream to stand down, a StillNeeded to install with a note, or
    # any other string: a reason to skip.
    applies: Optional[Callable[[Mapping[str, Any]], Optional[str]]] = None
    # Internal patches are always on with the gate and not selectable.
    internal: bool = False
    # Surfaces a third-party patch brings along (built-in ones use the table).
    extra_surfaces: Tuple[Surface, ...] = field(default_factory=tuple)
    # Optional registration done after the bindings are installed (for APIs
    # that take a callback rather than an attribute). Returns an undo callable
    # or None; raising rolls the whole patch back.
    after_install: Optional[Callable[[], Optional[Callable[[], None]]]] = None
    # The patch's reason, written here once: patches/<name>.toml and the README
    # row are generated from these (`python -m sglang_kv5d.manifests --write`).
    problem: str = ""  # README row: what upstream gets wrong, one line of markdown
    why: str = ""  # what upstream does, what breaks, what the patch does instead
    upstream: str = ""  # which SGLang releases have the problem
    removal: str = ""  # when the patch can go ("when upstream ...")
    sglang: str = ""  # releases it applies to when not the whole tested range
    reads: Tuple[str, ...] = ()  # READ rows of the surface table its code uses
    core: Tuple[str, ...] = ()  # modules holding the code it binds


# name -> "module:attribute" holding the Patch. Order matters: patches that
# wrap the same target stack in this order and are removed in reverse.
BUILTIN_PATCH_MODULES: Dict[str, str] = {
    "fail-closed-pool": "sglang_kv5d.patches.fail_closed:POOL_GUARD",
    "fail-closed-backend": "sglang_kv5d.patches.fail_closed:BACKEND_GUARD",
    "pool-layout-detection": "sglang_kv5d.patches.pool_layout_detection:PATCH",
    "attention-dispatch-5d": "sglang_kv5d.patches.attention_dispatch:PATCH",
    "fp8-kv-write": "sglang_kv5d.patches.fp8_kv_write:PATCH",
    "draft-pool-nhd": "sglang_kv5d.patches.draft_pool_nhd:PATCH",
    "target-verify-5d": "sglang_kv5d.patches.target_verify:PATCH",
    "prefix-valid-write-5d": "sglang_kv5d.patches.prefix_valid_write:PATCH",
    "cpu-copy-5d": "sglang_kv5d.patches.cpu_copy_5d:PATCH",
    "fail-closed-decode-offload": "sglang_kv5d.patches.cpu_copy_5d:OFFLOAD_GUARD",
    "server-args-guard": "sglang_kv5d.patches.server_args_guard:PATCH",
    "pd-layout-handshake": "sglang_kv5d.patches.pd_layout_handshake:PATCH",
    "pd-buffer-layouts": "sglang_kv5d.patches.pd_head_slice_5d:BUFFER_LAYOUTS",
    "pd-head-slice-5d": "sglang_kv5d.patches.pd_head_slice_5d:PATCH",
    "fail-closed-pd-head-slice-nixl": "sglang_kv5d.patches.pd_head_slice_5d:NIXL_GUARD",
}

ENTRY_POINT_GROUP = "sglang_kv5d.patches"


def load_builtin(name: str) -> Patch:
    modname, _, attr = BUILTIN_PATCH_MODULES[name].partition(":")
    patch = getattr(importlib.import_module(modname), attr)
    if patch.name != name:
        raise RuntimeError(f"{modname}.{attr} is named {patch.name!r}, expected {name!r}")
    return patch
