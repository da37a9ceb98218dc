"""The surface table: every SGLang object the overlay touches, in one place.

Each row names a target as ``"dotted.module:Qual.name"``. Rows with several
targets list the places a moved symbol has lived, newest first; the first one
that resolves wins (probing, never version strings). ``action`` says what the
overlay does with it:

    wrap      wrapped in place (wrapt FunctionWrapper); the original is kept
              and restored by deactivate()
    replace   replaced by a function with the same parameters; from-import
              copies listed in ``copies`` are rebound too
    read      only read or called (probes, kernels we call, registration APIs)

A row says where an object is and what shape it must have, nothing more: why
it is patched, since when upstream is wrong and when the patch can go are the
owning Patch's (each Patch names its rows in its bindings; patches/<name>.toml
renders them), and a READ row's purpose is the comment above it in reads.py.

``params`` lists the parameter-name prefixes accepted for the target (one tuple
per known signature). Before patching, ``inspect.signature`` of the live object
must start with one of them, or the patch fails with expected versus found.
The contract test (tests/test_surface_contract.py) checks every row against
the source of several SGLang wheels without importing them, and checks that
every row is used by a patch manifest in patches/ or marked as a probe.

SGLang's names that are not objects (module paths, environment variables,
literals such as the plugin entry-point group) are constants of
``surface_names`` re-exported here, each listed in ``NAMES`` with its kind and
the release it appeared in; the contract test checks those too, and fails on
any SGLang module path or variable written in the package outside the table.
Code reaches a row's live object with ``find_loaded`` (already imported),
``import_object`` (the selftest) or ``attr_name`` (an attribute to getattr).

Modules: ``table`` (the row type and actions), ``patched`` (rows the overlay
wraps or replaces), ``reads`` (rows it only reads or calls), ``names`` (names
that are not objects); the lookups are here. Standard library only: the
bootstrap and the doctor read this table.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

from ..surface_names import *  # noqa: F401,F403  (re-exported: the table's names)
from .names import NAMES, Name  # noqa: F401
from .patched import ROWS as _PATCHED
from .reads import ROWS as _READS
from .table import READ, REPLACE, WRAP, Surface  # noqa: F401

_ROWS = _PATCHED + _READS
SURFACES: Dict[str, Surface] = {row.id: row for row in _ROWS}

# Functions SGLang hands to multiprocessing as process targets. Wrapping one with
# a wrapt proxy breaks pickling under spawn, so the engine refuses to.
PROCESS_TARGET_NAMES = frozenset(
    {
        "run_scheduler_process",
        "run_detokenizer_process",
        "run_data_parallel_controller_process",
        "run_tokenizer_process",
        "run_multi_tokenizer_process",
    }
)


def split_target(target: str) -> Tuple[str, Tuple[str, ...]]:
    """``"pkg.mod:Cls.meth"`` -> ``("pkg.mod", ("Cls", "meth"))``."""
    module, _, qual = target.partition(":")
    if not module or not qual:
        raise ValueError(f"surface target {target!r} must look like 'package.module:Name.attr'")
    return module, tuple(qual.split("."))


def params_match(found: Tuple[str, ...], accepted: Optional[Tuple[Tuple[str, ...], ...]]) -> bool:
    """Does a found parameter list start with one of the accepted prefixes?"""
    if accepted is None:
        return True
    return any(found[: len(prefix)] == prefix for prefix in accepted)


def describe_params(accepted: Optional[Tuple[Tuple[str, ...], ...]]) -> str:
    if accepted is None:
        return "(any)"
    return " or ".join("(" + ", ".join(p) + ", ...)" for p in accepted)



def attr_name(surface_id: str) -> str:
    """The attribute name a row's (first) target ends in, for ``getattr`` on live objects."""
    return split_target(SURFACES[surface_id].targets[0])[1][-1]


def find_loaded(surface_id: str, modules=None):
    """The object of a row from modules already imported (the first target that
    resolves), or None; imports nothing. ``modules`` defaults to sys.modules."""
    import sys

    modules = sys.modules if modules is None else modules
    for target in SURFACES[surface_id].targets:
        module, path = split_target(target)
        obj = modules.get(module)
        for part in path:
            obj = getattr(obj, part, None) if obj is not None else None
        if obj is not None:
            return obj
    return None


def import_object(surface_id: str):
    """Import a row's modules in order and return the first target that resolves.

    For tools that build SGLang objects themselves (the selftest); patches are
    installed by the activation engine instead. Raises LookupError naming every
    target tried."""
    import importlib

    tried = []
    for target in SURFACES[surface_id].targets:
        module, path = split_target(target)
        try:
            obj = importlib.import_module(module)
        except ImportError as exc:
            tried.append(f"{target} ({exc})")
            continue
        for part in path:
            obj = getattr(obj, part, None)
            if obj is None:
                break
        if obj is not None:
            return obj
        tried.append(f"{target} (no such name)")
    raise LookupError(f"{surface_id}: not found in the installed SGLang; tried {'; '.join(tried)}")
