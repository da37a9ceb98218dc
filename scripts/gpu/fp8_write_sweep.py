"""Device-run helper: time write_kv_fp8 launch configurations (block tokens,
warps, K/V split) on large T, to pick the defaults in fp8_write.launch_config.

usage: python scripts/gpu/fp8_write_sweep.py OUT.json [T ...]
"""

import itertools
import json
import sys
import time

import torch

from sglang_kv5d.bench import common
from sglang_kv5d.bench.fp8_write import prefill_loc, decode_loc
from sglang_kv5d.kernels import fp8_write

out_path = sys.argv[1]
Ts = [int(t) for t in sys.argv[2:]] or [32768, 262144]
dev = torch.device("cuda")
bw = common.copy_bandwidth_bytes_per_s(dev)
res = {"copy_bandwidth_bytes_per_s": bw, "rows": []}
gen = torch.Generator().manual_seed(1)
configs = {
    "5d": [(16, 4, True), (32, 4, True), (64, 4, True), (32, 8, True), (64, 8, True),
           (128, 8, True), (32, 4, False), (64, 8, False)],
    "nhd": [(32, 4, True), (64, 4, True), (128, 8, True), (64, 4, False)],
}
t0 = time.time()
for (H, D), layout in itertools.product([(1, 256), (2, 256), (8, 128)], ["5d", "nhd"]):
    for T in Ts:
        n_pages = (T * 5 // 4) // 64 + 4
        k = torch.randn(T, H, D, device=dev).to(torch.bfloat16)
        v = torch.randn(T, H, D, device=dev).to(torch.bfloat16)
        loc = prefill_loc(T, n_pages * 64, 64, gen=gen, device=dev)
        if layout == "5d":
            kc = torch.zeros(n_pages, H, D // 16, 64, 16, dtype=torch.uint8, device=dev)
            vc = torch.zeros(n_pages, H, 4, D, 16, dtype=torch.uint8, device=dev)
        else:
            kc = torch.zeros(n_pages * 64, H, D, dtype=torch.uint8, device=dev)
            vc = torch.zeros(n_pages * 64, H, D, dtype=torch.uint8, device=dev)
        ks = torch.tensor([0.75], device=dev)
        floor = (T * H * 2 * D * 3 + T * 8) / bw * 1e6
        for bt, nw, split in configs[layout]:
            for enc in (["auto", "bits"] if (bt, nw, split) == configs[layout][1] else ["auto"]):
                fn = lambda: fp8_write.write_kv_fp8(k, v, kc, vc, loc, ks, ks, fp8_dtype=torch.float8_e4m3fn,
                                                    _block_tokens=bt, _num_warps=nw, _split_kv=split,
                                                    _encoder=enc)
                try:
                    us = common.graph_replay_median_us(fn, inner=5 if T > 32768 else 10, reps=10)
                except Exception as exc:
                    us = None
                    print("FAIL", H, D, layout, T, bt, nw, split, exc)
                row = dict(H=H, D=D, layout=layout, T=T, block_t=bt, warps=nw, split=split, encoder=enc,
                           us=us, floor_us=floor, ratio=(us / floor if us else None))
                res["rows"].append(row)
                print(f"H{H} D{D} {layout} T={T} bt={bt} w={nw} split={split} enc={enc}: "
                      f"{us if us is None else round(us, 2)} us  ratio={row['ratio'] and round(row['ratio'], 3)}"
                      f"  t={time.time() - t0:.0f}s", flush=True)
                with open(out_path, "w") as f:
                    json.dump(res, f, indent=1)
        del k, v, kc, vc, loc
        torch.cuda.empty_cache()
# decode latency: configs for small T
for (H, D), layout in itertools.product([(1, 256), (8, 128)], ["5d", "nhd"]):
    for T in (1, 128):
        n_pages = 64
        k = torch.randn(T, H, D, device=dev).to(torch.bfloat16)
        loc = decode_loc(T, n_pages * 64, gen=gen, device=dev)
        if layout == "5d":
            kc = torch.zeros(n_pages, H, D // 16, 64, 16, dtype=torch.uint8, device=dev)
            vc = torch.zeros(n_pages, H, 4, D, 16, dtype=torch.uint8, device=dev)
        else:
            kc = torch.zeros(n_pages * 64, H, D, dtype=torch.uint8, device=dev)
            vc = torch.zeros(n_pages * 64, H, D, dtype=torch.uint8, device=dev)
        ks = torch.tensor([0.75], device=dev)
        for bt, nw, split in [(16, 4, True), (16, 2, True), (16, 4, False)]:
            fn = lambda: fp8_write.write_kv_fp8(k, k, kc, vc, loc, ks, ks, fp8_dtype=torch.float8_e4m3fn,
                                                _block_tokens=bt, _num_warps=nw, _split_kv=split)
            us = common.graph_replay_median_us(fn, inner=20, reps=20)
            res["rows"].append(dict(H=H, D=D, layout=layout, T=T, block_t=bt, warps=nw, split=split,
                                    encoder="auto", us=us))
            print(f"decode H{H} D{D} {layout} T={T} bt={bt} w={nw} split={split}: {us:.2f} us", flush=True)
with open(out_path, "w") as f:
    json.dump(res, f, indent=1)
