"""What the overlay did in this process: one :class:`Status` per process.

Standard library only. A Status renders as a table (``str(status)`` /
``status.table()``) and as JSON (``status.to_json()``); each process can also
write it to ``$SGLANG_KV5D_STATUS_DIR/<pid>.json``.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass, field
from typing import List, Optional

APPLIED = "applied"
PENDING = "pending"  # target module not imported yet
SKIPPED = "skipped"  # not applicable here (SGLang version refused, patch says so)
FAILED = "failed"  # probe or install failed; nothing of the patch is installed
DISABLED = "disabled"  # not selected (SGLANG_KV5D_PATCHES), or overlay deactivated

STATES = (APPLIED, PENDING, SKIPPED, FAILED, DISABLED)


@dataclass
class PatchStatus:
    name: str
    state: str
    reason: str
    required_for_5d: bool = False
    internal: bool = False
    targets: List[str] = field(default_factory=list)


@dataclass
class Status:
    pid: int
    role: str
    active: bool
    routes: List[str]
    sglang_version: Optional[str]
    verdict: str
    verdict_message: str
    strict: bool
    patches: List[PatchStatus]
    warnings: List[str] = field(default_factory=list)

    def by_state(self, state: str) -> List[str]:
        return [p.name for p in self.patches if p.state == state]

    def patch(self, name: str) -> PatchStatus:
        for p in self.patches:
            if p.name == name:
                return p
        raise KeyError(f"no patch named {name!r}; known: {', '.join(p.name for p in self.patches)}")

    def to_dict(self) -> dict:
        return asdict(self)

    def to_json(self, indent: Optional[int] = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=False)

    def summary_line(self) -> str:
        """The one INFO line each process logs after activation."""
        parts = [
            f"pid={self.pid}",
            f"role={self.role}",
            f"sglang={self.sglang_version or 'missing'} ({self.verdict})",
            f"route={'+'.join(self.routes) or '-'}",
        ]
        for state in STATES:
            names = self.by_state(state)
            if names:
                parts.append(f"{state}=[{', '.join(names)}]")
        return "sglang-kv5d: " + " ".join(parts)

    def table(self) -> str:
        head = [
            f"sglang-kv5d status  pid {self.pid}  role {self.role}  "
            f"{'active' if self.active else 'inactive'}  routes {', '.join(self.routes) or '-'}",
            f"SGLang {self.sglang_version or 'missing'}: {self.verdict_message}",
            f"strict mode: {'on' if self.strict else 'off'}",
        ]
        rows = [("patch", "state", "5D", "reason")]
        for p in self.patches:
            rows.append((p.name, p.state, "yes" if p.required_for_5d else "", p.reason))
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        lines = []
        for i, r in enumerate(rows):
            lines.append("  ".join(r[j].ljust(widths[j]) for j in range(3)) + "  " + r[3])
            if i == 0:
                lines.append("  ".join("-" * w for w in widths) + "  " + "-" * 6)
        out = head + [""] + lines
        if self.warnings:
            out += [""] + [f"warning: {w}" for w in self.warnings]
        return "\n".join(out)

    __str__ = table

    def write(self, directory: str) -> str:
        """Write ``<directory>/<pid>.json`` atomically; returns the path."""
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, f"{self.pid}.json")
        tmp = f"{path}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(self.to_json())
        os.replace(tmp, path)
        return path


def process_role() -> str:
    """Best-effort name of this process's role, without importing anything."""
    title = None
    spt = sys.modules.get("setproctitle")
    if spt is not None:
        try:
            title = spt.getproctitle()
        except Exception:
            title = None
    if title and title.startswith("sglang::"):
        return title.split("::", 1)[1]
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and getattr(spec, "name", "").startswith("sglang."):
        return spec.name.rsplit(".", 1)[-1]
    mp = sys.modules.get("multiprocessing")
    if mp is not None:
        try:
            name = mp.current_process().name
            if name and name != "MainProcess":
                return name
        except Exception:
            pass
    return "main"
