"""Patch manifests: the human-readable record of each patch (patches/*.toml).

In a wheel they are shipped as ``sglang_kv5d/_manifests``; in a source
checkout they are read from the top-level ``patches/`` folder.
"""

from __future__ import annotations

import os
from typing import Dict, List

try:  # Python 3.11+
    import tomllib as _toml
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    _toml = None

REQUIRED_KEYS = ("name", "summary", "required_for_5d", "internal", "sglang", "surfaces", "reads", "code", "why",
                 "upstream", "removal")


def manifest_dir() -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    shipped = os.path.join(here, "_manifests")
    if os.path.isdir(shipped):
        return shipped
    return os.path.join(os.path.dirname(here), "patches")


def _parse(path: str) -> dict:
    with open(path, "rb") as fh:
        if _toml is not None:
            return _toml.load(fh)
    raise RuntimeError("reading manifests needs Python 3.11+ (tomllib)")


def load_manifests() -> Dict[str, dict]:
    """{patch name: manifest} for every ``*.toml`` in the manifest folder."""
    directory = manifest_dir()
    out: Dict[str, dict] = {}
    for fname in sorted(os.listdir(directory)):
        if not fname.endswith(".toml"):
            continue
        data = _parse(os.path.join(directory, fname))
        data["_file"] = fname
        out[data.get("name", fname[:-5])] = data
    return out


def manifest_problems(manifest: dict) -> List[str]:
    missing = [k for k in REQUIRED_KEYS if k not in manifest]
    problems = [f"missing key(s): {', '.join(missing)}"] if missing else []
    if manifest.get("_file") and manifest.get("name") and manifest["_file"] != manifest["name"] + ".toml":
        problems.append(f"file {manifest['_file']} should be named {manifest['name']}.toml")
    return problems
