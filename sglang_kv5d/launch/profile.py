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


def _read_text(path: str) -> str:
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise UsageError(f"cannot read profile {path}: {exc.strerror or exc}") from exc
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
    env = _env_table(path, data.get("env", {}))
    args = _args_list(path, data.get("args", []))
    return Profile(path=path, description=desc, env=env, args=args)
