"""``sglang-kv5d check`` and ``sglang-kv5d launch``: a plan, printed, then (launch) the exec.

The click commands in :mod:`sglang_kv5d.cli.launch` call :func:`run_check`
and :func:`run_launch` with the raw argv. Exit status: 0 no errors (warnings
allowed), 1 errors, 2 usage (including arguments SGLang's parser rejects).
A real launch replaces this process with SGLang's server (``python -m``
:data:`sglang_kv5d.surface.LAUNCH_SERVER` under the same interpreter); its
stdout belongs to SGLang, so ours goes to stderr.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Mapping, Optional, Sequence, TextIO, Union

from .. import rules as _rules
from ..safe_text import printable
from .argv import CHECK, EXIT_ERRORS, EXIT_OK, EXIT_USAGE, LAUNCH, UsageError
from .plan import Plan, make_plan
from .render import parse_error_lines, render_dry_run, render_findings, render_summary


def _w(stream: TextIO, text: str = "") -> None:
    """Write a line: findings, summaries and SGLang's messages carry outside
    values, so control characters are escaped (the dry run is already safe)."""
    stream.write(printable(text) + "\n")


def _plan_or_exit_code(argv: Sequence[str], command: str, *, environ: Optional[Mapping[str, str]],
                       out: TextIO, err: TextIO, help_text: str) -> Union[Plan, int]:
    """The plan, or the exit code when the command ends here (usage error, --help)."""
    try:
        plan = make_plan(argv, command, environ)
    except UsageError as exc:
        _w(err, f"Error: {exc}")
        _w(err, f"Try 'sglang-kv5d {command} --help' for help.")
        return EXIT_USAGE
    if plan.options.help:
        _w(out, help_text.rstrip())
        if plan.unchecked is not None:  # `check ARGS --help`: a CI line that checked nothing must not pass
            _w(err, f"sglang-kv5d {command}: nothing checked: {plan.unchecked}")
            return EXIT_USAGE
        return EXIT_OK
    return plan


def _report_parse(plan: Plan, err: TextIO) -> bool:
    """Print flag translations, notes and SGLang's parse error; False when parsing failed."""
    for t in plan.translations:
        _w(err, f"sglang-kv5d: warning: {t.message()}")
    for n in plan.notes:
        _w(err, f"sglang-kv5d: note: {n}")
    if plan.parse_error is not None:
        _w(err, "\n".join(parse_error_lines(plan)))
        return False
    return True


def _explain(rule_id: str, out: TextIO, err: TextIO) -> int:
    try:
        _w(out, _rules.explain(rule_id).rstrip())
        return EXIT_OK
    except KeyError:
        close = _rules.suggest_rule(rule_id)
        _w(err, f"Error: unknown rule {rule_id!r}" + (f" (did you mean {close}?)" if close else "")
           + f"; rules: {', '.join(sorted(_rules.RULES))}")
        return EXIT_USAGE


def run_check(argv: Sequence[str], environ: Optional[Mapping[str, str]] = None, *, out: Optional[TextIO] = None,
              err: Optional[TextIO] = None, help_text: str = "") -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    plan = _plan_or_exit_code(argv, CHECK, environ=environ, out=out, err=err, help_text=help_text)
    if isinstance(plan, int):
        return plan
    opts = plan.options
    if opts.explain:
        return _explain(opts.explain, out, err)
    if not _report_parse(plan, err):
        return EXIT_USAGE
    if plan.unchecked is not None:  # a CI line with --help must not read as "passed"
        _w(err, f"sglang-kv5d check: nothing checked: {plan.unchecked}; remove --help / -h / --version to check "
                "the line")
        return EXIT_USAGE
    if opts.json:
        _w(out, json.dumps([f.to_dict() for f in plan.findings], indent=2))
    else:
        if plan.findings:
            _w(out, render_findings(plan.findings))
        _w(out, render_summary(plan))
    return plan.exit_code


def run_launch(argv: Sequence[str], environ: Optional[Mapping[str, str]] = None, *, out: Optional[TextIO] = None,
               err: Optional[TextIO] = None, help_text: str = "") -> int:
    """Check, then replace this process with SGLang (unless --kv5d-dry-run)."""
    out = out or sys.stdout
    err = err or sys.stderr
    plan = _plan_or_exit_code(argv, LAUNCH, environ=environ, out=out, err=err, help_text=help_text)
    if isinstance(plan, int):
        return plan
    opts = plan.options
    if opts.dry_run:
        if opts.json:
            _w(out, json.dumps(plan.to_dict(), indent=2, default=str))
        else:
            _w(out, render_dry_run(plan))
        return plan.exit_code
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
        except (OSError, ValueError):  # a closed or broken stream: nothing left to flush before the exec
            pass
    os.execvpe(sys.executable, plan.argv, plan.env)
    return EXIT_OK  # not reached: execvpe replaced this process
