"""The selftest's results: one PhaseResult per (phase, pool), and the table."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import List, Sequence

# An output passes when max |out - ref| <= RTOL * max(1, max |ref|).
RTOL = 2e-2


@dataclass
class PhaseResult:
    phase: str
    pool: str
    calls: int = 0
    tokens: int = 0
    seconds: float = 0.0
    max_abs_err: float = 0.0
    max_ref: float = 0.0
    failures: List[str] = field(default_factory=list)
    skipped: str = ""  # why the phase did not run on this pool ("" when it ran)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    def compare(self, out, ref, what: str) -> None:
        """Hold one attention output against its float64 reference."""
        import torch

        out64 = out.detach().cpu().double().reshape(ref.shape)
        if not torch.isfinite(out64).all():
            self.failures.append(f"{what}: non-finite output")
            return
        ref_max = float(ref.abs().max()) if ref.numel() else 0.0
        err = float((out64 - ref).abs().max()) if ref.numel() else 0.0
        bound = RTOL * max(1.0, ref_max)
        self.max_abs_err = max(self.max_abs_err, err)
        self.max_ref = max(self.max_ref, ref_max)
        if err > bound:
            self.failures.append(f"{what}: max |error| {err:.3e} > {bound:.3e}")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["tokens_per_s"] = self.tokens_per_s
        return d


def _verdict(p: dict) -> str:
    if p.get("skipped"):
        return f"skipped: {p['skipped']}"
    return "ok" if not p["failures"] else "MISMATCH"


def render(reports: Sequence[dict]) -> str:
    """The reports of run_selftest as the table `sglang-kv5d selftest` prints."""
    lines = []
    for rep in reports:
        geo = rep["geometry"]
        lines.append(
            f"selftest {geo['name']} on {rep['device']}: {geo['hq']}/{geo['hkv']} heads, D={geo['head_dim']}, "
            f"page {geo['page']}, fp8 {rep.get('fp8_dtype', '?')}, attention impl {rep.get('attention_impl', '?')}, "
            f"SGLang {rep.get('sglang', '?')}"
        )
        if rep.get("error"):
            lines.append(f"  ERROR: {rep['error']}")
            continue
        paths = rep.get("attention_paths", {})
        if paths:
            lines.append(f"  attention paths ({rep.get('attention_paths_why', '')}):")
            for name, info in paths.items():
                lines.append(f"    {name}: {info['ran']}")
                for cfg, why in info.get("fallbacks", {}).items():
                    lines.append(f"      portable for {cfg}: {why}")
        lines.append(f"  {'path':7} {'phase':9} {'pool':11} {'calls':>5} {'tokens':>7} {'max |err|':>10} "
                     f"{'max |ref|':>9} {'tokens/s':>10}  result")
        for p in rep["phases"]:
            lines.append(
                f"  {p.get('path', ''):7} {p['phase']:9} {p['pool']:11} {p['calls']:5d} {p['tokens']:7d} "
                f"{p['max_abs_err']:10.2e} {p['max_ref']:9.2f} {p['tokens_per_s']:10.1f}  "
                f"{_verdict(p)}"
            )
        for name, f in rep.get("backend_flags", {}).items():
            lines.append(f"  backend over {name}: 5D={f['kv_cache_is_vectorized_5d']} "
                         f"decode page table={f['decode_page_table']}")
        for f in rep.get("failures", [])[:20]:
            lines.append(f"  FAIL {f}")
        lines.append(f"  => {'PASS' if rep['ok'] else 'FAIL'}")
    return "\n".join(lines)
