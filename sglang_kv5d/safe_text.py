"""Outside values made safe to print: one place that neutralises control characters.

Profile values, environment values, paths and SGLang's own messages reach our
output (``check``, the dry run, ``doctor``, ``patches``, status tables and log
lines). A value holding an escape sequence could move the cursor and rewrite
earlier lines on the terminal; a newline could forge a line. Every print site
of outside values goes through one of:

* :func:`printable` - text for a terminal: every character that is not
  printable (``str.isprintable``: C0/C1 controls, ESC, DEL, bidi overrides,
  U+2028 ...) becomes a Python-style escape (``\\x1b``, ``\\u202e``);
  newlines (and tabs) that separate our own lines are kept;
* :func:`one_line` - the same, newlines and tabs escaped too (log lines,
  shell comments, a value inside a line);
* :func:`shell_quote` / :func:`shell_join` - a word for a bash script that is
  also terminal-safe: ``shlex.quote`` when the value holds nothing but
  printable characters, newlines and tabs, else bash's ``$'...'`` quoting with
  the controls written as escapes (the same bytes reach the program, none
  reach the terminal raw).

Standard library only; imports nothing else from the package.
"""

from __future__ import annotations

import shlex
from typing import Iterable

_KEEP_IN_TEXT = "\n\t"


def _escape(ch: str) -> str:
    return ch.encode("unicode_escape").decode("ascii")


def printable(text: object) -> str:
    """``text`` (``str()`` of any object) with every non-printable character
    except newline and tab written as an escape; printable text is unchanged."""
    s = text if isinstance(text, str) else str(text)
    if s.isprintable():
        return s
    return "".join(ch if ch.isprintable() or ch in _KEEP_IN_TEXT else _escape(ch) for ch in s)


def one_line(text: object) -> str:
    """``text`` as one line: every non-printable character, newline and tab
    included, written as an escape (so nothing can end the line)."""
    s = text if isinstance(text, str) else str(text)
    if s.isprintable():
        return s
    return "".join(ch if ch.isprintable() else _escape(ch) for ch in s)


def _ansi_c(ch: str) -> str:
    if ch == "\\":
        return "\\\\"
    if ch == "'":
        return "\\'"
    if ch.isprintable():
        return ch
    code = ord(ch)
    if code < 0x80:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def shell_quote(value: str) -> str:
    """One bash word for ``value``: ``shlex.quote(value)`` when every character
    is printable (or a newline or tab), else ``$'...'`` (bash ANSI-C quoting) with backslash, quote
    and each control character escaped. NUL cannot be quoted (a C string ends
    there): callers refuse it where values enter."""
    if printable(value) == value:  # newlines and tabs are safe inside single quotes, and on a terminal
        return shlex.quote(value)
    if "\x00" in value:
        raise ValueError("a NUL character cannot be passed through a shell word")
    return "$'" + "".join(_ansi_c(ch) for ch in value) + "'"


def shell_join(words: Iterable[str]) -> str:
    """``shlex.join`` with :func:`shell_quote`: a terminal-safe bash command line."""
    return " ".join(shell_quote(w) for w in words)
