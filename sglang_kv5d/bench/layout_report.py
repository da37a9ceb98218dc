"""The layout verdict's arithmetic and tables (pure: no torch, no GPU).

A row's cells are ``[{layout, part, name, us | note}]`` (layout "nhd" / "5d",
part "write" / "attn"). Per layout, the layer's KV path is its fastest writer
plus its fastest attention kernel among those that ran; the verdict compares
the two totals:

    5D faster  by N% = (NHD - 5D) / NHD   (the share of NHD's layer time 5D saves)
    5D slower  by N% = (5D - NHD) / NHD
    within noise     when |5D / NHD - 1| < NOISE

A layout with a part that no contender ran gets no total and the row no
verdict; the line says which part and why, and compares what both have.
"""

from __future__ import annotations

from typing import Dict, List, Optional

#: below this relative difference the verdict says "within noise"
NOISE = 0.02
LAYOUTS = ("nhd", "5d")
PARTS = ("write", "attn")
LABEL = {"nhd": "NHD", "5d": "5D"}


def best(cells: List[dict], layout: str, part: str) -> Optional[dict]:
    """The fastest cell that ran for (layout, part), or None."""
    ran = [c for c in cells if c["layout"] == layout and c["part"] == part and c.get("us") is not None]
    return min(ran, key=lambda c: c["us"]) if ran else None


def notes(cells: List[dict], layout: str, part: str) -> List[str]:
    return [f"{c['name']}: {c['note']}" for c in cells
            if c["layout"] == layout and c["part"] == part and c.get("us") is None]


def layer(cells: List[dict]) -> Dict[str, dict]:
    """{layout: {"write": {name, us} | None, "attn": ..., "total_us": float | None}}."""
    out = {}
    for lay in LAYOUTS:
        parts = {p: best(cells, lay, p) for p in PARTS}
        entry = {p: (None if b is None else {"name": b["name"], "us": b["us"]}) for p, b in parts.items()}
        entry["total_us"] = (sum(b["us"] for b in parts.values()) if all(parts.values()) else None)
        out[lay] = entry
    return out


def _pct(t5: float, tn: float, noise: float) -> str:
    d = t5 / tn - 1.0
    if abs(d) < noise:
        return f"5D and NHD are within {100 * noise:.0f}% (noise)"
    word = "faster" if d < 0 else "slower"
    return f"5D is {100 * abs(d):.0f}% {word}"


def verdict(phase: str, label: str, cells: List[dict], *, noise: float = NOISE,
            attention_layers: Optional[int] = None) -> dict:
    """{"line": text, "ratio_5d_to_nhd": float | None, "layer": layer(cells)}."""
    lay = layer(cells)
    tn, t5 = lay["nhd"]["total_us"], lay["5d"]["total_us"]
    if tn and t5:
        ratio = t5 / tn
        line = (f"{label}: {_pct(t5, tn, noise)} per {phase} layer here "
                f"(5D {t5:.1f} us = {lay['5d']['write']['name']} + {lay['5d']['attn']['name']}; "
                f"NHD {tn:.1f} us = {lay['nhd']['write']['name']} + {lay['nhd']['attn']['name']})")
        if attention_layers:
            line += (f"; x {attention_layers} attention layers: 5D {t5 * attention_layers / 1000:.2f} ms, "
                     f"NHD {tn * attention_layers / 1000:.2f} ms per {'step' if phase == 'decode' else 'chunk'}")
        return {"line": line, "ratio_5d_to_nhd": ratio, "layer": lay}
    missing = [f"{LABEL[l]} {'attention' if p == 'attn' else 'write'} (" + ("; ".join(notes(cells, l, p))
               or "no contender") + ")" for l in LAYOUTS for p in PARTS if lay[l][p] is None]
    line = f"{label}: no {phase} verdict: nothing ran for " + ", ".join(missing)
    shared = [p for p in PARTS if lay["nhd"][p] and lay["5d"][p]]
    for p in shared:
        line += (f"; {'attention' if p == 'attn' else 'write'} alone: "
                 f"{_pct(lay['5d'][p]['us'], lay['nhd'][p]['us'], noise)}")
    return {"line": line, "ratio_5d_to_nhd": None, "layer": lay}


def row_label(row: dict) -> str:
    if row["phase"] == "decode":
        return f"{row['kv']} bs {row['bs']} ctx {row['ctx']}"
    return f"{row['kv']} {row['bs']} x {row['new']} new + {row['prefix']} cached"


def _cell(c: Optional[dict]) -> str:
    return "-" if c is None else f"{c['us']:.1f} ({c['name']})"


def format_table(result: dict) -> str:
    """Markdown: per phase a table of the layer's KV path per layout, then the
    verdict lines, then every contender's time or why it did not run."""
    g = result.get("geometry", {})
    lines = [f"Layout verdict: {result.get('device', {}).get('gpu', '?')}, {g.get('heads')}/{g.get('kv_heads')} heads "
             f"D={g.get('head_dim')} tp {g.get('tp')} ({g.get('h_q_per_rank')}/{g.get('h_kv_per_rank')} per rank), "
             f"page {g.get('page')}, from {g.get('source')}; {result.get('timing', '')}", ""]
    for phase in ("decode", "prefill"):
        rows = [r for r in result.get("rows", []) if r["phase"] == phase]
        if not rows:
            continue
        lines += [f"### {phase}: one layer's KV path (us; fastest contender of each part)", "",
                  "| shape | NHD write | NHD attention | NHD layer | 5D write | 5D attention | 5D layer | 5D / NHD |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in rows:
            lay = r["verdict"]["layer"]
            ratio = r["verdict"]["ratio_5d_to_nhd"]
            tot = lambda l: "-" if lay[l]["total_us"] is None else f"{lay[l]['total_us']:.1f}"  # noqa: E731
            lines.append(f"| {row_label(r)} | {_cell(lay['nhd']['write'])} | {_cell(lay['nhd']['attn'])} "
                         f"| {tot('nhd')} | {_cell(lay['5d']['write'])} | {_cell(lay['5d']['attn'])} | {tot('5d')} | "
                         + ("-" if ratio is None else f"{ratio:.2f}") + " |")
        lines.append("")
        lines += [r["verdict"]["line"] for r in rows]
        lines.append("")
        lines += [f"{phase} contenders (us per call; each part's fastest counts):", ""]
        why = {}
        for r in rows:
            parts = []
            for c in r["cells"]:
                who = f"{LABEL[c['layout']]} {c['part']} {c['name']}"
                if c.get("us") is None:
                    why.setdefault(f"{who}: {c['note']}", []).append(row_label(r))
                    continue
                extra = f" @{c['splits']} splits" if c.get("splits") else ""
                parts.append(f"{who} {c['us']:.1f}{extra}")
            lines.append(f"- {row_label(r)}: " + ("; ".join(parts) or "nothing ran"))
        for text, where in why.items():
            lines.append(f"- not timed: {text}" + ("" if len(where) == len(rows) else f" [{', '.join(where)}]"))
        lines.append("")
    return "\n".join(lines).rstrip()
