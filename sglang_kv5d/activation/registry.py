"""Which patches exist, and which of them this process may apply.

:func:`discover_patches` loads the built-in patches
(``sglang_kv5d.activation.patch_type.BUILTIN_PATCH_MODULES``, in their stacking order), then
third-party ones from the ``sglang_kv5d.patches`` entry-point group; a patch
that cannot load is reported with the reason and does not stop the others.

:func:`gate` is the one place that decides, before any target is looked at,
whether a patch is off here: SKIPPED when the SGLang version is refused (the
more basic problem, so it wins), DISABLED when ``SGLANG_KV5D_PATCHES`` leaves
it out. Internal patches are never gated. Activation, ``doctor`` and
``sglang-kv5d patches`` all ask it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from .. import config
from .patch_type import BUILTIN_PATCH_MODULES, ENTRY_POINT_GROUP, Patch, load_builtin
from ..state import APPLIED, DISABLED, FAILED, SKIPPED, UPSTREAM
from ..surface import Surface

Discovered = Tuple[str, Optional[Patch], Optional[str]]  # (name, patch or None, load error or None)


def discover_patches(surfaces: Dict[str, Surface]) -> List[Discovered]:
    """Built-in patches, then third-party ones; a third-party patch's own
    surfaces are added to ``surfaces`` (built-in rows win)."""
    found: List[Discovered] = []
    for name in BUILTIN_PATCH_MODULES:
        try:
            found.append((name, load_builtin(name), None))
        except Exception as exc:  # a broken patch module must not break the others
            found.append((name, None, f"cannot load patch module: {type(exc).__name__}: {exc}"))
    try:
        from importlib.metadata import entry_points

        eps = entry_points(group=ENTRY_POINT_GROUP)
    except Exception:  # broken metadata of any installed distribution may raise anything: no third-party patches
        eps = []
    for ep in eps:
        try:
            patch = ep.load()
            if not isinstance(patch, Patch):
                raise TypeError(f"entry point {ep.value} is a {type(patch).__name__}, not a Patch")
            for row in patch.extra_surfaces:
                surfaces.setdefault(row.id, row)
            found.append((patch.name, patch, None))
        except Exception as exc:  # ep.load() imports a third party's module: anything it raises is reported
            found.append((ep.name, None, f"cannot load entry point {ep.value}: {exc}"))
    return found


def known_patch_names() -> Optional[List[str]]:
    """Built-in patch names and those other packages register (entry points), or None."""
    try:
        from importlib.metadata import entry_points

        return list(BUILTIN_PATCH_MODULES) + [ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)]
    except Exception:  # noqa: BLE001 - broken entry-point metadata: the callers say "not checked"
        return None


def required_patch_names() -> Optional[List[str]]:
    """The selectable patches 5D needs (``required_for_5d``), built-in and registered, or None."""
    try:
        from ..surface import SURFACES

        return [name for name, patch, _ in discover_patches(dict(SURFACES))
                if patch is not None and patch.required_for_5d and not patch.internal]
    except Exception:  # noqa: BLE001 - a patch module that cannot load: the callers say "not checked"
        return None


def patch_modules(surfaces: Dict[str, Surface], patch: Patch) -> List[str]:
    """The modules of every surface the patch binds, in order, once each."""
    mods: List[str] = []
    for b in patch.bindings:
        row = surfaces.get(b.surface)
        if row is not None:
            mods.extend(row.modules)
    return list(dict.fromkeys(mods))


def gate(patch: Patch, verdict, selected: Optional[Sequence[str]]) -> Optional[Tuple[str, str]]:
    """(state, reason) when the patch is off in this process, else None.

    ``verdict`` is a :class:`sglang_kv5d.versions.Verdict`; ``selected`` the
    patch selection (None: every patch).
    """
    if patch.internal:
        return None
    if not verdict.allowed:
        return SKIPPED, verdict.message
    if selected is not None and patch.name not in selected:
        return DISABLED, f"not selected by {config.PATCHES}"
    return None


# --------------------------------------------------------------------------
# Probing every patch without activating (doctor, check, `sglang-kv5d patches`)


@dataclass
class PatchProbe:
    name: str
    ok: bool  # targets resolve, parameters match, replacements build (or provided upstream)
    reason: str  # the probe's finding
    required_for_5d: bool
    internal: bool
    targets: List[str]
    state: str = FAILED  # what activation would make of it here (APPLIED: "would apply")
    state_reason: str = ""
    patch: Optional[Patch] = None


def probe_patches(import_modules: bool = True, environ: Optional[Mapping[str, str]] = None) -> List[PatchProbe]:
    """Probe every patch (resolve, check, build; nothing installed) and give the
    state activation would reach here (:func:`gate`, then the probe).

    With ``import_modules`` the target modules are imported (this imports
    SGLang and torch: for the doctor and ``check``, never at activation).
    ``environ`` (default ``os.environ``) holds the version and selection switches.
    """
    import contextlib
    import warnings

    from .. import versions as _versions
    from ..surface import SURFACES
    from .install import probe_patch

    verdict = _versions.verdict(allow_untested=config.allow_untested(environ))
    selected = config.selected_patches(environ)
    surfaces = dict(SURFACES)
    probes: List[PatchProbe] = []
    # SGLang prints and warns at import time; keep stdout clean for --json.
    with contextlib.redirect_stdout(sys.stderr), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, patch, load_error in discover_patches(surfaces):
            if patch is None:
                reason = load_error or "cannot load"
                probes.append(PatchProbe(name, False, reason, False, False, [], FAILED, reason))
                continue
            out = probe_patch(patch, surfaces, import_modules)
            ok = out.state in (APPLIED, UPSTREAM)
            state, state_reason = gate(patch, verdict, selected) or (out.state, out.reason)
            probes.append(PatchProbe(name, ok, out.reason, patch.required_for_5d, patch.internal, out.targets,
                                     state, state_reason, patch))
    return probes
