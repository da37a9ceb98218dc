"""SGLang's own argument parser, used to check a launch before the exec.

The SGLang arguments are parsed with the installed SGLang's own parser
(``argparse.ArgumentParser`` + ``ServerArgs.add_cli_args``, the way
``prepare_server_args`` builds it, prefix abbreviations allowed as SGLang
allows them) without constructing ``ServerArgs``. Parse errors are SGLang's
messages, verbatim (:class:`SGLangParseError`), followed by our hint when we
have one (:func:`parse_error_hint`). :func:`segment_args` groups arguments into
option occurrences by SGLang's definitions, so a command-line option can
replace the profile's occurrences of the same destination.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
from dataclasses import dataclass
from typing import List, Optional, Sequence

from ..surface import SERVE_PROG, SURFACES, find_loaded, split_target
from .renames import RENAMES

# prepare_server_args builds ArgumentParser(prog="sglang serve") with argparse's
# default allow_abbrev=True (every tested release); we must accept and refuse
# exactly what SGLang will.
SGLANG_ALLOW_ABBREV = True
_ADD_CLI_ARGS = "server_args.ServerArgs.add_cli_args"


class SGLangParseError(Exception):
    """SGLang's argparse rejected the arguments; ``message`` is argparse's, verbatim."""

    def __init__(self, message: str, prog: str = SERVE_PROG):
        super().__init__(message)
        self.message = message
        self.prog = prog


class ParserExit(Exception):
    """argparse wanted to exit (``--help``, ``--version``): ``status`` and ``message``."""

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
        raise ParserExit(status, message)

    def print_help(self, file=None):  # type: ignore[override]
        self.help_requested = True

    def print_usage(self, file=None):  # type: ignore[override]
        pass


def build_sglang_parser() -> CapturingParser:
    """SGLang's own CLI definition on a capturing parser (imports SGLang's server_args)."""
    importlib.import_module(split_target(SURFACES[_ADD_CLI_ARGS].targets[0])[0])
    add_cli_args = find_loaded(_ADD_CLI_ARGS)
    if add_cli_args is None:
        raise ImportError(f"the installed SGLang has no {SURFACES[_ADD_CLI_ARGS].targets[0]}")
    parser = CapturingParser(prog=SERVE_PROG, allow_abbrev=SGLANG_ALLOW_ABBREV)
    add_cli_args(parser)
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


def _values(args: List[str], i: int, nargs) -> int:
    """Index after the values an option with ``nargs`` takes from ``args[i:]``."""
    if nargs is None or nargs == argparse.OPTIONAL:
        return i + 1 if i < len(args) and not _looks_like_option(args[i]) else i
    if isinstance(nargs, int):
        return min(i + nargs, len(args))
    if nargs in (argparse.ZERO_OR_MORE, argparse.ONE_OR_MORE):
        while i < len(args) and not _looks_like_option(args[i]):
            i += 1
        return i
    if nargs == argparse.REMAINDER:
        return len(args)
    return i


def segment_args(args: Sequence[str], parser: argparse.ArgumentParser, origin: str) -> List[Segment]:
    """Group argv into option occurrences (option token + its values) by SGLang's definitions."""
    out: List[Segment] = []
    args = list(args)
    i = 0
    while i < len(args):
        tok = args[i]
        i += 1
        act = _lookup(parser, tok.partition("=")[0]) if _looks_like_option(tok) else None
        if act is None:
            out.append(Segment(None, [tok], origin))
            continue
        end = i if "=" in tok else _values(args, i, act.nargs)
        out.append(Segment(act.dest, [tok] + args[i:end], origin))
        i = end
    return out


def parse_error_hint(message: str, parser: Optional[argparse.ArgumentParser]) -> Optional[str]:
    """Our hint after SGLang's parse error ``message``, or None."""
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
            if o.startswith("--linear-attn"):
                continue
            close = difflib.get_close_matches(o, list(parser._option_string_actions), n=1, cutoff=0.75)  # noqa: SLF001
            if close:
                hints.append(f"{o}: did you mean {close[0]}?")
        if hints:
            return "; ".join(hints)
    return None
