#!/usr/bin/env python
"""Compile the 5D decode / packed-verify kernel for sm_90 (no GPU needed) at
several launch configurations and print registers, stack (scratch), spills and
shared memory per configuration, one JSON row each.

    python lab/decode_configs_static.py [--arch sm_90] [--only verify|decode]

Put an unpacked Triton first on PYTHONPATH to compile with that version (the
H200 proxy has Triton 3.6.0). Configurations are the ``_config`` tuples of
``decode_attention_5d``: (BLOCK_N, BLOCK_H, num_warps, num_stages, LOAD3D[, maxnreg]).
"""

from __future__ import annotations

import argparse
import json
import sys

PAGE = 64

# (H_q, H_kv, D, kv, drafts, batch): the verify geometries of the bench (bs 128 direct, bs 1 split)
VERIFY = [(4, 1, 256), (16, 2, 256)]
VERIFY_CONFIGS = [
    (64, 64, 8, 3, True), (32, 64, 8, 3, True), (32, 64, 8, 2, True), (16, 64, 8, 3, True),
    (16, 64, 8, 4, True), (32, 128, 8, 2, True), (32, 128, 16, 3, True),
]
DECODE = [(4, 1, 256), (16, 2, 256), (32, 8, 128)]
DECODE_CONFIGS = [
    (64, 16, 4, 3, True), (64, 16, 4, 2, True), (64, 16, 4, 4, True), (32, 16, 4, 3, True),
    (32, 16, 4, 4, True), (128, 16, 4, 2, True), (128, 16, 8, 2, True), (64, 16, 8, 3, True),
    (64, 16, 4, 3, True, 168), (64, 16, 4, 3, True, 128),
]


def compile_one(target, hq, hkv, d, kv, drafts, batch, config, page=PAGE):
    import torch

    from sglang_kv5d.kernels.aot import compiling_for, kernel_stats
    from sglang_kv5d.kernels.attention_5d import decode_attention_5d

    X = 16 if kv == "fp8" else 8
    dt = torch.float8_e4m3fn if kv == "fp8" else torch.bfloat16
    ctx_len = 32768
    width = ctx_len // page
    blocks = 1024
    meta = dict(device="meta")
    k = torch.empty(blocks, hkv, d // X, page, X, dtype=dt, **meta)
    v = torch.empty(blocks, hkv, page // X, d, X, dtype=dt, **meta)
    q = torch.empty(batch * drafts, hq, d, dtype=torch.bfloat16, **meta)
    bt = torch.empty(batch, width, dtype=torch.int32, **meta)
    ctx = torch.empty(batch * drafts, dtype=torch.int32, **meta)
    scale = torch.empty(1, dtype=torch.float32, **meta) if kv == "fp8" else None
    splits = 1 if batch > 1 else 8
    info = {}
    with compiling_for(target) as launches:
        decode_attention_5d(q, k, v, bt, ctx, sm_scale=d ** -0.5, k_scale=scale, v_scale=scale,
                            queries_per_seq=drafts, _target=target, _config=config, num_splits=splits, _info=info)
    main = [ln for ln in launches if ln.name == "_decode_5d_kernel"][0]
    st = kernel_stats(main.kernel, target, main.num_warps)
    ptx = main.kernel.asm.get("ptx", "")
    st["wgmma"] = ptx.count("wgmma.mma_async")
    st["mma_sync"] = ptx.count("mma.sync")
    st["cp_async"] = ptx.count("cp.async.cg") + ptx.count("cp.async.ca")
    st["used_config"] = list(info.get("config", ()))
    return st


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--only", choices=("verify", "decode"))
    ap.add_argument("--filter", default="", help="only rows whose geom/kv/config text contains this")
    ap.add_argument("--case", action="append", default=[],
                    help="H_q,H_kv,D,drafts,kv,batch[,page] (repeatable): these cases instead of the lists above")
    ap.add_argument("--configs", default="", help="JSON list of _config tuples for --case (null: the default)")
    args = ap.parse_args(argv)
    import triton

    from sglang_kv5d.platform import known_target

    target = known_target(args.arch)
    import os

    force = os.environ.get("KV5D_FORCE_MASK_TILE")
    if force in ("0", "1"):  # compile with the bad-block handling of the other kind (static comparison only)
        from sglang_kv5d.kernels.attention_5d import decode

        decode.mask_tile = lambda t, bd, fp8, rows=16: force == "1"  # the name the launcher calls
    jobs = []
    if args.case:
        cfgs = json.loads(args.configs) if args.configs else [None]
        for spec in args.case:
            f = spec.split(",")
            hq, hkv, d, drafts, kv, batch = int(f[0]), int(f[1]), int(f[2]), int(f[3]), f[4], int(f[5])
            page = int(f[6]) if len(f) > 6 else PAGE
            for cfg in cfgs:
                jobs.append(("verify" if drafts > 1 else "decode", hq, hkv, d, kv, drafts, batch,
                             tuple(cfg) if cfg else None, page))
    elif args.only in (None, "verify"):
        for hq, hkv, d in VERIFY:
            for kv in ("bf16", "fp8"):
                for cfg in VERIFY_CONFIGS:
                    if hq // hkv * 16 <= 64 and cfg[1] == 128:
                        continue
                    for batch in (128, 1):
                        jobs.append(("verify", hq, hkv, d, kv, 16, batch, cfg, PAGE))
    if args.only in (None, "decode") and not args.case:
        for hq, hkv, d in DECODE:
            for kv in ("bf16", "fp8"):
                for cfg in DECODE_CONFIGS:
                    jobs.append(("decode", hq, hkv, d, kv, 1, 32, cfg, PAGE))
    for kind, hq, hkv, d, kv, drafts, batch, cfg, page in jobs:
        if args.filter and args.filter not in f"{hq}/{hkv} {kv} {cfg and list(cfg)} bs={batch}":
            continue
        row = dict(triton=triton.__version__, arch=args.arch, kind=kind, geom=f"{hq}/{hkv}", d=d, kv=kv,
                   drafts=drafts, batch=batch, page=page, config=cfg and list(cfg))
        try:
            row.update(compile_one(target, hq, hkv, d, kv, drafts, batch, cfg, page))
        except Exception as exc:  # noqa: BLE001 - a failed compile is a row
            row["error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ''}"
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
