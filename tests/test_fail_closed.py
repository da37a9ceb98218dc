"""Strict mode: a patch whose target changed fails, and 5D then refuses to start.

Each case runs in a fresh interpreter: the target's signature is changed
before activation (simulating a newer SGLang), a 5D pool is then built with
the real MHATokenToKVPool on the CPU.
"""

from __future__ import annotations

from tests.helpers.subproc import run_py

CASE = """
import json, logging, os, sys, io
log = io.StringIO()
logging.basicConfig(stream=log, level=logging.WARNING)
import torch
import sglang.srt.mem_cache.memory_pool as mp

def set_kv_buffer(self, layer, where, k, v):   # a "newer SGLang" signature
    raise AssertionError("never called")
mp.MHATokenToKVPool.set_kv_buffer = set_kv_buffer

import sglang_kv5d
st = sglang_kv5d.activate()
fp8 = st.patch("fp8-kv-write")
os.environ["SGLANG_AITER_KV_CACHE_LAYOUT"] = "vectorized_5d"
mp._use_aiter = True
from tests.helpers.pools import make_mha_pool
error = None
built = None
try:
    pool = make_mha_pool(dtype=torch.float8_e4m3fn, page_size=16, head_num=1, head_dim=64)
    built = tuple(pool.k_buffer[0].shape)
except Exception as exc:
    error = (type(exc).__name__, str(exc))
print(json.dumps(dict(state=fp8.state, reason=fp8.reason, error=error, built=built, log=log.getvalue(),
                      unchanged=mp.MHATokenToKVPool.set_kv_buffer is set_kv_buffer)))
"""


def test_changed_signature_fails_the_patch_and_5d_pool_raises():
    r = run_py(CASE)
    d = r.data
    assert d is not None, r
    assert d["state"] == "failed", d
    assert "signature changed" in d["reason"] and "found (self, layer, where, k, v)" in d["reason"], d
    assert "loc_info" in d["reason"]  # the expected parameters are shown too
    assert d["unchanged"] is True  # nothing of the failed patch was installed
    assert d["built"] is None
    name, message = d["error"]
    assert name == "Kv5dNotReadyError", d
    assert "fp8-kv-write is failed" in message and "Fix:" in message and "SGLANG_KV5D_STRICT=0" in message, message


def test_non_strict_warns_and_builds():
    r = run_py(CASE, env={"SGLANG_KV5D_STRICT": "0"})
    d = r.data
    assert d is not None, r
    assert d["state"] == "failed" and d["error"] is None, d
    assert d["built"] == [(256 + 16) // 16, 1, 64 // 16, 16, 16], d  # a real 5D fp8 pool
    assert "fp8-kv-write is failed" in d["log"], d


def test_disabled_required_patch_is_named_with_its_fix():
    r = run_py(CASE.replace("sglang_kv5d.activate()", "sglang_kv5d.activate(patches=['server-args-guard'])"))
    d = r.data
    assert d is not None, r
    name, message = d["error"]
    assert name == "Kv5dNotReadyError"
    assert "fp8-kv-write is disabled" in message and "SGLANG_KV5D_PATCHES" in message, message


def test_nhd_layout_is_not_blocked():
    r = run_py(CASE.replace('"vectorized_5d"', '"nhd"'))
    d = r.data
    assert d is not None, r
    assert d["error"] is None and len(d["built"]) == 3, d


def test_refused_sglang_version_refuses_5d():
    r = run_py(
        CASE.replace(
            "import sglang_kv5d\n",
            "import sglang_kv5d, sglang_kv5d.versions as v\n"
            "v.installed_sglang_version = lambda: '0.5.12.post1'\n",
        )
    )
    d = r.data
    assert d is not None, r
    assert d["state"] == "skipped" and "too old" in d["reason"], d
    name, message = d["error"]
    assert name == "Kv5dNotReadyError" and "0.5.13.post1" in message, message
