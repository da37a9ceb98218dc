"""Install one patch, all or nothing, and restore it exactly.

The steps, in order, for every binding of a patch:

    resolve   find the live target in ``sys.modules`` (never importing);
              Pending while a candidate module is not imported yet
    check     not read-only in the table, not a multiprocessing process
              target, parameters as the surface row expects
    build     make the replacement (a marked wrapt wrapper for WRAP, the
              marked function for REPLACE) before anything is changed
    install   set every replacement, rebind from-import copies, run the
              patch's ``after_install``; any error restores what was set

:func:`apply_patch` runs all four; :func:`probe_patch` runs the same resolve,
check and build (importing the modules first) and installs nothing, so what
``doctor`` and ``check`` predict is what activation does. Neither touches the
engine's records: they return an :class:`Outcome`.
"""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field
from typing import Any, Callable, List, Mapping, Optional, Tuple

from .patch_type import Binding, Patch, ProvidedUpstream, StillNeeded
from ..state import APPLIED, FAILED, SKIPPED, UPSTREAM
from ..surface import PROCESS_TARGET_NAMES, READ, REPLACE, WRAP, Surface, describe_params, params_match, split_target
from ..surface_names import MODULE_PREFIX, PACKAGE

# Attribute set on replacement functions (REPLACE) so a second engine or a
# reload never stacks a patch on itself. Wrappers carry ``_self_kv5d_patch``.
MARKER = "__kv5d_patch__"


def _wrapper_class():
    import wrapt

    class Kv5dFunctionWrapper(wrapt.FunctionWrapper):
        """A wrapt FunctionWrapper that remembers which patch installed it."""

        def __init__(self, wrapped, wrapper, patch_name):
            super().__init__(wrapped, wrapper)
            self._self_kv5d_patch = patch_name

    return Kv5dFunctionWrapper


def patch_marker(obj: Any) -> Optional[str]:
    """The patch name if ``obj`` was installed by sglang-kv5d, else None."""
    try:
        name = getattr(obj, "_self_kv5d_patch", None)
    except Exception:  # any object is asked: a proxy's __getattr__ may raise anything; then it is not ours
        name = None
    if name is None:
        name = getattr(obj, MARKER, None)
        if name is None and isinstance(obj, (staticmethod, classmethod)):
            name = getattr(obj.__func__, MARKER, None)
    return name if isinstance(name, str) else None


# --------------------------------------------------------------------------
# Resolve and check (read sys.modules, never import)


@dataclass
class Resolved:
    surface: Surface
    target: str
    module: types.ModuleType
    owner: Any  # module or class holding the attribute
    attr: str
    raw: Any  # the object as stored in owner.__dict__ (staticmethod kept)
    had_own: bool  # attr defined on owner itself (not inherited)

    @property
    def function(self) -> Any:
        raw = self.raw
        if isinstance(raw, (staticmethod, classmethod)):
            return raw.__func__
        return raw

    def current(self) -> Any:
        """What the owner holds under the attribute now."""
        if isinstance(self.owner, type):
            return self.owner.__dict__.get(self.attr)
        return getattr(self.owner, self.attr, None)


class Pending(Exception):
    """A target's module is not imported (or still executing) yet."""


# Modules a post-import hook reported as fully executed. importlib keeps
# ``__spec__._initializing`` set until after the hooks run, so the flag alone
# cannot tell a finished module from one still executing.
completed_modules: set = set()


def _initializing(module: types.ModuleType) -> bool:
    spec = getattr(module, "__spec__", None)
    return bool(getattr(spec, "_initializing", False))


def resolve_loaded(surface: Surface) -> Resolved:
    """Resolve a surface from already-imported modules.

    Raises Pending while any candidate's module is not imported yet (a later
    one may hold the name), LookupError (with every place tried) when all are
    imported and none has the name.
    """
    mods = sys.modules
    tried = []
    unloaded = []
    for target in surface.targets:
        modname, path = split_target(target)
        module = mods.get(modname)
        if module is None or (_initializing(module) and modname not in completed_modules):
            # Not imported yet, or still executing (a post-import hook of a
            # module it imports fired first): its names may not exist yet.
            unloaded.append(modname)
            continue
        owner: Any = module
        for part in path[:-1]:
            owner = getattr(owner, part, None)
            if owner is None:
                break
        attr = path[-1]
        if owner is not None:
            if isinstance(owner, type):
                had_own = attr in owner.__dict__
                raw = owner.__dict__.get(attr) if had_own else getattr(owner, attr, None)
            else:
                had_own = True
                raw = getattr(owner, attr, None)
            if raw is not None:
                return Resolved(surface, target, module, owner, attr, raw, had_own)
        tried.append(target)
    if unloaded:
        raise Pending(", ".join(unloaded))
    raise LookupError(f"{surface.id}: not found; tried {', '.join(tried)}")


def signature_problem(surface: Surface, fn: Any) -> Optional[str]:
    """None when ``fn``'s parameters match the surface, else 'expected ... found ...'."""
    if surface.params is None:
        return None
    import inspect

    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        return f"cannot read the signature of {surface.targets[0]}: {exc}"
    found = tuple(sig.parameters)
    if params_match(found, surface.params):
        return None
    return f"signature changed: expected {describe_params(surface.params)}, found ({', '.join(found)})"


class Refused(Exception):
    """A step refused the patch; ``state`` is FAILED, SKIPPED or UPSTREAM, the text the reason."""

    def __init__(self, reason: str, state: str = FAILED) -> None:
        super().__init__(reason)
        self.state = state


NOT_APPLICABLE = "not applicable: "  # the reason's prefix when a target is newer than the installed SGLang


def _older_than_surface(surface: Surface) -> Optional[str]:
    """The "not applicable" reason when the installed SGLang predates the
    version a missing target first appears in (the row's ``since``), else None."""
    from .. import versions as _versions

    installed = _versions.parse_version_or_none(_versions.installed_sglang_version() or "")
    since = _versions.parse_version_or_none(surface.since)
    if installed is None or since is None or not installed < since:
        return None
    return (f"{NOT_APPLICABLE}{surface.id} exists from SGLang {surface.since}; "
            f"this is {_versions.installed_sglang_version()}")


def resolve_patch(patch: Patch, surfaces: Mapping[str, Surface]) -> List[Tuple[Binding, Resolved]]:
    """Resolve and check every binding. Raises Pending or Refused."""
    resolved: List[Tuple[Binding, Resolved]] = []
    for b in patch.bindings:
        surface = surfaces.get(b.surface)
        if surface is None:
            raise Refused(f"binding names surface {b.surface}, which is not in the surface table")
        if surface.action == READ:
            raise Refused(f"surface {surface.id} is read-only in the table; a patch cannot change it")
        try:
            r = resolve_loaded(surface)
        except LookupError as exc:
            older = _older_than_surface(surface)
            if older:
                raise Refused(older, SKIPPED) from None
            raise Refused(str(exc).strip("'\"")) from None
        if r.attr in PROCESS_TARGET_NAMES:
            raise Refused(f"{r.target} is a multiprocessing process target; wrapping it breaks spawn")
        if b.check_signature:
            problem = signature_problem(surface, r.function)
            if problem:
                raise Refused(f"{r.target}: {problem}")
        resolved.append((b, r))
    return resolved


def check_applies(patch: Patch, resolved: List[Tuple[Binding, Resolved]]) -> Optional[str]:
    """The patch's own applicability check: None or a note (StillNeeded) to
    install; raises Refused (UPSTREAM for ProvidedUpstream, SKIPPED, or FAILED)."""
    if patch.applies is None:
        return None
    try:
        skip = patch.applies({b.surface: r.function for b, r in resolved})
    except Exception as exc:  # a patch's applies() (a third party's too) may raise anything: recorded, refused
        raise Refused(f"applicability check raised {type(exc).__name__}: {exc}") from None
    if isinstance(skip, ProvidedUpstream):
        raise Refused(f"provided upstream: {skip}", UPSTREAM)
    if isinstance(skip, StillNeeded):
        return str(skip)
    if skip:
        raise Refused(skip, SKIPPED)
    return None


def build(patch: Patch, resolved: List[Tuple[Binding, Resolved]]) -> List[Tuple[Resolved, Any]]:
    """Every replacement, built before anything is changed. Raises Refused."""
    built: List[Tuple[Resolved, Any]] = []
    for b, r in resolved:
        try:
            made = b.make(r.function)
            if r.surface.action == WRAP:
                if isinstance(r.raw, (staticmethod, classmethod)):
                    raise TypeError("wrapping static/class methods is not supported")
                replacement = _wrapper_class()(r.raw, made, patch.name)
            elif r.surface.action == REPLACE:
                if not callable(made):
                    raise TypeError("the replacement is not callable")
                try:
                    setattr(made, MARKER, patch.name)
                except AttributeError:
                    pass
                replacement = made
            else:  # pragma: no cover - resolve_patch refuses READ rows
                raise TypeError(f"unknown action {r.surface.action}")
        except Exception as exc:  # the patch's make() is patch code (third-party too): anything refuses it
            raise Refused(f"building the replacement for {r.target} failed: {type(exc).__name__}: {exc}") from None
        built.append((r, replacement))
    return built


# --------------------------------------------------------------------------
# Install and restore


@dataclass
class Installed:
    resolved: Resolved
    replacement: Any
    copies: List[Tuple[types.ModuleType, str]] = field(default_factory=list)


def install(patch: Patch, built: List[Tuple[Resolved, Any]]) -> Tuple[List[Installed], Optional[Callable]]:
    """Set every replacement, then run ``after_install``; on any error restore
    what was set and raise Refused. Returns (installed, undo)."""
    installed: List[Installed] = []
    try:
        for r, replacement in built:
            inst = Installed(r, replacement)
            setattr(r.owner, r.attr, replacement)
            installed.append(inst)
            if r.surface.action == REPLACE:
                inst.copies = _rebind_copies(r, replacement)
        undo = patch.after_install() if patch.after_install is not None else None
    except Exception as exc:  # setattr on SGLang's objects and after_install (patch code) may raise anything:
        # roll back what was set, then refuse the patch (all or nothing)
        for inst in reversed(installed):
            restore(inst)
        raise Refused(f"installing failed and was rolled back: {type(exc).__name__}: {exc}") from None
    return installed, undo


def _rebind_copies(r: Resolved, replacement: Any) -> List[Tuple[types.ModuleType, str]]:
    """Rebind ``from X import name`` copies of the original in loaded modules.

    The surface's declared copy holders are always checked; any other loaded
    ``sglang`` module holding the same object is rebound too (and reported).
    """
    original = r.raw
    rebound: List[Tuple[types.ModuleType, str]] = []
    candidates = set(r.surface.copies)
    candidates.update(n for n in list(sys.modules) if n == PACKAGE or n.startswith(MODULE_PREFIX))
    for modname in sorted(candidates):
        module = sys.modules.get(modname)
        if module is None or module is r.module:
            continue
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        for name, value in list(namespace.items()):
            if value is original:
                setattr(module, name, replacement)
                rebound.append((module, name))
    return rebound


def _later_copies(r: Resolved, replacement: Any) -> List[Tuple[types.ModuleType, str]]:
    """Every loaded holder of ``replacement`` other than the target itself.

    A module imported after the patch was installed (activation before the
    SGLang import: ``aiter_backend`` runs ``from aiter_utils import ...`` after
    aiter_utils' import hook patched it) copied the replacement, and nobody
    recorded it; restore finds such copies here: the surface's declared copy
    holders and every loaded ``sglang`` module.
    """
    found: List[Tuple[types.ModuleType, str]] = []
    candidates = set(r.surface.copies)
    candidates.update(n for n in list(sys.modules) if n == PACKAGE or n.startswith(MODULE_PREFIX))
    for modname in sorted(candidates):
        module = sys.modules.get(modname)
        namespace = getattr(module, "__dict__", None)
        if module is None or not isinstance(namespace, dict):
            continue
        for name, value in list(namespace.items()):
            if value is replacement and not (module is r.owner and name == r.attr):
                found.append((module, name))
    return found


def restore(inst: Installed) -> Optional[str]:
    """Put the original back, in the target and in every copy of the
    replacement (recorded at install or made later); returns a problem
    description or None."""
    r = inst.resolved
    for module, name in list(dict.fromkeys(inst.copies + _later_copies(r, inst.replacement))):
        if getattr(module, name, None) is inst.replacement:
            setattr(module, name, r.raw)
    if r.current() is not inst.replacement:
        return f"{r.target} was re-patched by someone else after sglang-kv5d; left as found"
    if r.had_own:
        setattr(r.owner, r.attr, r.raw)
    else:
        delattr(r.owner, r.attr)
    return None


# --------------------------------------------------------------------------
# The two callers: apply (activation) and probe (doctor, check)


@dataclass
class Outcome:
    state: str
    reason: str
    targets: List[str] = field(default_factory=list)
    installed: List[Installed] = field(default_factory=list)
    undo: Optional[Callable] = None


def apply_patch(patch: Patch, surfaces: Mapping[str, Surface]) -> Optional[Outcome]:
    """Resolve, check, build and install ``patch``; None while it is pending."""
    targets: List[str] = []
    try:
        resolved = resolve_patch(patch, surfaces)
        targets = [r.target for _, r in resolved]
        if all(patch_marker(r.raw) == patch.name for _, r in resolved) and resolved:
            return Outcome(APPLIED, "already installed in this process (another activation)", targets)
        note = check_applies(patch, resolved)
        installed, undo = install(patch, build(patch, resolved))
    except Pending:
        return None
    except Refused as exc:
        return Outcome(exc.state, str(exc), targets)
    copies = sum(len(i.copies) for i in installed)
    reason = f"{len(installed)} target(s) patched" + (f", {copies} from-import copies rebound" if copies else "")
    if note:
        reason += f"; {note}"
    return Outcome(APPLIED, reason, targets, installed, undo)


PROBE_OK = "targets resolve, signatures match, replacements build"


def probe_patch(patch: Patch, surfaces: Mapping[str, Surface], import_modules: bool = True) -> Outcome:
    """The checks of :func:`apply_patch` without installing: APPLIED here means
    "would apply", UPSTREAM "would stand down (provided upstream)". With
    ``import_modules`` the target modules are imported first (SGLang and
    torch: for ``doctor`` and ``check``, never at activation)."""
    if import_modules:
        import importlib

        for b in patch.bindings:
            for m in getattr(surfaces.get(b.surface), "modules", ()):
                try:
                    importlib.import_module(m)
                except ImportError:
                    continue  # an older candidate; resolution says whether one is left
                except Exception as exc:  # SGLang import-time failures are findings
                    return Outcome(FAILED, f"importing {m} raised {type(exc).__name__}: {exc}")
    targets: List[str] = []
    try:
        resolved = resolve_patch(patch, surfaces)
        targets = [r.target for _, r in resolved]
        note = check_applies(patch, resolved)
        build(patch, resolved)
    except Pending as exc:
        return Outcome(FAILED, f"module(s) not importable: {exc}", targets)
    except Refused as exc:
        return Outcome(exc.state, str(exc), targets)
    return Outcome(APPLIED, PROBE_OK + (f"; {note}" if note else ""), targets)
