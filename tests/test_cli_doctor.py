"""`sglang-kv5d doctor` and `sglang-kv5d patches`, run as the user would."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from sglang_kv5d.versions import parse_version
from tests.helpers.subproc import ROOT, clean_env, sglang_version

HAS_HANDSHAKE = parse_version(sglang_version()) >= parse_version("0.5.23")  # SGLang's PD kv_layout field

EXE = [sys.executable, "-m", "sglang_kv5d.cli"]


def _run(args, env=None, timeout=300):
    return subprocess.run(EXE + args, capture_output=True, text=True, env=clean_env(env), timeout=timeout, cwd=ROOT)


def test_doctor_json_reports_every_check_and_passes_here():
    proc = _run(["doctor", "--json"])
    checks = {c["name"]: c for c in json.loads(proc.stdout)}
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name in ("python", "torch", "triton", "wrapt", "sglang", "platform", "aiter", "plugin entry point",
                 ".pth bootstrap", "spawn probe", "patch fp8-kv-write", "patch pool-layout-detection",
                 "patch attention-dispatch-5d", "patch server-args-guard", "patch fail-closed-pool"):
        assert name in checks, name
    assert checks["spawn probe"]["status"] == "ok" and "spawn child" in checks["spawn probe"]["detail"]
    assert "activated via pth" in checks["spawn probe"]["detail"]
    assert checks["platform"]["status"] == "warn" and "float8_e4m3fn" in checks["platform"]["detail"]
    assert all(c["status"] == "ok" for n, c in checks.items() if n.startswith("patch ")), checks
    pd = checks["pd handshake"]  # what this node would report in the PD bootstrap handshake
    if HAS_HANDSHAKE:
        assert pd["status"] == "ok" and "computed from the KV pool at startup: kv5d.v1|full=nhd:" in pd["detail"]
    else:
        assert pd["status"] == "ok" and "no PD layout handshake" in pd["detail"], pd


def test_doctor_flags_plugin_filter_and_fails_on_refused_sglang(tmp_path):
    from tests.test_rules import _fake_sglang_version  # the installed SGLang relabelled 0.5.9

    fake = _fake_sglang_version(str(tmp_path), "0.5.9")
    pythonpath = os.pathsep.join([fake] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))
    proc = _run(["doctor", "--json", "--no-spawn"],
                env={"PYTHONPATH": pythonpath, "SGLANG_PLUGINS": "someone-else"})
    checks = {c["name"]: c for c in json.loads(proc.stdout)}
    assert proc.returncode == 1, proc.stdout
    assert checks["sglang"]["status"] == "fail" and "too old" in checks["sglang"]["detail"]
    assert checks["plugin entry point"]["status"] == "warn" and "SGLANG_PLUGINS" in checks["plugin entry point"]["detail"]
    assert checks["patch fp8-kv-write"]["status"] == "fail" and "skipped" in checks["patch fp8-kv-write"]["detail"]


def test_doctor_text_is_one_screen():
    proc = _run(["doctor", "--no-spawn"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) <= 40 and "0 failure(s)" in lines[-1], proc.stdout


def test_patches_lists_manifests_with_state():
    proc = _run(["patches", "--json"], env={"SGLANG_KV5D_PATCHES": "fp8-kv-write"})
    data = json.loads(proc.stdout)
    states = {p["name"]: p["state"] for p in data["patches"]}
    assert states["fp8-kv-write"] == "ready" and states["pool-layout-detection"] == "disabled"
    assert states["fail-closed-pool"] == "ready"  # internal: not selectable
    assert proc.returncode == 0
    text = _run(["patches"])
    assert "remove when" in text.stdout and "why:" in text.stdout


def test_doctor_pd_handshake_check(monkeypatch):
    from sglang_kv5d import doctor, versions
    from sglang_kv5d.disagg import layout

    monkeypatch.setattr(versions, "installed_sglang_version", lambda: "0.5.23")
    five = doctor.check_pd_handshake({"SGLANG_AITER_KV_CACHE_LAYOUT": "vectorized_5d"})
    assert five.status == "ok" and "kv5d.v1|full=vectorized_5d:<X>" in five.detail and "x16 for fp8" in five.detail
    geo = [dict(role="full", layout="vectorized_5d", x=16, dtype="float8_e4m3fn", page=64, head_dim=256,
                v_head_dim=256, heads=1)]
    exact = doctor.check_pd_handshake({}, geometry=geo)
    assert exact.detail == "reports kv5d.v1|full=vectorized_5d:x16:float8_e4m3fn:p64:d256:dv256:h1"
    assert layout.parse(exact.detail.split()[-1]).is_5d
    assert doctor.check_pd_handshake({}, geometry=[dict(geo[0], x=0)]).status == "warn"
    monkeypatch.setattr(versions, "installed_sglang_version", lambda: "0.5.16")
    old = doctor.check_pd_handshake({})
    assert "no PD layout handshake" in old.detail and "0.5.23" in old.detail
