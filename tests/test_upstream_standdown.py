"""Standing down for upstream: sglang#29009's surface on the real SGLang classes.

Each case runs in a fresh interpreter: tests/helpers/upstream_29009.py puts the
pull request's ``HybridLinearKVPool.kv_cache_layout`` property (and, where
asked, a hybrid branch in ``forward_extend_vectorized_5d``) onto the installed
SGLang before the overlay activates. Then pool-layout-detection reports
"provided upstream" and installs nothing, the fail-closed guard counts it as
satisfied, each AITER backend built under 5D is re-checked against the
buffers, and attention-dispatch-5d stays installed, saying the hybrid branch
is upstream's.
"""

from __future__ import annotations

import pytest

from sglang_kv5d.versions import parse_version
from tests.helpers.subproc import run_py, sglang_version

HAS_PAGE_TABLE_FLAG = parse_version(sglang_version()) >= parse_version("0.5.23")

CASE = """
import json, os, io, logging
log = io.StringIO()
logging.basicConfig(stream=log, level=logging.WARNING)
import torch
import sglang.srt.layers.attention.aiter_backend as ab
from tests.helpers import upstream_29009
PROPERTY = __PROPERTY__
EXTEND = __EXTEND__
if PROPERTY:
    upstream_29009.add_property()
if EXTEND:
    upstream_29009.add_hybrid_extend_branch()

import sglang_kv5d
from sglang_kv5d.activation import patch_marker, probe_patches
st = sglang_kv5d.activate()
out = {n: [st.patch(n).state, st.patch(n).reason] for n in ("pool-layout-detection", "attention-dispatch-5d")}
out["probe"] = {p.name: [p.ok, p.state, p.reason] for p in probe_patches(import_modules=False)
                if p.name in ("pool-layout-detection", "attention-dispatch-5d")}
init = ab.AiterAttnBackend.__dict__["__init__"]
markers = []
while init is not None and patch_marker(init):
    markers.append(patch_marker(init))
    init = getattr(init, "__wrapped__", None)
out["init_wrapped_by"] = markers

from tests.helpers.pools import make_hybrid_pool, vectorized_5d_env
from tests.helpers.backend import make_aiter_backend
_env = vectorized_5d_env()  # 5D requested, and new MHA pools allocate 5D buffers
_env.__enter__()

def build():
    pool = make_hybrid_pool(dtype=torch.bfloat16, page_size=16, head_num=1, head_dim=64)
    try:
        b = make_aiter_backend(pool)
        return dict(five=b.kv_cache_is_vectorized_5d, page_table=getattr(b, "decode_uses_page_table", None),
                    error=None)
    except Exception as exc:
        return dict(error=[type(exc).__name__, str(exc)])

out["honest"] = build()
if PROPERTY:
    upstream_29009.add_property(returns="nhd")  # upstream's label now contradicts the 5D buffers
    out["lying"] = build()
print(json.dumps(out))
"""


def _run(prop: bool, extend: bool = False):
    r = run_py(CASE.replace("__PROPERTY__", str(prop)).replace("__EXTEND__", str(extend)), timeout=300)
    assert r.data is not None, r
    return r.data


@pytest.mark.skipif(not HAS_PAGE_TABLE_FLAG, reason="the upstream detection chain (decode_uses_page_table) is 0.5.23's")
def test_property_makes_pool_layout_detection_stand_down_and_is_rechecked():
    d = _run(prop=True)
    state, reason = d["pool-layout-detection"]
    assert state == "upstream", d
    assert reason.startswith("provided upstream: ") and "sglang#29009" in reason, reason
    wrapped_by = d["init_wrapped_by"]  # nothing of pool-layout-detection installed, the guard is
    assert "pool-layout-detection" not in wrapped_by and "fail-closed-backend" in wrapped_by, d
    ok, pstate, preason = d["probe"]["pool-layout-detection"]
    assert ok is True and pstate == "upstream" and preason.startswith("provided upstream"), d  # doctor, KV5D011
    # upstream's own detection (through the property) serves, and 5D is not refused for the stand-down
    assert d["honest"] == dict(five=True, page_table=True, error=None), d
    # the re-check: upstream's flag contradicting the buffers fails closed, naming the stand-down
    name, message = d["lying"]["error"]
    assert name == "Kv5dNotReadyError", d
    assert "pool-layout-detection stood down" in message and "kv_cache_is_vectorized_5d=False" in message, message
    # attention-dispatch-5d: the real 0.5.23 extend has no hybrid branch, so no note
    state, reason = d["attention-dispatch-5d"]
    assert state == "applied" and "provided upstream" not in reason, d


@pytest.mark.skipif(not HAS_PAGE_TABLE_FLAG, reason="the upstream detection chain (decode_uses_page_table) is 0.5.23's")
def test_hybrid_extend_branch_keeps_attention_dispatch_installed_with_a_note():
    d = _run(prop=True, extend=True)
    state, reason = d["attention-dispatch-5d"]
    assert state == "applied", d
    assert "hybrid-pool branch of forward_extend_vectorized_5d is provided upstream (sglang#29009)" in reason, reason
    assert "still installed" in reason and "padded CK page table" in reason, reason
    ok, pstate, preason = d["probe"]["attention-dispatch-5d"]
    assert ok is True and pstate == "applied" and "provided upstream" in preason, d
    assert d["honest"]["error"] is None, d


def test_without_the_surface_both_patches_install():
    d = _run(prop=False, extend=True)  # a hybrid extend branch alone is not #29009's surface
    assert d["pool-layout-detection"][0] == "applied", d
    assert d["attention-dispatch-5d"][0] == "applied" and "provided upstream" not in d["attention-dispatch-5d"][1], d
    assert {"pool-layout-detection", "fail-closed-backend"} <= set(d["init_wrapped_by"]), d
    assert d["honest"] == dict(five=True, page_table=d["honest"]["page_table"], error=None), d


@pytest.mark.skipif(HAS_PAGE_TABLE_FLAG, reason="older SGLang only")
def test_property_alone_does_not_stand_down_where_upstream_does_not_read_it_to_the_end():
    """Before 0.5.23 AiterAttnBackend has no decode_uses_page_table: the patch's flag handling is still needed."""
    d = _run(prop=True)
    assert d["pool-layout-detection"][0] == "applied", d
    assert d["honest"]["error"] is None and d["honest"]["five"] is True, d
