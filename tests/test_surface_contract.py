"""Contract: every surface in the table exists in every tested SGLang wheel.

Reads the source of the wheels that scripts/setup-dev.sh downloads into
.cache/wheels (0.5.13.post1, 0.5.16, 0.5.20, 0.5.23) without installing or
importing them: each target resolves (one of its candidate locations, for
moved symbols), its parameters start with an accepted prefix, and each module
listed as holding a from-import copy really does ``from X import name``.
"""

from __future__ import annotations

import glob
import os
import re

import pytest

from sglang_kv5d.surface import SURFACES, params_match, split_target
from sglang_kv5d.versions import parse_version
from tests.helpers.source_contract import WheelSource, find, imports_name_from
from tests.helpers.subproc import ROOT

pytestmark = pytest.mark.sglang_independent

WHEEL_DIR = os.path.join(ROOT, ".cache", "wheels")
REQUIRED_VERSIONS = ("0.5.13.post1", "0.5.16", "0.5.20", "0.5.23")


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
