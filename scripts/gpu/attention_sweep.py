#!/usr/bin/env python
"""Tile-config and split-count sweep for decode_attention_5d (GPU, tuning aid).

    python scripts/gpu/attention_sweep.py --json sweep.json [--budget-s 90]

Times every candidate config (BLOCK_N, BLOCK_H, num_warps, num_stages, LOAD3D) on a
few representative shapes, then the split count around the default for small
batches. Stops early when the time budget is spent; prints what it has.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))


def main() -> int:
    import argparse

    import torch

    from sglang_kv5d.bench.attention import _kv_bytes, build_case
    from sglang_kv5d.bench.common import copy_bandwidth_bytes_per_s, graph_replay_median_us
    from sglang_kv5d.kernels.attention_5d import decode_attention_5d, default_num_splits

    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--budget-s", type=float, default=90.0)
    args = ap.parse_args()
    t0 = time.time()
    bw = copy_bandwidth_bytes_per_s()
    res = dict(copy_bw=bw, configs=[], splits=[])
    shapes = [
        # (bs, ctx, H_q, H_kv, D, kv)
        (128, 8192, 4, 1, 256, "bf16"),
        (128, 8192, 4, 1, 256, "fp8_e4m3fn"),
        (32, 8192, 32, 8, 128, "bf16"),
        (32, 8192, 32, 8, 128, "fp8_e4m3fn"),
    ]
    configs = [
        None,  # the shipped default (_decode_config)
        (32, 16, 4, 3, True),
        (32, 16, 4, 4, True),
        (64, 16, 4, 2, True),
        (64, 16, 4, 3, True),
        (16, 16, 4, 4, True),
        (64, 16, 8, 2, True),
    ]

    def timed(case, sm, cfg=None, splits=None):
        q = case["q"]
        out = torch.empty_like(q)
        sc = torch.ones(1, device="cuda") if case["fp8"] else None

        def fn():
            decode_attention_5d(
                q, case["k5"], case["v5"], case["bt"], case["ctx"], sm_scale=sm, k_scale=sc,
                v_scale=sc, out=out, num_splits=splits, _config=cfg,
            )

        fn()
        torch.cuda.synchronize()
        return graph_replay_median_us(fn, inner=5, reps=10, warmup=2)

    def dump():
        if args.json:
            with open(args.json, "w") as f:
                json.dump(res, f, indent=1)

    for bs, ctx, H_q, H_kv, D, kv in shapes:
        case = build_case(bs, ctx, H_q, H_kv, D, kv, "cuda")
        nbytes = _kv_bytes(bs, ctx, H_q, H_kv, D, 1 if case["fp8"] else 2)
        for cfg in configs:
            if time.time() - t0 > args.budget_s:
                break
            try:
                us = timed(case, 1 / math.sqrt(D), cfg)
                entry = dict(shape=[bs, ctx, H_q, H_kv, D, kv], config=list(cfg) if cfg else 'default', us=us, bw_frac=nbytes / us / 1e-6 / bw)
            except Exception as exc:  # noqa: BLE001
                entry = dict(shape=[bs, ctx, H_q, H_kv, D, kv], config=list(cfg) if cfg else 'default', error=str(exc)[:300])
            res["configs"].append(entry)
            print(entry, flush=True)
        del case
        torch.cuda.empty_cache()
        dump()
    for bs, ctx, H_q, H_kv, D, kv in [
        (1, 32768, 4, 1, 256, "bf16"),
        (1, 8192, 16, 2, 256, "fp8_e4m3fn"),
        (32, 32768, 4, 1, 256, "bf16"),
        (1, 1024, 32, 8, 128, "bf16"),
    ]:
        if time.time() - t0 > args.budget_s * 1.3:
            break
        case = build_case(bs, ctx, H_q, H_kv, D, kv, "cuda")
        nbytes = _kv_bytes(bs, ctx, H_q, H_kv, D, 1 if case["fp8"] else 2)
        d = default_num_splits(bs, H_kv, 1, case["bt"].shape[1] * 64, torch.device("cuda"))
        for s in sorted({1, max(1, d // 4), max(1, d // 2), d, d * 2, 16, 32, 64, 128}):
            us = timed(case, 1 / math.sqrt(D), None, s)
            entry = dict(shape=[bs, ctx, H_q, H_kv, D, kv], splits=s, default=d, us=us, bw_frac=nbytes / us / 1e-6 / bw)
            res["splits"].append(entry)
            print(entry, flush=True)
        del case
        torch.cuda.empty_cache()
        dump()
    res["elapsed_s"] = time.time() - t0
    dump()
    return 0


if __name__ == "__main__":
    sys.exit(main())
