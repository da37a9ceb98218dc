"""Device-run helper: time write_kv_fp8 launch configurations (window tokens,
heads per program, warps, K/V split, eager V load) to check the defaults in
fp8_write.launch_config. Results go to OUT.json as they come.

usage: python scripts/gpu/fp8_write_sweep.py OUT.json
"""

import itertools
import json
import sys
import time

import torch

from sglang_kv5d.bench import common
from sglang_kv5d.bench.fp8_write import decode_loc, prefill_loc
from sglang_kv5d.kernels import fp8_write

out_path = sys.argv[1]
dev = torch.device("cuda")
bw = common.copy_bandwidth_bytes_per_s(dev)
res = {"copy_bandwidth_bytes_per_s": bw, "rows": []}
gen = torch.Generator().manual_seed(1)
t0 = time.time()


def caches(layout, n_pages, H, D):
    if layout == "5d":
        return (torch.zeros(n_pages, H, D // 16, 64, 16, dtype=torch.uint8, device=dev),
                torch.zeros(n_pages, H, 4, D, 16, dtype=torch.uint8, device=dev))
    return (torch.zeros(n_pages * 64, H, D, dtype=torch.uint8, device=dev),
            torch.zeros(n_pages * 64, H, D, dtype=torch.uint8, device=dev))


def record(row):
    res["rows"].append(row)
    print(" ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items())
          + f" t={time.time() - t0:.0f}s", flush=True)
    with open(out_path, "w") as f:
        json.dump(res, f, indent=1)


for (H, D), layout in itertools.product([(1, 256), (2, 256), (8, 128)], ["5d", "nhd"]):
    hb_max = max(h for h in (1, 2, 4, 8) if h <= H and h * D <= 512)
    default = fp8_write.launch_config(32768, H, D, D, layout == "5d")
    if layout == "5d":
        cfgs = [(16, default["heads_per_program"], 4, True), (16, 1, 4, True), (16, hb_max, 4, True),
                (16, hb_max, 8, True), (32, 1, 4, True), (32, 1, 4, False)]
    else:
        cfgs = [(32, default["heads_per_program"], 4, True), (32, 1, 4, True), (32, hb_max, 4, True),
                (16, default["heads_per_program"], 4, True)]
    cfgs = list(dict.fromkeys(cfgs))
    for T in (32768, 262144):
        n_pages = (T * 5 // 4) // 64 + 4
        k = torch.randn(T, H, D, device=dev).to(torch.bfloat16)
        v = torch.randn(T, H, D, device=dev).to(torch.bfloat16)
        loc = prefill_loc(T, n_pages * 64, 64, gen=gen, device=dev)
        kc, vc = caches(layout, n_pages, H, D)
        ks = torch.tensor([0.75], device=dev)
        floor = (T * H * 2 * D * 3 + T * 8) / bw * 1e6
        for bt, hb, nw, split in cfgs:
            fn = lambda: fp8_write.write_kv_fp8(k, v, kc, vc, loc, ks, ks, fp8_dtype=torch.float8_e4m3fn,
                                                _block_tokens=bt, _heads_per_program=hb, _num_warps=nw,
                                                _split_kv=split)
            try:
                us = common.graph_replay_median_us(fn, inner=5 if T > 32768 else 10, reps=10)
            except Exception as exc:  # noqa: BLE001
                print("FAIL", H, D, layout, T, bt, hb, nw, split, exc, flush=True)
                continue
            record(dict(H=H, D=D, layout=layout, T=T, block_t=bt, hb=hb, warps=nw, split=split,
                        default=(bt, hb, nw, split) == cfgs[0], us=us, ratio=us / floor))
        del k, v, kc, vc, loc
        torch.cuda.empty_cache()

for (H, D), layout in itertools.product([(1, 256), (8, 128)], ["5d", "nhd"]):
    for T in (1, 128):
        k = torch.randn(T, H, D, device=dev).to(torch.bfloat16)
        loc = decode_loc(T, 64 * 64, gen=gen, device=dev)
        kc, vc = caches(layout, 64, H, D)
        ks = torch.tensor([0.75], device=dev)
        for eager in (True, False):
            fn = lambda: fp8_write.write_kv_fp8(k, k, kc, vc, loc, ks, ks, fp8_dtype=torch.float8_e4m3fn,
                                                _eager_v=eager)
            us = common.graph_replay_median_us(fn, inner=20, reps=20)
            record(dict(H=H, D=D, layout=layout, T=T, eager_v=eager, us=us))
