#!/usr/bin/env python
"""Split counts against resident CTAs per SM, for the decode rows below the peer.

    python scripts/gpu/attention_sweep_occupancy.py OUT.json [budget_s] [regcap]

``regcap``: instead, register caps that let 4 or 5 CTAs share an SM (maxnreg
128 / 96) against the shipped configuration and the same tiles uncapped,
each at the default split count for its own occupancy.

For each bf16 D=256 shape at bs >= 32 (and one fp8 control row): SGLang's
Triton decode at its best split count, then ours for a few tile configs
(BLOCK_N, BLOCK_H, num_warps, num_stages, LOAD3D[, maxnreg]) over a fine range
of split counts. Each config's compiled kernel reports registers, spills and
shared memory, from which the resident CTAs per SM follow; rows record the
waves (CTAs / (SMs x resident)) so that a split rule can be read off.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))


class _Capture:
    """Stands in for the Triton kernel object and keeps the last CompiledKernel."""

    def __init__(self, jit):
        self.jit = jit
        self.last = None

    def __getattr__(self, name):  # warmup() and the rest: the real kernel's
        return getattr(self.jit, name)

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.last = self.jit[grid](*args, **kwargs)
            return self.last

        return launch


def occupancy(ck, device) -> dict:
    """Registers, spills, shared memory and warps of a launched CompiledKernel,
    with the resident CTAs per SM the shipped split rule derives from them."""
    from sglang_kv5d.kernels.attention_5d import resident_ctas_of

    return dict(regs=int(getattr(ck, "n_regs", 0) or 0), spills=int(getattr(ck, "n_spills", 0) or 0),
                shared=int(ck.metadata.shared), warps=int(ck.metadata.num_warps),
                resident=resident_ctas_of(ck, device))


def main() -> int:
    import torch

    from sglang_kv5d.bench.attention import _kv_bytes, build_case, load_peer, peer_best_us
    from sglang_kv5d.bench.common import copy_bandwidth_bytes_per_s, graph_replay_median_us
    from sglang_kv5d.kernels import attention_5d as A

    out_path = sys.argv[1]
    budget = float(sys.argv[2]) if len(sys.argv) > 2 else 200.0
    t0 = time.time()
    bw = copy_bandwidth_bytes_per_s()
    peer, peer_src = load_peer()
    props = torch.cuda.get_device_properties(0)
    sms = props.multi_processor_count
    res = {"copy_bw": bw, "peer": peer_src, "sms": sms,
           "smem_per_sm": getattr(props, "shared_memory_per_multiprocessor", None), "rows": [], "kernels": {}}
    cap = _Capture(A._decode_5d_kernel)
    A._decode_5d_kernel = cap
    shapes = [(32, 8192, 4, 1, "bf16"), (32, 8192, 16, 2, "bf16"), (128, 8192, 4, 1, "bf16"),
              (128, 8192, 16, 2, "bf16"), (32, 32768, 4, 1, "bf16"), (32, 32768, 16, 2, "bf16"),
              (32, 1024, 16, 2, "bf16"), (32, 8192, 4, 1, "fp8_e4m3fn")]
    configs = [None, (32, 16, 4, 2, True), (32, 16, 4, 3, True, 168), (32, 16, 4, 2, True, 168),
               (64, 16, 4, 2, True, 232)]

    regcap = len(sys.argv) > 3 and sys.argv[3] == "regcap"
    if regcap:
        shapes = [(32, 8192, 16, 2, "bf16"), (32, 8192, 4, 1, "bf16"), (128, 8192, 16, 2, "bf16"),
                  (128, 8192, 4, 1, "bf16"), (32, 1024, 16, 2, "bf16"), (32, 1024, 4, 1, "bf16"),
                  (32, 32768, 16, 2, "bf16"), (128, 32768, 4, 1, "bf16"), (32, 8192, 4, 1, "fp8_e4m3fn"),
                  (32, 8192, 16, 2, "fp8_e4m3fn"), (128, 1024, 4, 1, "bf16"), (128, 1024, 16, 2, "bf16")]
        configs = [None, (32, 16, 4, 3, True), (64, 16, 4, 3, True), (32, 16, 4, 3, True, 128),
                   (32, 16, 4, 2, True, 128), (32, 16, 4, 3, True, 96), (64, 16, 4, 2, True, 128),
                   (16, 16, 4, 3, True, 96)]

    def save():
        with open(out_path, "w") as f:
            json.dump(res, f, indent=1)

    for bs, ctx, hq, hkv, kv in shapes:
        if time.time() - t0 > budget:
            break
        case = build_case(bs, ctx, hq, hkv, 256, kv, "cuda")
        nbytes = _kv_bytes(bs, ctx, hq, hkv, 256, 1 if kv.startswith("fp8") else 2)
        q, out = case["q"], torch.empty_like(case["q"])
        shape = [bs, ctx, hq, hkv, kv]
        sm_scale = 1 / math.sqrt(256)
        peer_best = peer_best_us(peer, case, out, sm_scale)
        res["rows"].append(dict(shape=shape, who="peer", us=peer_best[0], splits=peer_best[1]))
        work = bs * hkv
        d = A.default_num_splits(bs, hkv, 1, case["bt"].shape[1] * 64, torch.device("cuda"))
        cands = sorted({s for s in (*range(1, 17), 18, 20, 24, 28, 32)
                        if work * s <= 6 * sms and s <= ctx // 32} | {1, d})
        if regcap:
            cands = [None]
        best = None
        for cfg in configs:
            occ = None
            for s in cands:
                if time.time() - t0 > budget:
                    break

                info = {}

                def fn():
                    A.decode_attention_5d(q, case["k5"], case["v5"], case["bt"], case["ctx"], sm_scale=sm_scale,
                                          out=out, num_splits=s, _config=cfg, _info=info)

                try:
                    fn()
                    if occ is None and (s is None or s > 1):
                        occ = occupancy(cap.last, torch.device("cuda"))
                        res["kernels"][f"{shape}|{cfg}"] = occ
                    us = graph_replay_median_us(fn, inner=5, reps=10, warmup=2)
                except Exception as exc:  # noqa: BLE001 - recorded
                    res["rows"].append(dict(shape=shape, config=str(cfg), splits=s, error=str(exc)[:200]))
                    continue
                used = info.get("num_splits", s)
                waves = work * used / (sms * occ["resident"]) if occ else None
                row = dict(shape=shape, who="ours", config=list(cfg) if cfg else "default", splits=used,
                           default_splits=d, us=us, bw_frac=nbytes / (us * 1e-6) / bw,
                           vs_peer=peer_best[0] / us, waves=waves)
                res["rows"].append(row)
                if best is None or us < best["us"]:
                    best = row
            print("shape", shape, "cfg", cfg, "occ", occ, flush=True)
        print("shape", shape, "splits", d, "peer", peer_best, "best",
              best and (best["config"], best["splits"], round(best["us"], 2), round(best["vs_peer"], 3),
                        best["waves"]), f"t={time.time() - t0:.0f}s", flush=True)
        del case
        torch.cuda.empty_cache()
        save()
    res["elapsed_s"] = time.time() - t0
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
