"""Launch profiles: UTF-8 TOML with ``description``, an ``args`` list and an ``[env]`` table.

Every value is a string (``"64"``, ``"1"``): a number or boolean is an error
naming it, never silently converted. Variable names are
``[A-Za-z_][A-Za-z0-9_]*``; a NUL anywhere is refused. Anything else is a
:class:`~sglang_kv5d.launch.argv.UsageError` naming the file and the key.

How a profile combines with the command line: its arguments come first and
the command line's after them, and a command-line option replaces the
profile's occurrences of the same SGLang destination (:mod:`.plan`); its
``[env]`` sits below the exported environment (:mod:`.environment`).
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from typing import Any, Dict, List

from .argv import UsageError, check_env_name, check_env_value


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


#: the largest profile read (a profile is a few lines; /dev/zero must not exhaust memory)
MAX_PROFILE_BYTES = 1 << 20


def _read_bytes(path: str) -> bytes:
    """The file's bytes: a regular file of at most MAX_PROFILE_BYTES, else UsageError.

    Opened non-blocking (a FIFO must not hang ``check``), then fstat'ed: a
    FIFO, a device (/dev/zero), a socket or a directory is refused by kind
    before anything is read, and at most MAX_PROFILE_BYTES + 1 bytes are read.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    if "\x00" in path:
        raise UsageError(f"profile path {path!r} contains a NUL character")
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise UsageError(f"cannot read profile {path!r}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = ("a FIFO" if stat.S_ISFIFO(st.st_mode) else "a directory" if stat.S_ISDIR(st.st_mode)
                    else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
                    else "a socket" if stat.S_ISSOCK(st.st_mode) else "not a regular file")
            raise UsageError(f"profile {path!r} is {kind}, not a regular file; pass a TOML file")
        chunks, size = [], 0
        while size <= MAX_PROFILE_BYTES:
            chunk = os.read(fd, MAX_PROFILE_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise UsageError(f"cannot read profile {path!r}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if size > MAX_PROFILE_BYTES:
        raise UsageError(f"profile {path!r} is larger than {MAX_PROFILE_BYTES} bytes; a launch profile is a few "
                         "lines of TOML")
    return b"".join(chunks)


def _read_text(path: str) -> str:
    raw = _read_bytes(path)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"profile {path} is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}); "
            "save it as UTF-8 (TOML files are UTF-8)"
        ) from None


def _env_table(path: str, env_tab: Any) -> Dict[str, str]:
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
    return env


def _args_list(path: str, args: Any) -> List[str]:
    if not isinstance(args, list):
        raise UsageError(f"profile {path}: args must be a list of strings, not {_type_name(args)}")
    for i, a in enumerate(args):
        if not isinstance(a, str):
            hint = f"; write it in quotes: {json.dumps(json.dumps(a))}" if isinstance(a, (bool, int, float)) else ""
            raise UsageError(f"profile {path}: args[{i}] must be a string, not {_type_name(a)} ({a!r}){hint}")
        if "\x00" in a:
            raise UsageError(f"profile {path}: args[{i}] contains a NUL character")
    return list(args)


def load_profile(path: str) -> Profile:
    """Read and validate a launch profile; UsageError on any problem."""
    text = _read_text(path)
    try:
        data = _toml_loads(text)
    except UsageError:
        raise
    except (ValueError, RecursionError) as exc:  # TOMLDecodeError is a ValueError; hostile nesting recurses
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
    env = _env_table(path, data.get("env", {}))
    args = _args_list(path, data.get("args", []))
    return Profile(path=path, description=desc, env=env, args=args)
