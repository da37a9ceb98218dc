"""``sglang-kv5d launch`` / ``check``: argument splitting, SGLang's own parser,
renamed flags, shadowing, the real exec, --kv5d-dry-run, profiles, env
precedence, and the guard inside SGLang.

Everything goes through the installed SGLang (0.5.23, or 0.5.16 when the suite
runs with its PYTHONPATH): cases that only need the parser share one helper
process (tests/helpers/cli.py --batch); the exec, the guard and a few others
run as real subprocesses.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shlex
import subprocess
import sys
import textwrap

import pytest

from sglang_kv5d.versions import parse_version
from tests.helpers.subproc import sglang_version

from tests.helpers.cli import PROFILE, ROOT, base_env, run_batch, run_cli
from tests.helpers.subproc import run_py, sglang_version
from tests.helpers.models import tiny_llama

from sglang_kv5d.launch.argv import Options, UsageError, split_argv
from sglang_kv5d.launch.environment import ORIGIN_CLI, ORIGIN_DEFAULT, ORIGIN_ENV, ORIGIN_PROFILE, resolve_env
from sglang_kv5d.launch.profile import Profile, load_profile
from sglang_kv5d.launch.renames import RENAMES
from sglang_kv5d.launch.sglang_parser import segment_args
from sglang_kv5d.platform import detect_platform

FIVE_D = {"SGLANG_USE_AITER": "1", "SGLANG_AITER_KV_CACHE_LAYOUT": "vectorized_5d"}
MODEL = ["--model-path", "/models/Llama-3.1-8B-Instruct"]
DRY_JSON = ["launch", "--kv5d-dry-run", "--kv5d-json", "--kv5d-platform", "rocm"]


# ---------------------------------------------------------------------------
# SGLang's own parser, for the expected messages (built exactly as prepare_server_args does)


@pytest.fixture(scope="module")
def sglang_errors():
    """SGLang's verbatim error line for each argv, from a plain SGLang parser in a subprocess."""
    argvs = {
        "unknown": MODEL + ["--no-such-flag", "1"],
        "choice": MODEL + ["--kv-cache-dtype", "fp9"],
        "ambiguous": MODEL + ["--cuda-graph-max", "4"],
        "linear": MODEL + ["--linear-attn-backend", "aiter"],
        "profile": MODEL + ["--profile", "x"],
        "dry": MODEL + ["--dry-run"],
    }
    r = run_py(
        """
        import argparse, contextlib, io, json, sys
        from sglang.srt.server_args import ServerArgs
        out = {}
        for key, argv in json.loads(sys.argv[1]).items():
            p = argparse.ArgumentParser(prog="sglang serve")
            ServerArgs.add_cli_args(p)
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                try:
                    p.parse_args(argv)
                    out[key] = None
                except SystemExit:
                    out[key] = [ln for ln in err.getvalue().splitlines() if ": error: " in ln][-1]
        print(json.dumps(out))
        """,
        args=[json.dumps(argvs)],
    )
    assert r.data is not None, r
    return argvs, r.data


PARSE_CASES = ["unknown", "choice", "ambiguous", "linear", "profile", "dry"]


@pytest.fixture(scope="module")
def batch(sglang_errors):
    argvs, _ = sglang_errors
    cases = []
    # 0..5: parse errors through check
    for key in PARSE_CASES:
        cases.append({"argv": ["check", "--kv5d-platform", "rocm", *argvs[key]], "env": FIVE_D, "probe": []})
    # 6: shadowing: SGLang options named like ours / like common launcher flags
    cases.append({"argv": DRY_JSON + ["--tp", "8", "--kv5d-no-strict", "--port", "31000", *MODEL,
                                      "--json", '{"x": 1}', "--attention-backend", "aiter"],
                  "env": FIVE_D, "probe": []})
    # 7: everything after -- is SGLang's, --kv5d-* included
    cases.append({"argv": DRY_JSON + ["--", *MODEL, "--kv5d-platform", "cpu"], "env": FIVE_D, "probe": []})
    # 8: renamed flags
    cases.append({"argv": DRY_JSON + [*MODEL, "--attention-backend", "aiter", "--cuda-graph-max-bs", "64",
                                      "--mamba-scheduler-strategy=no_buffer"], "env": FIVE_D, "probe": []})
    # 9: human dry run with a profile, an exported variable, --kv5d-env and --kv5d-strict
    cases.append({"argv": ["launch", "--kv5d-dry-run", "--kv5d-platform", "rocm", "--kv5d-profile", PROFILE,
                           "--kv5d-strict", "--kv5d-env", "SGLANG_USE_CUDA_IPC_TRANSPORT=0",
                           "--tp", "4", "--served-model-name", "qwen 3.5"],
                  "env": {"SGLANG_VLM_CACHE_SIZE_MB": "100"}, "probe": []})
    # 10: JSON dry run of the same
    cases.append({"argv": DRY_JSON + ["--kv5d-profile", PROFILE, "--kv5d-strict",
                                      "--kv5d-env", "SGLANG_USE_CUDA_IPC_TRANSPORT=0",
                                      "--tp", "4", "--served-model-name", "qwen 3.5"],
                  "env": {"SGLANG_VLM_CACHE_SIZE_MB": "100"}, "probe": []})
    # 11: a dry run whose check fails exits 1
    cases.append({"argv": ["launch", "--kv5d-dry-run", "--kv5d-platform", "rocm", *MODEL,
                           "--enable-unified-memory"], "env": FIVE_D, "probe": []})
    # 12: our options are never abbreviated; a --kv5d typo is a usage error, not forwarded
    cases.append({"argv": ["launch", "--kv5d-dry", *MODEL], "env": FIVE_D, "probe": []})
    # 13: check --help is ours; 14: launch --help is ours
    cases.append({"argv": ["check", "--help"], "env": {}, "probe": []})
    cases.append({"argv": ["launch", "--help"], "env": {}, "probe": []})
    # 15: a real launch whose check fails never execs (exit 1; execvpe would replace the test helper)
    cases.append({"argv": ["launch", "--kv5d-platform", "cpu", *MODEL], "env": FIVE_D, "probe": []})
    return run_batch(cases)


@pytest.mark.parametrize("index,key", list(enumerate(PARSE_CASES)))
def test_sglang_parse_errors_are_shown_verbatim(batch, sglang_errors, index, key):
    _, expected = sglang_errors
    r = batch[index]
    assert expected[key], f"SGLang accepted {key!r}?"
    assert r["code"] == 2, r
    # SGLang's message verbatim, named as coming from SGLang's parser (not as "sglang serve: error:",
    # which read as if `sglang serve` had run)
    body = expected[key].split(": error: ", 1)[1]
    assert any(ln.startswith("sglang-kv5d: SGLang ") and "argument parser" in ln and ln.endswith(body)
               for ln in r["err"].splitlines()), (body, r["err"])
    assert "sglang serve: error:" not in r["err"]
    if key == "linear":
        assert "hint: upstream SGLang (PyPI) has no 'aiter' linear-attention backend" in r["err"]
    if key == "ambiguous":
        assert "could match" in expected[key] and "hint:" in r["err"]


def test_shadowing_options_reach_sglang_unchanged(batch):
    r = batch[6]
    assert r["code"] == 0, r
    plan = json.loads(r["out"])
    assert plan["argv"][1:3] == ["-m", "sglang.launch_server"]
    assert plan["argv"][3:] == ["--tp", "8", "--port", "31000", *MODEL, "--json", '{"x": 1}',
                                "--attention-backend", "aiter"]
    values = plan["sglang_values"]
    # SGLang's own parser resolved its abbreviations: --tp is --tp-size, --json is --json-model-override-args
    assert values["tp_size"] == 8 and values["port"] == 31000
    assert values["model_path"] == MODEL[1] and values["json_model_override_args"] == '{"x": 1}'
    strict = [e for e in plan["env"] if e["name"] == "SGLANG_KV5D_STRICT"]
    assert strict and strict[0]["value"] == "0" and strict[0]["origin"] == ORIGIN_CLI


def test_options_named_like_ours_without_prefix_are_sglangs(batch, sglang_errors):
    # --profile and --dry-run are not ours: SGLang judges them (0.5.16/0.5.23 reject both).
    _, expected = sglang_errors
    for index, key, token in ((4, "profile", "--profile"), (5, "dry", "--dry-run")):
        assert token in expected[key]
        assert expected[key].split(": error: ", 1)[1] in batch[index]["err"]  # SGLang's message, without its prog


def test_double_dash_hands_everything_after_it_to_sglang(batch):
    r = batch[7]
    assert r["code"] == 2, r
    plan = json.loads(r["out"])
    assert plan["argv"][3:] == [*MODEL, "--kv5d-platform", "cpu"]
    assert plan["platform"] == "rocm" and "--kv5d-platform" in plan["parse_error"]


@pytest.fixture(scope="module")
def installed_flags():
    """Which spellings the installed SGLang's parser has (asked in a subprocess)."""
    flags = sorted({f for r in RENAMES for f in (r.old, r.new)})
    r = run_py(
        """
        import argparse, json, sys
        from sglang.srt.server_args import ServerArgs
        p = argparse.ArgumentParser(); ServerArgs.add_cli_args(p)
        print(json.dumps({f: f in p._option_string_actions for f in sys.argv[1:]}))
        """,
        args=flags,
    )
    assert r.data is not None, r
    return r.data


def test_rename_table_matches_the_installed_parser(installed_flags):
    for r in RENAMES:
        # Every entry is either still accepted as written, or translatable here.
        assert installed_flags[r.old] or installed_flags[r.new], r


def test_renamed_flags_are_translated_with_a_warning(batch, installed_flags):
    r = batch[8]
    plan = json.loads(r["out"])
    translated = {t["old"].partition("=")[0]: t for t in plan["translations"]}
    for old, new, value in (("--cuda-graph-max-bs", "--cuda-graph-max-bs-decode", "64"),
                            ("--mamba-scheduler-strategy", "--mamba-radix-cache-strategy", "no_buffer")):
        if installed_flags[old]:  # e.g. SGLang 0.5.16: the old spelling still works, leave it alone
            assert old not in translated
            continue
        t = translated[old]
        assert "0.5.20" in t["message"] and new in t["message"]
        assert new in " ".join(plan["argv"]) and value in " ".join(plan["argv"])
        assert not any(a.split("=")[0] == old for a in plan["argv"])
    assert r["code"] == 0, r


@pytest.mark.slow
def test_renamed_flag_warning_in_real_check_subprocess():
    p = run_cli(["check", "--kv5d-platform", "rocm", *MODEL, "--attention-backend", "aiter",
                 "--cuda-graph-max-bs", "128"], FIVE_D)
    assert p.returncode == 0, p
    if (sglang_version() or "").startswith("0.5.16"):
        assert "warning: --cuda-graph-max-bs" not in p.stderr
    else:
        assert "sglang-kv5d: warning: --cuda-graph-max-bs is not an option of the installed SGLang" in p.stderr
        assert "passing --cuda-graph-max-bs-decode" in p.stderr


def test_dry_run_human_output(batch):
    r = batch[9]
    assert r["code"] == 0, r
    out = r["out"]
    lines = out.splitlines()
    assert any(ln.startswith("export SGLANG_KV5D=1 ") and "from default" in ln for ln in lines), out
    assert any(ln.startswith("export SGLANG_KV5D_STRICT=1 ") and "from command line" in ln for ln in lines), out
    assert any(ln.startswith("export SGLANG_USE_AITER=1 ") and "from profile" in ln for ln in lines), out
    cuda_ipc = next(ln for ln in lines if "SGLANG_USE_CUDA_IPC_TRANSPORT=0" in ln)
    assert "from command line" in cuda_ipc and "overrides profile value 1" in cuda_ipc
    vlm = next(ln for ln in lines if "SGLANG_VLM_CACHE_SIZE_MB=100" in ln)
    assert "kept, from environment" in vlm and "overrides profile value 8192" in vlm and not vlm.startswith("export")
    # The exact command, shell-quoted, runnable as printed.
    cmd = lines[lines.index("# command:") + 1]
    argv = shlex.split(cmd)
    assert argv[:3] == [sys.executable, "-m", "sglang.launch_server"]
    assert "'qwen 3.5'" in cmd and argv[-2:] == ["--served-model-name", "qwen 3.5"]
    assert argv[argv.index("--tp") + 1] == "4" and "--tp-size" not in argv  # profile's --tp-size 8 replaced
    assert "#   (dropped) --tp-size 8  <- profile, replaced by the command line" in lines
    assert "#   --tp 4  <- command line" in lines and "#   --page-size 64  <- profile" in lines
    assert "note: SGLANG_VLM_CACHE_SIZE_MB: keeping the exported value '100'" in out


def test_dry_run_json(batch):
    r = batch[10]
    assert r["code"] == 0, r
    plan = json.loads(r["out"])
    env = {e["name"]: e for e in plan["env"]}
    assert env["SGLANG_KV5D"]["value"] == "1" and env["SGLANG_KV5D"]["origin"] == ORIGIN_DEFAULT
    assert env["SGLANG_VLM_CACHE_SIZE_MB"]["origin"] == ORIGIN_ENV and not env["SGLANG_VLM_CACHE_SIZE_MB"]["changed"]
    assert env["SGLANG_USE_CUDA_IPC_TRANSPORT"]["origin"] == ORIGIN_CLI
    assert env["HSA_NO_SCRATCH_RECLAIM"]["origin"] == ORIGIN_PROFILE
    assert plan["command"] == shlex.join(plan["argv"])
    assert plan["dropped_profile_args"] == [["--tp-size", "8"]]
    assert plan["ok"] and plan["findings"] == []


def test_dry_run_exit_code_follows_the_check(batch):
    r = batch[11]
    assert r["code"] == 1 and "KV5D004 error" in r["out"] and "failed: " in r["out"], r


def test_own_options_are_not_abbreviated(batch):
    r = batch[12]
    assert r["code"] == 2 and "no such option: --kv5d-dry (did you mean --kv5d-dry-run?)" in r["err"], r


def test_help_is_ours(batch):
    assert batch[13]["code"] == 0 and "--explain" in batch[13]["out"] and "Exit status" in batch[13]["out"]
    assert batch[14]["code"] == 0 and "--kv5d-dry-run" in batch[14]["out"] and "-- --help" in batch[14]["out"]


def test_failed_check_does_not_exec(batch):
    r = batch[15]
    assert r["code"] == 1 and "KV5D003" in r["err"] and "not launching" in r["err"], r


# ---------------------------------------------------------------------------
# The exec, for real


_DUMP_SITECUSTOMIZE = """
import atexit, json, os, sys

def _kv5d_test_dump():
    path = os.environ.get("KV5D_TEST_DUMP")
    if not path:
        return
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    with open(path, "w") as fh:
        json.dump({"pid": os.getpid(), "main": getattr(spec, "name", None), "argv": sys.argv,
                   "SGLANG_KV5D": os.environ.get("SGLANG_KV5D"),
                   "SGLANG_VLM_CACHE_SIZE_MB": os.environ.get("SGLANG_VLM_CACHE_SIZE_MB"),
                   "SGLANG_KV5D_STRICT": os.environ.get("SGLANG_KV5D_STRICT")}, fh)

atexit.register(_kv5d_test_dump)
"""


@pytest.mark.slow
def test_launch_execs_sglangs_real_launch_server(tmp_path):
    """``launch -- --help`` replaces the launcher process (same PID) with SGLang's
    real ``sglang.launch_server``, SGLANG_KV5D=1 and the profile's variables in
    its environment. A sitecustomize on PYTHONPATH records, at interpreter exit,
    which module ran as __main__ and its environment (exec skips atexit, so only
    the replacing process writes the file)."""
    (tmp_path / "sitecustomize.py").write_text(_DUMP_SITECUSTOMIZE)
    dump = tmp_path / "dump.json"
    env = base_env({"KV5D_TEST_DUMP": str(dump), "PYTHONPATH": os.pathsep.join(
        [str(tmp_path)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))})
    proc = subprocess.Popen(
        [sys.executable, "-m", "sglang_kv5d.cli", "launch", "--kv5d-profile", PROFILE,
         "--kv5d-no-strict", "--", "--help"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT,
    )
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, (out[-2000:], err[-4000:])
    assert "usage: sglang serve" in out and "--model-path" in out, out[-2000:]
    data = json.loads(dump.read_text())
    assert data["pid"] == proc.pid, "SGLang ran in another process: the launcher did not exec"
    assert data["main"] == "sglang.launch_server"
    assert data["argv"][-1] == "--help"
    assert data["SGLANG_KV5D"] == "1"
    assert data["SGLANG_VLM_CACHE_SIZE_MB"] == "8192" and data["SGLANG_KV5D_STRICT"] == "0"


# ---------------------------------------------------------------------------
# Pure pieces (in-process, no SGLang import)


def test_split_argv():
    opts, rest = split_argv(["--tp", "8", "--kv5d-profile=p.toml", "--port", "1", "--kv5d-json",
                             "--kv5d-platform", "cuda", "--", "--kv5d-json", "-h"])
    assert rest == ["--tp", "8", "--port", "1", "--kv5d-json", "-h"]
    assert opts.profile == "p.toml" and opts.json and opts.platform == "cuda" and not opts.help
    opts, _ = split_argv(["--explain", "KV5D001"], "check")
    assert opts.explain == "KV5D001"
    _, rest = split_argv(["--explain", "KV5D001"], "launch")
    assert rest == ["--explain", "KV5D001"]  # not ours in launch: SGLang's to judge
    for bad in (["--kv5d-profile"], ["--kv5d-platform", "rocM"], ["--kv5d-json=1"], ["--kv5d-env", "X"],
                ["--kv5d-strct"], ["--kv5d-profile", "--"]):
        with pytest.raises(UsageError):
            split_argv(bad)


def test_env_precedence():
    prof = Profile("p.toml", "", {"A": "profile", "B": "profile", "C": "profile", "SGLANG_KV5D": "0"}, [])
    opts = Options(env=[("C", "cli")], strict=False)
    env, entries = resolve_env({"B": "shell", "C": "shell", "PATH": "/bin"}, prof, opts)
    by = {e.name: e for e in entries}
    assert env["A"] == "profile" and by["A"].origin == ORIGIN_PROFILE and by["A"].changed
    assert env["B"] == "shell" and by["B"].origin == ORIGIN_ENV and by["B"].overridden == [(ORIGIN_PROFILE, "profile")]
    assert env["C"] == "cli" and by["C"].origin == ORIGIN_CLI
    assert by["C"].overridden == [(ORIGIN_PROFILE, "profile"), (ORIGIN_ENV, "shell")]
    assert env["SGLANG_KV5D_STRICT"] == "0" and by["SGLANG_KV5D_STRICT"].origin == ORIGIN_CLI
    assert env["SGLANG_KV5D"] == "1" and by["SGLANG_KV5D"].origin == ORIGIN_DEFAULT
    assert env["PATH"] == "/bin" and "PATH" not in by
    with pytest.raises(UsageError):
        resolve_env({}, None, Options(env=[("SGLANG_KV5D", "0")]))


def test_profile_loading(tmp_path):
    p = load_profile(PROFILE)
    assert p.env["SGLANG_AITER_KV_CACHE_LAYOUT"] == "vectorized_5d" and p.env["USE_AITER_COMM"] == "1"
    assert p.args[:2] == ["--model-path", "/models/Qwen3.5-397B-A17B-PTPC-FP8"]
    assert "--cuda-graph-max-bs-decode" in p.args and "--linear-attn-backend" not in p.args
    with open(PROFILE, encoding="utf-8") as fh:
        text = fh.read()
    assert "--linear-attn-backend aiter" in text  # documented in the comments
    bad = tmp_path / "bad.toml"
    bad.write_text('[env]\nA = "1"\nargs = ["--tp", "2"]\n')  # args inside [env] by mistake
    with pytest.raises(UsageError, match="env.args"):
        load_profile(str(bad))
    bad.write_text('argz = []\n')
    with pytest.raises(UsageError, match="unknown key"):
        load_profile(str(bad))
    with pytest.raises(UsageError, match="cannot read"):
        load_profile(str(tmp_path / "missing.toml"))


def test_page16_profile_is_the_page64_profile_at_page_16():
    """launch/...-page16-5d.toml: the same deployment (args and [env]) as the page-64
    profile except --page-size, and its comments say why page 16."""
    page64 = load_profile(PROFILE)
    path = os.path.join(ROOT, "launch", "qwen3.5-397b-a17b-fp8-tp8-page16-5d.toml")
    page16 = load_profile(path)
    assert page16.env == page64.env
    i = page64.args.index("--page-size")
    assert page64.args[i + 1] == "64" and page16.args[i + 1] == "16"
    assert page16.args[:i + 1] == page64.args[:i + 1] and page16.args[i + 2:] == page64.args[i + 2:]
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    assert "MI355X" in text and "pa_decode_gluon" in text and "1, 16 and 1024" in text, text[:2000]
    assert f"--kv5d-profile launch/{os.path.basename(path)}" in text


def test_segments_follow_sglangs_nargs():
    p = argparse.ArgumentParser(allow_abbrev=True)
    p.add_argument("--tp-size", type=int)
    p.add_argument("--cuda-graph-bs-decode", nargs="+", type=int)
    p.add_argument("--disable-radix-cache", action="store_true")
    segs = segment_args(["--tp", "8", "--cuda-graph-bs-decode", "1", "2", "4", "--disable-radix-cache",
                                  "--who", "x"], p, "cli")
    assert [(s.dest, s.tokens) for s in segs] == [
        ("tp_size", ["--tp", "8"]), ("cuda_graph_bs_decode", ["--cuda-graph-bs-decode", "1", "2", "4"]),
        ("disable_radix_cache", ["--disable-radix-cache"]), (None, ["--who"]), (None, ["x"])]


def test_platform_override_needs_no_torch():
    assert detect_platform("rocm") == ("rocm", "--kv5d-platform")


# ---------------------------------------------------------------------------
# The guard inside SGLang


_GUARD_SCRIPT = """
import json, os, sys
model = sys.argv[1]
from sglang.srt.server_args import ServerArgs, prepare_server_args
from sglang_kv5d.rules import Kv5dConfigError, guard_server_args

assigned = []
original_setattr = ServerArgs.__setattr__
def spy(self, name, value):
    if SPYING:
        assigned.append(name)
    return original_setattr(self, name, value)
SPYING = False
ServerArgs.__setattr__ = spy

import sglang_kv5d                       # the real server-args-guard patch
import sglang_kv5d.platform as platform  # judge as the ROCm server would (this host is a CPU)
platform.detect_platform = lambda choice="auto", **_kw: ("rocm", "test")
status = sglang_kv5d.activate(patches=["server-args-guard"], strict=False)
# The guard judges the selection from the environment: judge as a server with
# every patch selected (this process installs only the guard, to stay light).
only_guard = os.environ.pop("SGLANG_KV5D_PATCHES")
hooks = sys.modules.get("sglang.srt.arg_groups.resolution_hooks")

def build(extra, env):
    os.environ.pop("SGLANG_AITER_KV_CACHE_LAYOUT", None)
    os.environ.update(env)
    sa = prepare_server_args(["--model-path", model, "--skip-tokenizer-init", "--device", "cpu"] + extra)
    if hasattr(sa, "resolve_once"):
        sa.resolve_once()   # 0.5.19+: resolution runs here, sealing the record on 0.5.20+
    return sa

out = {}
five_d = {"SGLANG_USE_AITER": "1", "SGLANG_AITER_KV_CACHE_LAYOUT": "vectorized_5d"}

out["patch"] = status.patch("server-args-guard").state
out["hook_registered"] = bool(hooks and getattr(hooks, "_HOOKS", {}).get("handle_other_validations"))
stage = "resolution"
try:
    sa = build(["--enable-unified-memory", "--attention-backend", "triton",
               "--cuda-graph-backend-prefill", "disabled"], five_d)  # 0.5.16 insists on it
    stage = "check_server_args"
    SPYING = True
    sa.check_server_args()
    out["unified"] = None
except Kv5dConfigError as exc:
    out["unified"] = {"ids": [f.id for f in exc.findings], "message": str(exc),
                      "is_value_error": isinstance(exc, ValueError), "stage": stage}
SPYING = False

os.environ.pop("SGLANG_AITER_KV_CACHE_LAYOUT", None)
sa = build(["--attention-backend", "aiter"], {"SGLANG_USE_AITER": "1"})
SPYING = True
sa.check_server_args()
out["clean_nhd"] = "passed"
SPYING = False

sa = build(["--attention-backend", "aiter", "--page-size", "64", "--kv-cache-dtype", "fp8_e4m3"], five_d)
SPYING = True
try:  # a selection of only the guard: under 5D it is refused, naming what it leaves out
    guard_server_args(sa, dict(os.environ, SGLANG_KV5D_PATCHES=only_guard), platform="rocm")
    out["selection"] = None
except Kv5dConfigError as exc:
    out["selection"] = [f.id for f in exc.findings]
guard_server_args(sa, os.environ, platform="rocm")
out["clean_5d_rocm"] = "passed"
try:
    guard_server_args(sa, dict(os.environ, SGLANG_USE_HND_KVCACHE="1"), platform="rocm")
except Kv5dConfigError as exc:
    out["hnd"] = [f.id for f in exc.findings]
SPYING = False
out["assigned"] = assigned
out["sealed"] = bool(getattr(sa, "_resolution_finished", False))
print(json.dumps(out))
"""


@pytest.mark.slow
def test_guard_inside_sglang(tmp_path):
    model = tiny_llama(tmp_path)
    r = run_py(_GUARD_SCRIPT, args=[str(model)], timeout=300)
    assert r.data is not None, r
    unified = r.data["unified"]
    assert unified is not None and "KV5D004" in unified["ids"], r.data
    assert unified["is_value_error"] and "KV5D004" in unified["message"]
    assert "--enable-unified-memory" in unified["message"]
    assert r.data["clean_nhd"] == "passed" and r.data["clean_5d_rocm"] == "passed"
    assert r.data["hnd"] == ["KV5D007"]
    assert r.data["selection"] == ["KV5D011"], r.data
    assert r.data["assigned"] == [], "the guard assigned to ServerArgs"
    assert r.data["patch"] == "applied"
    # 0.5.20+: the resolution hook fires first; older: check_server_args does
    has_hooks = r.data["hook_registered"]
    assert unified["stage"] == ("resolution" if has_hooks else "check_server_args"), r.data
    assert has_hooks == (parse_version(sglang_version()) >= parse_version("0.5.20"))


def test_hostile_toml_is_a_usage_error(tmp_path):
    bad = tmp_path / "bad.toml"
    for text in ('args = [\n', "a=" + "[" * 100000):  # malformed; nested past Python's recursion limit
        bad.write_text(text)
        with pytest.raises(UsageError, match="not valid TOML"):
            load_profile(str(bad))
