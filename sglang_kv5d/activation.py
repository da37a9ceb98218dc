"""The activation engine: apply and revert patches, once per process.

Every activation route ends in :func:`activate`:

    1. SGLang's plugin loader calls the ``kv5d`` entry point
       (sglang_kv5d._sglang_plugin.register) in processes that load plugins;
    2. the env-gated ``.pth`` bootstrap (sglang_kv5d._bootstrap) activates on
       the first ``import sglang`` in every interpreter that inherits
       ``SGLANG_KV5D=1`` (spawn children, versions whose children never load
       plugins);
    3. ``sglang_kv5d.activate()`` from custom scripts.

Mechanics. For each patch the engine registers wrapt post-import hooks on the
exact modules of its surfaces; a patch applies as soon as all of them are
imported (at once if they already are). Applying is all-or-nothing: resolve
every target from ``sys.modules`` (never importing), check its parameters
with ``inspect.signature``, build every replacement, then install; any error
rolls back what was installed and marks the patch failed with the reason.
``deactivate()`` restores the exact original objects, including from-import
copies rebound in other modules. State is guarded by a lock, and a forked
child re-checks its inherited patches and reports under its own pid.
"""

from __future__ import annotations

import inspect
import logging
import os
import sys
import threading
import types
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from . import config
from . import versions as _versions
from .patches import BUILTIN_PATCH_MODULES, ENTRY_POINT_GROUP, Binding, Patch, load_builtin
from .state import APPLIED, DISABLED, FAILED, PENDING, SKIPPED, PatchStatus, Status, process_role, write_status_file
from .surface import (
    PROCESS_TARGET_NAMES,
    READ,
    REPLACE,
    SURFACES,
    WRAP,
    Surface,
    describe_params,
    params_match,
    split_target,
)

logger = logging.getLogger("sglang_kv5d")

# Attribute set on replacement functions (REPLACE) so a second engine or a
# reload never stacks a patch on itself. Wrappers carry ``_self_kv5d_patch``.
MARKER = "__kv5d_patch__"


class Kv5dError(RuntimeError):
    """Base class of the overlay's errors."""


class Kv5dNotReadyError(Kv5dError):
    """5D was requested but a patch it needs is not applied (fail closed)."""


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
    except Exception:
        name = None
    if name is None:
        name = getattr(obj, MARKER, None)
        if name is None and isinstance(obj, (staticmethod, classmethod)):
            name = getattr(obj.__func__, MARKER, None)
    return name if isinstance(name, str) else None


# --------------------------------------------------------------------------
# Resolution (pure: reads sys.modules, never imports)


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


class _Pending(Exception):
    pass


def _initializing(module: types.ModuleType) -> bool:
    spec = getattr(module, "__spec__", None)
    return bool(getattr(spec, "_initializing", False))


# Modules a post-import hook reported as fully executed. importlib keeps
# ``__spec__._initializing`` set until after the hooks run, so the flag alone
# cannot tell a finished module from one still executing.
_completed_modules: set = set()


def resolve_loaded(surface: Surface, modules: Optional[Dict[str, types.ModuleType]] = None) -> Resolved:
    """Resolve a surface from already-imported modules.

    Raises _Pending when no candidate's module is imported yet, LookupError
    (with every place tried) when the modules are imported but the name is
    missing from all of them.
    """
    mods = sys.modules if modules is None else modules
    tried = []
    unloaded = []
    for target in surface.targets:
        modname, path = split_target(target)
        module = mods.get(modname)
        if module is None or (_initializing(module) and modname not in _completed_modules):
            # Not imported yet, or still executing (a post-import hook of a
            # module it imports fired first): its names may not exist yet.
            unloaded.append(modname)
            continue
        owner: Any = module
        ok = True
        for part in path[:-1]:
            owner = getattr(owner, part, None)
            if owner is None:
                ok = False
                break
        attr = path[-1]
        if ok:
            if isinstance(owner, type):
                had_own = attr in owner.__dict__
                raw = owner.__dict__.get(attr) if had_own else getattr(owner, attr, None)
            else:
                had_own = True
                raw = getattr(owner, attr, None)
            if raw is not None:
                return Resolved(surface, target, module, owner, attr, raw, had_own)
        tried.append(target)
    if unloaded and not tried:
        raise _Pending(", ".join(unloaded))
    if unloaded:
        # Some candidates are loaded but lack the name; a not-yet-imported one may have it.
        raise _Pending(", ".join(unloaded))
    raise LookupError(f"{surface.id}: not found; tried {', '.join(tried)}")


def signature_problem(surface: Surface, fn: Any) -> Optional[str]:
    """None when ``fn``'s parameters match the surface, else 'expected ... found ...'."""
    if surface.params is None:
        return None
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        return f"cannot read the signature of {surface.targets[0]}: {exc}"
    found = tuple(sig.parameters)
    if params_match(found, surface.params):
        return None
    return f"signature changed: expected {describe_params(surface.params)}, found ({', '.join(found)})"


# --------------------------------------------------------------------------
# Engine state


@dataclass
class _Installed:
    resolved: Resolved
    replacement: Any
    copies: List[Tuple[types.ModuleType, str]] = field(default_factory=list)


@dataclass
class _Record:
    patch: Patch
    state: str
    reason: str
    installed: List[_Installed] = field(default_factory=list)
    targets: List[str] = field(default_factory=list)
    undo: Optional[Any] = None  # from Patch.after_install


class _Engine:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.pid = os.getpid()
        self.active = False
        self.routes: List[str] = []
        self.strict = True
        self.verdict = _versions.Verdict(_versions.MISSING, None, False, "not checked yet")
        self.records: Dict[str, _Record] = {}
        self.order: List[str] = []  # application order, for reverse restore
        self.hooked_modules: set = set()
        self.warnings: List[str] = []
        self.logged_pid: Optional[int] = None
        self.logged_by: Optional[str] = None
        self.env_set_by_us: Dict[str, Optional[str]] = {}
        self.warned_5d: set = set()
        self.surfaces: Dict[str, Surface] = dict(SURFACES)
        self.selected: Optional[Tuple[str, ...]] = None
        self.activating = False  # inside activate(): it logs the status line itself


_engine = _Engine()


def _after_fork_in_child() -> None:
    """Forked child: fresh lock, own pid, re-check inherited patches, report."""
    global _engine
    eng = _engine
    eng.lock = threading.RLock()
    if not eng.active:
        eng.pid = os.getpid()
        return
    try:
        _recheck_pid(eng)
    except Exception:  # never break a fork
        pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _recheck_pid(eng: _Engine) -> None:
    if eng.pid == os.getpid():
        return
    eng.pid = os.getpid()
    eng.logged_pid = None
    eng.logged_by = None
    for rec in eng.records.values():
        if rec.state != APPLIED:
            continue
        for inst in rec.installed:
            r = inst.resolved
            current = r.owner.__dict__.get(r.attr) if isinstance(r.owner, type) else getattr(r.owner, r.attr, None)
            if current is not inst.replacement:
                rec.state = FAILED
                rec.reason = f"inherited patch of {r.target} was replaced after fork"
    _report(eng)


# --------------------------------------------------------------------------
# Patch discovery


def _discover_patches(eng: _Engine) -> List[Tuple[str, Optional[Patch], Optional[str]]]:
    """Built-in patches, then third-party ones from the entry-point group."""
    found: List[Tuple[str, Optional[Patch], Optional[str]]] = []
    for name in BUILTIN_PATCH_MODULES:
        try:
            found.append((name, load_builtin(name), None))
        except Exception as exc:  # a broken patch module must not break the others
            found.append((name, None, f"cannot load patch module: {type(exc).__name__}: {exc}"))
    try:
        from importlib.metadata import entry_points

        eps = entry_points(group=ENTRY_POINT_GROUP)
    except Exception:
        eps = []
    for ep in eps:
        try:
            patch = ep.load()
            if not isinstance(patch, Patch):
                raise TypeError(f"entry point {ep.value} is a {type(patch).__name__}, not a Patch")
            for row in patch.extra_surfaces:
                eng.surfaces.setdefault(row.id, row)
            found.append((patch.name, patch, None))
        except Exception as exc:
            found.append((ep.name, None, f"cannot load entry point {ep.value}: {exc}"))
    return found


# --------------------------------------------------------------------------
# Applying


def _patch_modules(eng: _Engine, patch: Patch) -> List[str]:
    mods: List[str] = []
    for b in patch.bindings:
        mods.extend(eng.surfaces[b.surface].modules)
    return list(dict.fromkeys(mods))


def _try_apply(eng: _Engine, rec: _Record) -> None:
    patch = rec.patch
    resolved: List[Tuple[Binding, Resolved]] = []
    try:
        for b in patch.bindings:
            surface = eng.surfaces[b.surface]
            if surface.action == READ:
                raise LookupError(f"surface {surface.id} is read-only in the table; a patch cannot change it")
            r = resolve_loaded(surface)
            if r.attr in PROCESS_TARGET_NAMES:
                raise LookupError(f"{r.target} is a multiprocessing process target; wrapping it breaks spawn")
            if b.check_signature:
                problem = signature_problem(surface, r.function)
                if problem:
                    raise LookupError(f"{r.target}: {problem}")
            resolved.append((b, r))
    except _Pending:
        return
    except LookupError as exc:
        rec.state, rec.reason = FAILED, str(exc).strip("'\"")
        _report_change(eng, rec)
        return
    rec.targets = [r.target for _, r in resolved]

    already = [r for _, r in resolved if patch_marker(r.raw) == patch.name]
    if already and len(already) == len(resolved):
        rec.state, rec.reason = APPLIED, "already installed in this process (another activation)"
        _report_change(eng, rec)
        return

    if patch.applies is not None:
        try:
            skip = patch.applies({b.surface: r.function for b, r in resolved})
        except Exception as exc:
            skip = None
            rec.state, rec.reason = FAILED, f"applicability check raised {type(exc).__name__}: {exc}"
            _report_change(eng, rec)
            return
        if skip:
            rec.state, rec.reason = SKIPPED, skip
            _report_change(eng, rec)
            return

    # Build every replacement before touching anything.
    built: List[Tuple[Resolved, Any]] = []
    try:
        for b, r in resolved:
            made = b.make(r.function)
            if r.surface.action == WRAP:
                inner = r.raw
                if isinstance(inner, (staticmethod, classmethod)):
                    raise TypeError(f"{r.target}: wrapping static/class methods is not supported")
                replacement = _wrapper_class()(inner, made, patch.name)
            elif r.surface.action == REPLACE:
                if not callable(made):
                    raise TypeError(f"{r.target}: replacement is not callable")
                try:
                    setattr(made, MARKER, patch.name)
                except AttributeError:
                    pass
                replacement = made
            else:  # pragma: no cover - rejected above
                raise TypeError(f"{r.target}: unknown action {r.surface.action}")
            built.append((r, replacement))
    except Exception as exc:
        rec.state, rec.reason = FAILED, f"building the replacement failed: {type(exc).__name__}: {exc}"
        _report_change(eng, rec)
        return

    # Install; roll back on any error.
    installed: List[_Installed] = []
    try:
        for r, replacement in built:
            inst = _Installed(r, replacement)
            setattr(r.owner, r.attr, replacement)
            installed.append(inst)
            if r.surface.action == REPLACE:
                inst.copies = _rebind_copies(r, replacement)
        rec.undo = patch.after_install() if patch.after_install is not None else None
    except Exception as exc:
        for inst in reversed(installed):
            _restore(inst)
        rec.state, rec.reason = FAILED, f"installing failed and was rolled back: {type(exc).__name__}: {exc}"
        _report_change(eng, rec)
        return
    rec.installed = installed
    rec.state = APPLIED
    copies = sum(len(i.copies) for i in installed)
    rec.reason = f"{len(installed)} target(s) patched" + (f", {copies} from-import copies rebound" if copies else "")
    eng.order.append(patch.name)
    _report_change(eng, rec)


def _rebind_copies(r: Resolved, replacement: Any) -> List[Tuple[types.ModuleType, str]]:
    """Rebind ``from X import name`` copies of the original in loaded modules.

    The surface's declared copy holders are always checked; any other loaded
    ``sglang`` module holding the same object is rebound too (and reported).
    """
    original = r.raw
    rebound: List[Tuple[types.ModuleType, str]] = []
    candidates = set(r.surface.copies)
    candidates.update(n for n in list(sys.modules) if n == "sglang" or n.startswith("sglang."))
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


def _restore(inst: _Installed) -> Optional[str]:
    """Put the original back; returns a problem description or None."""
    r = inst.resolved
    problem = None
    for module, name in inst.copies:
        if getattr(module, name, None) is inst.replacement:
            setattr(module, name, r.raw)
    current = r.owner.__dict__.get(r.attr) if isinstance(r.owner, type) else getattr(r.owner, r.attr, None)
    if current is not inst.replacement:
        problem = f"{r.target} was re-patched by someone else after sglang-kv5d; left as found"
        return problem
    if r.had_own:
        setattr(r.owner, r.attr, r.raw)
    else:
        delattr(r.owner, r.attr)
    return problem


def _on_module_imported(module: types.ModuleType) -> None:
    """wrapt post-import hook: apply whatever became applicable."""
    eng = _engine
    with eng.lock:
        _completed_modules.add(getattr(module, "__name__", ""))
        if not eng.active:
            return
        _recheck_pid(eng)
        _apply_pending(eng)


def _apply_pending(eng: _Engine) -> None:
    for name in list(eng.records):
        rec = eng.records[name]
        if rec.state == PENDING:
            _try_apply(eng, rec)


def _register_hooks(eng: _Engine, modules: Iterable[str]) -> None:
    import wrapt

    for modname in modules:
        if modname in eng.hooked_modules:
            continue
        eng.hooked_modules.add(modname)
        wrapt.register_post_import_hook(_on_module_imported, modname)


# --------------------------------------------------------------------------
# Reporting


def _status(eng: _Engine) -> Status:
    patches = []
    for name, rec in eng.records.items():
        patches.append(
            PatchStatus(
                name=name,
                state=rec.state,
                reason=rec.reason,
                required_for_5d=bool(rec.patch and rec.patch.required_for_5d),
                internal=bool(rec.patch and rec.patch.internal),
                targets=list(rec.targets),
            )
        )
    return Status(
        pid=os.getpid(),
        role=process_role(),
        active=eng.active,
        routes=list(eng.routes),
        sglang_version=eng.verdict.version,
        verdict=eng.verdict.kind,
        verdict_message=eng.verdict.message,
        strict=eng.strict,
        patches=patches,
        warnings=list(eng.warnings),
    )


def _write_status_file(status: Status) -> None:
    directory = config.status_dir()
    if not directory:
        return
    write_status_file(status, directory, logger)  # safe writer; an unsafe directory warns once


def _report(eng: _Engine, by: str = "route") -> None:
    """Log the status line for this pid and refresh the status file.

    An explicit route (plugin, api) logs once per pid. A process activated
    only through the .pth bootstrap (often before logging is configured) logs
    when its first patch settles, and again if an explicit route arrives later.
    """
    st = _status(eng)
    if eng.logged_pid != st.pid or (by == "route" and eng.logged_by != "route"):
        eng.logged_pid = st.pid
        eng.logged_by = by
        logger.info("%s", st.summary_line())
    _write_status_file(st)


def _report_change(eng: _Engine, rec: _Record) -> None:
    if rec.state == FAILED:
        logger.warning("sglang-kv5d: patch %s failed: %s", rec.patch.name, rec.reason)
    else:
        logger.debug("sglang-kv5d: patch %s %s: %s", rec.patch.name, rec.state, rec.reason)
    if eng.logged_pid != os.getpid() and rec.state in (APPLIED, FAILED) and not eng.activating:
        _report(eng, by="settle")  # first settled patch in a process nobody activated explicitly
    else:
        _write_status_file(_status(eng))


# --------------------------------------------------------------------------
# Public entry points


def activate(
    patches: Optional[Sequence[str]] = None,
    strict: Optional[bool] = None,
    *,
    route: str = "api",
) -> Status:
    """Turn the overlay on in this process (idempotent) and return its status.

    ``patches`` limits the selectable patches (default: SGLANG_KV5D_PATCHES,
    else all); ``strict`` overrides SGLANG_KV5D_STRICT. With ``route="api"``
    the choice is also exported to ``os.environ`` so child processes inherit it.
    """
    eng = _engine
    with eng.lock:
        _recheck_pid(eng)
        if route == "api":
            _export_env(eng, patches, strict)
        if route not in eng.routes:
            eng.routes.append(route)
        if eng.active:
            wanted = tuple(patches) if patches is not None else None
            if wanted is not None and wanted != eng.selected:
                msg = (f"already active with patch selection {eng.selected or 'all'}; the new selection "
                       f"{list(wanted)} is ignored (call deactivate() first to change it)")
                if msg not in eng.warnings:
                    eng.warnings.append(msg)
                    logger.warning("sglang-kv5d: %s", msg)
            if route != "pth":
                _report(eng)
            return _status(eng)

        eng.strict = config.strict() if strict is None else bool(strict)
        selected = tuple(patches) if patches is not None else config.selected_patches()
        eng.selected = selected
        eng.verdict = _versions.verdict(allow_untested=config.allow_untested())
        eng.records = {}
        eng.order = []
        eng.warnings = []
        for msg in config.activation_warnings():  # invalid switches: name them and what is assumed
            eng.warnings.append(msg)
            logger.warning("sglang-kv5d: %s", msg)
        discovered = _discover_patches(eng)
        known = {name for name, _, _ in discovered}
        if selected is not None:
            unknown = [n for n in selected if n not in known]
            if unknown:
                eng.warnings.append(
                    f"unknown patch name(s) in the selection: {', '.join(unknown)}; known: {', '.join(sorted(known))}"
                )
        preloaded = _preloaded_modules(eng, discovered)
        eng.active = True
        to_hook: List[str] = []
        for name, patch, load_error in discovered:
            if patch is None:
                stub = Patch(name=name, summary="(failed to load)", bindings=())
                eng.records[name] = _Record(stub, FAILED, load_error or "cannot load")
                continue
            rec = _Record(patch, PENDING, "waiting for " + ", ".join(_patch_modules(eng, patch)) + " to be imported")
            eng.records[name] = rec
            if not patch.internal and selected is not None and name not in selected:
                rec.state, rec.reason = DISABLED, f"not selected by {config.PATCHES}"
                continue
            if not patch.internal and not eng.verdict.allowed:
                rec.state, rec.reason = SKIPPED, eng.verdict.message
                continue
            to_hook.extend(_patch_modules(eng, patch))
        if preloaded and route == "api":
            eng.warnings.append(_preloaded_warning(eng, preloaded))
            logger.warning("sglang-kv5d: %s", eng.warnings[-1])
        eng.activating = True
        try:
            _apply_pending(eng)
        finally:
            eng.activating = False
        _register_hooks(eng, dict.fromkeys(to_hook))
        if route == "pth":
            _write_status_file(_status(eng))
        else:
            _report(eng)
        return _status(eng)


def _preloaded_modules(eng: _Engine, discovered) -> List[str]:
    mods = []
    for _, patch, _ in discovered:
        if patch is None:
            continue
        for b in patch.bindings:
            for m in eng.surfaces[b.surface].modules:
                if m in sys.modules and m not in mods:
                    mods.append(m)
    return mods


def _preloaded_warning(eng: _Engine, modules: List[str]) -> str:
    frozen = []
    for row in eng.surfaces.values():
        if row.frozen_at_import and any(m in modules for m in row.modules):
            frozen.append(row.frozen_at_import)
    msg = (
        "activate() ran after SGLang modules were imported ("
        + ", ".join(modules)
        + "): their functions are patched now, but objects built before this call "
        "(pools, attention backends) keep upstream behaviour"
    )
    if frozen:
        msg += "; fixed at import time and not changed: " + "; ".join(dict.fromkeys(frozen))
    return msg + ". Call sglang_kv5d.activate() before importing SGLang, or launch with `sglang-kv5d launch`."


def _export_env(eng: _Engine, patches: Optional[Sequence[str]], strict: Optional[bool]) -> None:
    wanted = {config.GATE: "1"}
    if patches is not None:
        wanted[config.PATCHES] = ",".join(patches)
    if strict is not None:
        wanted[config.STRICT] = "1" if strict else "0"
    for key, value in wanted.items():
        if os.environ.get(key) != value:
            eng.env_set_by_us.setdefault(key, os.environ.get(key))
            os.environ[key] = value


def deactivate() -> Status:
    """Restore every original object and turn the overlay off (idempotent)."""
    eng = _engine
    with eng.lock:
        _recheck_pid(eng)
        if not eng.active:
            return _status(eng)
        for name in reversed(eng.order):
            rec = eng.records[name]
            if rec.undo is not None:
                try:
                    rec.undo()
                except Exception as exc:
                    eng.warnings.append(f"{name}: undoing its registration failed: {exc}")
                rec.undo = None
            for inst in reversed(rec.installed):
                problem = _restore(inst)
                if problem:
                    eng.warnings.append(problem)
                    logger.warning("sglang-kv5d: %s", problem)
            rec.installed = []
        for rec in eng.records.values():
            if rec.state in (APPLIED, PENDING):
                rec.state, rec.reason = DISABLED, "deactivated"
        eng.order = []
        eng.active = False
        for key, previous in eng.env_set_by_us.items():
            if previous is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = previous
        eng.env_set_by_us = {}
        st = _status(eng)
        logger.info("sglang-kv5d: deactivated in pid %d", st.pid)
        _write_status_file(st)
        return st


def status() -> Status:
    """This process's status (patches are listed once the overlay was activated)."""
    eng = _engine
    with eng.lock:
        _recheck_pid(eng)
        if not eng.records and not eng.active:
            eng.verdict = _versions.verdict(allow_untested=config.allow_untested())
        st = _status(eng)
        if not eng.active:  # e.g. SGLANG_KV5D=maybe: say why the overlay is off
            st.warnings += [w for w in config.activation_warnings() if w not in st.warnings]
        return st


# --------------------------------------------------------------------------
# Fail closed


def enforce_5d_ready(where: str) -> None:
    """Called by the fail-closed guard when a 5D pool / AITER backend is built.

    Strict: raise Kv5dNotReadyError naming every 5D-required patch that is not
    applied, why, and the fix. Non-strict: log each problem once as a warning.
    """
    eng = _engine
    with eng.lock:
        problems = []
        for name, rec in eng.records.items():
            if not rec.patch.required_for_5d or rec.state in (APPLIED, PENDING):
                continue
            problems.append((name, rec.state, rec.reason, _fix_for(rec)))
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
    eng = _engine
    with eng.lock:
        if eng.strict:
            raise Kv5dNotReadyError(message)
        if message not in eng.warned_5d:
            eng.warned_5d.add(message)
            logger.warning("%s (continuing: %s=0)", message, config.STRICT)


def _fix_for(rec: _Record) -> str:
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


# --------------------------------------------------------------------------
# Probing without activating (doctor, check)


@dataclass
class PatchProbe:
    name: str
    ok: bool
    reason: str
    required_for_5d: bool
    internal: bool
    targets: List[str]


def probe_patches(import_modules: bool = True) -> List[PatchProbe]:
    """Resolve and signature-check every patch's targets without patching.

    With ``import_modules`` the target modules are imported (this imports
    SGLang and torch: for the doctor and ``check``, never at activation).
    """
    import contextlib
    import importlib
    import warnings

    # SGLang prints and warns at import time; keep stdout clean for --json.
    with contextlib.redirect_stdout(sys.stderr), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _probe_patches(import_modules, importlib)


def _probe_patches(import_modules: bool, importlib) -> List[PatchProbe]:
    eng = _Engine()
    probes: List[PatchProbe] = []
    for name, patch, load_error in _discover_patches(eng):
        if patch is None:
            probes.append(PatchProbe(name, False, load_error or "cannot load", False, False, []))
            continue
        ok, reason, targets = True, "", []
        for b in patch.bindings:
            surface = eng.surfaces[b.surface]
            if import_modules:
                for m in surface.modules:
                    try:
                        importlib.import_module(m)
                    except ImportError:
                        continue
                    except Exception as exc:  # SGLang import-time failures are findings
                        ok, reason = False, f"importing {m} raised {type(exc).__name__}: {exc}"
            if not ok:
                break
            try:
                r = resolve_loaded(surface)
            except _Pending as exc:
                ok, reason = False, f"module(s) not importable: {exc}"
                break
            except LookupError as exc:
                ok, reason = False, str(exc).strip("'\"")
                break
            targets.append(r.target)
            if b.check_signature:
                problem = signature_problem(surface, r.function)
                if problem:
                    ok, reason = False, f"{r.target}: {problem}"
                    break
            try:
                b.make(r.function)  # builds the replacement (imports the core), installs nothing
            except Exception as exc:
                ok, reason = False, f"building the replacement for {r.target} failed: {type(exc).__name__}: {exc}"
                break
        if ok:
            reason = "targets resolve, signatures match, replacements build"
        probes.append(PatchProbe(name, ok, reason, patch.required_for_5d, patch.internal, targets))
    return probes
