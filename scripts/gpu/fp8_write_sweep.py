"""Device-run helper: time write_kv_fp8 launch configurations against the
defaults of fp8_write.launch_config and against SGLang's reshape_and_cache_flash
(when importable), same run, same inputs. Rows go to OUT.json as they come, so
a run cut short by a timeout still leaves its data.

    python scripts/gpu/fp8_write_sweep.py OUT.json [small|large|all|third|occupancy|parts|words|order|order2|spec|decode|lanes|lanes2|lanes3|bytes|d256|cold|small2|small3]

small: T = 1, 16, 128 with decode slots (distinct random) and T = 128, 1024
       with prefill runs; V bytes stored one by one (groups off) with windows of
       1..16 tokens, heads per program, dims split over programs.
large: T = 4096, 32768 with prefill runs; K alone, V alone, warps, 5D V
       groups on or off, dims split, and the NHD window/head choices.
third: the 5D rows behind the NHD peer (heads per program, groups, decode windows).
occupancy: the same 5D rows with register caps (maxnreg) and 2 / 8 warps.
parts: K and V halves alone over windows, heads per program and warps.
words: the 5D V group path transposing in registers (v_words) against the
       tile path and against bytes one by one, over heads per program, row
       chunks, warps and windows, T = 1024, 4096, 32768 with prefill runs.
order: launch order (token_major: the programs of one token window, all head
       blocks, K and V, next to each other) against the default order, for
       both layouts, prefill runs T = 1024 .. 262144 and decode T = 128, with
       the heads-per-program / row-chunk choices that were close before.
order2: with token-major 5D for D <= 128 (the default since the order
       sweep): the Llama-like rows' warps and row chunks, and the group path
       against bytes one by one for D = 256, T = 4096 .. 262144.
spec: the register group path fetching the candidate leader's rows while the
       group is checked (v_spec) against the default, over the shapes that
       take groups and the ones next to the groups threshold.
decode: scattered slots (one token per sequence) at decode batch sizes
       128 .. 4096: the default against V bytes one by one without groups
       over windows and heads per program, K and V halves alone.
lanes: V bytes stored one by one with the lanes of a store on 16 / 4 / 2 / 1
       tokens before the next dim (byte_tokens), prefill runs and decode
       slots, T = 512 .. 16384.
lanes2: byte_tokens choosing per window (runs as loaded, other windows on
       byte_tokens tokens), and bytes one by one against the group path
       past 1024 tokens, prefill runs and decode, T = 512 .. 32768.
lanes3: the seventh session's defaults against byte_tokens 16 / 8 / 2 and,
       for D <= 128 between 1024 and 4096 tokens, the sixth's group path.
bytes: the bytes path on prefill runs of 2048 and 4096 tokens: windows,
       heads per program, row chunks, warps, launch order; K and V alone.
d256: D = 256 prefill runs of 8192 .. 131072 tokens (H = 1, 2): the group
       path's row chunks and warps against bytes one by one; Llama-like
       heads per program at 8192 / 32768. Meant for SWEEP_DTYPE=float8_e4m3fnuz.
cold: the defaults, bytes one by one and the group path with caches of 4 GiB
       per buffer (written lines cold, as in serving) against small caches.
small2: the rows below 4096 tokens still behind the peer (5D decode T = 16,
       128; Llama-like prefill runs T = 1024): warps, windows, K and V in one program, byte
       lanes, K and V halves alone.
small3: the best small2 candidates against the default, five rounds each.
Every shape also times the store floor of each layout swept
(sglang_kv5d.bench.store_floor: the same bytes written with a constant).
Times are CUDA-graph replay medians in us; ratio = time / byte floor.
"""

import json
import os
import sys
import time

import torch

from sglang_kv5d.bench import common, store_floor
from sglang_kv5d.bench.fp8_write import _import_peers, decode_loc, prefill_loc
from sglang_kv5d.kernels import fp8_write

out_path = sys.argv[1]
which = sys.argv[2] if len(sys.argv) > 2 else "all"
dev = torch.device("cuda")
bw = common.copy_bandwidth_bytes_per_s(dev)
res = {"copy_bandwidth_bytes_per_s": bw, "device": common.device_description(dev), "rows": []}
flash = _import_peers()["flash"]
gen = torch.Generator().manual_seed(1)
t0 = time.time()
GEOS = [(1, 256), (2, 256), (8, 128)]
PAGE = 64
# SWEEP_DTYPE=float8_e4m3fnuz sweeps the integer encoder (the peer has no such format on NVIDIA)
FN = getattr(torch, os.environ.get("SWEEP_DTYPE", "float8_e4m3fn"))
if FN != torch.float8_e4m3fn:
    flash = "not run for this format"


def caches(layout, n_pages, H, D):
    if layout == "5d":
        return (torch.zeros(n_pages, H, D // 16, PAGE, 16, dtype=torch.uint8, device=dev).view(FN),
                torch.zeros(n_pages, H, PAGE // 16, D, 16, dtype=torch.uint8, device=dev).view(FN))
    return (torch.zeros(n_pages * PAGE, H, D, dtype=torch.uint8, device=dev).view(FN),
            torch.zeros(n_pages * PAGE, H, D, dtype=torch.uint8, device=dev).view(FN))


def record(row):
    res["rows"].append(row)
    print(" ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items())
          + f" t={time.time() - t0:.0f}s", flush=True)
    with open(out_path, "w") as f:
        json.dump(res, f, indent=1)


def time_us(fn, T):
    return common.graph_replay_median_us(fn, inner=20 if T <= 4096 else 10, reps=20)


def sweep(H, D, T, slots, configs, n_pages=None):
    """Time ``configs`` (and the peer) on one shape; the caches hold about 1.25 T
    slots unless ``n_pages`` says otherwise."""
    n_pages = n_pages or (T * 5 // 4) // PAGE + 8
    k = torch.randn(T, H, D, device=dev).to(torch.bfloat16)
    v = torch.randn(T, H, D, device=dev).to(torch.bfloat16)
    if slots == "decode":
        loc = decode_loc(T, n_pages * PAGE, gen=gen, device=dev)
    else:
        loc = prefill_loc(T, n_pages * PAGE, PAGE, gen=gen, device=dev)
    ks = torch.tensor([0.75], device=dev)
    vs = torch.tensor([1.25], device=dev)
    floor = (T * H * 2 * D * 3 + T * 8) / bw * 1e6
    base = dict(H=H, D=D, T=T, slots=slots, cache_pages=n_pages)
    if not isinstance(flash, str):
        kc, vc = caches("nhd", n_pages, H, D)
        us = time_us(lambda: flash(k, v, kc.view(-1, PAGE, H, D), vc.view(-1, PAGE, H, D), loc,
                                   k_scale=ks, v_scale=vs), T)
        record(dict(base, layout="nhd", contender="flash", us=us, ratio=us / floor))
    for layout in sorted({c[0] for c in configs}):
        kc, vc = caches(layout, n_pages, H, D)
        for b in store_floor.block_sizes(T):
            us = time_us(store_floor.StoreFloor(kc, vc, loc, block_s=b), T)
            record(dict(base, layout=layout, contender=f"store floor, block_s={b}", us=us, ratio=us / floor))
    for layout, cfg in configs:
        kc, vc = caches(layout, n_pages, H, D)
        label = "default" if cfg is None else ",".join(f"{a}={b}" for a, b in cfg.items())
        fn = lambda: fp8_write.write_kv_fp8(k, v, kc, vc, loc, ks, vs, _config=cfg)
        try:
            us = time_us(fn, T)
        except Exception as exc:  # noqa: BLE001 - recorded
            record(dict(base, layout=layout, contender=label, error=f"{type(exc).__name__}: {exc}"[:300]))
            continue
        record(dict(base, layout=layout, contender=label, us=us, ratio=us / floor))
    del k, v, loc
    torch.cuda.empty_cache()


def small_configs(H, D):
    hb_max = max(h for h in (1, 2, 4, 8) if h <= H and h * D <= 512)
    out = [("5d", None), ("nhd", None)]
    for bt in (1, 4, 16):
        for hb in sorted({1, hb_max}):
            for ds in (1, 2):
                out.append(("5d", dict(groups=False, block_t=bt, heads_per_program=hb, d_split=ds)))
            out.append(("nhd", dict(block_t=bt, heads_per_program=hb)))
    out.append(("5d", dict(groups=False, block_t=4, heads_per_program=1, d_split=4 if D >= 128 else 2)))
    return out


def large_configs(H, D):
    hb_max = max(h for h in (1, 2, 4, 8) if h <= H and h * D <= 512)
    hb_256 = max(h for h in (1, 2, 4, 8) if h <= H and h * D <= 256)
    out = [("5d", None), ("5d", dict(parts="k")), ("5d", dict(parts="v")),
           ("5d", dict(groups=True, heads_per_program=hb_256, d_split=1)),
           ("5d", dict(groups=True, heads_per_program=hb_256, d_split=1, num_warps=8)),
           ("5d", dict(groups=False, heads_per_program=1, d_split=1)),
           ("5d", dict(groups=False, heads_per_program=1, d_split=2)),
           ("5d", dict(groups=False, heads_per_program=1, d_split=2, num_warps=8)),
           ("nhd", None), ("nhd", dict(parts="k")), ("nhd", dict(block_t=16)),
           ("nhd", dict(heads_per_program=hb_max)), ("nhd", dict(block_t=16, heads_per_program=hb_max)),
           ("nhd", dict(num_warps=8))]
    return out


if which in ("small", "all"):
    for H, D in GEOS:
        cfgs = small_configs(H, D)
        for T, slots in ((1, "decode"), (16, "decode"), (128, "decode"), (128, "runs"), (1024, "runs")):
            sweep(H, D, T, slots, cfgs)
if which in ("large", "all"):
    for H, D in GEOS:
        cfgs = large_configs(H, D)
        for T in (4096, 32768):
            sweep(H, D, T, "runs", cfgs)
if which == "third":
    # 5D rows still behind the NHD peer: heads per program with V bytes stored
    # one by one, the group path with one head, decode windows below 4 tokens
    for H, D in ((2, 256), (8, 128)):
        big = [("5d", None), ("5d", dict(groups=False, heads_per_program=2, d_split=2)),
               ("5d", dict(groups=False, heads_per_program=2, d_split=1)),
               ("5d", dict(groups=False, heads_per_program=1, d_split=2, block_t=32)),
               ("5d", dict(groups=True, heads_per_program=1, d_split=1)),
               ("5d", dict(groups=True, heads_per_program=1, d_split=2)),
               ("5d", dict(groups=True, heads_per_program=2, d_split=2))]
        for T in (4096, 32768):
            sweep(H, D, T, "runs", big)
        small = [("5d", None)] + [("5d", dict(groups=False, block_t=bt, heads_per_program=1, d_split=ds,
                                               num_warps=nw))
                                  for bt in (1, 2, 4) for ds in (1, 2, 4) for nw in (1, 2, 4)
                                  if (D // ds) >= 32]
        for T, slots in ((16, "decode"), (128, "decode"), (1024, "runs")):
            sweep(H, D, T, slots, small)
if which == "occupancy":
    # Register caps (more resident CTAs, more bytes in flight) and warps per
    # CTA for the 5D rows still behind the NHD peer; K and V halves alone too.
    for H, D in ((2, 256), (8, 128)):
        cfgs = [("5d", None)]
        for cap in (64, 48, 40, 32):
            cfgs.append(("5d", dict(maxnreg=cap)))
        for nw in (2, 8):
            cfgs.append(("5d", dict(num_warps=nw)))
            cfgs.append(("5d", dict(num_warps=nw, maxnreg=48)))
        for part in ("k", "v"):
            cfgs.append(("5d", dict(parts=part)))
            cfgs.append(("5d", dict(parts=part, maxnreg=48)))
            cfgs.append(("5d", dict(parts=part, maxnreg=32)))
        cfgs.append(("nhd", None))
        for T in (4096, 32768):
            sweep(H, D, T, "runs", cfgs)
        small = [("5d", None), ("5d", dict(maxnreg=48)), ("5d", dict(maxnreg=32)),
                 ("5d", dict(num_warps=2)), ("5d", dict(num_warps=2, maxnreg=48))]
        for T, slots in ((128, "decode"), (1024, "runs")):
            sweep(H, D, T, slots, small)
if which == "parts":
    # K and V halves alone over window / heads-per-program / warps: how fast
    # could each half be with a configuration of its own?
    for H, D in ((2, 256), (8, 128)):
        cfgs = [("5d", None), ("nhd", None), ("nhd", dict(parts="k")), ("nhd", dict(parts="v"))]
        for part in ("k", "v"):
            for bt in (16, 32, 64):
                for hb in (1, 2, 4):
                    if hb > H or hb * D > 512:
                        continue
                    for nw in (4, 8):
                        cfgs.append(("5d", dict(parts=part, block_t=bt, heads_per_program=hb,
                                                num_warps=nw, groups=D < 256, d_split=1)))
        for T in (4096, 32768):
            sweep(H, D, T, "runs", cfgs)
if which == "words":
    for H, D in ((8, 128), (2, 256), (1, 256)):
        hb_256 = max(h for h in (1, 2, 4, 8) if h <= H and h * D <= 256)
        cfgs = [("5d", None), ("nhd", None),
                ("5d", dict(groups=True, v_words=False, heads_per_program=hb_256, d_split=1)),
                ("5d", dict(groups=False, heads_per_program=1, d_split=2)),
                ("5d", dict(groups=True, parts="v", heads_per_program=hb_256, d_split=1)),
                ("5d", dict(groups=True, parts="k", heads_per_program=hb_256, d_split=1))]
        for hb in (1, 2, 4, 8):
            for ds in (1, 2):
                words = hb * D // ds // 2
                if hb > H or words < 32 or words > 512:
                    continue
                for nw in sorted({max(1, min(8, words // 32)), 4}):
                    for bt in (16, 32):
                        cfgs.append(("5d", dict(groups=True, heads_per_program=hb, d_split=ds,
                                                num_warps=nw, block_t=bt)))
        for T in (32768, 4096, 1024):
            sweep(H, D, T, "runs", cfgs)
if which == "order":
    TM = dict(token_major=True)
    for H, D in ((8, 128), (2, 256), (1, 256)):
        runs = [("5d", None), ("5d", TM), ("nhd", None), ("nhd", TM),
                ("5d", dict(parts="k")), ("5d", dict(parts="k", token_major=True)),
                ("5d", dict(parts="v")), ("5d", dict(parts="v", token_major=True))]
        if D == 128:
            for hb, ds in ((4, 2), (1, 1), (2, 2), (8, 2)):
                runs.append(("5d", dict(groups=True, heads_per_program=hb, d_split=ds)))
                runs.append(("5d", dict(groups=True, heads_per_program=hb, d_split=ds, token_major=True)))
            runs.append(("5d", dict(token_major=True, split_kv=False)))
        else:
            runs += [("5d", dict(token_major=True, d_split=1)), ("5d", dict(token_major=True, block_t=32)),
                     ("5d", dict(token_major=True, split_kv=False)),
                     ("5d", dict(token_major=True, heads_per_program=H))]
        runs.append(("nhd", dict(token_major=True, block_t=16)))
        for T in (32768, 4096, 262144, 1024):
            sweep(H, D, T, "runs", runs if T != 1024 else runs[:4])
        sweep(H, D, 128, "decode", [("5d", None), ("5d", TM), ("nhd", None), ("nhd", TM)])
if which == "order2":
    llama = [("5d", None), ("5d", dict(token_major=False)), ("5d", dict(num_warps=8)),
             ("5d", dict(heads_per_program=1, d_split=2)), ("5d", dict(heads_per_program=1)),
             ("5d", dict(parts="k")), ("5d", dict(parts="v")), ("nhd", None)]
    for T in (4096, 32768):
        sweep(8, 128, T, "runs", llama)
    for H in (2, 1):
        wide = [("5d", None), ("5d", dict(token_major=True)), ("nhd", None)]
        for ds in (1, 2):
            for tm in (False, True):
                wide.append(("5d", dict(groups=True, heads_per_program=1, d_split=ds, token_major=tm)))
        if H == 2:
            wide.append(("5d", dict(groups=True, heads_per_program=2, d_split=2, token_major=True)))
        for T in (4096, 32768, 262144):
            sweep(H, 256, T, "runs", wide)
if which == "spec":
    SPEC = dict(v_spec=True)
    for T in (4096, 32768, 262144):
        sweep(8, 128, T, "runs", [("5d", None), ("5d", SPEC), ("5d", dict(parts="v")),
                                  ("5d", dict(parts="v", v_spec=True)), ("nhd", None)])
    sweep(8, 128, 1024, "runs", [("5d", None), ("5d", dict(groups=True, heads_per_program=2, token_major=True)),
                                 ("5d", dict(groups=True, heads_per_program=2, token_major=True, v_spec=True))])
    sweep(8, 128, 2048, "decode", [("5d", None), ("5d", SPEC)])
    for H in (2, 1):
        for T in (4096, 32768, 262144):
            extra = [] if T > 4096 else [("5d", dict(groups=True, d_split=2, token_major=True)),
                                         ("5d", dict(groups=True, d_split=2, token_major=True, v_spec=True))]
            sweep(H, 256, T, "runs", [("5d", None), ("5d", SPEC)] + extra)
if which == "decode":
    for H, D in ((8, 128), (2, 256)):
        cfgs = [("5d", None), ("nhd", None), ("5d", dict(parts="k")), ("5d", dict(parts="v")),
                ("5d", dict(groups=False, block_t=4, heads_per_program=1, d_split=1, token_major=True)),
                ("5d", dict(groups=False, block_t=16, heads_per_program=1, d_split=1, token_major=True)),
                ("5d", dict(groups=False, block_t=4, heads_per_program=1, d_split=2, token_major=False)),
                ("5d", dict(groups=False, block_t=1, heads_per_program=1, d_split=1, token_major=True)),
                ("5d", dict(groups=False, parts="v", block_t=4, heads_per_program=1, d_split=1))]
        for T in (128, 512, 2048, 4096):
            sweep(H, D, T, "decode", cfgs)
if which == "lanes":
    # V bytes stored one by one with the lanes of a store on 16 / 4 / 2 / 1
    # tokens before the next dim (byte_tokens), on prefill runs and on
    # scattered decode slots, for the shapes that store bytes one by one (the
    # bytes path, and the group path's tokens outside complete groups)
    for H, D in ((8, 128), (2, 256), (1, 256)):
        for T in (512, 1024, 2048, 4096, 16384):
            for slots in ("runs", "decode"):
                if T == 16384 and (slots == "decode" or D == 128):
                    continue
                cfgs = [("5d", None)] + [("5d", dict(byte_tokens=lt)) for lt in (4, 2, 1)]
                if slots == "decode":
                    cfgs += [("5d", dict(groups=False, block_t=4, heads_per_program=1, d_split=1, token_major=True))]
                if T >= 2048 and D == 128:  # bytes one by one instead of the group path
                    cfgs += [("5d", dict(groups=False, heads_per_program=1, d_split=1, token_major=True,
                                         byte_tokens=lt)) for lt in (16, 4)]
                sweep(H, D, T, slots, cfgs + [("nhd", None)])
if which == "lanes2":
    # byte_tokens < block_t now chooses per window: a window of one run is
    # stored as loaded, any other with the lanes on byte_tokens tokens. Bytes
    # one by one against the group path past 1024 tokens, runs and decode.
    for H, D in ((8, 128), (2, 256), (1, 256)):
        bytes16 = dict(groups=False, heads_per_program=1, token_major=D < 256, byte_tokens=16)
        for T in (512, 1024, 2048, 4096, 8192, 32768):
            for slots in ("runs", "decode"):
                if T == 32768 and slots == "decode":
                    continue
                cfgs = [("5d", None), ("5d", dict(byte_tokens=4)), ("5d", dict(byte_tokens=2))]
                if T > 1024:
                    cfgs += [("5d", bytes16), ("5d", dict(bytes16, byte_tokens=4))]
                    if D == 128:
                        cfgs += [("5d", dict(bytes16, heads_per_program=2, byte_tokens=4)),
                                 ("5d", dict(bytes16, d_split=2, byte_tokens=4))]
                sweep(H, D, T, slots, cfgs + [("nhd", None)])
if which == "lanes3":
    # the seventh session's defaults (bytes one by one up to 4096 tokens for
    # D <= 128, byte_tokens 4 judged from the window's first and last two
    # slots) against the sixth's (groups past 1024 tokens, byte_tokens 16)
    for H, D in ((8, 128), (2, 256), (1, 256)):
        for T in (256, 512, 1024, 2048, 4096, 8192):
            for slots in ("runs", "decode"):
                cfgs = [("5d", None), ("5d", dict(byte_tokens=16)), ("5d", dict(byte_tokens=8)),
                        ("5d", dict(byte_tokens=2))]
                if D == 128 and 1024 < T <= 4096:
                    cfgs.append(("5d", dict(groups=True, heads_per_program=2, v_spec=True, byte_tokens=16)))
                sweep(H, D, T, slots, cfgs + [("nhd", None)])
if which == "bytes":
    # the bytes path at prefill sizes (runs): windows, heads per program, row
    # chunks, warps and launch order around the defaults; K and V halves
    for H, D in ((8, 128), (2, 256), (1, 256)):
        cfgs = [("5d", None), ("5d", dict(parts="k")), ("5d", dict(parts="v"))]
        for bt in (16, 32):
            for hb in (1, 2):
                for ds in (1, 2):
                    for nw in (2, 4, 8):
                        if hb > H or (D // ds) < 64:
                            continue
                        cfgs.append(("5d", dict(groups=False, block_t=bt, heads_per_program=hb, d_split=ds,
                                                num_warps=nw, byte_tokens=16)))
        cfgs.append(("5d", dict(token_major=D == 256)))
        for T in (2048, 4096):
            sweep(H, D, T, "runs", cfgs + [("nhd", None)])
if which == "d256":
    # D = 256 past the bytes path: row chunks of the group path against bytes
    # one by one (run with SWEEP_DTYPE=float8_e4m3fnuz for the integer encoder)
    for H in (1, 2):
        cfgs = [("5d", None), ("5d", dict(groups=True, d_split=1, token_major=True)),
                ("5d", dict(groups=True, d_split=2, token_major=True, num_warps=4)),
                ("5d", dict(groups=False, d_split=2, token_major=False)),
                ("5d", dict(groups=False, d_split=1, token_major=False)), ("nhd", None)]
        for T in (8192, 16384, 32768, 131072):
            sweep(H, 256, T, "runs", cfgs)
    for T in (8192, 32768):
        sweep(8, 128, T, "runs", [("5d", None), ("5d", dict(heads_per_program=1, d_split=1)),
                                  ("5d", dict(groups=False, heads_per_program=1, token_major=True)), ("nhd", None)])
if which == "cold":
    # caches of 4 GiB per K / V buffer (slots spread over all of it: the
    # written lines are not in the 50 MB L2 between replays, as in serving)
    # against the usual 1.25 T slots, for the choices the small caches made
    for H, D in ((8, 128), (2, 256)):
        pages = (4 << 30) // (PAGE * H * D)
        groups = dict(groups=True, heads_per_program=2, v_spec=True, byte_tokens=16) if D == 128 else \
            dict(groups=True, d_split=2, token_major=True, byte_tokens=16)
        bytes16 = dict(groups=False, heads_per_program=1, d_split=1 if D == 128 else 2, token_major=D == 128,
                       byte_tokens=16)
        for T, slots in ((512, "decode"), (2048, "decode"), (1024, "runs"), (4096, "runs"), (32768, "runs")):
            cfgs = [("5d", None), ("5d", bytes16), ("5d", groups)]
            if slots == "decode":
                cfgs.append(("5d", dict(bytes16, byte_tokens=4)))
            for n in (None, pages):
                sweep(H, D, T, slots, cfgs + [("nhd", None)], n_pages=n)
                torch.cuda.empty_cache()
if which == "small2":
    for H, D, T, slots in ((8, 128, 128, "decode"), (8, 128, 16, "decode"), (2, 256, 128, "decode"),
                           (8, 128, 1024, "runs"), (1, 256, 128, "decode")):
        cfg = fp8_write.launch_config(T, H, D, D, True)
        cfgs = [("5d", None), ("5d", dict(parts="k")), ("5d", dict(parts="v")), ("5d", dict(split_kv=False))]
        cfgs += [("5d", dict(num_warps=w)) for w in (1, 2, 8)]
        cfgs += [("5d", dict(block_t=b, byte_tokens=min(b, cfg["byte_tokens"])))
                 for b in (1, 2, 4, 8, 16, 32) if b != cfg["block_t"]]
        cfgs += [("5d", dict(byte_tokens=b)) for b in (1, 2, 4, 16) if b != cfg["byte_tokens"]]
        cfgs += [("5d", dict(token_major=not cfg["token_major"]))]
        cfgs += [("5d", dict(d_split=1 if cfg["d_split"] > 1 else 2))]
        if H > 1:
            cfgs += [("5d", dict(heads_per_program=2))]
        sweep(H, D, T, slots, cfgs + [("nhd", None)])
if which == "small3":
    # the small2 candidates against the default, five rounds each (rows at these
    # sizes move by 0.1-0.3 us between runs)
    for H, D, T, slots, cands in (
            (8, 128, 128, "decode", [dict(heads_per_program=2), dict(block_t=8)]),
            (1, 256, 128, "decode", [dict(token_major=True), dict(block_t=1, byte_tokens=1)]),
            (2, 256, 128, "decode", [dict(token_major=True), dict(block_t=2, byte_tokens=2)]),
            (8, 128, 1024, "runs", [dict(heads_per_program=2), dict(byte_tokens=16), dict(token_major=False)])):
        for rnd in range(5):
            sweep(H, D, T, slots, [("5d", None)] + [("5d", c) for c in cands])
print(f"done in {time.time() - t0:.0f}s", flush=True)
