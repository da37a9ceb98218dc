"""Every broad ``except`` in the package says why it must be broad.

A handler for ``Exception`` / ``BaseException`` (or a bare ``except:``) hides
whatever the code under it gets wrong, so each one carries a comment on its
own line that says why nothing narrower will do (aiter's or SGLang's own code
runs under it, a child process reports whatever happened, ...). Narrower
handlers need no comment.
"""

from __future__ import annotations

import ast
import os
import re

import pytest

import sglang_kv5d

pytestmark = pytest.mark.sglang_independent

PACKAGE = os.path.dirname(sglang_kv5d.__file__)
_BROAD = {"Exception", "BaseException"}


def _broad(handler: ast.ExceptHandler) -> bool:
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return handler.type is None or any(isinstance(k, ast.Name) and k.id in _BROAD for k in kinds)


def broad_handlers_without_reason(path: str):
    """``[(line, text)]`` of broad handlers in ``path`` whose line has no ``#`` comment."""
    source = open(path, encoding="utf-8").read()
    lines = source.splitlines()
    found = []
    for node in ast.walk(ast.parse(source, filename=path)):
        if isinstance(node, ast.ExceptHandler) and _broad(node):
            text = lines[node.lineno - 1]
            comment = text.split("except", 1)[1].partition("#")[2]
            reason = re.sub(r"pragma:\s*no cover|noqa(:\s*[A-Z0-9, ]+)?|type:\s*ignore(\[[^]]*\])?", "", comment)
            if not reason.strip(" -:;,"):
                found.append((node.lineno, text.strip()))
    return found


def test_each_broad_except_says_why():
    missing = []
    for dirpath, _, files in os.walk(PACKAGE):
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(dirpath, name)
                missing += [f"{os.path.relpath(path, PACKAGE)}:{n}: {t}" for n, t in broad_handlers_without_reason(path)]
    assert not missing, "narrow these, or say on the line why they must be broad:\n" + "\n".join(missing)


def test_the_scan_sees_each_form(tmp_path):
    src = tmp_path / "m.py"
    src.write_text(
        "try:\n    pass\nexcept Exception:\n    pass\n"
        "try:\n    pass\nexcept (ValueError, BaseException) as e:\n    pass\n"
        "try:\n    pass\nexcept:\n    pass\n"
        "try:\n    pass\nexcept Exception:  # aiter's own code\n    pass\n"
        "try:\n    pass\nexcept ValueError:\n    pass\n"
        "try:\n    pass\nexcept Exception:  # noqa: BLE001\n    pass\n"
    )
    assert [n for n, _ in broad_handlers_without_reason(str(src))] == [3, 7, 11, 23]
