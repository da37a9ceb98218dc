"""The decode attention benchmark's verdicts and tables."""

from __future__ import annotations

from sglang_kv5d.bench.attention_cases import TARGET_BS1_SPEEDUP, TARGET_BW_FRACTION, TARGET_BW_TOKENS
from sglang_kv5d.bench.attention_extend import format_extend_table


def evaluate_targets(row) -> dict:
    t = {}
    if "peer_us" in row:
        t["ge_peer"] = row["ours_us"] <= row["peer_us"] * 1.0
    if "aiter_us" in row:
        t["ge_aiter"] = row["ours_us"] <= row["aiter_us"]
    if row["bs"] * row["ctx"] >= TARGET_BW_TOKENS:
        t["read_ge_70pct"] = row["ours_read_fraction"] >= TARGET_BW_FRACTION
    if row["bs"] == 1 and row["ctx"] >= 8192 and "peer_us" in row:
        t["bs1_3x_peer"] = row["peer_us"] / row["ours_us"] >= TARGET_BS1_SPEEDUP
    return t


def summarize(rows) -> dict:
    s = {}
    for key in ("ge_peer", "ge_aiter", "read_ge_70pct", "bs1_3x_peer"):
        vals = [r["targets"][key] for r in rows if key in r.get("targets", {})]
        if vals or key != "ge_aiter":  # no aiter rows (CUDA): no aiter line
            s[key] = dict(met=sum(vals), of=len(vals))
    return s


def format_table(result: dict) -> str:
    dev = result.get("device", {})
    bw = result.get("read_bytes_per_s", 0.0)
    aiter_src = result.get("aiter_peer", "none (not ROCm)")
    rows = result.get("rows", [])
    # aiter columns only where an aiter peer exists or was tried (ROCm); off ROCm the table has none
    show_aiter = not aiter_src.startswith("none") or any("aiter_us" in r or "aiter_note" in r for r in rows)
    lines = [
        f"decode_attention_5d vs SGLang Triton decode ({result.get('peer', '?')})"
        + (f"; aiter peer: {aiter_src}" if show_aiter else ""),
        f"{dev.get('gpu', '?')} driver {dev.get('driver', '?')}, torch {dev.get('torch', '?')}, "
        f"triton {dev.get('triton', '?')}; read rate {bw / 1e9:.0f} GB/s (a sum kernel on the compute units); "
        f"page {result.get('page')}",
        "",
        "| KV | H_q/H_kv | D | bs | ctx | ours us | ours % read | splits | SGLang us (splits) | SGLang % read "
        "| vs SGLang | " + ("aiter us (splits) | aiter % read | vs aiter | " if show_aiter else "") + "targets |",
        "|---|---|---|---|---|---|---|---|---|---|---|" + ("---|---|---|" if show_aiter else "") + "---|",
    ]
    nan = float("nan")
    for r in rows:
        t = r.get("targets", {})
        marks = ", ".join(f"{k} {'met' if v else 'NOT met'}" for k, v in t.items())
        peer = f"{r['peer_us']:.1f} ({r['peer_splits']})" if "peer_us" in r else "n/a"
        aiter = f"{r['aiter_us']:.1f} ({r['aiter_splits']})" if "aiter_us" in r else (
            "failed" if "aiter_note" in r else "n/a")
        lines.append(
            f"| {r['kv']} | {r['H_q']}/{r['H_kv']} | {r['D']} | {r['bs']} | {r['ctx']} | "
            f"{r['ours_us']:.1f} | {100 * r['ours_read_fraction']:.1f}% | {r.get('ours_splits', '')} | {peer} | "
            f"{100 * r.get('peer_read_fraction', nan):.1f}% | {r.get('speedup_vs_peer', nan):.2f}x | "
            + (f"{aiter} | {100 * r.get('aiter_read_fraction', nan):.1f}% | {r.get('speedup_vs_aiter', nan):.2f}x | "
               if show_aiter else "")
            + f"{marks} |"
        )
    notes = sorted({r["aiter_note"] for r in result.get("rows", []) if "aiter_note" in r})
    for n in notes:
        lines.append(f"aiter: {n}")
    lines.append("")
    lines.append("% read = bytes read / time / read rate; vs X = X's time / ours (above 1: ours is faster)")
    s = result.get("summary", {})
    if s:
        lines.append(
            "targets: "
            + "; ".join(f"{k}: {v['met']}/{v['of']} rows met" for k, v in s.items())
        )
    if result.get("extend_rows"):
        lines += ["", format_extend_table(result["extend_rows"], result.get("extend_peer", "?"))]
    return "\n".join(lines)
