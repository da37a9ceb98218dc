"""Engine rules that need no SGLang: synthetic modules stand in for targets."""

from __future__ import annotations

import sys
import types

import pytest

from sglang_kv5d.activation import install, lifecycle
from sglang_kv5d.patches import Binding, Patch
from sglang_kv5d.state import APPLIED, FAILED, PENDING
from sglang_kv5d.surface import PROCESS_TARGET_NAMES, REPLACE, SURFACES, WRAP, Surface, split_target

pytestmark = pytest.mark.sglang_independent


@pytest.fixture
def fake_module():
    mod = types.ModuleType("kv5d_fake_target")

    def run_scheduler_process(a, b):
        return a + b

    def helper(a, b):
        return a * b

    mod.run_scheduler_process = run_scheduler_process
    mod.helper = helper
    sys.modules[mod.__name__] = mod
    yield mod
    del sys.modules[mod.__name__]


def _record(surface_id, target, action=REPLACE, params=(("a", "b"),), make=None):
    eng = lifecycle.Engine()
    eng.surfaces[surface_id] = Surface(id=surface_id, targets=(target,), action=action, params=params)
    patch = Patch(name="unit", summary="t",
                  bindings=(Binding(surface_id, make or (lambda orig: (lambda a, b: orig(a, b) + 1))),))
    return eng, lifecycle.Record(patch, PENDING, "")


def test_refuses_to_wrap_a_process_target(fake_module):
    eng, rec = _record("unit.proc", "kv5d_fake_target:run_scheduler_process")
    lifecycle.try_apply(eng, rec)
    assert rec.state == FAILED and "process target" in rec.reason
    assert fake_module.run_scheduler_process(1, 2) == 3  # untouched


def test_signature_mismatch_names_expected_and_found(fake_module):
    eng, rec = _record("unit.sig", "kv5d_fake_target:helper", params=(("x", "y"),))
    lifecycle.try_apply(eng, rec)
    assert rec.state == FAILED and "expected (x, y, ...)" in rec.reason and "found (a, b)" in rec.reason


def test_failed_build_leaves_nothing_installed(fake_module):
    def boom(orig):
        raise RuntimeError("no kernel")

    eng, rec = _record("unit.boom", "kv5d_fake_target:helper", make=boom)
    original = fake_module.helper
    lifecycle.try_apply(eng, rec)
    assert rec.state == FAILED and "no kernel" in rec.reason
    assert fake_module.helper is original


def test_apply_then_restore_exact_object(fake_module):
    eng, rec = _record("unit.ok", "kv5d_fake_target:helper")
    original = fake_module.helper
    lifecycle.try_apply(eng, rec)
    assert rec.state == APPLIED and fake_module.helper(2, 3) == 7
    for inst in rec.installed:
        assert install.restore(inst) is None
    assert fake_module.helper is original


def test_wrap_action_uses_a_marked_wrapper(fake_module):
    eng, rec = _record("unit.wrap", "kv5d_fake_target:helper", action=WRAP,
                       make=lambda orig: (lambda wrapped, inst, args, kwargs: wrapped(*args, **kwargs) * 10))
    lifecycle.try_apply(eng, rec)
    assert rec.state == APPLIED and fake_module.helper(2, 3) == 60
    assert install.patch_marker(fake_module.helper) == "unit"


def test_no_table_target_is_a_process_target():
    for row in SURFACES.values():
        for target in row.targets:
            assert split_target(target)[1][-1] not in PROCESS_TARGET_NAMES, target


@pytest.mark.parametrize("case", ["process-target", "signature", "build", "ok"])
def test_probe_and_apply_reach_the_same_verdict(fake_module, case):
    """Probing (doctor, check) runs apply's resolve/check/build: same state, same reason."""
    def boom(orig):
        raise RuntimeError("no kernel")

    target, params, make = {
        "process-target": ("run_scheduler_process", (("a", "b"),), None),
        "signature": ("helper", (("x", "y"),), None),
        "build": ("helper", (("a", "b"),), boom),
        "ok": ("helper", (("a", "b"),), None),
    }[case]
    eng, rec = _record("unit.same", f"kv5d_fake_target:{target}", params=params, make=make)
    original = getattr(fake_module, target)
    probed = install.probe_patch(rec.patch, eng.surfaces, import_modules=False)
    assert getattr(fake_module, target) is original  # a probe installs nothing
    lifecycle.try_apply(eng, rec)
    assert (probed.state, probed.targets) == (rec.state, rec.targets)
    if case == "ok":
        assert probed.reason == install.PROBE_OK and rec.state == APPLIED
    else:
        assert probed.reason == rec.reason and rec.state == FAILED


def test_gate_version_refusal_wins_over_selection_and_internal_patches_pass():
    from sglang_kv5d.activation.registry import gate
    from sglang_kv5d.state import DISABLED, SKIPPED
    from sglang_kv5d.versions import Verdict

    refused = Verdict("refused", "0.5.9", False, "SGLang 0.5.9 is too old")
    supported = Verdict("supported", "0.5.23", True, "supported")
    patch = Patch(name="unit", summary="t", bindings=())
    assert gate(patch, refused, ("other",)) == (SKIPPED, "SGLang 0.5.9 is too old")
    assert gate(patch, supported, ("other",)) == (DISABLED, "not selected by SGLANG_KV5D_PATCHES")
    assert gate(patch, supported, None) is None and gate(patch, supported, ("unit",)) is None
    internal = Patch(name="guard", summary="t", bindings=(), internal=True)
    assert gate(internal, refused, ("other",)) is None
