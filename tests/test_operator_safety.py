"""Operator safety (issue 18), each case in a fresh subprocess: switches validated
through the registry everywhere, status files that planted links cannot redirect,
dry runs that are safe shell scripts, usage errors without tracebacks, the CLI's
rough edges, and a stand-in SGLang told from the real one.

Every case asserts the exit code, that the message names the variable or value,
and that no traceback was printed; the status-file and dry-run cases also assert
that the victim files are intact and that nothing ran.
"""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import sys

import pytest

from sglang_kv5d import config
from tests.helpers.cli import base_env, run_batch, run_cli
from tests.helpers.subproc import ROOT, run_py, sglang_version

MODEL = ["--model-path", "/models/Llama-3.1-8B-Instruct"]
FIVE_D = {"SGLANG_USE_AITER": "1", "SGLANG_AITER_KV_CACHE_LAYOUT": "vectorized_5d"}


def _no_traceback(*texts: str) -> None:
    for t in texts:
        assert "Traceback (most recent call last)" not in t, t[-3000:]


def _doctor(env):
    p = run_cli(["doctor", "--json", "--no-spawn"], env)
    _no_traceback(p.stderr)
    return p, {c["name"]: c for c in json.loads(p.stdout)}


# ---------------------------------------------------------------------------
# 1-3: one registry, validated by check, doctor and activation


def test_registry_is_complete_and_parses_with_one_boolean_parser():
    for sw in config.SWITCHES.values():
        assert sw.meaning and sw.values and sw.default_text, sw.name
    own = [n for n, s in config.SWITCHES.items() if s.owner == config.OURS]
    assert set(own) >= {"SGLANG_KV5D", "SGLANG_KV5D_PATCHES", "SGLANG_KV5D_STRICT", "SGLANG_KV5D_ALLOW_UNTESTED",
                        "SGLANG_KV5D_STATUS_DIR", "SGLANG_KV5D_ATTN_IMPL"}
    assert {"SGLANG_AITER_KV_CACHE_LAYOUT", "SGLANG_USE_AITER", "SGLANG_USE_HND_KVCACHE"} <= set(config.SWITCHES)
    assert config.read("SGLANG_KV5D", {"SGLANG_KV5D": " On "}) == (True, None)
    value, problem = config.read("SGLANG_KV5D", {"SGLANG_KV5D": "maybe"})
    assert value is False and problem.rule == "KV5D013" and "'maybe'" in problem.message()
    assert config.read("SGLANG_KV5D_STRICT", {"SGLANG_KV5D_STRICT": "maybe"})[0] is True  # strict stays on
    assert config.read("SGLANG_AITER_KV_CACHE_LAYOUT", {"SGLANG_AITER_KV_CACHE_LAYOUT": "5d"})[1].rule == "KV5D001"
    # The .pth line skips the bootstrap for exactly the off spellings of the registry's parser.
    line = open(os.path.join(ROOT, "sglang_kv5d.pth")).read()
    assert str(("",) + config.FALSE_WORDS).replace("'", '"') in line, line


def test_invalid_gate_is_an_error_in_check_and_doctor():
    p = run_cli(["check", "--kv5d-platform", "rocm", *MODEL], {"SGLANG_KV5D": "maybe"})
    _no_traceback(p.stdout, p.stderr)
    assert p.returncode == 1, p
    assert "KV5D013 error: SGLANG_KV5D='maybe'" in p.stdout and "fix: export SGLANG_KV5D=1" in p.stdout, p.stdout
    p, checks = _doctor({"SGLANG_KV5D": "maybe", "SGLANG_AITER_KV_CACHE_LAYOUT": "5d",
                         "SGLANG_KV5D_ATTN_IMPL": "cuda"})
    assert p.returncode == 1, p
    gate = checks["switch SGLANG_KV5D"]
    assert gate["status"] == "fail" and "KV5D013" in gate["detail"] and "'maybe'" in gate["detail"] and gate["fix"]
    impl = checks["switch SGLANG_KV5D_ATTN_IMPL"]
    assert impl["status"] == "fail" and "'cuda'" in impl["detail"] and "assumes auto" in impl["detail"]
    layout = checks["switch SGLANG_AITER_KV_CACHE_LAYOUT"]  # item 3: doctor agrees with check's KV5D001
    assert layout["status"] == "fail" and "KV5D001" in layout["detail"] and "'5d'" in layout["detail"]


def test_invalid_gate_warns_when_sglang_is_imported_and_status_says_why():
    r = run_py(
        """
        import json, sglang
        import sglang_kv5d
        st = sglang_kv5d.status()
        print(json.dumps({"active": st.active, "warnings": st.warnings}))
        """,
        env={"SGLANG_KV5D": "maybe", **FIVE_D},
    )
    _no_traceback(r.stderr)
    assert r.returncode == 0 and r.data is not None, r
    warned = [ln for ln in r.stderr.splitlines() if ln.startswith("sglang-kv5d: warning: SGLANG_KV5D='maybe'")]
    assert len(warned) == 1 and "assuming off" in warned[0] and "runs unpatched" in warned[0], r.stderr
    assert r.data["active"] is False and any("SGLANG_KV5D='maybe'" in w for w in r.data["warnings"]), r.data


def test_invalid_attn_impl_fails_check_and_warns_at_activation():
    p = run_cli(["check", "--kv5d-platform", "rocm", *MODEL], {"SGLANG_KV5D_ATTN_IMPL": "cuda"})
    _no_traceback(p.stdout, p.stderr)
    assert p.returncode == 1 and "KV5D013 error: SGLANG_KV5D_ATTN_IMPL='cuda'" in p.stdout, p
    r = run_py(
        """
        import json, logging
        logging.basicConfig(level=logging.WARNING)
        import sglang_kv5d
        from sglang_kv5d import attention
        st = sglang_kv5d.activate()
        print(json.dumps({"warnings": st.warnings, "impl": attention.selected_impl()}))
        """,
        env={"SGLANG_KV5D_ATTN_IMPL": "cuda", "SGLANG_KV5D_STRICT": "sometimes", "SGLANG_AITER_KV_CACHE_LAYOUT": "5d"},
    )
    _no_traceback(r.stderr)
    assert r.data is not None, r
    w = r.data["warnings"]
    assert any("SGLANG_KV5D_ATTN_IMPL='cuda'" in x and "assuming auto" in x for x in w), w
    assert any("SGLANG_KV5D_STRICT='sometimes'" in x and "assuming on" in x for x in w), w
    assert any("SGLANG_AITER_KV_CACHE_LAYOUT='5d'" in x and "KV5D001" in x for x in w), w
    assert r.data["impl"] == "auto"


# ---------------------------------------------------------------------------
# 2: status files

_STATUS_CHILD = r"""
import json, logging, os, sys
logging.basicConfig(level=logging.WARNING, format="%(message)s")
os.umask(int(os.environ.get("KV5D_TEST_UMASK", "0o022"), 8))
d = os.environ["SGLANG_KV5D_STATUS_DIR"]
pid = os.getpid()
for name, target in json.loads(sys.argv[1]):
    os.symlink(target, os.path.join(d, name.format(pid=pid)))
import sglang_kv5d
sglang_kv5d.activate()
sglang_kv5d.deactivate()
sglang_kv5d.activate()   # three writes of the status file
print(json.dumps({"pid": pid}))
"""


def _status_child(directory, links=(), extra=None):
    env = {"SGLANG_KV5D_STATUS_DIR": str(directory), **(extra or {})}
    r = run_py(_STATUS_CHILD, env=env, args=[json.dumps(list(links))])
    _no_traceback(r.stderr)
    assert r.returncode == 0 and r.data is not None, r
    return r


def _victim(tmp_path):
    v = tmp_path / "victim"
    v.write_text("precious\n")
    os.chmod(v, 0o600)
    return v


def test_status_write_ignores_a_link_planted_at_the_old_temporary_name(tmp_path):
    d = tmp_path / "status"
    d.mkdir(mode=0o700)
    victim = _victim(tmp_path)
    r = _status_child(d, [("{pid}.json.tmp", str(victim))])
    assert victim.read_text() == "precious\n" and stat.S_IMODE(victim.stat().st_mode) == 0o600
    data = json.loads((d / f"{r.data['pid']}.json").read_text())
    assert data["pid"] == r.data["pid"]
    assert sorted(os.listdir(d)) == sorted([f"{r.data['pid']}.json", f"{r.data['pid']}.json.tmp"])


def test_status_write_dangling_link_creates_nothing_elsewhere(tmp_path):
    d = tmp_path / "status"
    d.mkdir(mode=0o700)
    elsewhere = tmp_path / "elsewhere"
    _status_child(d, [("{pid}.json.tmp", str(elsewhere))])
    assert not elsewhere.exists()


def test_status_write_replaces_a_link_at_the_final_name_not_its_target(tmp_path):
    d = tmp_path / "status"
    d.mkdir(mode=0o700)
    victim = _victim(tmp_path)
    r = _status_child(d, [("{pid}.json", str(victim))])
    final = d / f"{r.data['pid']}.json"
    assert victim.read_text() == "precious\n"
    assert not final.is_symlink() and json.loads(final.read_text())["pid"] == r.data["pid"]


def test_status_files_are_private_even_under_umask_000(tmp_path):
    d = tmp_path / "new" / "status"
    r = _status_child(d, extra={"KV5D_TEST_UMASK": "0o000"})
    f = d / f"{r.data['pid']}.json"
    assert stat.S_IMODE(f.stat().st_mode) == 0o600
    assert stat.S_IMODE(d.stat().st_mode) == 0o700 and stat.S_IMODE(d.parent.stat().st_mode) == 0o700
    r = _status_child(d, extra={"SGLANG_KV5D_STATUS_READABLE": "1"})
    assert stat.S_IMODE((d / f"{r.data['pid']}.json").stat().st_mode) == 0o644


def test_world_writable_status_dir_is_refused_with_one_warning(tmp_path):
    d = tmp_path / "shared"
    d.mkdir()
    os.chmod(d, 0o777)
    r = _status_child(d)
    assert os.listdir(d) == []
    warned = [ln for ln in r.stderr.splitlines() if "not writing status files to" in ln]
    assert len(warned) == 1 and "world-writable without the sticky bit" in warned[0] and str(d) in warned[0], r.stderr
    p, checks = _doctor({"SGLANG_KV5D_STATUS_DIR": str(d)})
    c = checks["switch SGLANG_KV5D_STATUS_DIR"]
    assert c["status"] == "warn" and "world-writable" in c["detail"] and c["fix"], c


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a directory to another user")
def test_status_dir_owned_by_another_user_is_refused(tmp_path):
    d = tmp_path / "theirs"
    d.mkdir(mode=0o755)
    os.chown(d, 65534, 65534)
    r = _status_child(d)
    assert os.listdir(d) == []
    assert any("owned by uid 65534" in ln for ln in r.stderr.splitlines()), r.stderr


# ---------------------------------------------------------------------------
# 3 / 4: usage errors (exit 2, one line naming the value, no traceback)


def _usage(p, *needles):
    _no_traceback(p.stdout, p.stderr)
    assert p.returncode == 2, p
    errors = [ln for ln in p.stderr.splitlines() if ln.startswith("Error: ")]
    assert len(errors) == 1, p.stderr
    for n in needles:
        assert n in errors[0], (n, errors[0])
    return errors[0]


@pytest.fixture(scope="module")
def profiles(tmp_path_factory):
    d = tmp_path_factory.mktemp("profiles")
    out = {}
    (d / "latin1.toml").write_bytes('description = "caf\xe9"\nargs = []\n'.encode("latin-1"))
    out["latin1"] = str(d / "latin1.toml")
    for key, body in {
        "key_eq": '[env]\n"A=B" = "1"\n',
        "key_empty": '[env]\n"" = "1"\n',
        "nul": '[env]\nSGLANG_VLM_CACHE_SIZE_MB = "1\\u0000"\n',
        "int_arg": 'args = ["--page-size", 64]\n',
        "bool_env": '[env]\nSGLANG_USE_AITER = true\n',
    }.items():
        (d / f"{key}.toml").write_text(body)
        out[key] = str(d / f"{key}.toml")
    return out


@pytest.fixture(scope="module")
def usage_batch(profiles):
    cases = [
        {"argv": ["check", "--kv5d-profile", profiles["latin1"]]},
        {"argv": ["check", "--kv5d-profile", profiles["key_eq"]]},
        {"argv": ["check", "--kv5d-profile", profiles["key_empty"]]},
        {"argv": ["check", "--kv5d-profile", profiles["nul"]]},
        {"argv": ["check", "--kv5d-profile", profiles["int_arg"]]},
        {"argv": ["check", "--kv5d-profile", profiles["bool_env"]]},
        {"argv": ["check", "--kv5d-env", "1ABC=1", *MODEL]},
        {"argv": ["check", "--kv5d-env", "ÄÖ=1", *MODEL]},
        {"argv": ["check", "--kv5d-env", "=1", *MODEL]},
        {"argv": ["launch", "--kv5d-dry-run", "--kv5d-env", "A=x\x00y", *MODEL]},
    ]
    return run_batch(cases)


@pytest.mark.parametrize("index,needles", [
    (0, ["latin1.toml", "not UTF-8", "0xe9"]),
    (1, ["'A=B'", "not a variable name"]),
    (2, ["an empty name"]),
    (3, ["SGLANG_VLM_CACHE_SIZE_MB", "NUL"]),
    (4, ["args[1]", "an integer", "64", '"64"']),
    (5, ["env.SGLANG_USE_AITER", "a boolean"]),
    (6, ["'1ABC'", "not a variable name"]),
    (7, ["'ÄÖ'", "not a variable name"]),
    (8, ["an empty name"]),
    (9, ["NUL", "A"]),
])
def test_bad_profiles_and_env_names_are_usage_errors(usage_batch, index, needles):
    r = usage_batch[index]
    _no_traceback(r["out"], r["err"])
    assert r["code"] == 2, r
    errors = [ln for ln in r["err"].splitlines() if ln.startswith("Error: ")]
    assert len(errors) == 1, r
    for n in needles:
        assert n in errors[0], (n, errors[0])


def test_non_utf8_profile_is_a_usage_error_in_a_real_subprocess(profiles):
    _usage(run_cli(["check", "--kv5d-profile", profiles["latin1"]]), "not UTF-8", profiles["latin1"])


def test_code_loading_variables_from_a_profile_or_command_line_warn(tmp_path):
    prof = tmp_path / "p.toml"
    prof.write_text('args = ["--model-path", "/m"]\n[env]\nLD_PRELOAD = "/tmp/evil.so"\n')
    p = run_cli(["check", "--kv5d-profile", str(prof), "--kv5d-env", "PYTHONSTARTUP=/tmp/x.py"],
                {"BASH_ENV": "/home/me/.bashrc"})  # exported by the operator: theirs, no warning
    _no_traceback(p.stdout, p.stderr)
    assert p.returncode == 0, p
    assert "KV5D014 warning: LD_PRELOAD='/tmp/evil.so' is set by the profile" in p.stdout, p.stdout
    assert "KV5D014 warning: PYTHONSTARTUP='/tmp/x.py' is set by the command line" in p.stdout, p.stdout
    assert "BASH_ENV" not in p.stdout and "0 error(s), 2 warning(s)" in p.stdout, p.stdout


@pytest.mark.parametrize("device", ["cuda", "rocm"])
def test_selftest_on_a_missing_device_is_a_usage_error(device):
    probe = run_py("import json, torch; print(json.dumps([torch.cuda.is_available(), torch.version.hip]))")
    if probe.data and probe.data[0] and (device == "cuda" or probe.data[1]):
        pytest.skip("this machine has the device")
    p = run_cli(["selftest", "--device", device])
    _usage(p, f"--device {device}")
    assert "cpu" in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr  # one line


def test_selftest_refuses_an_invalid_switch_before_running():
    _usage(run_cli(["selftest", "--device", "cpu"], {"SGLANG_KV5D_ATTN_IMPL": "cuda"}),
           "SGLANG_KV5D_ATTN_IMPL='cuda'", "KV5D013")


# ---------------------------------------------------------------------------
# 3: the dry run is a safe shell script

_FAKE_LAUNCH_SERVER = """
import json, os, sys
with open(os.environ["KV5D_RECORD"], "w") as fh:
    json.dump({"argv": sys.argv[1:], "env": {k: os.environ.get(k) for k in json.loads(os.environ["KV5D_NAMES"])}}, fh)
"""


def _command_text(script: str) -> str:
    """The command part of a dry run (it spans lines when a quoted value holds a newline)."""
    head, _, rest = script.partition("\n# command:\n")
    assert rest, script
    return rest.split("\n# SGLang arguments and their origin:", 1)[0]


def _hostile_cases(tmp):
    """(label, argv, env, expect_run) for each vector; each payload is a command on a line of its own
    (newlines before and after), which ran when the dry run printed values raw into comments."""
    d = os.path.join(tmp, "profiles")
    os.makedirs(d)

    def prof(name, body):
        path = os.path.join(d, name)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(body)
        return path

    nl = "\\n"
    base = ["launch", "--kv5d-dry-run", "--kv5d-platform", "cpu"]
    return [
        ("profile args value", base + ["--kv5d-profile", prof("a.toml", f'args = ["--model-path", "/m", '
                                       f'"--served-model-name", "x{nl}touch PWN1{nl}"]\n')], {}, True),
        ("command-line value", base + [*MODEL, "--served-model-name", "y\ntouch PWN2\n", "--api-key", "k'; touch PWN2b; '"],
         {}, True),
        ("profile description", base + ["--kv5d-profile", prof("c.toml", f'description = "d{nl}touch PWN3{nl}$(touch PWN3b)"\n'
                                        'args = ["--model-path", "/m"]\n')], {}, True),
        ("[env] key", base + ["--kv5d-profile", prof("d.toml", f'[env]\n"X{nl}touch PWN4{nl}" = "1"\n')], {}, False),
        ("profile path", base + ["--kv5d-profile", prof("e\ntouch PWN5\n.toml", 'args = ["--model-path", "/m"]\n')],
         {}, True),
        ("exported value overridden by --kv5d-env", base + ["--kv5d-env", "SGLANG_VLM_CACHE_SIZE_MB=2", *MODEL],
         {"SGLANG_VLM_CACHE_SIZE_MB": "1\ntouch PWN6\n"}, True),
        ("renamed flag's value", base + [*MODEL, "--cuda-graph-max-bs=4\ntouch PWN7\n"], {}, False),
        ("[env] value", base + ["--kv5d-profile", prof("h.toml", 'args = ["--model-path", "/m"]\n[env]\n'
                                f'SGLANG_VLM_CACHE_SIZE_MB = "1{nl}touch PWN8{nl}`touch PWN8b`"\n')], {}, True),
        ("kept exported value", base + [*MODEL], {"SGLANG_USE_AITER": "1\ntouch PWN9\n"}, True),
    ]


def test_dry_run_of_each_hostile_input_is_safe_to_run_with_bash(tmp_path):
    cases = _hostile_cases(str(tmp_path))
    results = run_batch([{"argv": argv, "env": env, "probe": []} for _, argv, env, _ in cases])
    fake = tmp_path / "fake"
    (fake / "sglang").mkdir(parents=True)
    (fake / "sglang" / "__init__.py").write_text("")
    (fake / "sglang" / "launch_server.py").write_text(_FAKE_LAUNCH_SERVER)
    for (label, argv, env, expect_run), r in zip(cases, results):
        _no_traceback(r["out"], r["err"])
        scratch = tmp_path / f"scratch-{label.replace(' ', '_').replace('/', '_')}"
        scratch.mkdir()
        script = scratch / "dry_run.sh"
        script.write_text(r["out"])
        record = tmp_path / f"record-{len(os.listdir(tmp_path))}.json"
        names = sorted(set(env) | {"SGLANG_VLM_CACHE_SIZE_MB", "SGLANG_KV5D", "SGLANG_USE_AITER"})
        run_env = base_env({**env, "PYTHONPATH": str(fake), "KV5D_RECORD": str(record),
                            "KV5D_NAMES": json.dumps(names)})
        b = subprocess.run(["bash", str(script)], cwd=scratch, env=run_env, capture_output=True, text=True,
                           timeout=120)
        assert sorted(os.listdir(scratch)) == ["dry_run.sh"], (label, os.listdir(scratch), r["out"], b.stderr)
        assert not list(tmp_path.glob("**/PWN*")) and not list(tmp_path.parent.glob("PWN*")), label
        if expect_run:
            assert r["code"] == 0, (label, r)
            plan_argv = shlex.split(_command_text(r["out"]))
            got = json.loads(record.read_text())
            assert b.returncode == 0, (label, b.stderr)
            assert got["argv"] == plan_argv[3:], (label, got, plan_argv)  # exactly what launch would exec
            assert got["env"]["SGLANG_KV5D"] == "1"
        else:
            assert r["code"] == 2 and not record.exists(), (label, r)
    # The overridden exported value reached SGLang as the command line's value, and the profile's
    # hostile [env] value verbatim (a value, never a command).
    assert results[5]["code"] == 0


def test_dry_run_hostile_command_line_in_a_real_subprocess(tmp_path):
    p = run_cli(["launch", "--kv5d-dry-run", "--kv5d-platform", "cpu", *MODEL, "--served-model-name",
                 "x\ntouch PWN\n"])
    _no_traceback(p.stderr)
    assert p.returncode == 0, p
    (tmp_path / "s.sh").write_text(p.stdout.replace(_command_text(p.stdout), "true"))  # all but the exec itself
    b = subprocess.run(["bash", "s.sh"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert b.returncode == 0 and sorted(os.listdir(tmp_path)) == ["s.sh"], b.stderr


# ---------------------------------------------------------------------------
# 6: rough edges


def test_summary_counts_translation_warnings_and_parser_errors_are_sglangs():
    p = run_cli(["check", "--kv5d-platform", "rocm", *MODEL, "--cuda-graph-max-bs", "8"])
    _no_traceback(p.stderr)
    assert p.returncode == 0, p
    n = sum(1 for ln in p.stderr.splitlines() if ln.startswith("sglang-kv5d: warning:"))
    # SGLang 0.5.16 still has --cuda-graph-max-bs (nothing to translate); 0.5.20+ does not
    assert n == (0 if (sglang_version() or "").startswith("0.5.16") else 1), p.stderr
    assert f"0 error(s), {n} warning(s)" in p.stdout, (p.stdout, p.stderr)
    p = run_cli(["check", "--kv5d-platform", "rocm", *MODEL, "--no-such-flag", "1"])
    _no_traceback(p.stderr)
    assert p.returncode == 2 and "sglang serve: error" not in p.stderr, p
    assert "argument parser (ServerArgs.add_cli_args) rejected the arguments: unrecognized arguments: --no-such-flag" \
        in p.stderr, p.stderr


def test_explain_shows_the_fix():
    p = run_cli(["check", "--explain", "KV5D013"])
    assert p.returncode == 0 and "\nFix: " in p.stdout, p
    with open(os.path.join(ROOT, "docs", "rules.md"), encoding="utf-8") as fh:
        assert fh.read().count("**Fix:**") >= 14


def test_sglang_import_noise_is_explained_once():
    p = run_cli(["check", "--kv5d-platform", "rocm", *MODEL, "--attention-backend", "aiter"], FIVE_D)
    _no_traceback(p.stderr)
    assert p.returncode == 0, p
    lines = p.stderr.splitlines()
    notes = [ln for ln in lines if ln.startswith("sglang-kv5d: note: SGLang printed")]
    assert len(notes) == 1 and "not sglang-kv5d findings" in notes[0], p.stderr
    assert not any(ln.startswith("aiter is AMD specific") for ln in lines), p.stderr  # only inside the note


# ---------------------------------------------------------------------------
# 7: doctor tells a real SGLang from a stand-in


def test_doctor_warns_about_a_stand_in_sglang(tmp_path):
    (tmp_path / "sglang").mkdir()
    (tmp_path / "sglang" / "__init__.py").write_text("")
    p, checks = _doctor({"PYTHONPATH": str(tmp_path)})
    w = checks["sglang install"]
    assert w["status"] == "warn" and str(tmp_path / "sglang") in w["detail"] and "no version of its own" in w["detail"]
    (tmp_path / "sglang" / "_version.py").write_text("__version__ = '0.5.99'\n")
    p, checks = _doctor({"PYTHONPATH": str(tmp_path)})
    assert "says 0.5.99" in checks["sglang install"]["detail"] and "0.5.23" in checks["sglang install"]["detail"] \
        or "says 0.5.99" in checks["sglang install"]["detail"], checks["sglang install"]
    assert checks["sglang"]["status"] == "fail" and "0.5.99" in checks["sglang"]["detail"], checks["sglang"]
    assert p.returncode == 1
    r = run_py("import json, sglang, sglang_kv5d; st = sglang_kv5d.status(); "
               "print(json.dumps([st.sglang_version, st.verdict]))", env={"PYTHONPATH": str(tmp_path)})
    assert r.data == ["0.5.99", "untested"], r
