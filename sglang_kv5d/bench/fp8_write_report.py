"""The FP8 write benchmark's targets, their verdicts and the table."""

from __future__ import annotations

from sglang_kv5d.bench.fp8_write_cases import DECODE_MAX_T

TARGETS = {
    "floor_ratio_max_large_t": 1.15,  # T >= 32768
    "decode_us_max": 6.0,  # T <= 128
    "vs_flash_max_small_t": 1.05,  # T < 4096: at most 5% slower than the NHD peer
    "vs_flash_max_large_t": 1.0,  # T >= 4096: faster than the NHD peer
    "speedup_vs_unfused_min_large_t": 7.0,  # T >= 32768, 5D
}


def _row_id(r: dict) -> str:
    """geometry/layout/T, with "decode" for the decode batches past DECODE_MAX_T."""
    big_decode = r.get("loc") == "decode" and r["T"] > DECODE_MAX_T
    return f"{r['geometry']}/{r['layout']}/T={r['T']}" + (" decode" if big_decode else "")


def evaluate_targets(result: dict) -> dict:
    """met / not met for each stated target, over the e4m3fn rows (fnuz rows are listed apart)."""
    out = {}
    for dtype in sorted({r["cache_dtype"] for r in result["rows"]}):
        rows = [r for r in result["rows"] if r["cache_dtype"] == dtype]
        checks = {}

        def add(name, items, bound=None):
            """items: (text, met, row); ``bound(row)``: does the row's store
            floor alone already miss the target (layout-bound)?"""
            items = list(items)
            if not items:
                return
            bad = [i for i in items if not i[1]]
            checks[name] = {
                "met": not bad,
                "checked": len(items),
                "failures": [i[0] for i in bad],
            }
            if bound is not None:
                checks[name]["layout_bound"] = [
                    f"{_row_id(i[2])}: store floor {i[2]['store_vs_flash']:.3f}x flash"
                    for i in bad if i[2].get("store_vs_flash") and bound(i[2])]

        add(
            "large T: fused <= 1.15x byte floor",
            ((f"{_row_id(r)}: {r['fused_floor_ratio']:.2f}x",
              r["fused_floor_ratio"] <= TARGETS["floor_ratio_max_large_t"], r)
             for r in rows if r["T"] >= 32768),
        )
        add(
            "T <= 128: fused <= 6 us",
            ((f"{_row_id(r)}: {r['fused_us']:.2f} us",
              r["fused_us"] <= TARGETS["decode_us_max"], r) for r in rows if r["T"] <= 128),
        )
        add(
            "T >= 4096: fused faster than flash (NHD peer)",
            ((f"{_row_id(r)}: {r['fused_vs_flash']:.3f}",
              r["fused_vs_flash"] < TARGETS["vs_flash_max_large_t"], r)
             for r in rows if r["T"] >= 4096 and r.get("fused_vs_flash")),
            bound=lambda r: r["store_vs_flash"] >= TARGETS["vs_flash_max_large_t"],
        )
        add(
            "T < 4096: fused within 5% of flash",
            ((f"{_row_id(r)}: {r['fused_vs_flash']:.3f}",
              r["fused_vs_flash"] <= TARGETS["vs_flash_max_small_t"], r)
             for r in rows if r["T"] < 4096 and r.get("fused_vs_flash")),
            bound=lambda r: r["store_vs_flash"] > TARGETS["vs_flash_max_small_t"],
        )
        add(
            "T >= 32768, 5D: >= 7x faster than unfused",
            ((f"{r['geometry']}/T={r['T']}: {r['speedup_vs_unfused']:.1f}x",
              r["speedup_vs_unfused"] >= TARGETS["speedup_vs_unfused_min_large_t"], r)
             for r in rows if r["T"] >= 32768 and r["layout"] == "5d" and r.get("speedup_vs_unfused")),
        )
        out[dtype] = checks
    return out


def _f(x, fmt):
    return "-" if x is None else format(x, fmt)


def format_table(result: dict) -> str:
    """A plain-text table of the rows, then the target verdicts."""
    dev = result.get("device", {})
    lines = [
        f"fused FP8 KV write - {dev.get('gpu', '?')} (driver {dev.get('driver', '?')}), "
        f"torch {dev.get('torch', '?')}, triton {dev.get('triton', '?')}",
        f"floor rate {result['read_write_bytes_per_s'] / 1e9:.0f} GB/s (read+write, a copy kernel on the "
        f"compute units); "
        f"page {result['page']}; inputs {result['input_dtype']}; {result['timing']}",
        "caches: " + (f"at least {result['cache_gib']:g} GiB per buffer, slots spread over it"
                      if result.get("cache_gib") else "about 1.25 x T slots per buffer (written lines stay in L2)"),
        "",
    ]
    hdr = (f"{'geometry':<12} {'lay':<3} {'cache':<15} {'T':>7} {'slots':<7} {'floor':>8} {'fused':>9} {'xfloor':>6} "
           f"{'unfused':>9} {'xfloor':>6} {'speedup':>7} {'flash':>9} {'xfloor':>6} {'f/flash':>7} "
           f"{'store':>8} {'f/store':>7} {'s/flash':>7}")
    lines.append(hdr)
    lines.append("-" * len(hdr))
    for r in result["rows"]:
        lines.append(
            f"{r['geometry']:<12} {r['layout']:<3} {r['cache_dtype'].replace('float8_', ''):<15} {r['T']:>7} "
            f"{r.get('loc', '?'):<7} "
            f"{r['floor_us']:>8.2f} {r['fused_us']:>9.2f} {r['fused_floor_ratio']:>6.2f} "
            f"{_f(r['unfused_us'], '9.2f'):>9} {_f(r['unfused_floor_ratio'], '6.2f'):>6} "
            f"{_f(r['speedup_vs_unfused'], '7.1f'):>7} {_f(r['flash_us'], '9.2f'):>9} "
            f"{_f(r['flash_floor_ratio'], '6.2f'):>6} {_f(r['fused_vs_flash'], '7.3f'):>7} "
            f"{_f(r.get('store_us'), '8.2f'):>8} {_f(r.get('fused_vs_store'), '7.2f'):>7} "
            f"{_f(r.get('store_vs_flash'), '7.3f'):>7}"
        )
    if any(r.get("aiter_us") for r in result["rows"]):
        lines.append("")
        lines.append("aiter's 5D writer (reshape_and_cache, asm_layout=True, fp8, per-tensor scales):")
        for r in result["rows"]:
            if r.get("aiter_us"):
                lines.append(f"  {_row_id(r)} {r['cache_dtype'].replace('float8_', '')}: aiter {r['aiter_us']:.2f} us, "
                             f"fused / aiter {r['fused_vs_aiter']:.3f}")
    notes = sorted({(k, r[k]) for r in result["rows"] for k in ("unfused_note", "flash_note", "aiter_note")
                    if k in r})
    if notes:
        lines.append("")
        for k, n in notes:
            lines.append(f"{k.replace('_note', '')}: {n}")
    lines.append("")
    lines.append("times in us per call; floor = (bytes read + written) / read+write rate; xfloor = time / floor; "
                 "unfused = SGLang's set_kv_buffer path (div, cast, its shuffle_5d writer or index_put); "
                 "speedup = unfused / fused; "
                 "f/flash = fused / flash (flash measured on an NHD cache); store = the row's layout "
                 "written with a constant, nothing read or computed (5D groups found beforehand); "
                 "f/store = fused / store; s/flash = store / flash")
    for dtype, checks in result.get("verdicts", {}).items():
        lines.append("")
        lines.append(f"targets ({dtype}):")
        for name, c in checks.items():
            lines.append(f"  [{'met' if c['met'] else 'NOT MET'}] {name} ({c['checked']} rows)"
                         + (": " + "; ".join(c["failures"]) if c["failures"] else ""))
            if c.get("layout_bound"):
                lines.append("      layout-bound (the layout's store floor, its bytes written with nothing read, "
                             "misses the target by itself): "
                             + "; ".join(c["layout_bound"]))
    return "\n".join(lines)
