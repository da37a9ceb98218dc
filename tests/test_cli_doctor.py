"""`sglang-kv5d doctor` and `sglang-kv5d patches`, run as the user would."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.helpers.subproc import ROOT, clean_env

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
