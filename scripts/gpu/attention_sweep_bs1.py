#!/usr/bin/env python
"""Split counts for bs = 1 decode (the 3x-peer target), ours against the peer.

    python scripts/gpu/attention_sweep_bs1.py OUT.json [tiles|short]

Each bs = 1 row of the benchmark at ctx 8k and 32k: SGLang's Triton decode at its
best split count, ours at the default and at fixed counts up to 256 (splits of
32 tokens and more; resident CTAs allow up to three per SM).

``tiles``: only the rows still short of 3x the peer, each over tile
configurations (BLOCK_N, BLOCK_H, num_warps, num_stages, LOAD3D) x split counts.
``short``: the bs = 1 rows at ctx 1k, 64- and 32-token tiles x 8 .. 32 splits
(splits shorter than a tile leave it partly empty).
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

    from sglang_kv5d.bench.attention import build_case, load_peer, peer_best_us
    from sglang_kv5d.bench.common import graph_replay_median_us
    from sglang_kv5d.kernels import attention_5d as A

    out_path = sys.argv[1]
    mode = sys.argv[2] if len(sys.argv) > 2 else ""
    t0 = time.time()
    peer, peer_src = load_peer()
    res = {"peer": peer_src, "rows": []}
    shapes = [(ctx, hq, hkv, D, kv) for ctx in (8192, 32768)
              for hq, hkv, D in ((4, 1, 256), (16, 2, 256), (32, 8, 128))
              for kv in ("bf16", "fp8_e4m3fn")]
    configs = [None]
    split_counts = (None, 96, 132, 176, 198, 256)
    if mode == "short":
        shapes = [(1024, hq, hkv, D, kv) for hq, hkv, D in ((4, 1, 256), (16, 2, 256), (32, 8, 128))
                  for kv in ("bf16", "fp8_e4m3fn")]
        configs = [None, (32, 16, 4, 3, True)]
        split_counts = (None, 8, 16, 32)
    if mode == "tiles":
        shapes = [(8192, 16, 2, 256, "bf16"), (8192, 16, 2, 256, "fp8_e4m3fn"),
                  (8192, 32, 8, 128, "bf16"), (8192, 32, 8, 128, "fp8_e4m3fn"),
                  (32768, 32, 8, 128, "fp8_e4m3fn")]
        configs = [None, (16, 16, 4, 3, True), (32, 16, 4, 3, True), (32, 16, 4, 4, True),
                   (64, 16, 4, 2, True), (64, 16, 4, 3, True), (64, 16, 8, 3, True)]
        split_counts = (None, 32, 48, 64, 96, 132, 198, 256)
    for ctx, hq, hkv, D, kv in shapes:
        case = build_case(1, ctx, hq, hkv, D, kv, "cuda")
        q, out = case["q"], torch.empty_like(case["q"])
        sm_scale = 1 / math.sqrt(D)
        best = peer_best_us(peer, case, out, sm_scale, inner=10, reps=20)
        shape = [1, ctx, hq, hkv, D, kv]
        res["rows"].append(dict(shape=shape, who="peer", us=best[0], splits=best[1]))
        for cfg in configs:
            line = [f"{shape} peer {best[0]:.1f} ({best[1]}) cfg={cfg}"]
            for s in split_counts:
                info = {}

                def fn():
                    A.decode_attention_5d(q, case["k5"], case["v5"], case["bt"], case["ctx"],
                                          sm_scale=sm_scale, out=out, num_splits=s, _info=info,
                                          _config=cfg)

                try:
                    fn()
                    us = graph_replay_median_us(fn, inner=10, reps=20, warmup=2)
                except Exception as exc:  # noqa: BLE001 - recorded (shared memory limits)
                    line.append(f"{s}:{type(exc).__name__}")
                    continue
                res["rows"].append(dict(shape=shape, who="ours", splits=info["num_splits"],
                                        config=info["config"], default=s is None and cfg is None,
                                        us=us, vs_peer=best[0] / us))
                line.append(f"{info['num_splits']}{'*' if s is None else ''}:{us:.1f}")
            print(" ".join(line), f"t={time.time() - t0:.0f}s", flush=True)
        with open(out_path, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
