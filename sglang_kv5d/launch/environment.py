"""The environment SGLang is launched with, and where each value came from.

Highest precedence first:
  1. the command line: ``--kv5d-env NAME=VALUE``, ``--kv5d-strict`` /
     ``--kv5d-no-strict`` (SGLANG_KV5D_STRICT);
  2. the environment the launcher was started in (an explicitly exported
     variable is never silently replaced by a profile);
  3. the profile's ``[env]`` table;
  4. defaults: ``SGLANG_KV5D=1``, always set by the launcher.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple

from .. import config as _config
from ..surface import LAUNCH_SERVER
from .argv import Options, UsageError
from .profile import Profile

GATE_ENV = _config.GATE
STRICT_ENV = _config.STRICT

ORIGIN_CLI = "command line"
ORIGIN_PROFILE = "profile"
ORIGIN_ENV = "environment"
ORIGIN_DEFAULT = "default"

# Variables the rules read: shown by --kv5d-dry-run even when nothing changes them.
RELEVANT_ENV = tuple(n for n in _config.SWITCHES if n not in (GATE_ENV, _config.PLUGINS))


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


def _gate_entry(base: Mapping[str, str], prof: Mapping[str, str], cli: Mapping[str, str]) -> Optional[EnvEntry]:
    """SGLANG_KV5D is always 1: a command-line 0 is a usage error, a profile or
    exported value other than 1 is replaced (and shown as replaced)."""
    if GATE_ENV in cli:
        if not _config.read(GATE_ENV, cli)[0]:
            raise UsageError(f"{GATE_ENV} is always 1 under the launcher; run python -m {LAUNCH_SERVER} without it")
        return None
    lost = []
    if GATE_ENV in prof and prof[GATE_ENV] != "1":
        lost.append((ORIGIN_PROFILE, prof[GATE_ENV]))
    if GATE_ENV in base and base[GATE_ENV] != "1":
        lost.append((ORIGIN_ENV, base[GATE_ENV]))
    return EnvEntry(GATE_ENV, "1", ORIGIN_DEFAULT, base.get(GATE_ENV), lost)


def resolve_env(
    base: Mapping[str, str], profile: Optional[Profile], opts: Options
) -> Tuple[Dict[str, str], List[EnvEntry]]:
    """The launch environment and, per variable involved, its origin (see the module doc)."""
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
    gate = _gate_entry(base, prof, cli)
    if gate is not None:
        env[GATE_ENV] = "1"
        entries[GATE_ENV] = gate
    for name in RELEVANT_ENV:
        if name not in entries and name in base:
            entries[name] = EnvEntry(name, base[name], ORIGIN_ENV, base[name])
    order = [GATE_ENV] + [n for n in cli if n != GATE_ENV] + [n for n in prof if n not in cli]
    order += [n for n in RELEVANT_ENV if n in entries]
    return env, [entries[n] for n in dict.fromkeys(order) if n in entries]
