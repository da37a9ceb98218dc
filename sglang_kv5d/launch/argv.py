"""Our ``--kv5d-*`` options, split from SGLang's arguments.

Our options all carry the ``--kv5d-`` prefix and are recognised anywhere
before ``--``, by their full name only (no prefix abbreviation). Every other
token, and everything after ``--``, is SGLang's: ``--tp``, ``--port``,
``--model-path``, unknown options... reach SGLang exactly as written. A
``--kv5d-`` token that is not one of ours is a usage error (a typo must not be
forwarded silently). ``-h``/``--help`` before ``--`` is our help; ``-- --help``
is SGLang's.

Values that enter here (and in profiles) are validated where they enter:
variable names ``[A-Za-z_][A-Za-z0-9_]*`` (ASCII), no NUL in any value.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple

from ..platform import PLATFORMS

LAUNCH = "launch"
CHECK = "check"
EXIT_OK, EXIT_ERRORS, EXIT_USAGE = 0, 1, 2

# A variable name the dry run may print unquoted and execvpe accepts: ASCII only.
ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z", re.ASCII)
PLATFORM_CHOICES = ("auto",) + PLATFORMS


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
    """UsageError when ``value`` holds a NUL (no environment can carry one)."""
    if "\x00" in value:
        raise UsageError(f"{where}: the value of {name} contains a NUL character, which no environment can hold")


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


def _set_flag(opts: Options, dest: str) -> None:
    if dest == "strict":
        opts.strict = True
    elif dest == "no_strict":
        opts.strict = False
    else:
        setattr(opts, dest, True)


def _set_value(opts: Options, name: str, value: str, command: str) -> None:
    dest = _VALUE_OPTIONS[name]
    if dest == "platform":
        if value not in PLATFORM_CHOICES:
            raise UsageError(f"invalid value for {name}: {value!r} (choose from {', '.join(PLATFORM_CHOICES)})")
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


def split_argv(argv: Sequence[str], command: str = LAUNCH) -> Tuple[Options, List[str]]:
    """Separate our ``--kv5d-*`` options from SGLang's arguments.

    Returns (options, sglang_args). Tokens after ``--`` are never looked at.
    ``check`` also takes ``--explain ID`` (SGLang has no option spelled or
    abbreviated that way).
    """
    opts = Options()
    rest: List[str] = []
    argv = list(argv)
    i = 0
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
        elif name in _FLAG_OPTIONS:
            if eq:
                raise UsageError(f"option {name} takes no value")
            _set_flag(opts, _FLAG_OPTIONS[name])
        elif name in _VALUE_OPTIONS:
            if not eq:
                if i >= len(argv) or argv[i] == "--":
                    raise UsageError(f"option {name} requires a value")
                value = argv[i]
                i += 1
            _set_value(opts, name, value, command)
        else:
            known = sorted(list(_FLAG_OPTIONS) + list(_VALUE_OPTIONS))
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
            raise UsageError(
                f"no such option: {name}" + (f" (did you mean {close[0]}?)" if close else "")
                + "; options starting with --kv5d- belong to sglang-kv5d"
            )
    return opts, rest
