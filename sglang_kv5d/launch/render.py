"""What ``check`` and ``launch`` print: findings, the summary, SGLang's parse
error, and the dry run as a shell script.

The dry run is safe to run: ``bash`` on it does what ``launch`` would (the
exports, then the exec'd command) and nothing else. Values reach code lines
only through :func:`sglang_kv5d.safe_text.shell_quote` (``shlex.quote``, or bash's
``$'...'`` for a value with control characters, so the script is terminal-safe too); variable names are validated where they enter
(profile, ``--kv5d-env``); every comment goes through :func:`shell_comment_text`;
a command that ``launch`` would refuse is left commented out.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, List, Sequence

from ..safe_text import one_line, shell_quote
from .argv import ENV_NAME_RE, EXIT_OK, UsageError
from .environment import GATE_ENV, ORIGIN_DEFAULT

if TYPE_CHECKING:  # pragma: no cover
    from ..rules import Finding
    from .plan import Plan


def render_findings(findings: Sequence["Finding"]) -> str:
    return "\n".join(f.format() for f in findings)


def render_summary(plan: "Plan") -> str:
    n_err = len(plan.errors)
    n_warn = len(plan.findings) - n_err + len(plan.translations)  # flag translations are printed as warnings
    verdict = "passed" if n_err == 0 else "failed"
    return (
        f"sglang-kv5d {plan.command}: {verdict}: {n_err} error(s), {n_warn} warning(s) "
        f"(SGLang {plan.sglang_version or 'not installed'}, platform {plan.platform} from {plan.platform_how})"
    )


def parse_error_lines(plan: "Plan") -> List[str]:
    """SGLang's parse error of ``plan`` (which has one), then our hint."""
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
    return one_line(text)


def _env_lines(plan: "Plan") -> List[str]:
    lines = []
    width = max([len(f"{e.name}={shell_quote(e.value or '')}") for e in plan.env_entries] + [10]) + 2
    for e in plan.env_entries:
        if not ENV_NAME_RE.match(e.name):  # defensive: names are validated where they enter
            raise UsageError(f"refusing to print the variable name {e.name!r} into a shell script")
        assign = f"{e.name}={shell_quote(e.value)}" if e.value is not None else f"unset {e.name}"
        what = "set" if e.changed else "kept"
        always = e.name == GATE_ENV and e.origin == ORIGIN_DEFAULT
        origin = e.origin + (" (SGLANG_KV5D is always 1 under the launcher)" if always else "")
        extra = "".join(f"; overrides {o} value {shell_quote(v)}" for o, v in e.overridden)
        trailer = " # " + shell_comment_text(f"{what}, from {origin}{extra}")
        if e.changed:
            prefix = "" if e.value is None else "export "
            lines.append(f"{prefix}{assign.ljust(width)}{trailer}")
        else:
            lines.append("#      " + shell_comment_text(assign).ljust(width) + trailer)
    return lines


def render_dry_run(plan: "Plan") -> str:
    """The dry run of ``plan`` as a shell script (see the module doc)."""
    lines: List[str] = []

    def comment(text: str) -> None:  # one logical line; a newline in a value becomes \\n
        lines.append("# " + shell_comment_text(text))

    lines.append("# sglang-kv5d launch --kv5d-dry-run")
    if plan.profile:
        comment(f"profile: {plan.profile.path}" + (f" ({plan.profile.description})" if plan.profile.description else ""))
    lines.append("# environment (precedence: command line > environment > profile > default):")
    lines.extend(_env_lines(plan))
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
        for ln in parse_error_lines(plan):
            comment(ln)
    for f in plan.findings:
        comment(f"{f.id} {f.severity}: {f.message}")
        comment(f"  fix: {f.fix}")
    if plan.parse_error is None:
        comment(render_summary(plan))
    return "\n".join(lines)
