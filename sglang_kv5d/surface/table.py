"""The surface table's row type and actions (see sglang_kv5d.surface)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

WRAP = "wrap"
REPLACE = "replace"
READ = "read"


@dataclass(frozen=True)
class Surface:
    id: str
    targets: Tuple[str, ...]
    action: str
    params: Optional[Tuple[Tuple[str, ...], ...]]
    why: str
    upstream: str
    removal: str
    copies: Tuple[str, ...] = ()
    # What SGLang computes when the module is imported and a later activation
    # cannot change (reported by activate() when the module was already loaded).
    frozen_at_import: str = ""
    # Versions (inclusive, as text) where the target is known to exist; outside
    # them the contract test expects it to be absent or moved.
    since: str = "0.5.13.post1"

    @property
    def modules(self) -> Tuple[str, ...]:
        return tuple(t.split(":", 1)[0] for t in self.targets)
