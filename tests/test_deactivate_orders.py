"""deactivate() restores every copy it made, in every activation order (issue 26 item 5).

``aiter_backend`` holds ``from aiter_utils import forward_*_vectorized_5d``
copies. When activation comes first (the README's order), aiter_utils' import
hook patches the functions before aiter_backend copies them, so the copies
are of the replacement and no install step recorded them. Each order runs in
a fresh interpreter (the order of imports is the point), with the real SGLang
modules, and checks that ``status()`` agrees with what is installed: while
active, every applied patch's targets hold its marked replacement; after
``deactivate()``, no loaded SGLang module (module attributes and class
attributes) holds anything sglang-kv5d installed, and the two functions are
the upstream originals, by identity, in both modules.
"""

from __future__ import annotations

import pytest

from tests.helpers.subproc import run_py

SCRIPT = """
import json, sys, types
import sglang_kv5d
from sglang_kv5d.activation import patch_marker
from sglang_kv5d.activation.lifecycle import engine

AB = "sglang.srt.layers.attention.aiter_backend"
AU = "sglang.srt.layers.attention.aiter_utils"
NAMES = ("forward_extend_vectorized_5d", "forward_decode_vectorized_5d")

def mark(value):  # a Mock in some module answers every attribute: count our patch names only
    name = patch_marker(value)
    return name if name in engine.records else None

def marked():
    out = []
    for modname, mod in list(sys.modules.items()):
        if not modname.startswith("sglang.") or not isinstance(getattr(mod, "__dict__", None), dict):
            continue
        for name, value in list(vars(mod).items()):
            if mark(value):
                out.append((f"{modname}:{name}", mark(value)))
            if isinstance(value, type) and value.__module__ == modname:
                out += [(f"{modname}:{name}.{a}", mark(v)) for a, v in list(vars(value).items()) if mark(v)]
    return sorted(out)

def load(order):
    if order == "import-first":
        import sglang.srt.layers.attention.aiter_backend
        originals = {n: getattr(sys.modules[AU], n) for n in NAMES}
        sglang_kv5d.activate()
    elif order == "activate-first":
        sglang_kv5d.activate()
        import sglang.srt.layers.attention.aiter_backend
        originals = None
    else:  # aiter_utils imported, then activate, then aiter_backend
        import sglang.srt.layers.attention.aiter_utils as au
        originals = {n: getattr(au, n) for n in NAMES}
        sglang_kv5d.activate()
        import sglang.srt.layers.attention.aiter_backend
    return originals

originals = load(sys.argv[1])
ab, au = sys.modules[AB], sys.modules[AU]
st = sglang_kv5d.status()
applied = {p.name for p in st.patches if p.state == "applied"}
installed = {inst.resolved.target: inst.resolved.raw for rec in engine.records.values() for inst in rec.installed}
if originals is None:  # activate-first: the originals are what the engine replaced
    originals = {n: installed[f"{AU}:{n}"] for n in NAMES}
copies_patched = [patch_marker(getattr(m, n)) for m in (ab, au) for n in NAMES]
active_owner = sorted({patch for _, patch in marked()})
st2 = sglang_kv5d.deactivate()
print(json.dumps({
    "applied": sorted(applied),
    "active_owner": active_owner,
    "copies_patched": copies_patched,
    "states_after": sorted({p.state for p in st2.patches}),
    "skipped_after": sorted(p.name for p in st2.patches if p.state == "skipped"),
    "status_after": sorted({p.state for p in sglang_kv5d.status().patches}),
    "left_marked": marked(),
    "originals_back": [getattr(m, n) is originals[n] for m in (ab, au) for n in NAMES],
}))
"""


@pytest.mark.parametrize("order", ["import-first", "activate-first", "utils-then-backend"])
def test_deactivate_restores_every_copy_in_every_order(order):
    r = run_py(SCRIPT, args=(order,), env={"SGLANG_KV5D_ALLOW_UNTESTED": "1"})
    d = r.data
    assert d is not None, r
    # status() agrees with what is installed: while active, the patches holding
    # marked objects are exactly the applied ones (minus patches with no target here)
    assert "attention-dispatch-5d" in d["applied"], d
    assert set(d["active_owner"]) <= set(d["applied"]), d
    assert d["copies_patched"] == ["attention-dispatch-5d"] * 4, d
    # ... and after deactivate() nothing is left installed anywhere, and status says so
    # (a patch skipped as not applicable to this SGLang, never installed, stays skipped)
    assert not set(d["skipped_after"]) & set(d["applied"]), d
    assert set(d["states_after"]) - {"skipped"} == {"disabled"}, d
    assert set(d["status_after"]) - {"skipped"} == {"disabled"}, d
    assert d["left_marked"] == [], d
    assert d["originals_back"] == [True] * 4, d
