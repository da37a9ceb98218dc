"""The surface table, the patch manifests (patches/*.toml), the README patch
table and the code agree; the manifests and the README table are generated
from the Patch objects."""

from __future__ import annotations

import dataclasses
import os
import sys
import tomllib

import pytest

from sglang_kv5d import manifests
from sglang_kv5d.manifests import COMMAND, load_manifests, manifest_data, manifest_problems, render_manifest
from sglang_kv5d.patches import BUILTIN_PATCH_MODULES, load_builtin
from sglang_kv5d.surface import READ, SURFACES
from tests.helpers.subproc import ROOT

pytestmark = pytest.mark.sglang_independent

MANIFESTS = load_manifests()
# Table rows used by the activation machinery itself or by the selftest (which
# builds real pools and a backend) rather than by a patch.
ENGINE_ROWS = {"plugins.load_plugins"}
SELFTEST_ROWS = {"memory_pool.MHATokenToKVPool", "memory_pool.HybridLinearKVPool", "memory_pool.KVWriteLoc",
                 "memory_pool._use_aiter", "aiter_backend.AiterAttnBackend", "runtime_context.get_parallel",
                 "runtime_context.get_schedule", "runtime_context.get_spec", "dp_attention.is_dp_attention_enabled",
                 "aiter_backend.AiterAttnBackend._build_verify_unified_metadata", "forward_batch_info.ForwardMode"}
# Rows only `sglang-kv5d bench` reads (its peers; sglang_kv5d/bench/sglang_peers.py), no patch.
BENCH_ROWS = {"kernels.launch_reshape_and_cache_flash", "kernels.decode_attention_fwd"}
# Rows only `sglang-kv5d launch` / `check` read (SGLang's own parser; sglang_kv5d/launch/sglang_parser.py).
LAUNCH_ROWS = {"server_args.ServerArgs.add_cli_args"}


def test_committed_manifests_and_readme_table_are_generated():
    problems = manifests.stale()
    assert problems == [], "\n".join(problems)


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


@pytest.mark.parametrize("name", sorted(BUILTIN_PATCH_MODULES))
def test_rendered_manifest_reads_back_as_the_patch(name):
    module = BUILTIN_PATCH_MODULES[name].partition(":")[0]
    patch = load_builtin(name)
    data = tomllib.loads(render_manifest(patch, module))
    data["why"] = " ".join(data["why"].split())
    assert data == manifest_data(patch, module)


def test_every_table_row_is_used():
    used = ENGINE_ROWS | SELFTEST_ROWS | BENCH_ROWS | LAUNCH_ROWS
    for manifest in MANIFESTS.values():
        used.update(manifest["surfaces"])
        used.update(manifest["reads"])
    assert sorted(set(SURFACES) - used) == [], "table rows no manifest mentions"


def test_table_rows_take_their_reason_from_the_patch():
    """A row carries where and what shape (targets, params, since); why, upstream
    and removal are the owning Patch's, written once. Every row the overlay
    changes is bound by a built-in patch whose reason is complete; every READ
    row says what it is read for in the comment above it (surface/reads.py)."""
    from sglang_kv5d.surface.table import Surface

    assert not {"why", "upstream", "removal"} & {f.name for f in dataclasses.fields(Surface)}
    owners = {}
    for name in BUILTIN_PATCH_MODULES:
        patch = load_builtin(name)
        for b in patch.bindings:
            owners.setdefault(b.surface, []).append(patch)
    for row in SURFACES.values():
        assert row.targets and all(":" in t for t in row.targets), row.id
        if row.action != READ:
            assert row.id in owners, f"{row.id}: changed by the table but bound by no built-in patch"
            for patch in owners[row.id]:
                assert patch.why.strip() and patch.upstream.strip() and patch.removal.strip(), (row.id, patch.name)
    with open(os.path.join(ROOT, "sglang_kv5d", "surface", "reads.py"), encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    for i, line in enumerate(lines):
        if line.strip() == "Surface(":
            assert lines[i - 1].strip().startswith("# "), f"surface/reads.py:{i + 1}: a READ row without its purpose"


# A newly registered patch: the generator covers it, and an incomplete reason
# tells its author where to write it and the one command to run.

PROBE = "tests.helpers.kv5d_probe_patch"


@pytest.fixture
def registered_probe(monkeypatch):
    __import__(PROBE)
    monkeypatch.setitem(BUILTIN_PATCH_MODULES, "engine-probe", f"{PROBE}:PATCH")
    return sys.modules[PROBE]


def test_a_new_patch_without_a_reason_names_the_place_and_the_command(registered_probe):
    files, problems = manifests.generated()
    (problem,) = [p for p in problems if "engine-probe" in p]
    assert "tests/helpers/kv5d_probe_patch.py" in problem and "why, upstream, removal, problem" in problem
    assert problem.endswith(f"run `{COMMAND}`"), problem
    assert not any(p.startswith("patches/engine-probe.toml") for p in manifests.stale())  # the reason first


def test_a_new_patch_gets_a_manifest_and_a_readme_row(registered_probe, monkeypatch, tmp_path):
    reasoned = dataclasses.replace(registered_probe.PATCH, problem="`get_bool_env_var` is never counted",
                                   why="A test patch.\nIt counts calls.", upstream="n/a", removal="when the test goes")
    monkeypatch.setattr(registered_probe, "PATCH", reasoned)
    (tmp_path / "README.md").write_text(f"intro\n{manifests.README_BEGIN}\nold\n{manifests.README_END}\ntail\n")
    files, problems = manifests.generated(str(tmp_path))
    assert problems == []
    toml = tomllib.loads(files["patches/engine-probe.toml"])
    assert toml["why"].split() == "A test patch. It counts calls.".split()
    assert toml["code"] == "tests/helpers/kv5d_probe_patch.py" and toml["surfaces"] == ["probe.get_bool_env_var"]
    readme = files["README.md"]
    assert readme.startswith("intro\n") and readme.endswith(f"{manifests.README_END}\ntail\n") and "old" not in readme
    assert "| `get_bool_env_var` is never counted | `engine-probe` |" in readme
    assert readme.index("`pool-layout-detection`") < readme.index("`engine-probe`")  # registry order
    (tmp_path / "patches").mkdir()
    written, problems = manifests.write(str(tmp_path))
    assert problems == [] and "patches/engine-probe.toml" in written and "README.md" in written
    assert manifests.stale(str(tmp_path)) == []
