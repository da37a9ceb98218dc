"""Which ``SGLANG_*`` variables does the installed SGLang read? (for KV5D012)

A scan of the installed package's ``.py`` sources as bytes, once per process
and package directory; SGLang is not imported.
"""

from __future__ import annotations

import functools
import os
import re
from typing import FrozenSet, Optional

from ..surface_names import ENV_PREFIX
from ..versions import sglang_package_dir

_PREFIX = ENV_PREFIX.encode("ascii")
_SGLANG_NAME_RE = re.compile(re.escape(_PREFIX) + rb"[A-Z0-9_]+")


@functools.lru_cache(maxsize=4)
def _scan_env_names(root: str) -> FrozenSet[str]:
    names = set()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for fn in filenames:
            if not fn.endswith(".py"):
                continue
            try:
                with open(os.path.join(dirpath, fn), "rb") as fh:
                    data = fh.read()
            except OSError:
                continue
            if _PREFIX in data:
                names.update(m.decode("ascii") for m in _SGLANG_NAME_RE.findall(data))
    return frozenset(names)


def sglang_env_names(root: Optional[str] = None) -> Optional[FrozenSet[str]]:
    """Names of ``SGLANG_*`` variables the installed SGLang reads (cached per process).

    Every ``SGLANG_*`` token in the package's ``.py`` sources counts: the
    ``Envs`` declarations in ``environ.py`` and the string literals passed to
    ``get_bool_env_var`` / ``os.environ`` / ``os.getenv`` elsewhere. A token
    ending in ``_`` is a prefix SGLang builds names from. Errs towards "known"
    (a name that only appears in a comment counts), so the warning never fires
    for a variable SGLang does read. None when SGLang is not installed.
    """
    root = root or sglang_package_dir()
    if not root or not os.path.isdir(root):
        return None
    return _scan_env_names(os.path.realpath(root))
