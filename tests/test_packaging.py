"""The wheel: build it, install it with its dependencies into a fresh venv beside
SGLang, and show in subprocesses that SGLang discovers the entry point and
that the .pth bootstrap activates the overlay.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import tarfile
import zipfile

import pytest

from tests.helpers.subproc import ROOT, clean_env

pytestmark = pytest.mark.sglang_independent


def _build(kind, tmp_path_factory, pattern):
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run([sys.executable, "-m", "build", f"--{kind}", "--no-isolation", "--outdir", str(out), ROOT],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    built = list(out.glob(pattern))
    assert len(built) == 1, built
    return str(built[0])


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    return _build("wheel", tmp_path_factory, "sglang_kv5d-*.whl")


@pytest.fixture(scope="module")
def sdist(tmp_path_factory):
    return _build("sdist", tmp_path_factory, "sglang_kv5d-*.tar.gz")


# What only the project's own machines need: raw device data, device helpers, sweeps.
NOT_SHIPPED = ("docs/results/", "lab/", "scripts/gpu/", "scripts/")


def _unshipped(names):
    return [n for n in names if any(n.startswith(p) for p in NOT_SHIPPED) or "sweep" in os.path.basename(n)]


def test_sdist_and_wheel_ship_no_lab_data_or_sweeps(sdist, wheel):
    with tarfile.open(sdist) as tar:
        # members are "sglang_kv5d-<version>/<path>"
        sdist_names = [m.name.split("/", 1)[1] for m in tar.getmembers() if m.isfile() and "/" in m.name]
    wheel_names = zipfile.ZipFile(wheel).namelist()
    assert not _unshipped(sdist_names), _unshipped(sdist_names)
    assert not _unshipped(wheel_names), _unshipped(wheel_names)
    assert not any(n.startswith("docs/") or n.startswith("lab/") for n in wheel_names)
    # what users need stays in the sdist
    for need in ("README.md", "docs/benchmarks.md", "docs/rules.md", "sglang_kv5d.pth", "pyproject.toml",
                 "sglang_kv5d/__init__.py", "sglang_kv5d/bench/attention.py"):
        assert need in sdist_names, need
    assert any(n.startswith("patches/") and n.endswith(".toml") for n in sdist_names)
    assert any(n.startswith("launch/") and n.endswith(".toml") for n in sdist_names)
    # the checkout really has what the build left out, so the assertions above can fail
    for held_back in ("docs/results", "lab"):
        assert os.path.isdir(os.path.join(ROOT, held_back)), held_back


def test_wheel_contents(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert "sglang_kv5d.pth" in names  # at the root of site-packages
    assert any(n.startswith("sglang_kv5d/_manifests/") and n.endswith(".toml") for n in names)
    meta = [n for n in names if n.endswith("METADATA")][0]
    text = zipfile.ZipFile(wheel).read(meta).decode()
    requires = [line for line in text.splitlines() if line.startswith("Requires-Dist")]
    hard = [r for r in requires if "extra ==" not in r]
    assert sorted(r.split(":", 1)[1].split()[0].split(">")[0] for r in hard) == ["click", "wrapt"], hard
    eps = zipfile.ZipFile(wheel).read([n for n in names if n.endswith("entry_points.txt")][0]).decode()
    assert "[sglang.srt.plugins]" in eps and "kv5d = sglang_kv5d._sglang_plugin:register" in eps
    assert "sglang-kv5d = sglang_kv5d.cli:main" in eps


@pytest.fixture(scope="module")
def fresh_venv(wheel, tmp_path_factory):
    """A new venv with the wheel + its dependencies; SGLang/torch visible through a path .pth."""
    root = tmp_path_factory.mktemp("venv")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = str(venv / "bin" / "python")
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", py, "install", "-q", wheel],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    # "Beside SGLang": the existing environment's packages (SGLang, torch) on the path.
    with open(os.path.join(site, "zz_existing_sglang_env.pth"), "w") as fh:
        fh.write(sysconfig.get_paths()["purelib"] + "\n")
    return py, site


PROBE = """
import json, os, sys
import sglang.srt.utils.common
import sglang_kv5d
from importlib.metadata import entry_points
st = sglang_kv5d.status()
eps = [ep.value for ep in entry_points(group="sglang.srt.plugins") if ep.name == "kv5d"]
import sglang.srt.plugins as p
p.load_plugins()
print(json.dumps({"file": sglang_kv5d.__file__, "active": st.active, "routes": st.routes, "eps": eps,
                  "routes_after_plugins": sglang_kv5d.status().routes,
                  "states": {x.name: x.state for x in st.patches}}))
"""


def _run(py, code, env):
    env = clean_env(env)
    env.pop("PYTHONPATH", None)
    proc = subprocess.run([py, "-c", code], capture_output=True, text=True, env=env, timeout=300, cwd="/")
    return proc


def test_fresh_venv_entry_point_and_pth_bootstrap(fresh_venv):
    py, site = fresh_venv
    proc = _run(py, PROBE, {"SGLANG_KV5D": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    assert data["file"].startswith(site), data  # the installed wheel, not the checkout
    assert data["eps"] == ["sglang_kv5d._sglang_plugin:register"]
    assert data["active"] is True and data["routes"] == ["pth"], data
    assert data["routes_after_plugins"] == ["pth", "plugin"], data
    assert data["states"]["fail-closed-pool"] == "pending"  # memory_pool not imported by this probe


def test_fresh_venv_gate_off_changes_nothing(fresh_venv):
    py, _ = fresh_venv
    code = ("import sys, json; import sglang.srt.utils.common; "
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('sglang_kv5d') or m == 'wrapt')))")
    proc = _run(py, code, {})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []


def test_fresh_venv_console_script(fresh_venv):
    py, _ = fresh_venv
    exe = os.path.join(os.path.dirname(py), "sglang-kv5d")
    proc = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=120, env=clean_env())
    assert proc.returncode == 0 and "sglang-kv5d" in proc.stdout, proc.stderr


def test_the_sglang_extra_is_the_tested_range():
    """pyproject.toml's ``sglang`` extra (which cannot import versions.py) names the
    tested range: at least OLDEST, below the release after NEWEST (NEWEST's post
    releases included, as the run-time verdict counts them)."""
    import re
    import tomllib

    from sglang_kv5d.versions import NEWEST, OLDEST, parse_version

    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as fh:
        extra = tomllib.load(fh)["project"]["optional-dependencies"]["sglang"]
    release = parse_version(NEWEST).release
    after = ".".join(str(p) for p in release[:-1] + (release[-1] + 1,))
    assert extra == [f"sglang>={OLDEST},<{after}"], (
        f"pyproject.toml's sglang extra {extra} is not the tested range of sglang_kv5d/versions.py: "
        f"write sglang>={OLDEST},<{after}")
    assert re.fullmatch(r"\d+(\.\d+)+", after)
