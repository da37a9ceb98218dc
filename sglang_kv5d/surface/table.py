"""The surface table's row type and actions (see sglang_kv5d.surface).

A row says where an SGLang object is and what shape it must have: its id,
targets, action, accepted parameters, from-import copies and the release it
appeared in. Why it is patched, since when upstream is wrong and when the patch
can go are the owning Patch's (``problem`` / ``why`` / ``upstream`` /
``removal``, rendered into patches/<name>.toml); each Patch names its rows in
its bindings. A READ row's purpose is the comment above it in reads.py.
"""

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
