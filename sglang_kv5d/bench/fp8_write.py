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
inputs + loc and bytes written = the FP8 K and V. A ``copy_`` in a CUDA graph
is not the rate: the copy engine runs it as a memcpy at about 0.63x of the
compute units' rate on an H200, which would make every floor 1.57x too long.

Slot ids and cache sizes: :mod:`sglang_kv5d.bench.fp8_write_cases`; verdicts
and the table: :mod:`sglang_kv5d.bench.fp8_write_report`; SGLang's kernels are
reached through the surface table (:mod:`sglang_kv5d.bench.sglang_peers`).

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
from sglang_kv5d.bench.aiter_peers import error_line as _error_line
from sglang_kv5d.bench.fp8_write_cases import (  # noqa: F401  (the suite's public names)
    DECODE_MAX_T, DEFAULT_CACHE_DTYPES, DEFAULT_DECODE_BATCHES, DEFAULT_GEOMETRIES, DEFAULT_LAYOUTS,
    DEFAULT_TOKEN_COUNTS, PAGE, cache_pages, decode_loc, norm_geometries, prefill_loc, row_cases,
)
from sglang_kv5d.bench.fp8_write_report import TARGETS, evaluate_targets, format_table  # noqa: F401
from sglang_kv5d.platform import target_of


def _time(fn, T) -> float:
    inner = 10 if T <= 32768 else 3
    reps = 20 if T <= 32768 else 10
    return common.graph_replay_median_us(fn, inner=inner, reps=reps)


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
    geoms = norm_geometries(geometries)
    token_counts = [int(t) for t in token_counts]
    layouts = list(layouts)
    cache_dtypes = list(cache_dtypes)
    in_dtype = getattr(torch, input_dtype)

    info = common.device_description(dev)
    say(f"device: {info.get('gpu')} driver {info.get('driver')} torch {info['torch']} triton {info['triton']}")
    from sglang_kv5d.bench import aiter_peers, bandwidth, sglang_peers

    rates = common.memory_rates(dev)
    bw = rates.copy
    say(f"read+write rate: {bw / 1e9:.0f} GB/s (copy kernel); read {rates.read / 1e9:.0f}, "
        f"write {rates.write / 1e9:.0f} GB/s")
    peers = sglang_peers.fp8_write_peers()
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
                    except Exception as exc:  # noqa: BLE001 - a peer fails with any error: reported in the row
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
                                                  fp8_write.native_fp8_ok(dev, cdt), target_of(dev))

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
                        except Exception as exc:  # noqa: BLE001 - a peer fails with any error: reported in the row
                            unfused_note = f"failed on {cdt_name}: {_error_line(exc)}"
                    aiter_us, aiter_note = None, None
                    if layout == "5d" and aiter_peers.available(aiter, "reshape_and_cache"):
                        try:
                            aiter_us = _time(aiter_peers.write_callable(aiter, k, v, kc, vc, loc, k_scale=ks,
                                                                        v_scale=vs), T)
                        except Exception as exc:  # noqa: BLE001 - a peer fails with any error: reported in the row
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
