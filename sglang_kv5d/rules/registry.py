"""The rule registry: findings, rules, and running them.

A rule is a pure function over a :class:`~sglang_kv5d.rules.context.Context`
that yields :class:`Finding` objects; :func:`rule` registers it under a stable
ID (KV5D001 ..) with its severity, title, documentation and general fix.
:func:`evaluate` runs the registered rules in ID order. The rule groups
(``layout``, ``memory``, ``speculative``, ...) register themselves when the
``sglang_kv5d.rules`` package is imported.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Dict, Iterable, List, Optional

if TYPE_CHECKING:  # pragma: no cover
    from .context import Context

ERROR = "error"
WARNING = "warning"


@dataclass(frozen=True)
class Finding:
    id: str
    severity: str  # ERROR | WARNING
    message: str
    fix: str

    def to_dict(self) -> Dict[str, str]:
        return {"id": self.id, "severity": self.severity, "message": self.message, "fix": self.fix}

    def format(self) -> str:
        return f"{self.id} {self.severity}: {self.message}\n  fix: {self.fix}"


@dataclass(frozen=True)
class Rule:
    id: str
    severity: str
    title: str
    doc: str  # markdown: why, and what fires
    check: Callable[["Context"], List[Finding]] = field(compare=False)
    fix: str = ""  # the general fix (each finding carries a specific one)

    def finding(self, message: str, fix: str) -> Finding:
        return Finding(self.id, self.severity, message, fix)


RULES: Dict[str, Rule] = {}


def rule(rule_id: str, severity: str, title: str, doc: str, *, fix: str):
    """Register the decorated ``fn(ctx, rule) -> Iterable[Finding]`` as rule ``rule_id``."""
    def deco(fn: Callable[["Context", Rule], Iterable[Finding]]):
        def check(ctx: "Context", _fn=fn, _id=rule_id) -> List[Finding]:
            return list(_fn(ctx, RULES[_id]) or ())

        RULES[rule_id] = Rule(rule_id, severity, title, textwrap.dedent(doc).strip(), check, fix)
        return fn

    return deco


def evaluate(ctx: "Context", only: Optional[Iterable[str]] = None) -> List[Finding]:
    """Run every rule (or those in ``only``) in ID order; errors and warnings mixed."""
    wanted = None if only is None else set(only)
    out: List[Finding] = []
    for rid in sorted(RULES):
        if wanted is not None and rid not in wanted:
            continue
        out.extend(RULES[rid].check(ctx))
    return out


def errors(findings: Iterable[Finding]) -> List[Finding]:
    return [f for f in findings if f.severity == ERROR]
