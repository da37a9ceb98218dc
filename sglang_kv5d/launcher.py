"""Logic behind ``sglang-kv5d launch`` and ``sglang-kv5d check``.

    sglang-kv5d launch [--kv5d-* OPTIONS] [--] SGLANG_ARGS...
    sglang-kv5d check  [--kv5d-* OPTIONS] [--explain ID] [--] SGLANG_ARGS...

Argument handling
    Our options all carry the ``--kv5d-`` prefix and are recognised anywhere
    before ``--``, by their full name only (no prefix abbreviation). Every other
    token, and everything after ``--``, is SGLang's: ``--tp``, ``--port``,
    ``--model-path``, unknown options... reach SGLang exactly as written. A
    ``--kv5d-`` token that is not one of ours is a usage error (a typo must not
    be forwarded silently). ``-h``/``--help`` before ``--`` is our help;
    ``-- --help`` is SGLang's.

    The SGLang arguments are parsed with the installed SGLang's own parser
    (``argparse.ArgumentParser`` + ``ServerArgs.add_cli_args``, the way
    ``prepare_server_args`` builds it, prefix abbreviations allowed as SGLang
    allows them) without constructing ``ServerArgs``. Parse errors are
    SGLang's messages, verbatim, followed by our hint when we have one.

Profiles (UTF-8 TOML: ``description``, ``args`` list, ``[env]`` table; every
value a string, names ``[A-Za-z_][A-Za-z0-9_]*``, no NUL; anything else is a
usage error naming it)
    Arguments: the profile's arguments come first and the command line's after
    them, so for a repeated single-valued option the command line wins the way
    argparse always works (last one wins). In addition, when the command line
    sets an option (any spelling of the same SGLang destination), the
    profile's occurrences of it are dropped from the final command, so list
    options (``nargs='+'``) are replaced rather than merged and the command
    shows one value. A profile flag without a value (``--disable-radix-cache``)
    cannot be switched off from the command line: copy and edit the profile.

    Environment, highest precedence first:
      1. the command line: ``--kv5d-env NAME=VALUE``, ``--kv5d-strict`` /
         ``--kv5d-no-strict`` (SGLANG_KV5D_STRICT);
      2. the environment the launcher was started in (an explicitly exported
         variable is never silently replaced by a profile);
      3. the profile's ``[env]`` table;
      4. defaults: ``SGLANG_KV5D=1``, always set by the launcher.
    ``--kv5d-dry-run`` shows every variable involved with its origin, and what
    it overrode, as a shell script that is safe to run: values reach code lines
    only through ``shlex.quote``, comments are escaped (:func:`shell_comment_text`),
    and a command that ``launch`` would refuse is left commented out.

Renamed flags
    ``RENAMES`` translates options that SGLang renamed between releases (for
    scripts written for another release), only when the installed parser lacks
    the old spelling and has the new one, with a warning naming the releases.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import io
import json
import os
import re
import shlex
import sys
import warnings
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from . import config as _config
from . import rules as _rules

LAUNCH = "launch"
CHECK = "check"
EXIT_OK, EXIT_ERRORS, EXIT_USAGE = 0, 1, 2

GATE_ENV = _config.GATE
STRICT_ENV = _config.STRICT
# A variable name the dry run may print unquoted and execvpe accepts: ASCII only.
ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z", re.ASCII)
SGLANG_MODULE = "sglang.launch_server"
# prepare_server_args builds ArgumentParser(prog="sglang serve") with argparse's
# default allow_abbrev=True (0.5.16 and 0.5.23 both); we must accept and refuse
# exactly what SGLang will.
SGLANG_PROG = "sglang serve"
SGLANG_ALLOW_ABBREV = True

ORIGIN_CLI = "command line"
ORIGIN_PROFILE = "profile"
ORIGIN_ENV = "environment"
ORIGIN_DEFAULT = "default"

# Variables the rules read: shown by --kv5d-dry-run even when nothing changes them.
RELEVANT_ENV = tuple(n for n in _config.SWITCHES if n not in (GATE_ENV, _config.PLUGINS))


class UsageError(Exception):
    """Bad use of our own options or profile: exit 2."""


def check_env_name(name: str, where: str) -> None:
    """UsageError unless ``name`` is a portable variable name ([A-Za-z_][A-Za-z0-9_]*)."""
    if not ENV_NAME_RE.match(name):
        shown = "an empty name" if name == "" else f"{name!r}"
        raise UsageError(
            f"{where}: {shown} is not a variable name (use letters A-Z/a-z, digits and '_', not starting with a digit)"
        )


def check_env_value(name: str, value: str, where: str) -> None:
    if "\x00" in value:
        raise UsageError(f"{where}: the value of {name} contains a NUL character, which no environment can hold")


# --------------------------------------------------------------------------
# Our own options


_FLAG_OPTIONS = {
    "--kv5d-dry-run": "dry_run",
    "--kv5d-json": "json",
    "--kv5d-strict": "strict",
    "--kv5d-no-strict": "no_strict",
}
_VALUE_OPTIONS = {
    "--kv5d-profile": "profile",
    "--kv5d-platform": "platform",
    "--kv5d-env": "env",
    "--kv5d-explain": "explain",
}
PLATFORM_CHOICES = ("auto",) + _rules.PLATFORMS


@dataclass
class Options:
    profile: Optional[str] = None
    dry_run: bool = False
    platform: str = "auto"
    strict: Optional[bool] = None
    json: bool = False
    env: List[Tuple[str, str]] = field(default_factory=list)
    explain: Optional[str] = None
    help: bool = False


def split_argv(argv: Sequence[str], command: str = LAUNCH) -> Tuple[Options, List[str]]:
    """Separate our ``--kv5d-*`` options from SGLang's arguments.

    Returns (options, sglang_args). Tokens after ``--`` are never looked at.
    ``check`` also takes ``--explain ID`` (SGLang has no option spelled or
    abbreviated that way).
    """
    opts = Options()
    rest: List[str] = []
    known = sorted(list(_FLAG_OPTIONS) + list(_VALUE_OPTIONS))
    i = 0
    argv = list(argv)
    while i < len(argv):
        tok = argv[i]
        i += 1
        if tok == "--":
            rest.extend(argv[i:])
            break
        if tok in ("-h", "--help"):
            opts.help = True
            continue
        name, eq, value = tok.partition("=")
        if command == CHECK and name == "--explain":
            name = "--kv5d-explain"
        if not name.startswith("--kv5d-"):
            rest.append(tok)
            continue
        if name in _FLAG_OPTIONS:
            if eq:
                raise UsageError(f"option {name} takes no value")
            dest = _FLAG_OPTIONS[name]
            if dest == "strict":
                opts.strict = True
            elif dest == "no_strict":
                opts.strict = False
            else:
                setattr(opts, dest, True)
            continue
        if name in _VALUE_OPTIONS:
            if not eq:
                if i >= len(argv) or argv[i] == "--":
                    raise UsageError(f"option {name} requires a value")
                value = argv[i]
                i += 1
            dest = _VALUE_OPTIONS[name]
            if dest == "platform":
                if value not in PLATFORM_CHOICES:
                    raise UsageError(
                        f"invalid value for {name}: {value!r} (choose from {', '.join(PLATFORM_CHOICES)})"
                    )
                opts.platform = value
            elif dest == "env":
                k, has_eq, v = value.partition("=")
                if not has_eq:
                    raise UsageError(f"{name} expects NAME=VALUE, got {value!r}")
                check_env_name(k, f"{name} {value!r}")
                check_env_value(k, v, name)
                opts.env.append((k, v))
            elif dest == "explain":
                if command != CHECK:
                    raise UsageError(f"{name} is a check option")
                opts.explain = value
            else:
                setattr(opts, dest, value)
            continue
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        raise UsageError(
            f"no such option: {name}" + (f" (did you mean {close[0]}?)" if close else "")
            + "; options starting with --kv5d- belong to sglang-kv5d"
        )
    return opts, rest


# --------------------------------------------------------------------------
# Profiles


@dataclass
class Profile:
    path: str
    description: str
    env: Dict[str, str]
    args: List[str]


_PROFILE_KEYS = ("description", "env", "args")


def _toml_loads(text: str) -> Dict[str, Any]:
    try:
        import tomllib  # type: ignore[import-not-found]
    except ImportError:  # Python 3.10
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ImportError as exc:  # pragma: no cover
            raise UsageError("reading a profile on Python 3.10 needs the 'tomli' package") from exc
    return tomllib.loads(text)


def _type_name(v: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number"}.get(type(v), f"a {type(v).__name__}")


def load_profile(path: str) -> Profile:
    """Read and validate a launch profile; UsageError on any problem.

    Values keep their TOML types: every ``args`` item and every ``[env]``
    value must be a string (``"64"``, ``"1"``); a number or boolean is an error
    naming it, never silently converted. Variable names must be
    ``[A-Za-z_][A-Za-z0-9_]*``; a NUL anywhere is refused.
    """
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise UsageError(f"cannot read profile {path}: {exc.strerror or exc}") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"profile {path} is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}); "
            "save it as UTF-8 (TOML files are UTF-8)"
        ) from None
    try:
        data = _toml_loads(text)
    except UsageError:
        raise
    except Exception as exc:  # tomllib.TOMLDecodeError
        raise UsageError(f"profile {path} is not valid TOML: {exc}") from exc
    unknown = sorted(set(data) - set(_PROFILE_KEYS))
    if unknown:
        raise UsageError(
            f"profile {path}: unknown key(s) {', '.join(unknown)} (a profile has description, args and an [env] table;"
            " keys after [env] belong to the table, so put args before it)"
        )
    desc = data.get("description", "")
    if not isinstance(desc, str):
        raise UsageError(f"profile {path}: description must be a string, not {_type_name(desc)}")
    if "\x00" in desc:
        raise UsageError(f"profile {path}: description contains a NUL character")
    env_tab = data.get("env", {})
    if not isinstance(env_tab, dict):
        raise UsageError(f"profile {path}: env must be a table of NAME = \"value\"")
    env: Dict[str, str] = {}
    for k, v in env_tab.items():
        check_env_name(k, f"profile {path}: [env] key")
        if not isinstance(v, str):
            shown = json.dumps(v) if isinstance(v, (bool, int, float)) else None
            raise UsageError(
                f"profile {path}: env.{k} must be a string, not {_type_name(v)}"
                + (f"; write {k} = {json.dumps(json.dumps(v))}" if shown else "")
            )
        check_env_value(k, v, f"profile {path}: env.{k}")
        env[k] = v
    args = data.get("args", [])
    if not isinstance(args, list):
        raise UsageError(f"profile {path}: args must be a list of strings, not {_type_name(args)}")
    for i, a in enumerate(args):
        if not isinstance(a, str):
            hint = f"; write it in quotes: {json.dumps(json.dumps(a))}" if isinstance(a, (bool, int, float)) else ""
            raise UsageError(f"profile {path}: args[{i}] must be a string, not {_type_name(a)} ({a!r}){hint}")
        if "\x00" in a:
            raise UsageError(f"profile {path}: args[{i}] contains a NUL character")
    return Profile(path=path, description=desc, env=env, args=list(args))


# --------------------------------------------------------------------------
# Environment


@dataclass
class EnvEntry:
    name: str
    value: Optional[str]  # in the launch environment; None = unset
    origin: str
    previous: Optional[str]  # in the environment the launcher started in
    overridden: List[Tuple[str, str]] = field(default_factory=list)  # (origin, value) that lost

    @property
    def changed(self) -> bool:
        return self.value != self.previous

    def to_dict(self) -> Dict[str, Any]:
        return {
            "name": self.name,
            "value": self.value,
            "origin": self.origin,
            "previous": self.previous,
            "changed": self.changed,
            "overridden": [{"origin": o, "value": v} for o, v in self.overridden],
        }


def resolve_env(
    base: Mapping[str, str], profile: Optional[Profile], opts: Options
) -> Tuple[Dict[str, str], List[EnvEntry]]:
    """The launch environment and, per variable involved, its origin.

    Precedence: command line > environment > profile > default (see module doc).
    """
    env = dict(base)
    entries: Dict[str, EnvEntry] = {}
    cli: Dict[str, str] = dict(opts.env)
    if opts.strict is not None:
        cli[STRICT_ENV] = "1" if opts.strict else "0"
    prof = dict(profile.env) if profile else {}

    for name, value in prof.items():
        if name in cli:
            continue
        if name in base:
            entries[name] = EnvEntry(name, base[name], ORIGIN_ENV, base[name],
                                     [] if base[name] == value else [(ORIGIN_PROFILE, value)])
        else:
            env[name] = value
            entries[name] = EnvEntry(name, value, ORIGIN_PROFILE, None)
    for name, value in cli.items():
        lost = []
        if name in prof:
            lost.append((ORIGIN_PROFILE, prof[name]))
        if name in base and base[name] != value:
            lost.append((ORIGIN_ENV, base[name]))
        env[name] = value
        entries[name] = EnvEntry(name, value, ORIGIN_CLI, base.get(name), lost)
    if GATE_ENV in cli and not _config.read(GATE_ENV, cli)[0]:
        raise UsageError(f"{GATE_ENV} is always 1 under the launcher; run python -m {SGLANG_MODULE} without it")
    if GATE_ENV not in cli:
        lost = []
        if GATE_ENV in prof and prof[GATE_ENV] != "1":
            lost.append((ORIGIN_PROFILE, prof[GATE_ENV]))
        if GATE_ENV in base and base[GATE_ENV] != "1":
            lost.append((ORIGIN_ENV, base[GATE_ENV]))
        env[GATE_ENV] = "1"
        entries[GATE_ENV] = EnvEntry(GATE_ENV, "1", ORIGIN_DEFAULT, base.get(GATE_ENV), lost)
    for name in RELEVANT_ENV:
        if name not in entries and name in base:
            entries[name] = EnvEntry(name, base[name], ORIGIN_ENV, base[name])
    order = [GATE_ENV] + [n for n in cli if n != GATE_ENV] + [n for n in prof if n not in cli]
    order += [n for n in RELEVANT_ENV if n in entries]
    seen: List[str] = []
    for n in order:
        if n in entries and n not in seen:
            seen.append(n)
    return env, [entries[n] for n in seen]


# --------------------------------------------------------------------------
# SGLang's parser


class SGLangParseError(Exception):
    """SGLang's argparse rejected the arguments; ``message`` is argparse's, verbatim."""

    def __init__(self, message: str, prog: str = SGLANG_PROG):
        super().__init__(message)
        self.message = message
        self.prog = prog


class _ParserExit(Exception):
    def __init__(self, status: int, message: Optional[str]):
        super().__init__(message)
        self.status = status
        self.message = message


class CapturingParser(argparse.ArgumentParser):
    """argparse that reports instead of printing and exiting.

    ``error()`` is what every argparse parse error goes through (with or
    without ``exit_on_error``), so overriding it catches them all; ``exit()``
    and ``print_help()`` cover ``--help``/``--version`` style actions.
    """

    help_requested = False

    def error(self, message):  # type: ignore[override]
        raise SGLangParseError(message, self.prog)

    def exit(self, status=0, message=None):  # type: ignore[override]
        raise _ParserExit(status, message)

    def print_help(self, file=None):  # type: ignore[override]
        self.help_requested = True

    def print_usage(self, file=None):  # type: ignore[override]
        pass


def build_sglang_parser() -> CapturingParser:
    """SGLang's own CLI definition on a capturing parser (imports SGLang lazily)."""
    from sglang.srt.server_args import ServerArgs  # noqa: WPS433 (lazy on purpose)

    parser = CapturingParser(prog=SGLANG_PROG, allow_abbrev=SGLANG_ALLOW_ABBREV)
    ServerArgs.add_cli_args(parser)
    return parser


def _lookup(parser: argparse.ArgumentParser, opt: str) -> Optional[argparse.Action]:
    acts = parser._option_string_actions  # noqa: SLF001 (argparse's public-in-practice table)
    if opt in acts:
        return acts[opt]
    if parser.allow_abbrev and opt.startswith("--"):
        matches = [o for o in acts if o.startswith(opt)]
        if len(matches) == 1:
            return acts[matches[0]]
    return None


def _looks_like_option(tok: str) -> bool:
    if not tok.startswith("-") or tok == "-":
        return False
    try:
        float(tok)
        return False
    except ValueError:
        return True


@dataclass
class Segment:
    dest: Optional[str]  # SGLang destination, None for a token the parser does not know
    tokens: List[str]
    origin: str
    note: str = ""


def segment_args(args: Sequence[str], parser: argparse.ArgumentParser, origin: str) -> List[Segment]:
    """Group argv into option occurrences (option token + its values) by SGLang's definitions."""
    out: List[Segment] = []
    i = 0
    args = list(args)
    while i < len(args):
        tok = args[i]
        i += 1
        if not _looks_like_option(tok):
            out.append(Segment(None, [tok], origin))
            continue
        name, eq, _ = tok.partition("=")
        act = _lookup(parser, name)
        if act is None:
            out.append(Segment(None, [tok], origin))
            continue
        toks = [tok]
        nargs = act.nargs
        if not eq:
            if nargs is None or nargs == argparse.OPTIONAL:
                if i < len(args) and not _looks_like_option(args[i]):
                    toks.append(args[i])
                    i += 1
            elif isinstance(nargs, int):
                toks.extend(args[i:i + nargs])
                i += nargs
            elif nargs in (argparse.ZERO_OR_MORE, argparse.ONE_OR_MORE):
                while i < len(args) and not _looks_like_option(args[i]):
                    toks.append(args[i])
                    i += 1
            elif nargs == argparse.REMAINDER:
                toks.extend(args[i:])
                i = len(args)
        out.append(Segment(act.dest, toks, origin))
    return out


# --------------------------------------------------------------------------
# Renamed flags


@dataclass(frozen=True)
class Rename:
    old: str
    new: str
    history: str  # when SGLang renamed / removed it
    const: Optional[str] = None  # the old spelling was a flag meaning ``new const``
    flag: bool = False  # both spellings are flags (no value)


_ALIAS_0516 = "a deprecated alias in SGLang 0.5.16, absent in 0.5.23"

RENAMES: Tuple[Rename, ...] = (
    Rename("--mamba-scheduler-strategy", "--mamba-radix-cache-strategy",
           "renamed in SGLang 0.5.14 (deprecated alias until 0.5.19), removed in 0.5.20"),
    Rename("--cuda-graph-max-bs", "--cuda-graph-max-bs-decode",
           "split into --cuda-graph-max-bs-decode/-prefill (the old spelling was a decode alias in 0.5.16), "
           "removed in 0.5.20, where it is an ambiguous prefix"),
    Rename("--cuda-graph-bs", "--cuda-graph-bs-decode",
           "split into --cuda-graph-bs-decode/-prefill; " + _ALIAS_0516),
    Rename("--piecewise-cuda-graph-max-tokens", "--cuda-graph-max-bs-prefill", _ALIAS_0516),
    Rename("--piecewise-cuda-graph-tokens", "--cuda-graph-bs-prefill", _ALIAS_0516),
    Rename("--enable-breakable-cuda-graph", "--cuda-graph-backend-prefill", _ALIAS_0516, const="breakable"),
    Rename("--disable-piecewise-cuda-graph", "--cuda-graph-backend-prefill", _ALIAS_0516, const="disabled"),
    Rename("--nsa-prefill-backend", "--dsa-prefill-backend", _ALIAS_0516),
    Rename("--nsa-decode-backend", "--dsa-decode-backend", _ALIAS_0516),
    Rename("--speculative-dflash-draft-window-size", "--speculative-draft-window-size", _ALIAS_0516),
    Rename("--stream-output", "--incremental-streaming-output", _ALIAS_0516, flag=True),
    Rename("--enable-prefill-context-parallel", "--enable-prefill-cp", _ALIAS_0516, flag=True),
    Rename("--enable-dsa-prefill-context-parallel", "--enable-prefill-cp", _ALIAS_0516, flag=True),
    Rename("--enable-nsa-prefill-context-parallel", "--enable-prefill-cp", _ALIAS_0516, flag=True),
)


@dataclass
class Translation:
    old: str
    new_tokens: List[str]
    origin: str
    history: str

    def message(self) -> str:
        return (
            f"{self.old} is not an option of the installed SGLang ({self.history}); "
            f"passing {' '.join(self.new_tokens)} instead"
        )

    def to_dict(self) -> Dict[str, Any]:
        return {"old": self.old, "new": self.new_tokens, "origin": self.origin, "history": self.history,
                "message": self.message()}


def translate_renamed(
    args: Sequence[str], parser: argparse.ArgumentParser, origin: str
) -> Tuple[List[str], List[Translation]]:
    """Rewrite renamed options the installed parser no longer has (exact spellings only)."""
    acts = parser._option_string_actions  # noqa: SLF001
    table = {r.old: r for r in RENAMES if r.old not in acts and r.new in acts}
    out: List[str] = []
    done: List[Translation] = []
    for tok in args:
        name, eq, value = tok.partition("=")
        r = table.get(name)
        if r is None or (eq and (r.const is not None or r.flag)):
            out.append(tok)
            continue
        if r.const is not None:
            new = [r.new, r.const]
        elif eq:
            new = [f"{r.new}={value}"]
        else:
            new = [r.new]
        out.extend(new)
        shown = new if (r.const is not None or eq or r.flag) else new + ["<value>"]
        done.append(Translation(tok, shown, origin, r.history))
    return out, done


# --------------------------------------------------------------------------
# Hints after SGLang's own parse errors


def parse_error_hint(message: str, args: Sequence[str], parser: Optional[argparse.ArgumentParser]) -> Optional[str]:
    lower = message.lower()
    if "linear-attn" in lower and "aiter" in lower:
        return (
            "upstream SGLang (PyPI) has no 'aiter' linear-attention backend; only ROCm fork builds accept "
            "--linear-attn-backend aiter (and its -decode-/-prefill- variants). Drop them: the default "
            "triton kernels serve the linear-attention layers"
        )
    if lower.startswith("ambiguous option"):
        opt = message.split(":", 1)[1].split(" could match", 1)[0].strip()
        name = opt.partition("=")[0]
        for r in RENAMES:
            if r.old == name:
                return f"{name} was {r.history}; use {r.new}"
        return (
            f"SGLang accepts an abbreviation only when it matches one option; spell {name} out in full "
            "(sglang-kv5d launch -- --help lists them)"
        )
    if lower.startswith("unrecognized arguments:") and parser is not None:
        opts = [t.partition("=")[0] for t in message.split(":", 1)[1].split() if t.startswith("--")]
        hints = []
        for o in opts:
            if o.startswith("--linear-attn") or o == "--linear-attn-backend":
                continue
            close = difflib.get_close_matches(o, list(parser._option_string_actions), n=1, cutoff=0.75)  # noqa: SLF001
            if close:
                hints.append(f"{o}: did you mean {close[0]}?")
        if hints:
            return "; ".join(hints)
    return None


# --------------------------------------------------------------------------
# Platform


def detect_platform(choice: str = "auto") -> Tuple[str, str]:
    """(platform, how it was decided). Imports torch only in auto mode."""
    if choice != "auto":
        return choice, "--kv5d-platform"
    torch = None
    try:
        import torch  # type: ignore
    except Exception:
        torch = None
    if torch is not None and getattr(getattr(torch, "version", None), "hip", None):
        return "rocm", "torch.version.hip"
    if torch is not None and getattr(torch.version, "cuda", None):
        try:
            if torch.cuda.is_available():
                return "cuda", "torch.cuda.is_available()"
        except Exception:
            pass
    for path in (os.environ.get("ROCM_PATH"), "/opt/rocm"):
        if path and os.path.isdir(path) and (torch is None or not getattr(torch.version, "cuda", None)):
            return "rocm", f"{path} exists"
    return "cpu", "no ROCm or CUDA device found"


# --------------------------------------------------------------------------
# Patch probes (KV5D011)


def probe_patch_problems() -> Tuple[Optional[List[Tuple[str, str]]], Optional[str]]:
    """([(patch, reason)] for 5D-required patches that cannot apply, note).

    The list is None when no probe is available (the note says why).
    """
    try:
        from .activation import probe_patches  # type: ignore[attr-defined]
    except ImportError as exc:
        return None, f"KV5D011 not checked: no patch probe available (sglang_kv5d.activation.probe_patches: {exc})"
    try:
        probes = probe_patches()
    except Exception as exc:  # the probe itself failing is reported, not fatal
        return None, f"KV5D011 not checked: the patch probe failed ({type(exc).__name__}: {exc})"
    problems = [
        (str(p.name), str(p.reason))
        for p in probes
        if getattr(p, "required_for_5d", False) and not getattr(p, "ok", True)
    ]
    return problems, None


# --------------------------------------------------------------------------
# The plan: everything but the exec


@dataclass
class Plan:
    command: str
    options: Options
    profile: Optional[Profile] = None
    env: Dict[str, str] = field(default_factory=dict)
    env_entries: List[EnvEntry] = field(default_factory=list)
    segments: List[Segment] = field(default_factory=list)
    dropped: List[Segment] = field(default_factory=list)  # profile options the command line replaced
    translations: List[Translation] = field(default_factory=list)
    namespace: Optional[argparse.Namespace] = None
    parse_error: Optional[SGLangParseError] = None
    hint: Optional[str] = None
    sglang_help: bool = False
    platform: str = "cpu"
    platform_how: str = ""
    sglang_version: Optional[str] = None
    findings: List[_rules.Finding] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    explicit_values: Dict[str, Any] = field(default_factory=dict)

    @property
    def args(self) -> List[str]:
        return [t for s in self.segments for t in s.tokens]

    @property
    def argv(self) -> List[str]:
        return [sys.executable, "-m", SGLANG_MODULE, *self.args]

    @property
    def command_line(self) -> str:
        return shlex.join(self.argv)

    @property
    def errors(self) -> List[_rules.Finding]:
        return _rules.errors(self.findings)

    @property
    def exit_code(self) -> int:
        if self.parse_error is not None:
            return EXIT_USAGE
        return EXIT_ERRORS if self.errors else EXIT_OK

    def to_dict(self) -> Dict[str, Any]:
        return {
            "ok": self.exit_code == EXIT_OK,
            "exit_code": self.exit_code,
            "sglang_version": self.sglang_version,
            "platform": self.platform,
            "platform_origin": self.platform_how,
            "profile": self.profile.path if self.profile else None,
            "argv": self.argv,
            "command": self.command_line,
            "args": [{"tokens": s.tokens, "origin": s.origin, "note": s.note} for s in self.segments],
            "dropped_profile_args": [s.tokens for s in self.dropped],
            "env": [e.to_dict() for e in self.env_entries],
            "translations": [t.to_dict() for t in self.translations],
            "parse_error": None if self.parse_error is None else self.parse_error.message,
            "hint": self.hint,
            "sglang_values": self.explicit_values,
            "findings": [f.to_dict() for f in self.findings],
            "notes": self.notes,
        }


@contextlib.contextmanager
def _quiet_sglang_imports(sink: Optional[List[str]] = None):
    """SGLang's import-time chatter (platform UserWarnings, "aiter is AMD specific
    kernel library...", quantization notices) must not reach our stdout, which
    may carry JSON, nor read as a verdict on the operator's arguments. Python
    warnings are dropped; what SGLang prints (to stdout or stderr) is collected
    in ``sink`` (one entry per line) for :func:`import_noise_note`."""
    buf = io.StringIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            try:
                yield
            finally:
                for ln in buf.getvalue().splitlines():
                    if ln.startswith("sglang-kv5d"):  # our own bootstrap's messages are not SGLang's noise
                        sys.stderr.write(ln + "\n")
                    elif ln.strip() and sink is not None:
                        sink.append(ln.rstrip())


def import_noise_note(lines: Sequence[str]) -> Optional[str]:
    """One note explaining what SGLang printed while being imported, or None."""
    if not lines:
        return None
    distinct = list(dict.fromkeys(lines))
    shown = "; ".join(repr(ln[:160]) for ln in distinct[:3]) + (f"; and {len(distinct) - 3} more" if len(distinct) > 3 else "")
    return (f"SGLang printed {len(lines)} line(s) while its modules were imported for this check; these are "
            f"SGLang's import-time notices about optional kernels and libraries on this machine (for example "
            f"aiter off ROCm), not sglang-kv5d findings: {shown}")


def _sglang_version() -> Optional[str]:
    from .versions import installed_sglang_version

    return installed_sglang_version()


def make_plan(
    argv: Sequence[str],
    command: str = LAUNCH,
    environ: Optional[Mapping[str, str]] = None,
    *,
    parser_factory=None,
    probe=None,
) -> Plan:
    """Parse, merge, translate and check; never execs. Raises UsageError for exit-2 problems
    of our own (SGLang's parse errors land in ``plan.parse_error``)."""
    base = dict(os.environ if environ is None else environ)
    parser_factory = parser_factory or build_sglang_parser
    probe = probe or probe_patch_problems  # looked up per call (tests substitute it)
    opts, cli_args = split_argv(argv, command)
    plan = Plan(command=command, options=opts)
    if opts.help or opts.explain:
        return plan
    plan.profile = load_profile(opts.profile) if opts.profile else None
    plan.env, plan.env_entries = resolve_env(base, plan.profile, opts)
    for e in plan.env_entries:
        if e.origin == ORIGIN_ENV and e.overridden:
            plan.notes.append(
                f"{e.name}: keeping the exported value {e.value!r}; the profile's {e.overridden[0][1]!r} "
                "does not override the environment (use --kv5d-env to force it)"
            )
    plan.platform, plan.platform_how = detect_platform(opts.platform)
    plan.sglang_version = _sglang_version()
    noise: List[str] = []
    origins = {e.name: e.origin for e in plan.env_entries if e.origin in (ORIGIN_PROFILE, ORIGIN_CLI)}
    replaced = [(e.name, v, o) for e in plan.env_entries for o, v in e.overridden]
    known_patches = _known_patch_names()

    def context(args, problems=None, known_env=None):
        return _rules.make_context(plan.env, args, plan.sglang_version, plan.platform, patch_problems=problems,
                                   known_env=known_env, env_origins=origins, replaced=replaced,
                                   known_patches=known_patches)

    try:
        with _quiet_sglang_imports(noise):
            parser = parser_factory()
    except ImportError as exc:
        _add_noise_note(plan, noise)
        plan.notes.append(f"cannot import SGLang's server_args ({exc}); SGLang arguments not checked")
        plan.segments = [Segment(None, list((plan.profile.args if plan.profile else [])), ORIGIN_PROFILE),
                         Segment(None, list(cli_args), ORIGIN_CLI)]
        plan.segments = [s for s in plan.segments if s.tokens]
        plan.findings = _rules.evaluate(context({}))
        return plan

    prof_args, t1 = translate_renamed(plan.profile.args if plan.profile else [], parser, ORIGIN_PROFILE)
    cli_t, t2 = translate_renamed(cli_args, parser, ORIGIN_CLI)
    plan.translations = t1 + t2
    prof_segs = segment_args(prof_args, parser, ORIGIN_PROFILE)
    cli_segs = segment_args(cli_t, parser, ORIGIN_CLI)
    cli_dests = {s.dest for s in cli_segs if s.dest}
    plan.dropped = [s for s in prof_segs if s.dest and s.dest in cli_dests]
    plan.segments = [s for s in prof_segs if not (s.dest and s.dest in cli_dests)] + cli_segs
    for t in plan.translations:
        for s in plan.segments:
            if s.origin == t.origin and s.tokens and s.tokens[0] in (t.new_tokens[0],) and not s.note:
                s.note = f"translated from {t.old}"
                break

    final = plan.args
    if "--config" in final or any(a.startswith("--config=") for a in final):
        plan.notes.append("--config: the YAML file's options are merged by SGLang at start-up and are not checked here")
    try:
        ns = parser.parse_args(final)
    except SGLangParseError as exc:
        _add_noise_note(plan, noise)
        plan.parse_error = exc
        plan.hint = parse_error_hint(exc.message, final, parser)
        return plan
    except _ParserExit as exc:
        if parser.help_requested or exc.status == 0:
            plan.sglang_help = True
            plan.notes.append("SGLang's --help was requested: nothing to check")
            return plan
        plan.parse_error = SGLangParseError((exc.message or "").strip() or f"exit status {exc.status}")
        return plan
    plan.namespace = ns
    defaults = {a.dest: a.default for a in parser._actions}  # noqa: SLF001
    plan.explicit_values = {
        k: v for k, v in sorted(vars(ns).items()) if k in defaults and v != defaults[k]
    }

    problems, note = (None, None)
    ctx_env = plan.env
    if _rules.Context(ctx_env, None, None, plan.platform).wants_5d:
        with _quiet_sglang_imports(noise):
            problems, note = probe()
        if note:
            plan.notes.append(note)
    _add_noise_note(plan, noise)
    plan.findings = _rules.evaluate(context(ns, problems, _rules.sglang_env_names()))
    return plan


def _add_noise_note(plan: Plan, noise: List[str]) -> None:
    note = import_noise_note(noise)
    if note:
        plan.notes.append(note)
    noise.clear()


def _known_patch_names() -> Optional[List[str]]:
    """Built-in patch names and those other packages register (entry points), or None."""
    try:
        from importlib.metadata import entry_points

        from .patches import BUILTIN_PATCH_MODULES, ENTRY_POINT_GROUP

        return list(BUILTIN_PATCH_MODULES) + [ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)]
    except Exception:
        return None


# --------------------------------------------------------------------------
# Rendering


def _w(stream, text: str = "") -> None:
    stream.write(text + "\n")


def render_findings(findings: Sequence[_rules.Finding]) -> str:
    return "\n".join(f.format() for f in findings)


def render_summary(plan: Plan) -> str:
    n_err = len(plan.errors)
    n_warn = len(plan.findings) - n_err + len(plan.translations)  # flag translations are printed as warnings
    verdict = "passed" if n_err == 0 else "failed"
    return (
        f"sglang-kv5d {plan.command}: {verdict}: {n_err} error(s), {n_warn} warning(s) "
        f"(SGLang {plan.sglang_version or 'not installed'}, platform {plan.platform} from {plan.platform_how})"
    )


def render_parse_error(plan: Plan) -> str:
    return "\n".join(_parse_error_lines(plan))


def _parse_error_lines(plan: Plan) -> List[str]:
    assert plan.parse_error is not None
    version = f"SGLang {plan.sglang_version}" if plan.sglang_version else "SGLang"
    lines = [f"sglang-kv5d: {version}'s argument parser (ServerArgs.add_cli_args) rejected the arguments: "
             f"{plan.parse_error.message}"]
    if plan.hint:
        lines.append(f"hint: {plan.hint}")
    return lines


def shell_comment_text(text: str) -> str:
    """``text`` made safe for the rest of a shell comment line: every character
    that is not printable (newline, carriage return, escape sequences, NUL,
    U+2028 ...) is written as a Python-style escape, so nothing can end the
    comment and start a command, or rewrite the terminal."""
    out = []
    for ch in text:
        if ch.isprintable():
            out.append(ch)
        else:
            out.append(ch.encode("unicode_escape").decode("ascii"))
    return "".join(out)


def render_dry_run(plan: Plan) -> str:
    """The dry run as a shell script: ``bash`` on it does what ``launch`` would
    (the exports, then the exec'd command) and nothing else. Values reach code
    lines only through ``shlex.quote``; variable names are validated where they
    enter (profile, --kv5d-env); every comment goes through
    :func:`shell_comment_text`."""
    lines: List[str] = []

    def comment(text: str) -> None:  # one logical line; a newline in a value becomes \\n
        lines.append("# " + shell_comment_text(text))

    lines.append("# sglang-kv5d launch --kv5d-dry-run")
    if plan.profile:
        comment(f"profile: {plan.profile.path}" + (f" ({plan.profile.description})" if plan.profile.description else ""))
    lines.append("# environment (precedence: command line > environment > profile > default):")
    width = max([len(f"{e.name}={shlex.quote(e.value or '')}") for e in plan.env_entries] + [10]) + 2
    for e in plan.env_entries:
        if not ENV_NAME_RE.match(e.name):  # defensive: names are validated where they enter
            raise UsageError(f"refusing to print the variable name {e.name!r} into a shell script")
        assign = f"{e.name}={shlex.quote(e.value)}" if e.value is not None else f"unset {e.name}"
        what = "set" if e.changed else "kept"
        origin = e.origin + (" (SGLANG_KV5D is always 1 under the launcher)" if e.name == GATE_ENV and e.origin == ORIGIN_DEFAULT else "")
        extra = "".join(f"; overrides {o} value {shlex.quote(v)}" for o, v in e.overridden)
        trailer = " # " + shell_comment_text(f"{what}, from {origin}{extra}")
        if e.changed:
            prefix = "" if e.value is None else "export "
            lines.append(f"{prefix}{assign.ljust(width)}{trailer}")
        else:
            lines.append("#      " + shell_comment_text(assign).ljust(width) + trailer)
    if plan.exit_code == EXIT_OK:
        lines.append("# command:")
        lines.append(plan.command_line)
    else:  # launch would stop here, so the script must not run it either
        lines.append("# command (not run: launch would refuse it, see below):")
        comment(plan.command_line)
    lines.append("# SGLang arguments and their origin:")
    for s in plan.segments:
        comment(f"  {shlex.join(s.tokens)}  <- {s.origin}" + (f" ({s.note})" if s.note else ""))
    for s in plan.dropped:
        comment(f"  (dropped) {shlex.join(s.tokens)}  <- profile, replaced by the command line")
    for t in plan.translations:
        comment(f"renamed: {t.message()} [{t.origin}]")
    for n in plan.notes:
        comment(f"note: {n}")
    if plan.parse_error is not None:
        for ln in _parse_error_lines(plan):
            comment(ln)
    for f in plan.findings:
        comment(f"{f.id} {f.severity}: {f.message}")
        comment(f"  fix: {f.fix}")
    if plan.parse_error is None:
        comment(render_summary(plan))
    return "\n".join(lines)


# --------------------------------------------------------------------------
# Entry points (the click commands in sglang_kv5d.cli.launch call these)


def _plan_or_exit_code(argv, command, environ, out, err, help_text):
    """The plan, or the exit code when the command ends here (usage error, --help)."""
    try:
        plan = make_plan(argv, command, environ)
    except UsageError as exc:
        _w(err, f"Error: {exc}")
        _w(err, f"Try 'sglang-kv5d {command} --help' for help.")
        return EXIT_USAGE
    if plan.options.help:
        _w(out, help_text.rstrip())
        return EXIT_OK
    return plan


def _report_parse(plan, err) -> bool:
    """Print flag translations, notes and SGLang's parse error; False when parsing failed."""
    for t in plan.translations:
        _w(err, f"sglang-kv5d: warning: {t.message()}")
    for n in plan.notes:
        _w(err, f"sglang-kv5d: note: {n}")
    if plan.parse_error is not None:
        _w(err, render_parse_error(plan))
        return False
    return True


def run_check(argv: Sequence[str], environ: Optional[Mapping[str, str]] = None, *, out=None, err=None,
              help_text: str = "") -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    plan = _plan_or_exit_code(argv, CHECK, environ, out, err, help_text)
    if isinstance(plan, int):
        return plan
    opts = plan.options
    if opts.explain:
        try:
            _w(out, _rules.explain(opts.explain).rstrip())
            return EXIT_OK
        except KeyError:
            close = _rules.suggest_rule(opts.explain)
            _w(err, f"Error: unknown rule {opts.explain!r}" + (f" (did you mean {close}?)" if close else "")
               + f"; rules: {', '.join(sorted(_rules.RULES))}")
            return EXIT_USAGE
    if not _report_parse(plan, err):
        return EXIT_USAGE
    if opts.json:
        _w(out, json.dumps([f.to_dict() for f in plan.findings], indent=2))
    else:
        if plan.findings:
            _w(out, render_findings(plan.findings))
        _w(out, render_summary(plan))
    return plan.exit_code


def run_launch(argv: Sequence[str], environ: Optional[Mapping[str, str]] = None, *, out=None, err=None,
               help_text: str = "", execvpe=None) -> int:
    """Check, then replace this process with SGLang (unless --kv5d-dry-run)."""
    out = out or sys.stdout
    err = err or sys.stderr
    plan = _plan_or_exit_code(argv, LAUNCH, environ, out, err, help_text)
    if isinstance(plan, int):
        return plan
    opts = plan.options
    if opts.dry_run:
        if opts.json:
            _w(out, json.dumps(plan.to_dict(), indent=2, default=str))
        else:
            _w(out, render_dry_run(plan))
        return plan.exit_code
    # Real launch: stdout belongs to SGLang; ours goes to stderr.
    if not _report_parse(plan, err):
        return EXIT_USAGE
    if opts.json:
        _w(err, json.dumps([f.to_dict() for f in plan.findings], indent=2))
    elif plan.findings:
        _w(err, render_findings(plan.findings))
    if plan.errors:
        _w(err, render_summary(plan) + "; not launching")
        return EXIT_ERRORS
    for stream in (out, err, sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    (execvpe or os.execvpe)(sys.executable, plan.argv, plan.env)
    return EXIT_OK  # only reached with a fake execvpe (tests)
