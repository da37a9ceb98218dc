"""Options SGLang renamed between releases, translated for scripts written for another one.

A rename applies only when the installed parser lacks the old spelling and
has the new one, to exact spellings (never abbreviations), with a warning
naming the releases.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple


@dataclass(frozen=True)
class Rename:
    old: str
    new: str
    history: str  # when SGLang renamed / removed it
    const: Optional[str] = None  # the old spelling was a flag meaning ``new const``
    flag: bool = False  # both spellings are flags (no value)


_ALIAS_0516 = "a deprecated alias in SGLang 0.5.16, absent in 0.5.23"

RENAMES: Tuple[Rename, ...] = (
    Rename("--mamba-scheduler-strategy", "--mamba-radix-cache-strategy",
           "renamed in SGLang 0.5.14 (deprecated alias until 0.5.19), removed in 0.5.20"),
    Rename("--cuda-graph-max-bs", "--cuda-graph-max-bs-decode",
           "split into --cuda-graph-max-bs-decode/-prefill (the old spelling was a decode alias in 0.5.16), "
           "removed in 0.5.20, where it is an ambiguous prefix"),
    Rename("--cuda-graph-bs", "--cuda-graph-bs-decode",
           "split into --cuda-graph-bs-decode/-prefill; " + _ALIAS_0516),
    Rename("--piecewise-cuda-graph-max-tokens", "--cuda-graph-max-bs-prefill", _ALIAS_0516),
    Rename("--piecewise-cuda-graph-tokens", "--cuda-graph-bs-prefill", _ALIAS_0516),
    Rename("--enable-breakable-cuda-graph", "--cuda-graph-backend-prefill", _ALIAS_0516, const="breakable"),
    Rename("--disable-piecewise-cuda-graph", "--cuda-graph-backend-prefill", _ALIAS_0516, const="disabled"),
    Rename("--nsa-prefill-backend", "--dsa-prefill-backend", _ALIAS_0516),
    Rename("--nsa-decode-backend", "--dsa-decode-backend", _ALIAS_0516),
    Rename("--speculative-dflash-draft-window-size", "--speculative-draft-window-size", _ALIAS_0516),
    Rename("--stream-output", "--incremental-streaming-output", _ALIAS_0516, flag=True),
    Rename("--enable-prefill-context-parallel", "--enable-prefill-cp", _ALIAS_0516, flag=True),
    Rename("--enable-dsa-prefill-context-parallel", "--enable-prefill-cp", _ALIAS_0516, flag=True),
    Rename("--enable-nsa-prefill-context-parallel", "--enable-prefill-cp", _ALIAS_0516, flag=True),
)


@dataclass
class Translation:
    old: str
    new_tokens: List[str]
    origin: str
    history: str

    def message(self) -> str:
        return (
            f"{self.old} is not an option of the installed SGLang ({self.history}); "
            f"passing {' '.join(self.new_tokens)} instead"
        )

    def to_dict(self) -> Dict[str, Any]:
        return {"old": self.old, "new": self.new_tokens, "origin": self.origin, "history": self.history,
                "message": self.message()}


def translate_renamed(
    args: Sequence[str], parser: argparse.ArgumentParser, origin: str
) -> Tuple[List[str], List[Translation]]:
    """Rewrite renamed options the installed parser no longer has (exact spellings only)."""
    acts = parser._option_string_actions  # noqa: SLF001
    table = {r.old: r for r in RENAMES if r.old not in acts and r.new in acts}
    out: List[str] = []
    done: List[Translation] = []
    for tok in args:
        name, eq, value = tok.partition("=")
        r = table.get(name)
        if r is None or (eq and (r.const is not None or r.flag)):
            out.append(tok)
            continue
        if r.const is not None:
            new = [r.new, r.const]
        elif eq:
            new = [f"{r.new}={value}"]
        else:
            new = [r.new]
        out.extend(new)
        shown = new if (r.const is not None or eq or r.flag) else new + ["<value>"]
        done.append(Translation(tok, shown, origin, r.history))
    return out, done
