"""Hostile input and newcomer friction in the CLI and activation (issue 26 items 4, 7, 9, 10, 11, 12).

Real subprocesses where activation or a hang matters, click's CliRunner on the
real commands elsewhere; nothing heavy runs (every fuzzed value fails
validation, or the command ends at a usage error or ``--help``).
"""

from __future__ import annotations

import json
import logging
import os
import random
import stat
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from sglang_kv5d.safe_text import one_line, printable, shell_join, shell_quote
from tests.helpers.cli import base_env, run_batch, run_cli
from tests.helpers.subproc import ROOT, run_py

ESC = "\x1b[2J\x1b[1;1H"  # clear the screen, cursor home: rewrites what was printed before
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a path to another user")
OTHER_UID = 65534


def _no_controls(text: str) -> None:
    bad = sorted({hex(ord(c)) for c in text if not c.isprintable() and c not in "\n\t"})
    assert not bad, (bad, text[-2000:])


def _no_traceback(*texts: str) -> None:
    for t in texts:
        assert "Traceback" not in t, t[-3000:]


# ---------------------------------------------------------------------------
# item 7: one sanitizer, used at every print site of outside values


def test_sanitizer_escapes_controls_and_keeps_text():
    assert printable("plain ünïcödé text\nline two\tcol") == "plain ünïcödé text\nline two\tcol"
    assert printable(f"a{ESC}b\rc\x7f\u202e\u2028") == "a\\x1b[2J\\x1b[1;1Hb\\rc\\x7f\\u202e\\u2028"
    assert one_line("a\nb\tc\x1b") == "a\\nb\\tc\\x1b"
    assert shell_quote("a b") == "'a b'" and shell_quote("x\ny") == "'x\ny'"
    assert shell_quote(f"v{ESC}'\\") == "$'v\\x1b[2J\\x1b[1;1H\\'\\\\'"
    with pytest.raises(ValueError):
        shell_quote("a\x00b")


@pytest.mark.parametrize("value", [ESC, "\x9b2J", "a'b\x1b\\c", "\u202eevil", "x\r\x08\x07", "é\x1bü\n\x1b"])
def test_shell_quote_round_trips_through_bash(value):
    got = subprocess.run(["bash", "-c", f"printf %s {shell_quote(value)}"], capture_output=True, timeout=30)
    assert got.returncode == 0 and got.stdout.decode("utf-8") == value
    _no_controls(shell_join(["--x", value]))


def test_dry_run_and_check_print_no_raw_escape_sequences(tmp_path):
    """Escape sequences in a profile's description, [env] value and args, in an
    exported value and in the profile's own path: the dry run stays a bash
    script that sets exactly those values, and nothing raw reaches the terminal."""
    bad = tmp_path / f"p{ESC}.toml"
    esc = ESC.replace("\x1b", "\\u001b")  # TOML spells a control character as an escape
    bad.write_text(f'description = "d{esc}"\nargs = ["--model-path", "/m", "--served-model-name", "n{esc}"]\n'
                   f'[env]\nSGLANG_VLM_CACHE_SIZE_MB = "1{esc}"\n', encoding="utf-8")
    broken = tmp_path / f"b{ESC}.toml"
    broken.write_text("args = [\n", encoding="utf-8")
    base = ["--kv5d-platform", "cpu"]
    env = {"SGLANG_USE_AITER": f"1{ESC}"}
    results = run_batch([
        {"argv": ["launch", "--kv5d-dry-run", *base, "--kv5d-profile", str(bad)], "env": env, "probe": []},
        {"argv": ["check", *base, "--kv5d-profile", str(bad)], "env": env, "probe": []},
        {"argv": ["check", *base, "--kv5d-profile", str(broken)], "env": {}, "probe": []},
        {"argv": ["check", *base, "--kv5d-profile", str(tmp_path / f"missing{ESC}.toml")], "env": {}, "probe": []},
    ])
    for r in results:
        _no_traceback(r["out"], r["err"])
        _no_controls(r["out"] + r["err"])
    dry = results[0]
    assert dry["code"] == 0, dry
    assert "SGLANG_VLM_CACHE_SIZE_MB=$'1\\x1b[2J\\x1b[1;1H'" in dry["out"], dry["out"]
    assert [r["code"] for r in results[2:]] == [2, 2], results
    # paste-safe and exact: bash sets the value verbatim (the exec line itself is left out)
    script = "\n".join(ln for ln in dry["out"].splitlines() if ln.startswith("export "))
    got = subprocess.run(["bash", "-c", script + '\nprintf %s "$SGLANG_VLM_CACHE_SIZE_MB"'],
                         capture_output=True, timeout=30, env=base_env())
    assert got.stdout.decode() == f"1{ESC}", got


def test_status_table_and_log_line_escape_controls():
    from sglang_kv5d.state import PatchStatus, Status

    st = Status(pid=1, role="main", active=True, routes=["api"], sglang_version="0.5.23", verdict="supported",
                verdict_message=f"ok{ESC}", strict=True,
                patches=[PatchStatus(f"p{ESC}", "failed", f"path /tmp/x{ESC}\ny")], warnings=[f"w{ESC}\nforged"])
    table = st.table()
    _no_controls(table)
    assert "forged" in table and "\nforged" not in table and "\ny" not in table
    line = st.summary_line()
    assert "\n" not in line and "\x1b" not in line


# ---------------------------------------------------------------------------
# item 9: usage errors exit 2 with a message, never a traceback


@pytest.mark.parametrize("device", ["cpu", "", " ", "cuda;x", "cuda:-1", "cuda:", "hip:0", "cuda:1x", f"cuda{ESC}",
                                    "cuda:99999"])
def test_bench_refuses_a_bad_device_before_any_work(device):
    from sglang_kv5d.cli.bench import bench

    r = CliRunner().invoke(bench, ["--device", device])
    assert r.exit_code == 2, (device, r.output, r.exception)
    assert "--device" in r.output and "cuda" in r.output and "needs a GPU" not in r.output, r.output
    assert "\x1b" not in r.output
    _no_traceback(r.output)


def test_bench_device_index_is_checked_against_the_gpus_torch_sees():
    from sglang_kv5d.bench.common import DeviceError, check_gpu_index, parse_gpu_device

    assert parse_gpu_device("cuda") is None and parse_gpu_device(" CUDA:3 ") == 3
    check_gpu_index(None, 0) or check_gpu_index(0, 1) or check_gpu_index(7, 8)
    with pytest.raises(DeviceError, match=r"cuda:99: torch sees 2 GPU\(s\) here \(cuda:0 \.\. cuda:1\)"):
        check_gpu_index(99, 2)
    with pytest.raises(DeviceError, match="torch sees no GPU"):
        check_gpu_index(0, 0)


@pytest.mark.parametrize("where,why", [("missing/out.json", "does not exist"), ("", "is a directory")])
def test_bench_out_is_checked_before_the_run(tmp_path, where, why):
    from sglang_kv5d.cli.bench import bench

    target = str(tmp_path / where) if where else str(tmp_path)
    r = CliRunner().invoke(bench, ["--what", "fp8-write", "--out", target])
    assert r.exit_code == 2 and why in r.output and "--out" in r.output, r.output
    assert "needs a GPU" not in r.output  # refused before torch or the GPU is even looked at
    _no_traceback(r.output)


def test_profile_reads_are_bounded_and_refuse_non_regular_files(tmp_path):
    from sglang_kv5d.launch.argv import UsageError
    from sglang_kv5d.launch.profile import MAX_PROFILE_BYTES, load_profile

    big = tmp_path / "big.toml"
    big.write_text("#" * (MAX_PROFILE_BYTES + 10))
    for path, needle in (("/dev/zero", "a device"), (str(tmp_path), "a directory"), (str(big), "larger than")):
        with pytest.raises(UsageError, match=needle):
            load_profile(path)
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    # a FIFO with no writer: a plain open() blocks forever, so this runs in a real subprocess with a timeout
    p = run_cli(["check", "--kv5d-profile", str(fifo)], timeout=120)
    assert p.returncode == 2 and "a FIFO, not a regular file" in p.stderr, p
    _no_traceback(p.stderr)


def test_activate_argument_errors_are_clear_and_change_nothing():
    import sglang_kv5d

    cases = [
        (dict(patches=5), TypeError, "takes a list of patch names"),
        (dict(patches="fp8-kv-write"), TypeError, "patches=['fp8-kv-write']"),
        (dict(patches=[]), ValueError, "selects no patch"),
        (dict(patches=[None]), TypeError, "must be a patch name"),
        (dict(patches=["fp8-kv-writ"]), ValueError, "did you mean fp8-kv-write?"),
        (dict(strict="maybe"), ValueError, "is not a boolean"),
        (dict(strict=""), ValueError, "empty"),
        (dict(strict=1), TypeError, "takes True, False, None"),
    ]
    before = {k: v for k, v in os.environ.items() if k.startswith("SGLANG_KV5D")}
    for kwargs, exc, needle in cases:
        with pytest.raises(exc, match=None) as info:
            sglang_kv5d.activate(**kwargs)
        assert needle in str(info.value), (kwargs, str(info.value))
    assert {k: v for k, v in os.environ.items() if k.startswith("SGLANG_KV5D")} == before
    assert sglang_kv5d.status().active is False


# ---------------------------------------------------------------------------
# item 10: children inherit exactly the parent's selection; invalid tokens are never "all patches"


def test_children_inherit_exactly_the_parents_selection_and_strictness():
    r = run_py("""
import json, subprocess, sys
import sglang_kv5d
st = sglang_kv5d.activate(patches=("fp8-kv-write", "pool-layout-detection"), strict="off")
parent = {"selectable": sorted(p.name for p in st.patches if p.state != "disabled" and not p.internal),
          "strict": st.strict}
child = subprocess.run([sys.executable, "-c", '''
import json, sglang_kv5d
st = sglang_kv5d.activate()
print(json.dumps({"selectable": sorted(p.name for p in st.patches if p.state != "disabled" and not p.internal),
                  "strict": st.strict}))
'''], capture_output=True, text=True)
print(json.dumps({"parent": parent, "child": json.loads(child.stdout.strip().splitlines()[-1])}))
""")
    assert r.data is not None, r
    assert r.data["parent"] == r.data["child"] == {"selectable": ["fp8-kv-write", "pool-layout-detection"],
                                                   "strict": False}, r.data


def test_invalid_or_unknown_patch_tokens_never_select_every_patch():
    from sglang_kv5d import config
    from sglang_kv5d.activation.registry import gate
    from sglang_kv5d.patches import Patch
    from sglang_kv5d.versions import SUPPORTED, Verdict

    env = {"SGLANG_KV5D_PATCHES": "fp8-kv-write,FP8 KV"}
    assert config.selected_patches(env) == ()
    (p,) = config.problems(env)
    assert "'FP8 KV' is not a patch name" in p.message() and "no selectable patch" in p.activation_warning()
    patch = Patch(name="fp8-kv-write", summary="x", bindings=())
    assert gate(patch, Verdict(SUPPORTED, "0.5.23", True, "ok"), config.selected_patches(env)) is not None
    (typo,) = config.problems({"SGLANG_KV5D_PATCHES": "fp8-kv-writ"}, known_patches=["fp8-kv-write", "other"])
    assert "'fp8-kv-writ' (did you mean fp8-kv-write?)" in typo.message(), typo.message()


# ---------------------------------------------------------------------------
# item 11: status files: no planted symlinked directory, no forged log lines


@ROOT_ONLY
def test_status_dir_behind_a_symlink_of_another_user_is_not_followed(tmp_path, caplog):
    from sglang_kv5d.state import PatchStatus, Status, write_status_file

    target = tmp_path / "roots"
    target.mkdir(mode=0o700)
    link = tmp_path / "planted"
    link.symlink_to(target)
    os.lchown(link, OTHER_UID, OTHER_UID)
    st = Status(1, "main", True, [], None, "supported", "", True, [PatchStatus("p", "applied", "")])
    log = logging.getLogger("kv5d-test-status")
    with caplog.at_level(logging.WARNING, logger=log.name):
        assert write_status_file(st, str(link), log) is None
        assert write_status_file(st, str(link / "sub"), log) is None  # no directory is created through it
    assert os.listdir(target) == []
    assert "symbolic link owned by uid 65534" in caplog.text, caplog.text
    os.lchown(link, 0, 0)  # our own link is fine
    assert write_status_file(st, str(link), log) == str(link / "1.json") and os.listdir(target) == ["1.json"]


def test_a_newline_in_the_status_path_cannot_forge_a_log_line(tmp_path, caplog):
    from sglang_kv5d.state import PatchStatus, Status, write_status_file

    d = tmp_path / "x\nsglang-kv5d: pid=1 applied=[everything]"
    d.mkdir()
    os.chmod(d, 0o777)  # unsafe: refused, and the refusal names the path
    st = Status(1, "main", True, [], None, "supported", "", True, [PatchStatus("p", "applied", "")])
    log = logging.getLogger("kv5d-test-status-nl")
    with caplog.at_level(logging.WARNING, logger=log.name):
        write_status_file(st, str(d), log)
    (msg,) = [r.getMessage() for r in caplog.records]
    assert "\n" not in msg and "x\\nsglang-kv5d: pid=1" in msg, msg


# ---------------------------------------------------------------------------
# item 4: SGLANG_KV5D_PEER_PATH runs code: it must be a trusted directory


def _peer_dir(root, mode=0o755):
    d = root / "peer"
    (d / "sglang_peer").mkdir(parents=True)
    marker = root / "RAN"
    (d / "sglang_peer" / "__init__.py").write_text("")
    (d / "sglang_peer" / "decode_attention.py").write_text(f"open({str(marker)!r}, 'w').close()\n"
                                                          "def decode_attention_fwd(*a, **k): pass\n")
    os.chmod(d, mode)
    return d, marker


def _no_sglang(_module):
    raise ImportError("no SGLang in this test")


@pytest.mark.parametrize("plant", ["world-writable", "group-writable file", "parent without sticky bit",
                                   pytest.param("owned by another user", marks=ROOT_ONLY)])
def test_peer_path_refuses_a_directory_others_can_change_and_runs_nothing(tmp_path, plant):
    import importlib

    from sglang_kv5d.bench.sglang_peers import PeerPathError, decode_peer

    base = tmp_path / "base"
    base.mkdir(mode=0o755)
    d, marker = _peer_dir(base)
    if plant == "world-writable":
        os.chmod(d, 0o777)
    elif plant == "group-writable file":
        os.chmod(d / "sglang_peer" / "decode_attention.py", 0o664)
    elif plant == "parent without sticky bit":
        os.chmod(base, 0o777)
    else:
        os.chown(d, OTHER_UID, OTHER_UID)
    env = {"SGLANG_KV5D_PEER_PATH": str(d)}
    with pytest.raises(PeerPathError, match="refusing to import code from") as info:
        decode_peer(env, importer=lambda m: _no_sglang(m) if m.startswith("sglang.") else importlib.import_module(m))
    assert not marker.exists() and str(d) not in sys.path, info.value
    if plant == "world-writable":  # the CLI: one line, exit 2
        from sglang_kv5d.cli.bench import bench

        r = CliRunner().invoke(bench, ["--what", "attention"], env=env)
        assert r.exit_code == 2 and "world-writable" in r.output, r.output
        _no_traceback(r.output)


def test_peer_path_of_our_own_accepts_and_imports(tmp_path):
    import importlib

    from sglang_kv5d.bench.sglang_peers import decode_peer

    d, marker = _peer_dir(tmp_path)
    env = {"SGLANG_KV5D_PEER_PATH": str(d)}
    for name in [m for m in sys.modules if m == "sglang_peer" or m.startswith("sglang_peer.")]:
        del sys.modules[name]
    try:
        fn, where = decode_peer(env, importer=lambda m: _no_sglang(m) if m.startswith("sglang.")
                                else importlib.import_module(m))
        assert callable(fn) and marker.exists()
    finally:
        if str(d) in sys.path:
            sys.path.remove(str(d))
        for name in [m for m in sys.modules if m == "sglang_peer" or m.startswith("sglang_peer.")]:
            del sys.modules[name]


# ---------------------------------------------------------------------------
# item 12: doctor --kernels-for shows progress k/n


def test_kernel_compile_progress_counts_each_case(tmp_path):
    from sglang_kv5d.doctor import kernel_rows_with_progress

    seen = []
    rows = kernel_rows_with_progress("gfx942", seen.append, kinds=["verify-table"])
    assert rows and all(r["ok"] and r["arch"] == "gfx942" for r in rows), rows
    n = len(seen)
    assert n >= 2 and seen == [s for s in seen if s.startswith("kernels ")], seen
    assert [s.split()[1] for s in seen] == [f"{k}/{n}" for k in range(1, n + 1)], seen


# ---------------------------------------------------------------------------
# item 9: a fuzz test over every command's options: exit 0/1/2, never a traceback

HOSTILE = ["", " ", "-", "--", "--help", "=", "x" * 4000, ESC, "a\nb", "\r", "\u202e", "\udcff", "💥", "nan", "inf",
           "-1", "1e309", "0x10", "%s%n{0}", "$(id)", "`id`", "'", '"', "\\", "../../etc/passwd", "/dev/zero",
           "/nonexistent/x.toml", "cuda;rm -rf /", "cuda:99", "NAME", "=x", "A=\x00", "KV5D999", "gfx1100"]


# What follows each fuzzed option so the command stops at a usage error, never starting real work
# (click validates options in command-line order, so the fuzzed one is judged first).
_BACKSTOP = {"bench": ["--device", "cpu"], "selftest": ["--device", "nope"], "doctor": ["--kernels-for", "nope"],
             "patches": ["--nope"]}


def _fuzz_cases(rng):
    """argv lists: every option of every click command (read from the commands themselves)
    with each hostile value, then a backstop; launch / check (raw argv) with each of ours."""
    from sglang_kv5d.cli import cli

    alphabet = "aZ09-_=:;,./\\'\" \n\r\t\x1b\x7f\x9b\u202eé💥$`"
    values = HOSTILE + ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40))) for _ in range(8)]
    cases = []
    for name, backstop in _BACKSTOP.items():
        for param in cli.commands[name].params:
            if not isinstance(param, click.Option) or "--help" in param.opts:
                continue
            opt = param.opts[-1]
            if param.is_flag:
                cases.append([name, opt, *backstop])
                continue
            for v in values:
                if "\x00" in v:  # a real argv cannot carry NUL (exec refuses it); launch/check get it below
                    continue
                cases.append([name, opt, v, *backstop] if opt != backstop[0] else [name, opt, v])
    for v in values:
        cases.append(["check", "--kv5d-profile", v])
        cases.append(["check", "--kv5d-platform", v])
        cases.append(["check", "--explain", v])
        cases.append(["check", "--kv5d-env", v, "--kv5d-profile", "/dev/zero"])
        cases.append(["launch", "--kv5d-dry-run", "--kv5d-profile", v, "--kv5d-platform", "nope"])
        cases.append(["launch", "--kv5d-dry-run", "--kv5d-env", v, "--kv5d-profile", "/dev/zero"])
        cases.append([v, "--help"])
    for cmd in (*_BACKSTOP, "check", "launch"):
        cases.append([cmd, "--help"])
    return cases


def test_fuzz_every_command_exits_0_1_or_2_without_a_traceback(monkeypatch):
    from sglang_kv5d.cli import cli

    def no_exec(*a, **k):
        raise AssertionError("the fuzz test must never exec SGLang")

    monkeypatch.setattr(os, "execvpe", no_exec)
    monkeypatch.setenv("SGLANG_KV5D_PEER_PATH", "")
    rng = random.Random(26)
    runner = CliRunner()
    for argv in _fuzz_cases(rng):
        r = runner.invoke(cli, argv, catch_exceptions=True)
        assert r.exception is None or isinstance(r.exception, SystemExit), (argv, r.exception, r.output[-2000:])
        assert r.exit_code in (0, 1, 2), (argv, r.exit_code, r.output[-2000:])
        _no_traceback(r.output)
        if argv[-1] != "--help" and "--help" not in argv[:2]:
            assert r.exit_code == 2 or argv[0] == "check" and "--explain" in argv, (argv, r.exit_code, r.output)
