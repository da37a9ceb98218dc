"""The surface table, the patch manifests (patches/*.toml) and the code agree."""

from __future__ import annotations

import os

import pytest

from sglang_kv5d.manifests import load_manifests, manifest_problems
from sglang_kv5d.patches import BUILTIN_PATCH_MODULES, load_builtin
from sglang_kv5d.surface import READ, SURFACES
from tests.helpers.subproc import ROOT

pytestmark = pytest.mark.sglang_independent

MANIFESTS = load_manifests()
# Table rows used by the activation machinery itself rather than by a patch.
ENGINE_ROWS = {"plugins.load_plugins"}
# Rows only `sglang-kv5d bench` reads (its peers; sglang_kv5d/bench/sglang_peers.py), no patch.
BENCH_ROWS = {"kernels.launch_reshape_and_cache_flash", "kernels.decode_attention_fwd"}


def test_one_manifest_per_builtin_patch():
    assert sorted(MANIFESTS) == sorted(BUILTIN_PATCH_MODULES)


@pytest.mark.parametrize("name", sorted(BUILTIN_PATCH_MODULES))
def test_manifest_matches_code(name):
    manifest = MANIFESTS[name]
    assert manifest_problems(manifest) == []
    patch = load_builtin(name)
    assert manifest["surfaces"] == [b.surface for b in patch.bindings]
    assert manifest["required_for_5d"] == patch.required_for_5d
    assert manifest["internal"] == patch.internal
    assert manifest["summary"] == patch.summary
    code_file = manifest["code"].split(" ", 1)[0]
    assert os.path.exists(os.path.join(ROOT, code_file)), code_file
    for sid in manifest["surfaces"]:
        assert sid in SURFACES, f"{name}: unknown surface {sid}"
        assert SURFACES[sid].action != READ, f"{name}: {sid} is read-only in the table but listed as changed"
    for sid in manifest["reads"]:
        assert sid in SURFACES, f"{name}: unknown surface {sid}"
        assert SURFACES[sid].action == READ, f"{name}: {sid} is changed by the table but listed as read"


def test_every_table_row_is_used():
    used = set(ENGINE_ROWS) | BENCH_ROWS
    for manifest in MANIFESTS.values():
        used.update(manifest["surfaces"])
        used.update(manifest["reads"])
    assert sorted(set(SURFACES) - used) == [], "table rows no manifest mentions"


def test_table_rows_are_documented():
    for row in SURFACES.values():
        assert row.why and row.upstream and row.removal, row.id
        assert row.targets and all(":" in t for t in row.targets), row.id
