"""Benchmark: the fused FP8 KV write against its peers, on one GPU.

Contenders, per (geometry, layout, cache dtype, T):

    fused      sglang_kv5d.kernels.fp8_write.write_kv_fp8 (one launch, K and V)
    unfused    what SGLang's MHATokenToKVPool.set_kv_buffer does for an FP8 cache:
               k.div_(k_scale); v.div_(v_scale); .to(fp8); .view(uint8); then the
               scatter: launch_reshape_and_cache_shuffle_5d (5D) or an index_put
               (NHD; SGLang's CUDA build may use its own store kernel there)
    flash      SGLang's Triton reshape_and_cache_flash with k_scale/v_scale: the
               fused NHD writer AiterAttnBackend uses for NHD pools (NHD only,
               K and V of one head dim); its time is listed on both layouts' rows
               as the NHD reference point
    store      the store floor of the row's layout (sglang_kv5d.bench.store_floor):
               a constant byte written to exactly the bytes the fused write
               writes, nothing read or computed; 5D V groups found on the host;
               the fastest of its launch sizes.
               Where it alone misses a flash target, the verdict calls the row
               layout-bound: writing that layout's bytes for those slots costs
               more than the target allows, before anything is read or computed

    aiter      (ROCm, 5D rows, when aiter imports) aiter's own 5D writer:
               ``reshape_and_cache(..., kv_cache_dtype="fp8", asm_layout=True)``
               with per-tensor scales (sglang_kv5d.bench.aiter_peers); without
               aiter the result names why

All timings are CUDA-graph replay medians (sglang_kv5d.bench.common). The byte
floor is (bytes read + bytes written) / the read+write rate of a copy kernel on
the compute units (sglang_kv5d.bench.bandwidth), with bytes read = K and V
inputs + loc and bytes written = the FP8 K and V. (A ``copy_`` in a CUDA graph
is a copy-engine memcpy, about 0.63x of that rate on an H200: floors from it
were 1.57x too long and every xfloor ratio that much too kind.)

Slot ids: decode sizes (T <= 128) get distinct random slots; larger T get
prefill-like runs of consecutive slots (1024..4096 tokens each, each run
starting at a random offset inside a random page), so V groups are not aligned
with the token index. Large decode batches (``decode_batches``, T = 512 and
2048 by default) get distinct random slots too: there the 5D V layout scatters
one byte per 16-byte vector, the costliest case for that layout.

Cache size: by default each cache buffer holds about 1.25 T slots, so the
lines a call writes stay in the L2 cache between graph replays. That flatters
partial-sector writes (5D decode). ``cache_gib`` makes every buffer at least
that large, with the slots spread over all of it, as in serving.
"""

from __future__ import annotations

import math
import time
from typing import Callable, Iterable, Optional

from sglang_kv5d.bench import common

DEFAULT_GEOMETRIES = (
    {"name": "qwen3.5-tp8", "H": 1, "D": 256},
    {"name": "qwen3.5-tp1", "H": 2, "D": 256},
    {"name": "llama-like", "H": 8, "D": 128},
)
DEFAULT_TOKEN_COUNTS = (1, 16, 128, 1024, 4096, 32768, 262144)
DEFAULT_DECODE_BATCHES = (512, 2048)  # decode slots past DECODE_MAX_T
DEFAULT_CACHE_DTYPES = ("float8_e4m3fn", "float8_e4m3fnuz")
DEFAULT_LAYOUTS = ("5d", "nhd")
PAGE = 64
DECODE_MAX_T = 128

TARGETS = {
    "floor_ratio_max_large_t": 1.15,  # T >= 32768
    "decode_us_max": 6.0,  # T <= 128
    "vs_flash_max_small_t": 1.05,  # T < 4096: at most 5% slower than the NHD peer
    "vs_flash_max_large_t": 1.0,  # T >= 4096: faster than the NHD peer
    "speedup_vs_unfused_min_large_t": 7.0,  # T >= 32768, 5D
}


def _norm_geometries(geometries) -> list:
    out = []
    for g in geometries:
        if isinstance(g, dict):
            H, D = int(g["H"]), int(g["D"])
            name = g.get("name") or f"H{H}-D{D}"
            DV = int(g.get("DV", D))
        else:
            g = tuple(g)
            if len(g) == 3 and isinstance(g[0], str):
                name, H, D = g[0], int(g[1]), int(g[2])
            else:
                H, D = int(g[0]), int(g[1])
                name = f"H{H}-D{D}"
            DV = D
        out.append({"name": name, "H": H, "D": D, "DV": DV})
    return out


def _import_peers() -> dict:
    """SGLang's kernels when importable: {name: callable or 'skipped: reason'}."""
    peers = {}
    errors = []
    for mod in (
        "sglang.kernels.ops.kvcache.shuffle_5d_cache",  # 0.5.23
        "sglang.kernels.ops.attention.utils",  # 0.5.16 .. 0.5.22
        "sglang.srt.layers.attention.utils",  # 0.5.13.post1 .. 0.5.15.post1
    ):
        try:
            m = __import__(mod, fromlist=["launch_reshape_and_cache_shuffle_5d"])
            peers["shuffle_5d"] = getattr(m, "launch_reshape_and_cache_shuffle_5d")
            peers["shuffle_5d_module"] = mod
            break
        except Exception as exc:  # noqa: BLE001 - reported
            errors.append(f"{mod}: {type(exc).__name__}: {exc}")
    else:
        peers["shuffle_5d"] = "skipped: " + "; ".join(errors)
    errors = []
    for mod in (
        "sglang.kernels.ops.kvcache.cache_ops",  # 0.5.23
        "sglang.kernels.ops.attention.utils",
        "sglang.srt.layers.attention.utils",
    ):
        try:
            m = __import__(mod, fromlist=["launch_reshape_and_cache_flash"])
            peers["flash"] = getattr(m, "launch_reshape_and_cache_flash")
            peers["flash_module"] = mod
            break
        except Exception as exc:  # noqa: BLE001
            errors.append(f"{mod}: {type(exc).__name__}: {exc}")
    else:
        peers["flash"] = "skipped: " + "; ".join(errors)
    return peers


def prefill_loc(T: int, n_slots: int, page: int, *, gen, device):
    """Runs of 1024..4096 consecutive slots, each starting at a random in-page offset."""
    import torch

    n_pages = n_slots // page
    order = torch.randperm(n_pages, generator=gen)
    pieces, used_pages, total = [], 0, 0
    while total < T:
        length = min(int(torch.randint(1024, 4097, (1,), generator=gen)), T - total)
        off = int(torch.randint(0, page, (1,), generator=gen))
        need = (off + length + page - 1) // page
        pages = order[used_pages : used_pages + need]
        used_pages += need
        slots = (pages[:, None] * page + torch.arange(page)[None, :]).flatten()[off : off + length]
        pieces.append(slots)
        total += length
    return torch.cat(pieces).to(device)


def decode_loc(T: int, n_slots: int, *, gen, device):
    import torch

    return torch.randperm(n_slots, generator=gen)[:T].to(device)


def _error_line(exc: BaseException) -> str:
    """The exception's type and the last non-empty line of its message (a
    Triton CompilationError starts with the source position and ends with the
    cause), at most 200 characters."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {lines[-1][:200] if lines else ''}"


def _time(fn, T) -> float:
    inner = 10 if T <= 32768 else 3
    reps = 20 if T <= 32768 else 10
    return common.graph_replay_median_us(fn, inner=inner, reps=reps)


def cache_pages(T: int, H: int, D: int, page: int, cache_gib: float = 0.0) -> int:
    """Pages per cache buffer: about 1.25 T slots, or enough pages for
    ``cache_gib`` GiB of one buffer of H heads x D bytes per slot (fp8)."""
    return max(math.ceil(T * 1.25 / page) + 4, int(cache_gib * (1 << 30)) // (page * H * D))


def row_cases(token_counts: Iterable[int], decode_batches: Iterable[int]) -> list:
    """(T, "decode" | "prefill") per benchmark row, by T: decode slots up to
    DECODE_MAX_T tokens and for every decode batch, prefill runs otherwise."""
    return sorted({(int(T), "decode" if int(T) <= DECODE_MAX_T else "prefill") for T in token_counts}
                  | {(int(T), "decode") for T in decode_batches})


def run(
    device: str = "cuda",
    geometries: Iterable = DEFAULT_GEOMETRIES,
    token_counts: Iterable[int] = DEFAULT_TOKEN_COUNTS,
    progress: Optional[Callable[[str], None]] = None,
    *,
    layouts: Iterable[str] = DEFAULT_LAYOUTS,
    cache_dtypes: Iterable[str] = DEFAULT_CACHE_DTYPES,
    input_dtype: str = "bfloat16",
    page: int = PAGE,
    seed: int = 0,
    decode_batches: Iterable[int] = DEFAULT_DECODE_BATCHES,
    cache_gib: float = 0.0,
) -> dict:
    """Time the fused FP8 write and its peers; return a JSON-serialisable dict.

    Rows: every T of ``token_counts`` (decode slots up to DECODE_MAX_T tokens,
    prefill runs above) and every T of ``decode_batches`` with decode slots.
    ``cache_gib``: the least size of each cache buffer (0: about 1.25 T slots).
    """
    if not (cache_gib >= 0 and math.isfinite(cache_gib)):
        raise ValueError(f"cache_gib: expected a finite size >= 0 in GiB, got {cache_gib!r}")
    import torch

    from sglang_kv5d.bench import store_floor
    from sglang_kv5d.kernels import fp8_write

    say = progress or (lambda s: None)
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    torch.cuda.set_device(dev)
    geoms = _norm_geometries(geometries)
    token_counts = [int(t) for t in token_counts]
    layouts = list(layouts)
    cache_dtypes = list(cache_dtypes)
    in_dtype = getattr(torch, input_dtype)

    info = common.device_description(dev)
    say(f"device: {info.get('gpu')} driver {info.get('driver')} torch {info['torch']} triton {info['triton']}")
    from sglang_kv5d.bench import aiter_peers, bandwidth

    rates = common.memory_rates(dev)
    bw = rates.copy
    say(f"read+write rate: {bw / 1e9:.0f} GB/s (copy kernel); read {rates.read / 1e9:.0f}, "
        f"write {rates.write / 1e9:.0f} GB/s")
    peers = _import_peers()
    aiter = aiter_peers.load()
    aiter_src = aiter_peers.describe(aiter, "reshape_and_cache")
    say(f"peer aiter: {aiter_src}")
    for name in ("shuffle_5d", "flash"):
        if isinstance(peers[name], str):
            say(f"peer {name}: {peers[name]}")
        else:
            say(f"peer {name}: {peers[name + '_module']}")

    result = {
        "benchmark": "fp8_write",
        "device": info,
        "rates": rates.to_dict(),
        "read_write_bytes_per_s": bw,
        "page": page,
        "input_dtype": input_dtype,
        "cache_gib": cache_gib,
        "timing": "CUDA-graph replay median, us per call",
        "loc": {
            "decode": f"T <= {DECODE_MAX_T} and the decode batches {sorted(int(t) for t in decode_batches)}: "
                      "distinct random slots",
            "prefill": "the other T (> 128): runs of 1024..4096 consecutive slots, each from a random in-page offset",
        },
        "scales": "fused and flash: one-element fp32 tensors (read in-kernel); unfused: "
        "one-element fp32 tensors holding 1.0 (it divides its inputs in place every call)",
        "peers": {
            k: (v if isinstance(v, str) else peers.get(k + "_module"))
            for k, v in peers.items()
            if not k.endswith("_module")
        } | {"aiter": aiter_src},
        "targets": dict(TARGETS),
        "rows": [],
    }

    gen = torch.Generator().manual_seed(seed)
    gdev = torch.Generator(device=dev).manual_seed(seed)
    t_start = time.time()
    cases = row_cases(token_counts, decode_batches)
    for geo in geoms:
        H, DK, DV = geo["H"], geo["D"], geo["DV"]
        for T, slots in cases:
            n_pages = cache_pages(T, H, max(DK, DV), page, cache_gib)
            n_slots = n_pages * page
            k = torch.randn(T, H, DK, generator=gdev, device=dev, dtype=torch.float32).to(in_dtype)
            v = torch.randn(T, H, DV, generator=gdev, device=dev, dtype=torch.float32).to(in_dtype)
            if slots == "decode":
                loc = decode_loc(T, n_slots, gen=gen, device=dev)
                loc_kind = "decode"
            else:
                loc = prefill_loc(T, n_slots, page, gen=gen, device=dev)
                loc_kind = "prefill"
            ks = torch.tensor([0.75], device=dev)
            vs = torch.tensor([1.25], device=dev)
            one = torch.tensor([1.0], device=dev)
            in_bytes = T * H * (DK + DV) * k.element_size() + T * loc.element_size()
            out_bytes = T * H * (DK + DV)
            floor_us = bandwidth.floor_us("write", in_bytes, out_bytes, rates)
            for cdt_name in cache_dtypes:
                cdt = getattr(torch, cdt_name)
                flash_us, flash_note = None, None
                if isinstance(peers["flash"], str):
                    flash_note = peers["flash"]
                elif DK != DV:
                    flash_note = "skipped: needs K and V of one head dim"
                else:
                    kcn = torch.zeros(n_slots, H, DK, dtype=torch.uint8, device=dev).view(cdt)
                    vcn = torch.zeros(n_slots, H, DV, dtype=torch.uint8, device=dev).view(cdt)
                    flash = peers["flash"]

                    def run_flash():
                        flash(k, v, kcn.view(-1, page, H, DK), vcn.view(-1, page, H, DV), loc,
                              k_scale=ks, v_scale=vs)

                    try:
                        flash_us = _time(run_flash, T)
                    except Exception as exc:  # noqa: BLE001 - reported in the row
                        flash_note = f"failed on {cdt_name}: {_error_line(exc)}"
                    del kcn, vcn
                for layout in layouts:
                    if layout == "5d":
                        kc = torch.zeros(n_pages, H, DK // 16, page, 16, dtype=torch.uint8, device=dev)
                        vc = torch.zeros(n_pages, H, page // 16, DV, 16, dtype=torch.uint8, device=dev)
                    else:
                        kc = torch.zeros(n_slots, H, DK, dtype=torch.uint8, device=dev)
                        vc = torch.zeros(n_slots, H, DV, dtype=torch.uint8, device=dev)
                    kct, vct = kc.view(cdt), vc.view(cdt)
                    cfg = fp8_write.launch_config(T, H, DK, DV, layout == "5d",
                                                  fp8_write._native_fp8_ok(dev, cdt))

                    def run_fused():
                        fp8_write.write_kv_fp8(k, v, kct, vct, loc, ks, vs)

                    fused_us = _time(run_fused, T)
                    store_times = {b: _time(store_floor.StoreFloor(kc, vc, loc, block_s=b), T)
                                   for b in store_floor.block_sizes(T)}
                    store_block, store_us = min(store_times.items(), key=lambda kv: kv[1])

                    k2, v2 = k.clone(), v.clone()
                    unfused_us, unfused_note = None, None
                    if layout == "5d" and isinstance(peers["shuffle_5d"], str):
                        unfused_note = peers["shuffle_5d"]
                    else:
                        shuffle = peers["shuffle_5d"]

                        def run_unfused():
                            k2.div_(one)
                            v2.div_(one)
                            ck = k2.to(cdt).view(torch.uint8)
                            cv = v2.to(cdt).view(torch.uint8)
                            if layout == "5d":
                                shuffle(ck, cv, kc, vc, loc)
                            else:
                                kc[loc] = ck
                                vc[loc] = cv

                        try:
                            unfused_us = _time(run_unfused, T)
                        except Exception as exc:  # noqa: BLE001
                            unfused_note = f"failed on {cdt_name}: {_error_line(exc)}"
                    aiter_us, aiter_note = None, None
                    if layout == "5d" and aiter_peers.available(aiter, "reshape_and_cache"):
                        try:
                            aiter_us = _time(aiter_peers.write_callable(aiter, k, v, kc, vc, loc, k_scale=ks,
                                                                        v_scale=vs), T)
                        except Exception as exc:  # noqa: BLE001 - reported in the row
                            aiter_note = f"failed on {cdt_name}: {_error_line(exc)}"
                    elif layout == "5d" and aiter:
                        aiter_note = aiter_src
                    del k2, v2, kc, vc, kct, vct

                    row = {
                        "geometry": geo["name"],
                        "H": H,
                        "D_k": DK,
                        "D_v": DV,
                        "layout": layout,
                        "cache_dtype": cdt_name,
                        "T": T,
                        "loc": loc_kind,
                        "cache_slots": n_slots,
                        "config": cfg,
                        "bytes": in_bytes + out_bytes,
                        "floor_us": floor_us,
                        "fused_us": fused_us,
                        "fused_floor_ratio": fused_us / floor_us,
                        "unfused_us": unfused_us,
                        "unfused_floor_ratio": (unfused_us / floor_us) if unfused_us else None,
                        "speedup_vs_unfused": (unfused_us / fused_us) if unfused_us else None,
                        "flash_us": flash_us,
                        "flash_floor_ratio": (flash_us / floor_us) if flash_us else None,
                        "fused_vs_flash": (fused_us / flash_us) if flash_us else None,
                        "store_us": store_us,
                        "store_block_s": store_block,
                        "fused_vs_store": fused_us / store_us,
                        "store_vs_flash": (store_us / flash_us) if flash_us else None,
                        "aiter_us": aiter_us,
                        "fused_vs_aiter": (fused_us / aiter_us) if aiter_us else None,
                    }
                    if aiter_note:
                        row["aiter_note"] = aiter_note
                    if unfused_note:
                        row["unfused_note"] = unfused_note
                    if flash_note:
                        row["flash_note"] = flash_note
                    result["rows"].append(row)
                    say(
                        f"{geo['name']:>12} {layout:>3} {cdt_name:<15} T={T:>6} {loc_kind:<7}: "
                        f"fused {fused_us:8.2f} us "
                        f"({row['fused_floor_ratio']:.2f}x floor), store {store_us:8.2f}"
                        + (f", unfused {unfused_us:8.2f}" if unfused_us else "")
                        + (f", flash {flash_us:8.2f}" if flash_us else "")
                    )
            del k, v, loc
            torch.cuda.empty_cache()
    result["elapsed_s"] = time.time() - t_start
    result["verdicts"] = evaluate_targets(result)
    return result


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
