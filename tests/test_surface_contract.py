"""Contract: every surface in the table exists in every tested SGLang wheel.

Reads the source of the wheels that scripts/setup-dev.sh downloads into
.cache/wheels (sglang_kv5d/versions.py: CONTRACT_WHEELS) without installing or
importing them: each target resolves (one of its candidate locations, for
moved symbols), its parameters start with an accepted prefix, and each module
listed as holding a from-import copy really does ``from X import name``.
The table's other names (surface.NAMES) are checked there too: modules exist,
environment variables and literals occur in the wheel's source. Finally, no
module of the package outside the table imports SGLang or writes an SGLang
module path or variable name in a string (docstrings and comments may).
"""

from __future__ import annotations

import ast
import glob
import os
import re

import pytest

from sglang_kv5d import surface
from sglang_kv5d.surface import ENV, MODULE, NAMES, SURFACES, TEXT, params_match, split_target
from sglang_kv5d.versions import CONTRACT_WHEELS, parse_version
from tests.helpers.source_contract import WheelSource, find, imports_name_from
from tests.helpers.subproc import ROOT

pytestmark = pytest.mark.sglang_independent

WHEEL_DIR = os.path.join(ROOT, ".cache", "wheels")
REQUIRED_VERSIONS = CONTRACT_WHEELS


def _wheels():
    found = {}
    for path in glob.glob(os.path.join(WHEEL_DIR, "sglang-*.whl")):
        m = re.match(r"sglang-([^-]+)-", os.path.basename(path))
        if m:
            found[m.group(1)] = path
    return found


WHEELS = _wheels()


def test_every_required_wheel_is_cached():
    missing = [v for v in REQUIRED_VERSIONS if v not in WHEELS]
    assert not missing, f"run scripts/setup-dev.sh to download sglang {missing} into {WHEEL_DIR}"


@pytest.fixture(scope="module", params=sorted(WHEELS, key=parse_version) or ["none"])
def wheel(request):
    if request.param == "none":
        pytest.fail(f"no SGLang wheels in {WHEEL_DIR}; run scripts/setup-dev.sh")
    return request.param, WheelSource(WHEELS[request.param])


@pytest.mark.parametrize("surface_id", sorted(SURFACES))
def test_surface_resolves_with_expected_parameters(wheel, surface_id):
    version, src = wheel
    row = SURFACES[surface_id]
    if parse_version(version) < parse_version(row.since):
        pytest.skip(f"{surface_id} exists from {row.since}")
    tried = []
    for target in row.targets:
        module, path = split_target(target)
        tree = src.module_tree(module)
        if tree is None:
            tried.append(f"{target} (no module)")
            continue
        hit = find(tree, path)
        if hit is None:
            tried.append(f"{target} (no such name)")
            continue
        kind, params = hit
        if row.params is not None:
            assert kind == "function", f"{target} in {version} is a {kind}, expected a function"
            assert params_match(params, row.params), (
                f"{target} in sglang {version}: parameters {params} do not start with any of {row.params}"
            )
        for holder in row.copies:
            holder_tree = src.module_tree(holder)
            assert holder_tree is not None, f"{holder} missing in {version}"
            assert imports_name_from(holder_tree, module, path[-1]), (
                f"{holder} in {version} no longer does `from {module} import {path[-1]}`: "
                "update the table's copies"
            )
        return
    pytest.fail(f"{surface_id} not found in sglang {version}; tried: {'; '.join(tried)}")


def test_newest_wheel_has_the_page_table_flag_and_older_do_not():
    """The version difference pool-layout-detection branches on (by probing)."""
    for version, path in WHEELS.items():
        tree_src = WheelSource(path).zip.read("sglang/srt/layers/attention/aiter_backend.py").decode()
        has = "self.decode_uses_page_table =" in tree_src
        assert has == (parse_version(version) >= parse_version("0.5.23")), version


def test_pd_layout_handshake_exists_only_from_0_5_23():
    """pd-layout-handshake's surface: get_pd_kv_layout and the kv_layout field of the bootstrap report
    exist from 0.5.23; before, nothing carries a layout between PD roles (the patch cannot apply there)."""
    for version, path in WHEELS.items():
        src = WheelSource(path)
        utils_tree = src.module_tree("sglang.srt.disaggregation.utils")
        conn_text = src.zip.read("sglang/srt/disaggregation/common/conn.py").decode()
        has = find(utils_tree, ("get_pd_kv_layout",)) is not None
        assert has == (parse_version(version) >= parse_version("0.5.23")), version
        assert ("info.kv_layout != self.kv_layout" in conn_text) == has, version
        assert find(src.module_tree("sglang.srt.disaggregation.common.conn"),
                    ("CommonKVManager", "try_ensure_parallel_info")) is not None, version


# ---------------------------------------------------------------------------
# Names that are not objects (modules, environment variables, literals)


def _wheel_text(src: WheelSource) -> str:
    """All of the wheel's Python source as one string (cached on the reader)."""
    text = getattr(src, "_all_text", None)
    if text is None:
        text = "\n".join(src.zip.read(n).decode("utf-8", "replace") for n in sorted(src.names)
                         if n.startswith("sglang/") and n.endswith(".py"))
        src._all_text = text
    return text


@pytest.mark.parametrize("value", sorted(NAMES))
def test_name_exists_in_wheel(wheel, value):
    version, src = wheel
    name = NAMES[value]
    if parse_version(version) < parse_version(name.since):
        pytest.skip(f"{value} exists from {name.since}")
    if name.kind == MODULE:
        assert src.module_tree(value) is not None, f"module {value} is not in sglang {version}"
    elif name.kind == ENV:
        assert re.search(r"\b" + re.escape(value) + r"\b", _wheel_text(src)), (
            f"sglang {version} never mentions the environment variable {value}"
        )
    else:
        assert name.kind == TEXT, f"{value}: unknown kind {name.kind!r}"
        assert value in _wheel_text(src), f"sglang {version} source has no {value!r}"


def test_every_sglang_constant_of_the_table_is_a_checked_name():
    """A module-level string of the surface package or surface_names.py naming SGLang is in
    NAMES (so the contract test above covers it) or is the module of a row's target."""
    from sglang_kv5d import surface_names

    row_modules = {m for row in SURFACES.values() for m in row.modules}
    loose = []
    for attr, value in list(vars(surface).items()) + list(vars(surface_names).items()):
        if attr.isupper() and isinstance(value, str) and SGLANG_NAME.search(value):
            if value not in NAMES and value.rstrip(".") not in NAMES and value not in row_modules:
                loose.append(f"{attr} = {value!r}")
    assert not loose, f"add these to surface.NAMES: {loose}"


# ---------------------------------------------------------------------------
# The package names SGLang only through the table

PACKAGE_DIR = os.path.join(ROOT, "sglang_kv5d")
TABLE = ("sglang_kv5d/surface_names.py", "sglang_kv5d/surface/")
# An SGLang module path (``sglang.srt...``), a process-title prefix, or an SGLang
# environment variable; the overlay's own SGLANG_KV5D* variables are not SGLang's.
SGLANG_NAME = re.compile(r"\bsglang(\.[A-Za-z_]|::|\.$)|\bSGLANG_(?!KV5D)[A-Z0-9_]*")
# Words that look like SGLang variables but are not: a click metavar.
NOT_SGLANG = {"SGLANG_ARGS"}


def _docstrings(tree):
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def _is_sglang_module(name) -> bool:
    return bool(name) and (name == "sglang" or name.startswith("sglang."))


def sglang_names_outside_table(package_dir: str = PACKAGE_DIR):
    """``path:line: what`` for every import of SGLang and every string constant
    (docstrings aside) naming an SGLang module or variable, outside the table."""
    found = []
    for dirpath, dirnames, filenames in os.walk(package_dir):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for fname in sorted(filenames):
            if not fname.endswith(".py"):
                continue
            path = os.path.join(dirpath, fname)
            rel = os.path.relpath(path, ROOT).replace(os.sep, "/")
            if rel.startswith(TABLE):
                continue
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read(), filename=rel)
            docs = _docstrings(tree)
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.level == 0 and _is_sglang_module(node.module):
                    found.append(f"{rel}:{node.lineno}: from {node.module} import ...")
                elif isinstance(node, ast.Import):
                    found += [f"{rel}:{node.lineno}: import {a.name}" for a in node.names if _is_sglang_module(a.name)]
                elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                    hits = {m.group(0) for m in SGLANG_NAME.finditer(node.value)} - NOT_SGLANG
                    if hits:
                        found.append(f"{rel}:{node.lineno}: {node.value[:70]!r}")
    return found


def test_scan_finds_what_it_must(tmp_path):
    """The scanner itself: each form it must catch, and what it must let pass."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "bad.py").write_text(
        '"""Docstrings may say sglang.srt.server_args and SGLANG_USE_AITER."""\n'
        "import sglang.srt.utils\n"
        "from sglang.srt import server_args\n"
        "M = 'sglang.srt.mem_cache.memory_pool'\n"
        "E = 'SGLANG_USE_AITER'\n"
        "P = 'sglang::'\n"
        "T = f'export SGLANG_PLUGINS={1}'\n"
        "OK = ('SGLANG_KV5D_STRICT', 'sglang-kv5d', 'sglang_kv5d.kernels', 'SGLANG_ARGS')  # SGLANG_X in a comment\n"
    )
    found = [f.split(":", 2)[1] for f in sglang_names_outside_table(str(pkg))]
    assert sorted(found, key=int) == ["2", "3", "4", "5", "6", "7"]


def test_package_names_sglang_only_through_the_surface_table():
    found = sglang_names_outside_table()
    assert not found, (
        "SGLang names outside sglang_kv5d/surface/ (add a constant or row there and use it):\n  "
        + "\n  ".join(found)
    )


# ---------------------------------------------------------------------------
# Reaching a row's live object


def test_row_access_helpers(monkeypatch):
    from sglang_kv5d.surface import READ, Surface, attr_name, find_loaded, import_object

    assert attr_name("memory_pool.KVCache._check_physical_write_loc") == "_check_physical_write_loc"
    assert find_loaded("memory_pool.unwrap_write_loc", modules={}) is None  # imports nothing
    fake = type("M", (), {"unwrap_write_loc": staticmethod(len)})
    assert find_loaded("memory_pool.unwrap_write_loc", modules={surface.MEMORY_POOL: fake}) is len
    row = Surface(id="test.moved", targets=("json:no_such_name", "sglang_kv5d_no_such_module:x", "json:dumps"),
                  action=READ, params=None)
    monkeypatch.setitem(SURFACES, row.id, row)
    import json

    assert import_object("test.moved") is json.dumps  # the first target that resolves
    monkeypatch.setitem(SURFACES, row.id, Surface(**{**row.__dict__, "targets": row.targets[:2]}))
    with pytest.raises(LookupError) as err:
        import_object("test.moved")
    assert "json:no_such_name (no such name)" in str(err.value)
    assert "sglang_kv5d_no_such_module:x (No module named" in str(err.value)
