"""The plan of a launch: everything ``launch`` and ``check`` decide before the exec.

:func:`make_plan` splits our options from SGLang's arguments, loads the
profile, resolves the environment, translates renamed options, merges the
profile's and the command line's arguments (a command-line option replaces
the profile's occurrences of the same SGLang destination, so list options are
replaced rather than merged; a profile flag without a value cannot be switched
off from the command line), parses them with SGLang's own parser and runs the
launch rules. It never execs.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from .. import rules as _rules
from ..platform import detect_platform
from ..safe_text import shell_join
from ..surface import LAUNCH_SERVER
from . import probes as _probes
from .argv import CHECK, EXIT_ERRORS, EXIT_OK, EXIT_USAGE, LAUNCH, Options, split_argv
from .environment import ORIGIN_CLI, ORIGIN_ENV, ORIGIN_PROFILE, EnvEntry, resolve_env
from .profile import Profile, load_profile
from .quiet import import_noise_note, quiet_sglang_imports
from .renames import Translation, translate_renamed
from .sglang_parser import (
    ParserExit, Segment, SGLangParseError, build_sglang_parser, parse_error_hint, segment_args,
)

__all__ = ["Plan", "make_plan", "LAUNCH", "CHECK"]


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
    platform: str = "cpu"
    platform_how: str = ""
    sglang_version: Optional[str] = None
    findings: List[_rules.Finding] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    explicit_values: Dict[str, Any] = field(default_factory=dict)
    # Why nothing was checked (SGLang's --help / -h / --version in the arguments):
    # `check` exits 2 with it instead of "passed".
    unchecked: Optional[str] = None

    @property
    def args(self) -> List[str]:
        return [t for s in self.segments for t in s.tokens]

    @property
    def argv(self) -> List[str]:
        return [sys.executable, "-m", LAUNCH_SERVER, *self.args]

    @property
    def command_line(self) -> str:
        return shell_join(self.argv)  # shlex.join, terminal-safe ($'...' for control characters)

    @property
    def errors(self) -> List[_rules.Finding]:
        return _rules.errors(self.findings)

    @property
    def exit_code(self) -> int:
        if self.parse_error is not None or (self.unchecked is not None and self.command == CHECK):
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


def _sglang_version() -> Optional[str]:
    from ..versions import installed_sglang_version

    return installed_sglang_version()


def _add_noise_note(plan: Plan, noise: List[str]) -> None:
    note = import_noise_note(noise)
    if note:
        plan.notes.append(note)
    noise.clear()


def _merge_args(plan: Plan, parser: argparse.ArgumentParser, cli_args: Sequence[str]) -> None:
    """Translate renamed options, then the profile's arguments followed by the
    command line's, without the profile's occurrences of what the command line sets."""
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
            if s.origin == t.origin and s.tokens and s.tokens[0] == t.new_tokens[0] and not s.note:
                s.note = f"translated from {t.old}"
                break


_PARSED, _REJECTED, _EXITED = "parsed", "rejected", "exited"


def _parse(plan: Plan, parser: argparse.ArgumentParser) -> str:
    """SGLang's parser on the merged arguments: parsed, rejected (SGLang's
    error), or exited (SGLang's own --help, or an action that exits)."""
    final = plan.args
    if "--config" in final or any(a.startswith("--config=") for a in final):
        plan.notes.append("--config: the YAML file's options are merged by SGLang at start-up and are not checked here")
    try:
        ns = parser.parse_args(final)
    except SGLangParseError as exc:
        plan.parse_error = exc
        plan.hint = parse_error_hint(exc.message, parser)
        return _REJECTED
    except ParserExit as exc:
        if getattr(parser, "help_requested", False) or exc.status == 0:
            plan.unchecked = ("the arguments ask SGLang for its --help (or -h / --version), so SGLang would print "
                              "it and exit: no rule was checked")
            plan.notes.append("SGLang's --help was requested: nothing to check")
        else:
            plan.parse_error = SGLangParseError((exc.message or "").strip() or f"exit status {exc.status}")
        return _EXITED
    plan.namespace = ns
    defaults = {a.dest: a.default for a in parser._actions}  # noqa: SLF001
    plan.explicit_values = {k: v for k, v in sorted(vars(ns).items()) if k in defaults and v != defaults[k]}
    return _PARSED


def make_plan(
    argv: Sequence[str],
    command: str = LAUNCH,
    environ: Optional[Mapping[str, str]] = None,
    *,
    parser_factory: Optional[Callable[[], argparse.ArgumentParser]] = None,
    probe: Optional[Callable[[], Tuple[Optional[List[Tuple[str, str]]], Optional[str]]]] = None,
) -> Plan:
    """Parse, merge, translate and check; never execs. Raises UsageError for exit-2 problems
    of our own (SGLang's parse errors land in ``plan.parse_error``).

    ``environ`` defaults to ``os.environ``, ``parser_factory`` to SGLang's parser,
    ``probe`` to :func:`sglang_kv5d.launch.probes.probe_patch_problems`."""
    base = dict(os.environ if environ is None else environ)
    parser_factory = parser_factory or build_sglang_parser
    probe = probe or _probes.probe_patch_problems  # looked up per call (tests substitute it)
    opts, cli_args = split_argv(argv, command)
    plan = Plan(command=command, options=opts)
    if opts.help and command == CHECK and cli_args:
        plan.unchecked = "-h / --help shows this help and exits, so the SGLang arguments given with it were not checked"
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
    known_patches = _probes.known_patch_names()
    required_patches = _probes.required_patch_names()

    def context(args, problems=None, known_env=None):
        return _rules.make_context(plan.env, args, plan.sglang_version, plan.platform, patch_problems=problems,
                                   known_env=known_env, env_origins=origins, replaced=replaced,
                                   known_patches=known_patches, required_patches=required_patches)

    try:
        with quiet_sglang_imports(noise):
            parser = parser_factory()
    except ImportError as exc:
        _add_noise_note(plan, noise)
        plan.notes.append(f"cannot import SGLang's server_args ({exc}); SGLang arguments not checked")
        segments = [Segment(None, list(plan.profile.args if plan.profile else []), ORIGIN_PROFILE),
                    Segment(None, list(cli_args), ORIGIN_CLI)]
        plan.segments = [s for s in segments if s.tokens]
        plan.findings = _rules.evaluate(context({}))
        return plan

    _merge_args(plan, parser, cli_args)
    parsed = _parse(plan, parser)
    if parsed == _REJECTED:
        _add_noise_note(plan, noise)
    if parsed != _PARSED:
        return plan

    problems = None
    if _rules.Context(plan.env, None, None, plan.platform).wants_5d:
        with quiet_sglang_imports(noise):
            problems, note = probe()
        if note:
            plan.notes.append(note)
    _add_noise_note(plan, noise)
    plan.findings = _rules.evaluate(context(plan.namespace, problems, _rules.sglang_env_names()))
    return plan
