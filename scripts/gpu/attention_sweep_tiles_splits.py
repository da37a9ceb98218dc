#!/usr/bin/env python
"""Sweep decode tile configs and split counts together, with the peer in the same run.

    python scripts/gpu/attention_sweep_tiles_splits.py OUT.json [budget_s] [load2d]

Rows: the shapes still below a target in docs/benchmarks.md (bf16 D=256 at
bs >= 32; bs = 1 rows against the 3x-peer target). For each shape: SGLang's
Triton decode at its best split count, then every (tile config x split count)
candidate of ours. Rows are written to OUT.json as they come.
Tile config = (BLOCK_N, BLOCK_H, num_warps, num_stages, LOAD3D).
"""

from __future__ import annotations

import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))


def main() -> int:
    import torch

    from sglang_kv5d.bench.attention import _kv_bytes, build_case, load_peer, peer_best_us
    from sglang_kv5d.bench.common import copy_bandwidth_bytes_per_s, graph_replay_median_us
    from sglang_kv5d.kernels.attention_5d import _decode_config, decode_attention_5d, default_num_splits

    out_path = sys.argv[1]
    budget = float(sys.argv[2]) if len(sys.argv) > 2 else 200.0
    t0 = time.time()
    bw = copy_bandwidth_bytes_per_s()
    peer, peer_src = load_peer()
    res = {"copy_bw": bw, "peer": peer_src, "rows": []}
    dev = torch.device("cuda")
    bf16_256 = [(bs, ctx, hq, hkv, "bf16") for bs in (32, 128) for ctx in (1024, 8192, 32768)
                for hq, hkv in ((4, 1), (16, 2))]
    bs1 = [(1, ctx, hq, hkv, kv) for ctx in (1024, 8192, 32768) for hq, hkv in ((4, 1), (16, 2))
           for kv in ("bf16", "fp8_e4m3fn")]
    configs = [None, (32, 16, 4, 2, True), (32, 16, 4, 3, True), (16, 16, 4, 2, True), (16, 16, 4, 3, True),
               (64, 16, 4, 2, True), (32, 16, 8, 2, True)]
    if len(sys.argv) > 3 and sys.argv[3] == "load2d":
        # second pass: tiles loaded straight into the dot's [D, N] / [N, D] order
        # (LOAD3D off) against the shipped 3-D load, on the rows below the peer
        configs = [None, (32, 16, 4, 2, False), (32, 16, 4, 3, False), (64, 16, 4, 2, False),
                   (64, 16, 4, 3, False), (16, 16, 4, 3, False), (32, 16, 4, 1, True), (64, 16, 4, 1, True)]
        bf16_256 = [(32, 1024, 16, 2, "bf16"), (32, 8192, 4, 1, "bf16"), (32, 8192, 16, 2, "bf16"),
                    (128, 8192, 16, 2, "bf16"), (128, 1024, 4, 1, "bf16")]
        bs1 = [(1, 8192, 4, 1, "bf16"), (1, 8192, 16, 2, "fp8_e4m3fn")]

    def save():
        with open(out_path, "w") as f:
            json.dump(res, f, indent=1)

    for bs, ctx, hq, hkv, kv in bf16_256 + bs1:
        if time.time() - t0 > budget:
            break
        case = build_case(bs, ctx, hq, hkv, 256, kv, "cuda")
        nbytes = _kv_bytes(bs, ctx, hq, hkv, 256, 1 if kv.startswith("fp8") else 2)
        q, out = case["q"], torch.empty_like(case["q"])
        shape = [bs, ctx, hq, hkv, kv]
        sm_scale = 1 / math.sqrt(256)
        # the peer at its best split count
        errors = []
        peer_best = peer_best_us(peer, case, out, sm_scale, errors=errors)
        res["rows"] += [dict(shape=shape, who="peer", splits=s, error=e) for s, e in errors]
        res["rows"].append(dict(shape=shape, who="peer", us=peer_best[0], splits=peer_best[1]))
        d = default_num_splits(bs, hkv, 1, case["bt"].shape[1] * 64, dev)
        # split counts up to about 8 waves of CTAs and at least 32 tokens per split
        cap = min(max(1, ctx // 32), max(1, 8 * 132 // (bs * hkv)))
        cands = sorted({s for s in (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256) if s <= cap} | {d})
        best = None
        for cfg in configs:
            for s in cands:
                if time.time() - t0 > budget:
                    break

                def fn():
                    decode_attention_5d(q, case["k5"], case["v5"], case["bt"], case["ctx"], sm_scale=sm_scale,
                                        out=out, num_splits=s, _config=cfg)

                try:
                    us = graph_replay_median_us(fn, inner=5, reps=10, warmup=2)
                except Exception as exc:  # noqa: BLE001
                    res["rows"].append(dict(shape=shape, config=str(cfg), splits=s, error=str(exc)[:200]))
                    continue
                row = dict(shape=shape, who="ours", config=list(cfg) if cfg else "default", splits=s,
                           default_splits=d, us=us, bw_frac=nbytes / (us * 1e-6) / bw, vs_peer=peer_best[0] / us)
                res["rows"].append(row)
                if best is None or us < best["us"]:
                    best = row
        print("shape", shape, "default", _decode_config(256, hq // hkv, 64, 16 if kv != "bf16" else 8,
                                                        kv != "bf16"),
              "splits", d, "peer", peer_best, "best", best and (best["config"], best["splits"], round(best["us"], 2),
                                                                 round(best["vs_peer"], 3)),
              f"t={time.time() - t0:.0f}s", flush=True)
        del case
        torch.cuda.empty_cache()
        save()
    res["elapsed_s"] = time.time() - t0
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
