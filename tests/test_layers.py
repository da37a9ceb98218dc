"""The package's layers: no import cycles, no import from a lower layer to a higher one.

The import graph is read from the AST of every module under ``sglang_kv5d/``
(nothing is imported): ``import a.b``, ``from a import b``, relative
imports, and imports inside functions, classes and ``if`` blocks all count.
``from pkg import name`` is an arrow to ``pkg.name`` when that is a module,
else to ``pkg`` (its ``__init__``). Strings handed to ``importlib`` are not
arrows: that is how the engine loads patch modules by name.

The layers, bottom to top (a module may import its own layer and those below;
between two different top-level units of one layer only without a cycle):

    0 foundation  leaves every layer reads: _version, surface_names, safe_text,
                  platform, aiter_pages, config, versions, state, trusted_path,
                  errors (the exception types), kernel_failures (the
                  kernel-failure records the hot paths keep)
    1 surface     the table of SGLang names the overlay touches
    2 kernels     Triton code and host launchers (platform, config, failure
                  records only)
    3 core        pools, composites, cpu_copy, prefix_valid, disagg, attention,
                  speculative, kernel_check (the checks before
                  traffic run kernels and name attention's ConfigKey: they
                  take explicit shapes, and read no SGLang object, patch or
                  engine state)
    4 engine      activation: the patch type (activation.patch_type), the
                  built-in patch table, loading patch modules by name,
                  install / restore, status, fail closed
    5 patches     patches (the adapters binding core code to SGLang surfaces,
                  including the checks at pool / backend build), upstream
                  (the probes that are patches' ``applies`` verdicts: they
                  answer the engine's ProvidedUpstream / StillNeeded) and
                  rules (the launch rules)
    6 tools       launch, doctor, selftest, bench, kernel_report, manifests
    7 entry       cli, the package __init__, _bootstrap, _sglang_plugin

Patches reach the engine only through ``sglang_kv5d.activation`` (its public
functions) and ``sglang_kv5d.activation.patch_type``. A further test keeps
shared names public: no module of the package imports an
``_underscore`` name from another of its modules (dunders allowed), nor reads
``module._name`` off a module it imported.
"""

from __future__ import annotations

import ast
import os
from typing import Dict, List, Set, Tuple

import pytest

pytestmark = pytest.mark.sglang_independent

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "sglang_kv5d")
PKG = "sglang_kv5d"

# Written once: the layer of each unit (a module, or a package with everything under it).
LAYERS: Dict[int, Tuple[str, ...]] = {
    0: ("_version", "surface_names", "safe_text", "platform", "aiter_pages", "config", "versions", "state",
        "trusted_path", "errors", "kernel_failures"),
    1: ("surface",),
    2: ("kernels",),
    3: ("pools", "composites", "cpu_copy", "prefix_valid", "disagg", "attention", "speculative", "kernel_check"),
    4: ("activation",),
    5: ("patches", "upstream", "rules"),
    6: ("launch", "doctor", "selftest", "bench", "kernel_report", "manifests"),
    7: ("cli", "", "_bootstrap", "_sglang_plugin"),  # "": the package's own __init__
}
LAYER_NAMES = {0: "foundation", 1: "surface", 2: "kernels", 3: "core", 4: "engine", 5: "patches", 6: "tools",
               7: "entry"}


def _modules(root: str = ROOT) -> Dict[str, str]:
    """Dotted module name -> file path, for every module of the package."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.startswith("."))
        for fn in sorted(filenames):
            if not fn.endswith(".py"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, fn), root)[:-3].split(os.sep)
            if rel[-1] == "__init__":
                rel = rel[:-1]
            out[".".join([PKG] + rel)] = os.path.join(dirpath, fn)
    return out


def _is_package(path: str) -> bool:
    return os.path.basename(path) == "__init__.py"


def _resolve(name: str, modules) -> str:
    """The longest prefix of ``name`` that is a module of the package ('' if none)."""
    parts = name.split(".")
    while parts:
        cand = ".".join(parts)
        if cand in modules:
            return cand
        parts.pop()
    return ""


def _imports(mod: str, path: str, modules) -> List[Tuple[str, str, int]]:
    """(target module, imported name or '', line) for every import of the package in ``mod``."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == PKG or alias.name.startswith(PKG + "."):
                    out.append((_resolve(alias.name, modules), "", node.lineno))
        elif isinstance(node, ast.ImportFrom):
            out += _imports_of_node(mod, path, node, modules)
    return [(t, n, ln) for t, n, ln in out if t and t != mod]


def import_graph(root: str = ROOT) -> Dict[str, Dict[str, int]]:
    """module -> {imported module: first line}."""
    modules = _modules(root)
    graph: Dict[str, Dict[str, int]] = {}
    for mod, path in modules.items():
        edges = graph.setdefault(mod, {})
        for target, _, line in _imports(mod, path, modules):
            edges.setdefault(target, line)
    return graph


def unit_of(mod: str) -> str:
    """The top-level unit of a module: sglang_kv5d.attention.decode -> 'attention'."""
    rest = mod[len(PKG) + 1:] if mod != PKG else ""
    return rest.split(".", 1)[0]


def layer_of(mod: str) -> int:
    unit = unit_of(mod)
    for layer, units in LAYERS.items():
        if unit in units:
            return layer
    raise KeyError(unit)


def _cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """Strongly connected components with more than one node (Tarjan), each as one cycle through it."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on: Set[str] = set()
    comps: List[List[str]] = []
    counter = [0]

    def visit(v):
        work = [(v, iter(sorted(graph.get(v, ()))))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        while work:
            node, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    advanced = True
                    break
                if w in on:
                    low[node] = min(low[node], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                if len(comp) > 1:
                    comps.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_one_cycle(graph, set(c)) for c in comps]


def _one_cycle(graph, comp: Set[str]) -> List[str]:
    """A shortest cycle through the component's first node, as a path."""
    start = min(comp)
    prev = {start: None}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph.get(v, ())):
                if w not in comp:
                    continue
                if w == start:
                    path = [v]
                    while prev[path[-1]] is not None:
                        path.append(prev[path[-1]])
                    return list(reversed(path)) + [start]
                if w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return sorted(comp)


def module_cycles(graph=None) -> List[List[str]]:
    graph = graph or import_graph()
    return _cycles({m: set(e) for m, e in graph.items()})


def unit_cycles(graph=None) -> List[List[str]]:
    """Cycles between top-level units (attention <-> kernel_check counts even without a module cycle)."""
    graph = graph or import_graph()
    units: Dict[str, Set[str]] = {}
    for m, edges in graph.items():
        u = unit_of(m)
        units.setdefault(u, set()).update(unit_of(t) for t in edges if unit_of(t) != u)
    return _cycles(units)


def up_arrows(graph=None) -> List[str]:
    graph = graph or import_graph()
    out = []
    for m, edges in sorted(graph.items()):
        for t, line in sorted(edges.items()):
            if layer_of(t) > layer_of(m):
                out.append(f"{m} (layer {layer_of(m)} {LAYER_NAMES[layer_of(m)]}) imports {t} "
                           f"(layer {layer_of(t)} {LAYER_NAMES[layer_of(t)]}) at line {line}")
    return out


def private_imports(root: str = ROOT) -> List[str]:
    """``from <package module> import _name`` and ``<imported package module>._name`` between modules."""
    modules = _modules(root)
    out = []
    for mod, path in sorted(modules.items()):
        tree = ast.parse(open(path, encoding="utf-8").read(), path)
        aliases: Dict[str, str] = {}  # local name bound to a package module -> that module
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith(PKG + ".") or alias.name == PKG:
                        if alias.asname:
                            aliases[alias.asname] = alias.name
            elif isinstance(node, ast.ImportFrom):
                for target, name, line in _imports_of_node(mod, path, node, modules):
                    if name and name.startswith("_") and not name.startswith("__") and target != mod:
                        out.append(f"{mod}:{line} imports {name} from {target}")
                    elif not name:
                        for alias in node.names:
                            aliases[alias.asname or alias.name] = target
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in aliases and node.attr.startswith("_")
                    and not node.attr.startswith("__") and aliases[node.value.id] != mod):
                out.append(f"{mod}:{node.lineno} reads {node.value.id}.{node.attr} ({aliases[node.value.id]})")
    return out


def _imports_of_node(mod, path, node, modules):
    """(target module, imported name or '', line) for each name of one ``from ... import``
    of the package: the module itself when ``name`` is one, else the module it is read from."""
    package = mod if _is_package(path) else mod.rpartition(".")[0]
    if node.level:
        base = package.split(".")
        if node.level > 1:
            base = base[: len(base) - (node.level - 1)]
        src = ".".join(base + ([node.module] if node.module else []))
    else:
        src = node.module or ""
    if not (src == PKG or src.startswith(PKG + ".")):
        return []
    out = []
    for alias in node.names:
        sub = f"{src}.{alias.name}"
        if sub in modules:
            out.append((sub, "", node.lineno))
        else:
            out.append((_resolve(src, modules), alias.name, node.lineno))
    return out


def test_every_unit_has_a_layer():
    missing = sorted({unit_of(m) for m in _modules()} - {u for units in LAYERS.values() for u in units})
    assert not missing, f"modules of no layer (add them to LAYERS in {__file__}): {missing}"


def test_no_module_cycles():
    cycles = module_cycles()
    assert not cycles, "import cycles between modules:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_no_cycles_between_units():
    cycles = unit_cycles()
    assert not cycles, "import cycles between top-level units:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_no_import_from_a_lower_layer_to_a_higher_one():
    arrows = up_arrows()
    assert not arrows, "imports from a lower layer to a higher one:\n" + "\n".join(arrows)


def test_patches_reach_the_engine_through_its_public_face():
    """A patch imports the engine's package (its public functions) or the patch
    type, never the lifecycle, install or registry modules themselves."""
    allowed = {"sglang_kv5d.activation", "sglang_kv5d.activation.patch_type"}
    graph = import_graph()
    found = [f"{m}:{line} imports {t}" for m, edges in sorted(graph.items()) if unit_of(m) == "patches"
             for t, line in sorted(edges.items()) if unit_of(t) == "activation" and t not in allowed]
    assert not found, "\n".join(found)


def test_no_private_names_across_modules():
    found = private_imports()
    assert not found, "private names used across modules (make them public where shared):\n" + "\n".join(found)


def test_the_graph_sees_function_level_and_relative_imports():
    graph = import_graph()
    # sglang_kv5d/__init__.py imports the engine inside its functions, relatively.
    assert "sglang_kv5d.activation" in graph["sglang_kv5d"]
    assert "sglang_kv5d._version" in graph["sglang_kv5d"]


def test_the_scans_see_each_form(tmp_path):
    """A made-up package: a cycle through a function-level relative import, an
    up-arrow, a private name imported and one read off an imported module."""
    pkg = tmp_path / PKG
    (pkg / "attention").mkdir(parents=True)
    files = {
        "__init__.py": "",
        "config.py": "def f():\n    from .pools import _helper\n",  # foundation -> core: up-arrow, private
        "pools.py": "import sglang_kv5d.config as cfg\n_helper = 1\nx = cfg._hidden\n",
        "attention/__init__.py": "from .routing import route\n",
        "attention/routing.py": "def route():\n    from . import decode\n",
        "attention/decode.py": "from sglang_kv5d.attention import routing\n__all__ = []\n",
    }
    for rel, text in files.items():
        (pkg / rel).write_text(text)
    graph = import_graph(str(pkg))
    assert graph["sglang_kv5d.config"] == {"sglang_kv5d.pools": 2}
    assert [c for c in module_cycles(graph) if "sglang_kv5d.attention.routing" in c] == [
        ["sglang_kv5d.attention.decode", "sglang_kv5d.attention.routing", "sglang_kv5d.attention.decode"]]
    assert unit_cycles(graph) == [["config", "pools", "config"]]
    assert up_arrows(graph) == ["sglang_kv5d.config (layer 0 foundation) imports sglang_kv5d.pools "
                                "(layer 3 core) at line 2"]
    assert private_imports(str(pkg)) == ["sglang_kv5d.config:2 imports _helper from sglang_kv5d.pools",
                                         "sglang_kv5d.pools:3 reads cfg._hidden (sglang_kv5d.config)"]
