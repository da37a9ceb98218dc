"""The engine's life in one process: activate, apply on import, deactivate, status.

State is one :class:`Engine` per process, guarded by a lock. For each patch
:func:`activate` asks the registry's gate, registers wrapt post-import hooks
on the exact modules of its surfaces and applies it (sglang_kv5d.activation.
install) as soon as all of them are imported, at once if they already are.
:func:`deactivate` restores the exact original objects in reverse order. A
forked child gets a fresh lock, re-checks the patches it inherited and
reports under its own pid. Every change is logged once per pid and written to
the status file (``SGLANG_KV5D_STATUS_DIR``).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from .. import config
from .. import versions as _versions
from .patch_type import Patch
from ..state import APPLIED, DISABLED, FAILED, PENDING, UPSTREAM, PatchStatus, Status, process_role, write_status_file
from ..surface import SURFACES, Surface
from . import install as _install
from .registry import discover_patches, gate, patch_modules

logger = logging.getLogger("sglang_kv5d")


@dataclass
class Record:
    patch: Patch
    state: str
    reason: str
    installed: List[_install.Installed] = field(default_factory=list)
    targets: List[str] = field(default_factory=list)
    undo: Optional[Any] = None  # from Patch.after_install


class Engine:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.pid = os.getpid()
        self.active = False
        self.routes: List[str] = []
        self.strict = True
        self.verdict = _versions.Verdict(_versions.MISSING, None, False, "not checked yet")
        self.records: Dict[str, Record] = {}
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


engine = Engine()


def _after_fork_in_child() -> None:
    """Forked child: fresh lock, own pid, re-check inherited patches, report."""
    eng = engine
    eng.lock = threading.RLock()
    if not eng.active:
        eng.pid = os.getpid()
        return
    try:
        recheck_pid(eng)
    except Exception:  # runs in the child of any fork (os.register_at_fork): never break it
        pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def recheck_pid(eng: Engine) -> None:
    """In a process other than the one that activated: check that every
    inherited replacement is still in place, then report under this pid."""
    if eng.pid == os.getpid():
        return
    eng.pid = os.getpid()
    eng.logged_pid = None
    eng.logged_by = None
    for rec in eng.records.values():
        if rec.state != APPLIED:
            continue
        for inst in rec.installed:
            if inst.resolved.current() is not inst.replacement:
                rec.state = FAILED
                rec.reason = f"inherited patch of {inst.resolved.target} was replaced after fork"
    _report(eng)


# --------------------------------------------------------------------------
# Applying


def try_apply(eng: Engine, rec: Record) -> None:
    """Apply one pending patch if its modules are imported; record the outcome."""
    out = _install.apply_patch(rec.patch, eng.surfaces)
    if out is None:
        return  # still pending
    rec.state, rec.reason = out.state, out.reason
    if out.targets:
        rec.targets = out.targets
    if out.state == APPLIED and out.installed:
        rec.installed, rec.undo = out.installed, out.undo
        eng.order.append(rec.patch.name)
    _report_change(eng, rec)


def _on_module_imported(module) -> None:
    """wrapt post-import hook: apply whatever became applicable."""
    eng = engine
    with eng.lock:
        _install.completed_modules.add(getattr(module, "__name__", ""))
        if not eng.active:
            return
        recheck_pid(eng)
        _apply_pending(eng)


def _apply_pending(eng: Engine) -> None:
    for name in list(eng.records):
        rec = eng.records[name]
        if rec.state == PENDING:
            try_apply(eng, rec)


def _register_hooks(eng: Engine, modules: Iterable[str]) -> None:
    import wrapt

    for modname in modules:
        if modname in eng.hooked_modules:
            continue
        eng.hooked_modules.add(modname)
        wrapt.register_post_import_hook(_on_module_imported, modname)


# --------------------------------------------------------------------------
# Reporting


def snapshot(eng: Engine) -> Status:
    patches = [
        PatchStatus(name=name, state=rec.state, reason=rec.reason, required_for_5d=bool(rec.patch.required_for_5d),
                    internal=bool(rec.patch.internal), targets=list(rec.targets))
        for name, rec in eng.records.items()
    ]
    return Status(pid=os.getpid(), role=process_role(), active=eng.active, routes=list(eng.routes),
                  sglang_version=eng.verdict.version, verdict=eng.verdict.kind, verdict_message=eng.verdict.message,
                  strict=eng.strict, patches=patches, warnings=list(eng.warnings))


def _write_status_file(st: Status) -> None:
    directory = config.status_dir()
    if directory:
        write_status_file(st, directory, logger)  # safe writer; an unsafe directory warns once


def _report(eng: Engine, by: str = "route") -> None:
    """Log the status line for this pid and refresh the status file.

    An explicit route (plugin, api) logs once per pid. A process activated
    only through the .pth bootstrap (often before logging is configured) logs
    when its first patch settles, and again if an explicit route arrives later.
    """
    st = snapshot(eng)
    if eng.logged_pid != st.pid or (by == "route" and eng.logged_by != "route"):
        eng.logged_pid = st.pid
        eng.logged_by = by
        logger.info("%s", st.summary_line())
    _write_status_file(st)


def _report_change(eng: Engine, rec: Record) -> None:
    if rec.state == FAILED:
        logger.warning("sglang-kv5d: patch %s failed: %s", rec.patch.name, rec.reason)
    else:
        logger.debug("sglang-kv5d: patch %s %s: %s", rec.patch.name, rec.state, rec.reason)
    if eng.logged_pid != os.getpid() and rec.state in (APPLIED, FAILED, UPSTREAM) and not eng.activating:
        _report(eng, by="settle")  # first settled patch in a process nobody activated explicitly
    else:
        _write_status_file(snapshot(eng))


def _warn(eng: Engine, msg: str) -> None:
    eng.warnings.append(msg)
    logger.warning("sglang-kv5d: %s", msg)


# --------------------------------------------------------------------------
# Public entry points


def activate(patches: Optional[Sequence[str]] = None, strict: Optional[bool] = None, *,
             route: str = "api") -> Status:
    """Turn the overlay on in this process (idempotent) and return its status.

    ``patches`` limits the selectable patches (default: SGLANG_KV5D_PATCHES,
    else all); ``strict`` overrides SGLANG_KV5D_STRICT. With ``route="api"``
    both are validated first (:func:`check_patches_arg`, :func:`check_strict_arg`:
    TypeError / ValueError, nothing changed) and exported to ``os.environ``, so
    child processes inherit exactly this selection and strictness.
    """
    eng = engine
    with eng.lock:
        recheck_pid(eng)
        discovered = None
        if route == "api":  # the other routes pass nothing
            strict = check_strict_arg(strict)
            if patches is not None:
                if not eng.active:
                    discovered = discover_patches(eng.surfaces)
                known = eng.records if eng.active else [name for name, _, _ in discovered]
                patches = check_patches_arg(patches, known)
            _export_env(eng, patches, strict)
        if route not in eng.routes:
            eng.routes.append(route)
        if eng.active:
            wanted = tuple(patches) if patches is not None else None
            if wanted is not None and wanted != eng.selected:
                msg = (f"already active with patch selection {eng.selected or 'all'}; the new selection "
                       f"{list(wanted)} is ignored (call deactivate() first to change it)")
                if msg not in eng.warnings:
                    _warn(eng, msg)
            if route != "pth":
                _report(eng)
            return snapshot(eng)

        eng.strict = config.strict() if strict is None else bool(strict)
        selected = tuple(patches) if patches is not None else config.selected_patches()
        eng.selected = selected
        eng.verdict = _versions.verdict(allow_untested=config.allow_untested())
        eng.records = {}
        eng.order = []
        eng.warnings = []
        for msg in config.activation_warnings():  # invalid switches: name them and what is assumed
            _warn(eng, msg)
        if discovered is None:
            discovered = discover_patches(eng.surfaces)
        unknown = config.unknown_patch_names(selected or (), [name for name, _, _ in discovered])
        if unknown:
            eng.warnings.append(f"{config.PATCHES}: {unknown}")
        preloaded = _preloaded_modules(eng, discovered)
        eng.active = True
        to_hook: List[str] = []
        for name, patch, load_error in discovered:
            if patch is None:
                stub = Patch(name=name, summary="(failed to load)", bindings=())
                eng.records[name] = Record(stub, FAILED, load_error or "cannot load")
                continue
            modules = patch_modules(eng.surfaces, patch)
            rec = Record(patch, PENDING, "waiting for " + ", ".join(modules) + " to be imported")
            eng.records[name] = rec
            off = gate(patch, eng.verdict, selected)
            if off is not None:
                rec.state, rec.reason = off
                continue
            to_hook.extend(modules)
        if preloaded and route == "api":
            _warn(eng, _preloaded_warning(eng, preloaded))
        eng.activating = True
        try:
            _apply_pending(eng)
        finally:
            eng.activating = False
        _register_hooks(eng, dict.fromkeys(to_hook))
        if route == "pth":
            _write_status_file(snapshot(eng))
        else:
            _report(eng)
        return snapshot(eng)


def check_strict_arg(strict: Any) -> Optional[bool]:
    """``activate(strict=...)``: None, a bool, or a string spelled as
    SGLANG_KV5D_STRICT accepts (1/true/yes/on, 0/false/no/off); anything else
    raises (TypeError for another type, ValueError for another string), so
    ``strict="no"`` never means strict."""
    if strict is None or isinstance(strict, bool):
        return strict
    if isinstance(strict, str):
        if strict.strip() == "":
            raise ValueError("activate(strict=''): empty; pass True, False or None (SGLANG_KV5D_STRICT decides)")
        try:
            return config.parse_bool(strict)
        except ValueError as exc:
            raise ValueError(f"activate(strict={strict!r}): {exc}; or pass True / False") from None
    raise TypeError(f"activate(strict=...) takes True, False, None or a string such as 'on' / 'off', "
                    f"not {type(strict).__name__} {strict!r}")


def check_patches_arg(patches: Any, known: Iterable[str]) -> Tuple[str, ...]:
    """``activate(patches=...)`` (not None) as the tuple of names children inherit.

    A list / tuple / set of known patch names, at least one. A lone string, an
    empty collection, a non-string item or an unknown name (typo hinted)
    raises TypeError / ValueError: none of them may quietly select nothing
    here while SGLANG_KV5D_PATCHES gives children every patch.
    """
    if isinstance(patches, (str, bytes)):
        raise TypeError(f"activate(patches={patches!r}): pass a list of patch names, e.g. "
                        f"patches=[{patches!r}] (a string is not a list of names)")
    if not isinstance(patches, (list, tuple, set, frozenset)):
        raise TypeError(f"activate(patches=...) takes a list of patch names or None (every patch), "
                        f"not {type(patches).__name__} {patches!r}")
    names = tuple(sorted(patches)) if isinstance(patches, (set, frozenset)) else tuple(patches)
    bad = [n for n in names if not isinstance(n, str)]
    if bad:
        raise TypeError(f"activate(patches=...): every item must be a patch name (a string), not {bad[0]!r}")
    if not names:
        raise ValueError("activate(patches=[]) selects no patch; pass None for every patch, or name the patches "
                         "(`sglang-kv5d patches` lists them)")
    names = tuple(dict.fromkeys(n.strip() for n in names))
    problem = config.unknown_patch_names(names, known)
    if problem:
        raise ValueError(f"activate(patches=...): {problem}")
    return names


def _preloaded_modules(eng: Engine, discovered) -> List[str]:
    mods: List[str] = []
    for _, patch, _ in discovered:
        if patch is not None:
            mods.extend(m for m in patch_modules(eng.surfaces, patch) if m in sys.modules and m not in mods)
    return mods


def _preloaded_warning(eng: Engine, modules: List[str]) -> str:
    frozen = [row.frozen_at_import for row in eng.surfaces.values()
              if row.frozen_at_import and any(m in modules for m in row.modules)]
    msg = (
        "activate() ran after SGLang modules were imported ("
        + ", ".join(modules)
        + "): their functions are patched now, but objects built before this call "
        "(pools, attention backends) keep upstream behaviour"
    )
    if frozen:
        msg += "; fixed at import time and not changed: " + "; ".join(dict.fromkeys(frozen))
    return msg + ". Call sglang_kv5d.activate() before importing SGLang, or launch with `sglang-kv5d launch`."


def _export_env(eng: Engine, patches: Optional[Sequence[str]], strict: Optional[bool]) -> None:
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
    eng = engine
    with eng.lock:
        recheck_pid(eng)
        if not eng.active:
            return snapshot(eng)
        for name in reversed(eng.order):
            rec = eng.records[name]
            if rec.undo is not None:
                try:
                    rec.undo()
                except Exception as exc:  # an after_install undo is patch code (third-party too): warn, restore the rest
                    eng.warnings.append(f"{name}: undoing its registration failed: {exc}")
                rec.undo = None
            for inst in reversed(rec.installed):
                problem = _install.restore(inst)
                if problem:
                    _warn(eng, problem)
            rec.installed = []
        for rec in eng.records.values():
            if rec.state in (APPLIED, PENDING, UPSTREAM):
                rec.state, rec.reason = DISABLED, "deactivated"
        eng.order = []
        eng.active = False
        for key, previous in eng.env_set_by_us.items():
            if previous is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = previous
        eng.env_set_by_us = {}
        st = snapshot(eng)
        logger.info("sglang-kv5d: deactivated in pid %d", st.pid)
        _write_status_file(st)
        return st


def patch_state(name: str) -> Optional[str]:
    """Patch ``name``'s state in this process (None: not registered), read
    without the side effects of :func:`status` (for patches asking at run time)."""
    rec = engine.records.get(name)
    return None if rec is None else rec.state


def strict_mode() -> bool:
    """Is the engine in strict (fail-closed) mode? Read, never recomputed."""
    return bool(engine.strict)


def status() -> Status:
    """This process's status (patches are listed once the overlay was activated)."""
    eng = engine
    with eng.lock:
        recheck_pid(eng)
        if not eng.records and not eng.active:
            eng.verdict = _versions.verdict(allow_untested=config.allow_untested())
        st = snapshot(eng)
        if not eng.active:  # e.g. SGLANG_KV5D=maybe: say why the overlay is off
            st.warnings += [w for w in config.activation_warnings() if w not in st.warnings]
        return st
