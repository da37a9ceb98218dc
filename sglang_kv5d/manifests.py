"""Patch manifests: the human-readable record of each patch, generated from its Patch.

A patch's reason is written once, in its :class:`sglang_kv5d.patches.Patch`
(``problem``, ``why``, ``upstream``, ``removal``, ``sglang``, ``reads``,
``core``). From it this module renders:

    patches/<name>.toml     one manifest per registered built-in patch (shipped
                            in the wheel as ``sglang_kv5d/_manifests``)
    README.md patch table   "what upstream gets wrong | patch", one row per
                            selectable patch, between the patch-table markers

``python -m sglang_kv5d.manifests --write`` rewrites both in a source checkout;
``--check`` (what tests/test_manifests.py runs) lists what is out of date and
the command that fixes it. ``sglang-kv5d patches`` reads the Patch objects
through :func:`manifest_data`, so what it prints is what the files say.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap
from typing import Dict, List, Optional, Sequence, Tuple

REQUIRED_KEYS = ("name", "summary", "required_for_5d", "internal", "sglang", "surfaces", "reads", "code",
                 "problem", "why", "upstream", "removal")
# Fields of a Patch that hold its reason; the first four must not be empty.
REASON_FIELDS = ("why", "upstream", "removal")
COMMAND = "python -m sglang_kv5d.manifests --write"

README_BEGIN = (f"<!-- patch table: generated from each Patch's `problem` by `{COMMAND}`; "
                "a test keeps it in sync -->")
README_END = "<!-- end of patch table -->"

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_PKG_DIR)


def manifest_dir() -> str:
    shipped = os.path.join(_PKG_DIR, "_manifests")
    if os.path.isdir(shipped):
        return shipped
    return os.path.join(_ROOT, "patches")


# --------------------------------------------------------------------------
# From a Patch


def module_file(module: str) -> str:
    """``sglang_kv5d.x.y`` as a path from the checkout root (``sglang_kv5d/x/y.py``
    or ``sglang_kv5d/x/y/``), found without importing anything."""
    path = os.path.join(*module.split("."))
    if os.path.isfile(os.path.join(_ROOT, path + ".py")):
        return path.replace(os.sep, "/") + ".py"
    if os.path.isdir(os.path.join(_ROOT, path)):
        return path.replace(os.sep, "/") + "/"
    raise LookupError(f"module {module} is not in this checkout")


def _file_or_name(module: str) -> str:
    try:
        return module_file(module)
    except LookupError:  # reported by reason_problems; a manifest still renders
        return module


def _sglang_range(patch) -> str:
    if patch.sglang:
        return patch.sglang
    from .versions import NEWEST, OLDEST

    return f"{OLDEST} .. {NEWEST}"


def manifest_data(patch, module: Optional[str] = None) -> dict:
    """The manifest of ``patch`` (its Patch object's fields, in manifest order).
    ``module`` is the module defining it (from the registry), for ``code``."""
    code = ""
    if module:
        code = _file_or_name(module)
        if patch.core:
            code += " (core: " + ", ".join(_file_or_name(m) for m in patch.core) + ")"
    return {
        "name": patch.name,
        "summary": patch.summary,
        "required_for_5d": bool(patch.required_for_5d),
        "internal": bool(patch.internal),
        "sglang": _sglang_range(patch),
        "surfaces": [b.surface for b in patch.bindings],
        "reads": list(patch.reads),
        "code": code,
        "problem": patch.problem,
        "why": " ".join(patch.why.split()),
        "upstream": patch.upstream,
        "removal": patch.removal,
    }


def reason_problems(patch, module: str) -> List[str]:
    """What is missing from a patch's reason, with where to write it."""
    fields = list(REASON_FIELDS) + ([] if patch.internal else ["problem"])
    missing = [f for f in fields if not str(getattr(patch, f, "") or "").strip()]
    out = []
    if missing:
        out.append(f"patch {patch.name}: its Patch(...) in {module_file(module)} has no "
                   f"{', '.join(missing)}; write them there (the one place for a patch's reason), "
                   f"then run `{COMMAND}`")
    for m in patch.core:
        try:
            module_file(m)
        except LookupError as exc:
            out.append(f"patch {patch.name}: core {exc}; fix Patch.core in {module_file(module)}")
    return out


def _toml_str(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)  # a JSON string is a TOML basic string


def _toml_list(name: str, items: Sequence[str]) -> str:
    one = f"{name} = [{', '.join(_toml_str(i) for i in items)}]"
    if len(one) <= 100:
        return one
    return f"{name} = [\n" + "".join(f"    {_toml_str(i)},\n" for i in items) + "]"


def render_manifest(patch, module: str) -> str:
    """patches/<name>.toml for ``patch``, defined in ``module``."""
    d = manifest_data(patch, module)
    why = textwrap.fill(d["why"], width=78, break_long_words=False, break_on_hyphens=False)
    why = why.replace("\\", "\\\\").replace('"""', '""\\"')
    lines = [
        f"# Generated from the Patch in {module_file(module)} by `{COMMAND}`: edit it there.",
        f"name = {_toml_str(d['name'])}",
        f"summary = {_toml_str(d['summary'])}",
        f"required_for_5d = {'true' if d['required_for_5d'] else 'false'}",
        f"internal = {'true' if d['internal'] else 'false'}",
        f"sglang = {_toml_str(d['sglang'])}",
        _toml_list("surfaces", d["surfaces"]),
        _toml_list("reads", d["reads"]),
        f"code = {_toml_str(d['code'])}",
        f"problem = {_toml_str(d['problem'])}",
        f'why = """\n{why}\n"""',
        f"upstream = {_toml_str(d['upstream'])}",
        f"removal = {_toml_str(d['removal'])}",
    ]
    return "\n".join(lines) + "\n"


def render_readme_table(patches: Sequence[Tuple[str, object, str]]) -> str:
    """The README's "problem upstream | patch" table: every selectable patch, registry order."""
    rows = ["| problem upstream | patch |", "|---|---|"]
    for name, patch, _ in patches:
        if not patch.internal:
            rows.append(f"| {' '.join(patch.problem.split())} | `{name}` |")
    return "\n".join(rows) + "\n"


def _replace_block(text: str, body: str) -> str:
    if text.count(README_BEGIN) != 1 or text.count(README_END) != 1 or text.index(README_BEGIN) > text.index(README_END):
        raise ValueError(f"the README must contain the markers {README_BEGIN!r} and {README_END!r} once each, in order")
    head, rest = text.split(README_BEGIN, 1)
    _, tail = rest.split(README_END, 1)
    return f"{head}{README_BEGIN}\n{body}{README_END}{tail}"


# --------------------------------------------------------------------------
# The registered patches and the files generated from them


def builtin_patches() -> List[Tuple[str, object, str]]:
    """(name, Patch, defining module) of every built-in patch, in registry order."""
    from .patches import BUILTIN_PATCH_MODULES, load_builtin

    return [(name, load_builtin(name), BUILTIN_PATCH_MODULES[name].partition(":")[0])
            for name in BUILTIN_PATCH_MODULES]


def generated(root: str = _ROOT) -> Tuple[Dict[str, str], List[str]]:
    """({path under root: text it must hold}, problems that stop generation)."""
    patches = builtin_patches()
    problems = [p for _, patch, module in patches for p in reason_problems(patch, module)]
    files = {f"patches/{name}.toml": render_manifest(patch, module) for name, patch, module in patches}
    readme = os.path.join(root, "README.md")
    try:
        with open(readme, encoding="utf-8") as fh:
            files["README.md"] = _replace_block(fh.read(), render_readme_table(patches))
    except (OSError, ValueError) as exc:
        problems.append(f"README.md: {exc}")
    return files, problems


def _incomplete(problems: List[str]) -> set:
    """The manifests of the patches a problem names (``patch NAME: ...``)."""
    return {f"patches/{p.split()[1].rstrip(':')}.toml" for p in problems if p.startswith("patch ")}


def stale(root: str = _ROOT) -> List[str]:
    """Every way the committed manifests / README differ from the Patch objects."""
    files, problems = generated(root)
    out = list(problems)
    incomplete = _incomplete(problems)
    for rel, text in files.items():
        if rel in incomplete:
            continue  # the problem above says what to do first
        path = os.path.join(root, rel)
        try:
            with open(path, encoding="utf-8") as fh:
                current = fh.read()
        except OSError:
            current = None
        if current != text:
            what = "is missing" if current is None else "differs from its Patch"
            if rel == "README.md":
                what = "has a patch table that differs from the Patch objects"
            out.append(f"{rel} {what}: run `{COMMAND}`")
    directory = os.path.join(root, "patches")
    for fname in sorted(os.listdir(directory)) if os.path.isdir(directory) else ():
        if fname.endswith(".toml") and f"patches/{fname}" not in files:
            out.append(f"patches/{fname}: no registered patch of that name; add it to BUILTIN_PATCH_MODULES "
                       f"(sglang_kv5d.patches exports it) and run `{COMMAND}`, or delete the file")
    return out


def write(root: str = _ROOT) -> Tuple[List[str], List[str]]:
    """Write the generated files; returns (paths written, problems). A patch
    whose reason is incomplete keeps its file, and then the README keeps its table."""
    files, problems = generated(root)
    skip = _incomplete(problems)
    if skip:
        skip.add("README.md")
    written = []
    for rel, text in files.items():
        if rel in skip:
            continue
        path = os.path.join(root, rel)
        try:
            with open(path, encoding="utf-8") as fh:
                if fh.read() == text:
                    continue
        except OSError:
            pass
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
        written.append(rel)
    return written, []


# --------------------------------------------------------------------------
# Reading the shipped manifests


def _parse(path: str) -> dict:
    try:  # Python 3.11+
        import tomllib
    except ModuleNotFoundError:  # pragma: no cover - Python 3.10
        raise RuntimeError("reading manifests needs Python 3.11+ (tomllib)") from None
    with open(path, "rb") as fh:
        return tomllib.load(fh)


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


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m sglang_kv5d.manifests",
                                description="Generate patches/*.toml and the README patch table from the Patch objects.")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--write", action="store_true", help="rewrite what is out of date (in a source checkout)")
    g.add_argument("--check", action="store_true", help="list what is out of date; exit 1 if anything is")
    a = p.parse_args(argv)
    if not os.path.isfile(os.path.join(_ROOT, "pyproject.toml")) or not os.path.isdir(os.path.join(_ROOT, "patches")):
        sys.stderr.write(f"python -m sglang_kv5d.manifests: {_ROOT} is not a source checkout of sglang-kv5d "
                         "(no pyproject.toml / patches/): run it from an editable install of a checkout\n")
        return 2
    if a.check:
        out = stale()
        for line in out:
            sys.stderr.write(line + "\n")
        return 1 if out else 0
    written, problems = write()
    for line in problems:
        sys.stderr.write(line + "\n")
    for rel in written:
        sys.stdout.write(f"wrote {rel}\n")
    return 1 if problems else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
