"""The activation engine on a real SGLang function, in fresh interpreters.

A test-only patch (tests/helpers/kv5d_probe_patch.py) is registered through
the ``sglang_kv5d.patches`` entry-point group by a fake dist-info on
PYTHONPATH, so every activation route (API, SGLang plugin loader, .pth
bootstrap) sees it. It replaces SGLang's real ``get_bool_env_var``, which
about 90 SGLang modules hold as a from-import copy.
"""

from __future__ import annotations

import os
import shutil
import sysconfig

import pytest

from sglang_kv5d.versions import parse_version
from tests.helpers.subproc import ROOT, run_py, sglang_version

HELPERS = os.path.join(ROOT, "tests", "helpers")

PRELUDE = """
import json, os, sys
def copies(fn):
    return sorted(n for n, m in list(sys.modules.items())
                  if n.startswith("sglang") and getattr(m, "get_bool_env_var", None) is fn)
def emit(**kw):
    print(json.dumps(kw))
"""


@pytest.fixture(scope="module")
def probe_dir(tmp_path_factory):
    """A PYTHONPATH folder holding the probe patch and a dist-info announcing it."""
    d = tmp_path_factory.mktemp("probe")
    shutil.copy(os.path.join(HELPERS, "kv5d_probe_patch.py"), d / "kv5d_probe_patch.py")
    info = d / "kv5d_probe-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: kv5d-probe\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[sglang_kv5d.patches]\nengine-probe = kv5d_probe_patch:PATCH\n")
    return str(d)


def _env(probe_dir, **extra):
    env = {"PYTHONPATH": os.pathsep.join([probe_dir, ROOT, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    env.update(extra)
    return env


def test_import_then_activate_patches_every_copy(probe_dir):
    r = run_py(
        PRELUDE
        + """
import sglang.srt.utils.common as c
import sglang.srt.mem_cache.memory_pool
orig = c.get_bool_env_var
before = copies(orig)
import sglang_kv5d, kv5d_probe_patch
st = sglang_kv5d.activate(patches=["engine-probe"])
new = c.get_bool_env_var
c.get_bool_env_var("SGLANG_KV5D_PROBE_X")
emit(state=st.patch("engine-probe").state, before=len(before), after=len(copies(new)), stale=copies(orig),
     calls=kv5d_probe_patch.CALLS, gate=os.environ.get("SGLANG_KV5D"), wrapped_is_orig=new.__wrapped__ is orig,
     warnings=st.warnings)
""",
        env=_env(probe_dir),
    )
    d = r.data
    assert d is not None, r
    assert d["state"] == "applied", r
    assert d["before"] > 10 and d["after"] == d["before"], d  # every from-import copy rebound
    assert d["stale"] == [], d
    assert "SGLANG_KV5D_PROBE_X" in d["calls"]
    assert d["gate"] == "1"  # exported for children
    assert d["wrapped_is_orig"] is True
    assert any("imported" in w for w in d["warnings"]), d  # names the modules imported earlier


def test_activate_then_import_applies_on_import(probe_dir):
    r = run_py(
        PRELUDE
        + """
import sglang_kv5d
st0 = sglang_kv5d.activate(patches=["engine-probe"])
pending = st0.patch("engine-probe").state
import sglang.srt.utils.common as c
st1 = sglang_kv5d.status()
emit(pending=pending, state=st1.patch("engine-probe").state, marker=getattr(c.get_bool_env_var, "__kv5d_patch__", None),
     warnings=st0.warnings)
""",
        env=_env(probe_dir),
    )
    assert r.data == {"pending": "pending", "state": "applied", "marker": "engine-probe", "warnings": []}, r


def test_activate_twice_installs_one_wrapper(probe_dir):
    r = run_py(
        PRELUDE
        + """
import sglang_kv5d
sglang_kv5d.activate(patches=["engine-probe"])
sglang_kv5d.activate(patches=["engine-probe"])
import sglang.srt.utils.common as c
import sglang.srt.mem_cache.memory_pool as mp
sglang_kv5d.activate()
init = mp.MHATokenToKVPool.__dict__["__init__"]
emit(depth=int(hasattr(c.get_bool_env_var, "__wrapped__")) + int(hasattr(c.get_bool_env_var.__wrapped__, "__wrapped__")),
     guard=type(init).__name__, guard_inner=type(init.__wrapped__).__name__,
     routes=sglang_kv5d.status().routes)
""",
        env=_env(probe_dir),
    )
    assert r.data == {"depth": 1, "guard": "Kv5dFunctionWrapper", "guard_inner": "function", "routes": ["api"]}, r


def test_deactivate_twice_restores_originals(probe_dir):
    r = run_py(
        PRELUDE
        + """
import sglang.srt.utils.common as c
import sglang.srt.mem_cache.memory_pool as mp
orig, orig_init = c.get_bool_env_var, mp.MHATokenToKVPool.__dict__["__init__"]
n = len(copies(orig))
import sglang_kv5d
sglang_kv5d.activate(patches=["engine-probe"])
patched = c.get_bool_env_var
s1 = sglang_kv5d.deactivate()
s2 = sglang_kv5d.deactivate()
emit(restored=c.get_bool_env_var is orig, copies=len(copies(orig)) == n, leftover=copies(patched),
     init=mp.MHATokenToKVPool.__dict__["__init__"] is orig_init, active=[s1.active, s2.active],
     states=sorted({p.state for p in s2.patches}), gate=os.environ.get("SGLANG_KV5D"))
""",
        env=_env(probe_dir),
    )
    assert r.data == {
        "restored": True,
        "copies": True,
        "leftover": [],
        "init": True,
        "active": [False, False],
        "states": ["disabled"],
        "gate": None,  # activate() set it, deactivate() took it back
    }, r


def test_activate_deactivate_then_import_keeps_originals(probe_dir):
    r = run_py(
        PRELUDE
        + """
import sglang_kv5d
sglang_kv5d.activate(patches=["engine-probe"])
sglang_kv5d.deactivate()
import sglang.srt.utils.common as c
import sglang.srt.mem_cache.memory_pool as mp
emit(marker=getattr(c.get_bool_env_var, "__kv5d_patch__", None),
     init=type(mp.MHATokenToKVPool.__dict__["__init__"]).__name__)
""",
        env=_env(probe_dir),
    )
    assert r.data == {"marker": None, "init": "function"}, r


@pytest.mark.parametrize("route", ["api", "plugin", "pth"])
def test_each_route_applies_and_reverts_on_a_real_target(probe_dir, route):
    """The same test-only patch through each activation route, then reverted."""
    site = sysconfig.get_paths()["purelib"]
    if route == "pth" and not os.path.exists(os.path.join(site, "sglang_kv5d.pth")):
        pytest.skip("sglang_kv5d.pth is not installed in this environment (run scripts/setup-dev.sh)")
    trigger = {
        "api": "import sglang_kv5d; sglang_kv5d.activate(patches=['engine-probe'])\nimport sglang.srt.utils.common as c",
        "plugin": "import sglang.srt.plugins as p; p.load_plugins()\nimport sglang.srt.utils.common as c",
        "pth": "import sglang.srt.utils.common as c",
    }[route]
    env = {"SGLANG_KV5D_PATCHES": "engine-probe"}
    if route != "api":
        env["SGLANG_KV5D"] = "1"
    code = PRELUDE + trigger + """
import sglang_kv5d
st = sglang_kv5d.status()
patched = getattr(c.get_bool_env_var, "__kv5d_patch__", None)
sglang_kv5d.deactivate()
emit(routes=st.routes, state=st.patch("engine-probe").state, patched=patched,
     restored=getattr(c.get_bool_env_var, "__kv5d_patch__", None) is None)
"""
    python_args = []
    if route == "plugin":
        # Isolate the plugin route: no site processing, so no .pth bootstrap;
        # site-packages is put on sys.path by hand.
        code = f"import sys; sys.path[:0] = [{site!r}, {ROOT!r}, {probe_dir!r}]\n" + code
        r = _run_no_site(code, _env(probe_dir, **env))
    else:
        r = run_py(code, env=_env(probe_dir, **env))
    assert r.data is not None, r
    assert r.data["routes"] == [route], r
    assert r.data["state"] == "applied" and r.data["patched"] == "engine-probe", r
    assert r.data["restored"] is True, r


def _run_no_site(code, env):
    import subprocess
    import sys
    import textwrap

    from tests.helpers.subproc import Result, clean_env

    proc = subprocess.run([sys.executable, "-S", "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=clean_env(env), timeout=180, cwd=ROOT)
    return Result(proc)


def test_plugins_filter_does_not_stop_the_pth_route(probe_dir):
    r = run_py(
        PRELUDE
        + """
import sglang.srt.plugins as p
p.load_plugins()
import sglang.srt.utils.common as c
import sglang_kv5d
st = sglang_kv5d.status()
emit(routes=st.routes, state=st.patch("engine-probe").state)
""",
        env=_env(probe_dir, SGLANG_KV5D="1", SGLANG_PLUGINS="other", SGLANG_KV5D_PATCHES="engine-probe"),
    )
    assert r.data == {"routes": ["pth"], "state": "applied"}, r


def test_spawn_child_activates_through_the_environment(probe_dir):
    r = run_py(
        PRELUDE
        + """
import multiprocessing as mp
import sglang_kv5d
sglang_kv5d.activate(patches=["engine-probe"])
from tests.helpers.spawn_target import report_activation
ctx = mp.get_context("spawn")
q = ctx.Queue()
proc = ctx.Process(target=report_activation, args=(q,))
proc.start()
child = json.loads(q.get(timeout=120))
proc.join(60)
emit(child=child, parent=os.getpid(), exitcode=proc.exitcode)
""",
        env=_env(probe_dir),
    )
    d = r.data
    assert d is not None, r
    child = d["child"]
    assert child["pid"] != d["parent"] and d["exitcode"] == 0
    assert child["gate"] == "1" and child["active"] is True and child["routes"] == ["pth"], d
    assert child["probe"] == "applied" and child["patched"] == "engine-probe", d


def test_fork_child_rechecks_and_reports_under_its_pid(probe_dir, tmp_path):
    r = run_py(
        PRELUDE
        + """
import sglang_kv5d
import sglang.srt.utils.common as c
sglang_kv5d.activate(patches=["engine-probe"])
pid = os.fork()
if pid == 0:
    st = sglang_kv5d.status()
    ok = st.pid == os.getpid() and st.patch("engine-probe").state == "applied"
    os._exit(0 if ok else 3)
_, code = os.waitpid(pid, 0)
emit(child=pid, code=os.waitstatus_to_exitcode(code), parent=os.getpid())
""",
        env=_env(probe_dir, SGLANG_KV5D_STATUS_DIR=str(tmp_path)),
    )
    d = r.data
    assert d is not None and d["code"] == 0, r
    files = sorted(os.listdir(tmp_path))
    assert f"{d['parent']}.json" in files and f"{d['child']}.json" in files, files


def test_gate_off_imports_nothing():
    for code in ("pass", "import sglang_kv5d"):
        r = run_py(
            code
            + "\nimport sys, json\nprint(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('torch', 'sglang', 'wrapt', 'multiprocessing', 'triton'))))"
        )
        assert r.data == [], (code, r)


def test_gate_on_without_sglang_imports_nothing_heavy():
    r = run_py(
        "import sys, json\nprint(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('torch', 'sglang', 'wrapt', 'multiprocessing', 'triton'))))",
        env={"SGLANG_KV5D": "1"},
    )
    assert r.data == [], r


def test_pth_line_costs_well_under_5ms_when_gate_is_off():
    import time

    line = open(os.path.join(ROOT, "sglang_kv5d.pth")).read()
    env_backup = os.environ.pop("SGLANG_KV5D", None)
    try:
        start = time.perf_counter()
        for _ in range(1000):
            exec(line, {})
        per_call = (time.perf_counter() - start) / 1000
    finally:
        if env_backup is not None:
            os.environ["SGLANG_KV5D"] = env_backup
    assert per_call < 0.005, per_call


def test_builtin_patches_apply_when_activated_before_sglang_imports():
    """Activation first, then SGLang's own import order: every built-in patch applies.

    aiter_backend imports aiter_utils part-way through its execution; a hook
    firing then must not judge aiter_backend by its half-built namespace.
    """
    r = run_py(
        PRELUDE
        + """
import sglang_kv5d
sglang_kv5d.activate()
import sglang.srt.layers.attention.aiter_backend as ab
import sglang.srt.server_args
import sglang.srt.mem_cache.kv_cache_configurator  # draft-pool-nhd's module (the model runner imports it)
import sglang.srt.disaggregation.decode_kvcache_offload_manager  # fail-closed-decode-offload's (the scheduler imports it)
# the PD patches' modules (a PD scheduler imports them)
import sglang.srt.disaggregation.prefill, sglang.srt.disaggregation.decode
import sglang.srt.disaggregation.mooncake.conn, sglang.srt.disaggregation.nixl.conn
st = sglang_kv5d.status()
emit(states={p.name: p.state for p in st.patches}, reasons={p.name: p.reason for p in st.patches},
     rebound=getattr(ab.forward_extend_vectorized_5d, "__kv5d_patch__", None))
"""
    )
    d = r.data
    assert d is not None, r
    # pd-layout-handshake's get_pd_kv_layout exists from 0.5.23: older SGLang skips it, naming the row
    skipped = {n for n, st in d["states"].items() if st == "skipped"}
    expect_skipped = set() if parse_version(sglang_version()) >= parse_version("0.5.23") else {"pd-layout-handshake"}
    assert skipped == expect_skipped, d["reasons"]
    for name in skipped:
        assert d["reasons"][name].startswith("not applicable: ") and "exists from SGLang 0.5.23" in d["reasons"][name]
    assert set(d["states"].values()) - {"skipped"} == {"applied"}, d["reasons"]
    assert d["rebound"] == "attention-dispatch-5d"


def test_one_info_status_line_per_process(probe_dir, tmp_path):
    r = run_py(
        PRELUDE
        + """
import io, logging
buf = io.StringIO()
logging.basicConfig(stream=buf, level=logging.INFO, format="%(levelname)s %(message)s")
import sglang_kv5d
import sglang.srt.utils.common
sglang_kv5d.activate(patches=["engine-probe"])
sglang_kv5d.activate(patches=["engine-probe"])
lines = [l for l in buf.getvalue().splitlines() if "sglang-kv5d: pid=" in l]
emit(lines=lines, pid=os.getpid(), files=sorted(os.listdir(os.environ["SGLANG_KV5D_STATUS_DIR"])))
""",
        env=_env(probe_dir, SGLANG_KV5D_STATUS_DIR=str(tmp_path)),
    )
    d = r.data
    assert d is not None, r
    assert len(d["lines"]) == 1, d["lines"]
    line = d["lines"][0]
    assert line.startswith("INFO ") and f"pid={d['pid']}" in line and "role=main" in line
    assert "sglang=" in line and ("(supported)" in line or "(best-effort)" in line)
    assert "applied=[" in line and "engine-probe" in line and "disabled=[" in line
    assert d["files"] == [f"{d['pid']}.json"]
