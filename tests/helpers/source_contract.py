"""Resolve surface-table targets in an SGLang wheel by reading its source (ast).

Nothing is installed or imported: the wheel is opened as a zip.
"""

from __future__ import annotations

import ast
import zipfile
from typing import Dict, List, Optional, Tuple


class WheelSource:
    def __init__(self, path: str):
        self.path = path
        self.zip = zipfile.ZipFile(path)
        self.names = set(self.zip.namelist())
        self._trees: Dict[str, Optional[ast.Module]] = {}

    def module_tree(self, module: str) -> Optional[ast.Module]:
        if module not in self._trees:
            base = module.replace(".", "/")
            tree = None
            for candidate in (base + ".py", base + "/__init__.py"):
                if candidate in self.names:
                    tree = ast.parse(self.zip.read(candidate).decode("utf-8"))
                    break
            self._trees[module] = tree
        return self._trees[module]


def _top_level(body) -> List[ast.stmt]:
    """Module-level statements, looking into if/try blocks (not defs)."""
    out: List[ast.stmt] = []
    for node in body:
        out.append(node)
        if isinstance(node, ast.If):
            out.extend(_top_level(node.body) + _top_level(node.orelse))
        elif isinstance(node, ast.Try):
            out.extend(_top_level(node.body))
            for h in node.handlers:
                out.extend(_top_level(h.body))
            out.extend(_top_level(node.orelse) + _top_level(node.finalbody))
    return out


def _params(fn: ast.FunctionDef) -> Tuple[str, ...]:
    a = fn.args
    names = [p.arg for p in a.posonlyargs + a.args]
    if a.vararg:
        names.append(a.vararg.arg)
    names += [p.arg for p in a.kwonlyargs]
    if a.kwarg:
        names.append(a.kwarg.arg)
    return tuple(names)


def find(tree: ast.Module, path: Tuple[str, ...]):
    """Return ('function', params) / ('class', None) / ('name', None) or None."""
    scope = _top_level(tree.body)
    for i, name in enumerate(path):
        last = i == len(path) - 1
        found = None
        for node in scope:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                found = ("function", _params(node), node)
            elif isinstance(node, ast.ClassDef) and node.name == name:
                found = ("class", None, node)
            elif last and isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == name for t in node.targets
            ):
                found = ("name", None, node)
            elif last and isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
                found = ("name", None, node)
        if found is None:
            return None
        if last:
            return found[0], found[1]
        if found[0] != "class":
            return None
        scope = list(found[2].body)
    return None


def imports_name_from(tree: ast.Module, module: str, name: str) -> bool:
    """Does the module do ``from <module> import <name>`` anywhere at top level?"""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == module:
            if any(alias.name == name for alias in node.names):
                return True
    return False
