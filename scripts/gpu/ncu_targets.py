#!/usr/bin/env python
"""Launch one kernel of interest a few times, for Nsight Compute to profile.

    ncu --clock-control none -k regex:NAME -c 1 --section ... \\
        python scripts/gpu/ncu_targets.py TARGET

TARGET: attn-ours | attn-peer   bf16 D=256, H_q/H_kv = 16/2, bs 32, ctx 8k (the
                                decode row furthest below the peer), ours at
                                its default split count, the peer at 8 splits
        write-5d | write-nhd    fused FP8 write, H=8 D=128, T=32768, prefill runs
                                (the 5D row furthest behind NHD)
        write-5d-k | write-5d-v the K or the V half of write-5d alone
NCU_T (environment) sets the write's token count (default 32768).
"""

from __future__ import annotations

import math
import os
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))


def main() -> int:
    import torch

    target = sys.argv[1]
    dev = torch.device("cuda")
    if target.startswith("attn"):
        from sglang_kv5d.bench.attention import build_case, load_peer, nhd_for_peer, peer_call
        from sglang_kv5d.kernels.attention_5d import decode_attention_5d

        case = build_case(32, 8192, 16, 2, 256, "bf16", "cuda")
        q, out = case["q"], torch.empty_like(case["q"])
        if target == "attn-ours":
            def fn():
                decode_attention_5d(q, case["k5"], case["v5"], case["bt"], case["ctx"],
                                    sm_scale=1 / math.sqrt(256), out=out)
        else:
            peer, _ = load_peer()
            k_nhd, v_nhd, indptr, indices = nhd_for_peer(case)
            fn = peer_call(peer, q, k_nhd, v_nhd, indptr, indices, out, 8, 1 / math.sqrt(256))
    else:
        from sglang_kv5d.bench.fp8_write import prefill_loc
        from sglang_kv5d.kernels.fp8_write import write_kv_fp8

        T, H, D, page = int(os.environ.get("NCU_T", "32768")), 8, 128, 64
        n_pages = (T * 5 // 4) // page + 8
        k = torch.randn(T, H, D, device=dev).to(torch.bfloat16)
        v = torch.randn(T, H, D, device=dev).to(torch.bfloat16)
        loc = prefill_loc(T, n_pages * page, page, gen=torch.Generator().manual_seed(1), device=dev)
        fn8 = torch.float8_e4m3fn
        if target.startswith("write-5d"):
            kc = torch.zeros(n_pages, H, D // 16, page, 16, dtype=torch.uint8, device=dev).view(fn8)
            vc = torch.zeros(n_pages, H, page // 16, D, 16, dtype=torch.uint8, device=dev).view(fn8)
        else:
            kc = torch.zeros(n_pages * page, H, D, dtype=torch.uint8, device=dev).view(fn8)
            vc = torch.zeros(n_pages * page, H, D, dtype=torch.uint8, device=dev).view(fn8)
        ks = torch.tensor([0.75], device=dev)

        part = {"write-5d-k": dict(parts="k"), "write-5d-v": dict(parts="v")}.get(target)

        def fn():
            write_kv_fp8(k, v, kc, vc, loc, ks, ks, _config=part)
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
