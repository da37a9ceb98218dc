#!/usr/bin/env python
"""Issue 27 item 4 on a GPU: side-by-side timings of the 5D decode kernel and
its packed speculative verify, one process, CUDA-graph replay medians
(sglang_kv5d/bench/common.py), one JSON line per row to --out.

    python lab/h200_gaps.py --out gaps.jsonl [--parts verify,decode,bounds] [--budget-s 330]

Kernel variants timed side by side in every row:
  head       an earlier commit's module, for comparison: here, before the call,
             mkdir -p .device/head && git rev-parse --short C > .device/head/COMMIT &&
             git archive C sglang_kv5d/kernels/attention_5d | tar -x --strip-components=2 -C .device/head
             (a package, .device/head/attention_5d/; before the package split:
             git show C:sglang_kv5d/kernels/attention_5d.py > .device/head/attention_5d_head.py)
             and carry .device (absent: head is left out)
  cur        the working tree's package (sglang_kv5d.kernels.attention_5d)
  nobounds   cur with the block-id check compiled out (a copy whose block_ok
             accepts every id: what the bounds check costs; measurement only)
  cur@CFG    cur with another launch configuration (_config) or split count

Parts:
  verify  decode_attention_5d(queries_per_seq=16): 16 drafts per request, draft t
          seeing prefix + t + 1 keys, beside one decode step of the same batch
          (verify/decode), with its FLOP count (4 x rows x ctx x D per
          sequence and KV head) and max |difference| to head's output
  decode  the decode rows under 70% of the read rate (fp8 32/8 D=128, fp8 4/1
          D=256, bs 32): tiles, stages, warps, split counts; bf16 D=256 with 2 stages
  bounds  fp8 (and bf16) D=256 decode: head, cur, nobounds, twice each
  table   the verify table of docs/benchmarks.md: head and cur side by side
  splits  the decode rows the wave-fill split rule changes, head and cur
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import json
import math
import os
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)

N = 16
T0 = time.time()
DEV = "cuda"
DRY = False  # --dry: one tiny row per part on the CPU under the interpreter, one call instead of a timing
MODS = {}


def _shape(bs, ctx):
    return (min(bs, 2), 128) if DRY else (bs, ctx)


def _time(fn, est):
    fn()
    _sync()
    if DRY:
        return 1.0
    from sglang_kv5d.bench.common import adaptive_median_us

    return adaptive_median_us(fn, est)


def _few(items):
    return list(items)[:1] if DRY else list(items)


def _sync():
    if not DRY:
        import torch

        torch.cuda.synchronize()


def _free():
    if not DRY:
        import torch

        torch.cuda.empty_cache()


def _out(fh, row):
    row["t_s"] = round(time.time() - T0, 1)
    fh.write(json.dumps(row) + "\n")
    fh.flush()
    print(json.dumps(row)[:400], flush=True)


def _absolute(src):
    """A kernels module's source with its imports from the rest of sglang_kv5d made absolute."""
    for rel in ("...platform import", "..platform import"):  # package modules, the old single module
        src = src.replace(f"from {rel}", "from sglang_kv5d.platform import")
    for rel in ("from ... import config", "from .. import config"):
        src = src.replace(rel, "from sglang_kv5d import config")
    return src


def _load_copy(name, sources):
    """Import ``sources`` ({file name: text}; one file: a module, several: a
    package with its __init__.py) under ``name``, from a copy in /tmp."""
    if len(sources) == 1:
        path = f"/tmp/kv5d_variants/{name}.py"
        locations = None
    else:
        path = f"/tmp/kv5d_variants/{name}/__init__.py"
        locations = [os.path.dirname(path)]
    os.makedirs(os.path.dirname(path), exist_ok=True)
    for fname, src in sources.items():
        with open(os.path.join(os.path.dirname(path), fname if locations else os.path.basename(path)), "w") as f:
            f.write(_absolute(src))
    spec = importlib.util.spec_from_file_location(name, path, submodule_search_locations=locations)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _package_sources(directory):
    out = {}
    for fname in sorted(os.listdir(directory)):
        if fname.endswith(".py"):
            with open(os.path.join(directory, fname)) as f:
                out[fname] = f.read()
    return out


def _modules():
    from sglang_kv5d.kernels import attention_5d as cur

    MODS["cur"] = cur
    sources = _package_sources(os.path.dirname(inspect.getfile(cur)))
    old = "    ok = (blk >= 0) & (blk < n_blocks)\n"
    assert old in sources["kernel_common.py"], "the block_ok body changed: update lab/h200_gaps.py"
    sources["kernel_common.py"] = sources["kernel_common.py"].replace(old, "    ok = blk == blk\n")
    MODS["nobounds"] = _load_copy("attention_5d_nobounds", sources)
    head_dir = os.path.join(ROOT, ".device", "head", "attention_5d")
    head = os.path.join(ROOT, ".device", "head", "attention_5d_head.py")
    if os.path.isdir(head_dir):
        MODS["head"] = _load_copy("attention_5d_head", _package_sources(head_dir))
    elif os.path.exists(head):
        with open(head) as f:
            MODS["head"] = _load_copy("attention_5d_head", {"attention_5d_head.py": f.read()})


def _case(bs, ctx, geom, kv, seed=0):
    from sglang_kv5d.bench.attention_cases import build_case

    H_q, H_kv, D = geom
    return build_case(bs, ctx, H_q, H_kv, D, kv, DEV, seed=seed)


def _variants(extra):
    """[(label, module name, _config, num_splits)]: head and cur at their defaults, then ``extra``."""
    out = [(m, m, None, None) for m in ("head", "cur") if m in MODS]
    return out + list(extra)


def part_verify(fh, rates, deadline):
    import torch

    from sglang_kv5d.bench.attention_cases import kv_bytes

    d256 = [(32, 64, 8, 3, True), (16, 64, 8, 3, True)]
    rows = [  # (geom, bs, ctx, drafts)
        ((16, 2, 256), 32, 8192, N), ((4, 1, 256), 32, 8192, N), ((16, 2, 256), 128, 8192, N),
        ((4, 1, 256), 128, 8192, N), ((16, 2, 256), 1, 32768, N), ((4, 1, 256), 1, 32768, N),
        ((32, 8, 128), 32, 8192, N), ((16, 2, 256), 32, 32768, N), ((4, 1, 256), 32, 8192, 8),
        ((4, 1, 256), 32, 8192, 4),
    ]
    for kv in _few(("fp8_e4m3fn", "bf16")):
        for geom, bs, ctx, n in _few(rows):
            if time.time() > deadline:
                _out(fh, dict(part="verify", skipped="deadline", kv=kv, geom=list(geom), bs=bs, ctx=ctx, drafts=n))
                continue
            H_q, H_kv, D = geom
            bs, ctx = _shape(bs, ctx)
            case = _case(bs, ctx, geom, kv, seed=3)
            fp8 = case["fp8"]
            scale = torch.tensor([1.0], device=DEV) if fp8 else None
            kw = dict(sm_scale=1 / math.sqrt(D), k_scale=scale, v_scale=scale)
            q = torch.randn(bs * n, H_q, D, device=DEV, dtype=torch.bfloat16)
            steps = torch.arange(1, n + 1, dtype=torch.int32, device=DEV)
            lens = ((case["ctx"] - n)[:, None] + steps[None, :]).reshape(-1).to(torch.int32)
            out = torch.empty_like(q)
            dq = q[::n].contiguous()
            dout = torch.empty_like(dq)
            cur = MODS["cur"]
            nbytes = kv_bytes(bs, ctx, H_q, H_kv, D, 1 if fp8 else 2)
            floor = nbytes / rates.read * 1e6
            dec_us = _time(lambda: cur.decode_attention_5d(dq, case["k5"], case["v5"], case["bt"], case["ctx"],
                                                           out=dout, **kw), floor * 1.5)
            flops = 4.0 * bs * H_q * n * ctx * D
            base = dict(part="verify", kv=kv, geom=list(geom), bs=bs, ctx=ctx, drafts=n, decode_us=dec_us,
                        bytes_floor_us=floor, flops=flops)
            extra = []
            if D == 256 and n == N:
                extra += [(f"cur@{c[:4]}", "cur", c, None) for c in d256]
                if H_q // H_kv * n == 128 and not fp8:
                    extra.append(("cur@128rows", "cur", (32, 128, 8, 2, True), None))
            ref = None
            for label, mname, cfg, sp in _variants(_few(extra)):
                mod = MODS[mname]
                info = {}
                mod.decode_attention_5d(q, case["k5"], case["v5"], case["bt"], lens, out=out, queries_per_seq=n,
                                        _config=cfg, _info=info, **kw)
                _sync()
                if ref is None:
                    ref = out.float().clone()
                diff = float((out.float() - ref).abs().max())
                opts = [info["num_splits"]] + ([info["num_splits"] * 2] if bs <= 32 and D == 256 and not DRY else [])
                for s in opts:
                    def ver(mod=mod, cfg=cfg, s=s):
                        mod.decode_attention_5d(q, case["k5"], case["v5"], case["bt"], lens, out=out,
                                                queries_per_seq=n, _config=cfg, num_splits=s, **kw)

                    us = _time(ver, dec_us * 3)
                    _out(fh, dict(base, variant=label, config=list(info["config"]), splits=s,
                                  default_splits=s == info["num_splits"], verify_us=us, verify_vs_decode=us / dec_us,
                                  tflops=flops / us * 1e-6, max_diff_vs_first=diff))
            del case, q, out
            _free()


def part_table(fh, rates, deadline):
    """The verify table of docs/benchmarks.md (bench/verify.py's rows), head and
    cur side by side, each beside one decode step of cur; fp8 rows of 128
    packed rows also with 32-token tiles (48-64 B of stack on sm_90)."""
    import torch

    from sglang_kv5d.bench.attention_cases import GEOMETRIES, kv_bytes

    only = os.environ.get("KV5D_GAPS_GEOM")  # e.g. "16,2,256": that geometry's rows only
    geoms = [g for g in GEOMETRIES if not only or ",".join(map(str, g)) == only]
    rows = [(kv, g, bs, ctx) for kv in ("bf16", "fp8_e4m3fn") for g in geoms for bs in (1, 32, 128)
            for ctx in (8192, 32768)]
    for kv, geom, bs, ctx in _few(rows):
        if time.time() > deadline:
            _out(fh, dict(part="table", skipped="deadline", kv=kv, geom=list(geom), bs=bs, ctx=ctx))
            continue
        H_q, H_kv, D = geom
        bs, ctx = _shape(bs, ctx)
        case = _case(bs, ctx, geom, kv, seed=3)
        fp8 = case["fp8"]
        scale = torch.tensor([1.0], device=DEV) if fp8 else None
        kw = dict(sm_scale=1 / math.sqrt(D), k_scale=scale, v_scale=scale)
        q = torch.randn(bs * N, H_q, D, device=DEV, dtype=torch.bfloat16)
        steps = torch.arange(1, N + 1, dtype=torch.int32, device=DEV)
        lens = ((case["ctx"] - N)[:, None] + steps[None, :]).reshape(-1).to(torch.int32)
        out = torch.empty_like(q)
        dq = q[::N].contiguous()
        dout = torch.empty_like(dq)
        cur = MODS["cur"]
        nbytes = kv_bytes(bs, ctx, H_q, H_kv, D, 1 if fp8 else 2)
        dec_us = _time(lambda: cur.decode_attention_5d(dq, case["k5"], case["v5"], case["bt"], case["ctx"], out=dout,
                                                       **kw), nbytes / rates.read * 1.5e6)
        row = dict(part="table", kv=kv, geom=list(geom), bs=bs, ctx=ctx, drafts=N, decode_us=dec_us,
                   bytes_floor_us=nbytes / rates.read * 1e6, flops=4.0 * bs * H_q * N * ctx * D)
        extra = [("cur@32tok", "cur", (32, 128, 8, 2, True), None)] if fp8 and H_q // H_kv * N >= 128 else []
        ref = None
        for label, mname, cfg, sp in _variants(extra):
            info = {}

            def ver(mod=MODS[mname], cfg=cfg, info=info):
                mod.decode_attention_5d(q, case["k5"], case["v5"], case["bt"], lens, out=out, queries_per_seq=N,
                                        _config=cfg, _info=info, **kw)

            us = _time(ver, dec_us * 3)
            if ref is None:
                ref = out.float().clone()
            row[label] = dict(us=us, config=list(info["config"]), splits=info["num_splits"],
                              max_diff_vs_first=float((out.float() - ref).abs().max()))
        _out(fh, row)
        del case, q, out
        _free()


def part_splits(fh, rates, deadline):
    """Decode rows whose split count the wave-fill rule changes (and neighbours it must leave alone)."""
    import torch

    from sglang_kv5d.bench.attention_cases import kv_bytes

    rows = [("fp8_e4m3fn", (32, 8, 128), 32, 8192), ("fp8_e4m3fn", (32, 8, 128), 32, 32768),
            ("fp8_e4m3fn", (32, 8, 128), 32, 1024), ("fp8_e4m3fn", (32, 8, 128), 128, 8192),
            ("bf16", (32, 8, 128), 32, 8192), ("fp8_e4m3fn", (4, 1, 256), 32, 8192)]
    for kv, geom, bs, ctx in _few(rows):
        if time.time() > deadline:
            _out(fh, dict(part="splits", skipped="deadline", kv=kv, geom=list(geom), bs=bs, ctx=ctx))
            continue
        H_q, H_kv, D = geom
        bs, ctx = _shape(bs, ctx)
        case = _case(bs, ctx, geom, kv)
        fp8 = case["fp8"]
        scale = torch.ones(1, dtype=torch.float32, device=DEV) if fp8 else None
        q, out = case["q"], torch.empty_like(case["q"])
        kw = dict(sm_scale=1 / math.sqrt(D), k_scale=scale, v_scale=scale)
        nbytes = kv_bytes(bs, ctx, H_q, H_kv, D, 1 if fp8 else 2)
        row = dict(part="splits", kv=kv, geom=list(geom), bs=bs, ctx=ctx, read_floor_us=nbytes / rates.read * 1e6)
        ref = None
        for m in ("head", "cur"):
            info = {}

            def fn(mod=MODS[m], info=info):
                mod.decode_attention_5d(q, case["k5"], case["v5"], case["bt"], case["ctx"], out=out, _info=info, **kw)

            us = _time(fn, nbytes / rates.read * 1.5e6)
            if ref is None:
                ref = out.float().clone()
            row[m] = dict(us=us, splits=info["num_splits"], read_fraction=nbytes / (us * 1e-6) / rates.read,
                          max_diff_vs_first=float((out.float() - ref).abs().max()))
        _out(fh, row)
        del case
        _free()


def part_decode(fh, rates, deadline):
    import torch

    from sglang_kv5d.bench.attention_cases import kv_bytes

    plan = [
        ((32, 8, 128), "fp8_e4m3fn", 32, 8192,
         [(64, 16, 4, 4, True), (32, 16, 4, 4, True), (128, 16, 4, 2, True), (64, 16, 8, 3, True)], [2, 3, 4]),
        ((32, 8, 128), "fp8_e4m3fn", 32, 32768, [(64, 16, 4, 4, True), (32, 16, 4, 4, True)], [2, 3]),
        ((32, 8, 128), "bf16", 32, 8192, [], [2, 3]),
        ((4, 1, 256), "fp8_e4m3fn", 32, 8192,
         [(64, 16, 4, 2, True), (32, 16, 4, 3, True), (32, 16, 4, 4, True)], [4, 6, 12, 16]),
        ((4, 1, 256), "bf16", 32, 8192, [(64, 16, 4, 2, True)], []),
        ((16, 2, 256), "bf16", 32, 8192, [(64, 16, 4, 2, True)], []),
        ((16, 2, 256), "bf16", 128, 8192, [(64, 16, 4, 2, True)], []),
        ((16, 2, 256), "bf16", 1, 32768, [(64, 16, 4, 2, True)], []),
    ]
    for geom, kv, bs, ctx, configs, splits in _few(plan):
        if time.time() > deadline:
            _out(fh, dict(part="decode", skipped="deadline", kv=kv, geom=list(geom), bs=bs, ctx=ctx))
            continue
        H_q, H_kv, D = geom
        bs, ctx = _shape(bs, ctx)
        case = _case(bs, ctx, geom, kv)
        fp8 = case["fp8"]
        scale = torch.ones(1, dtype=torch.float32, device=DEV) if fp8 else None
        q, out = case["q"], torch.empty_like(case["q"])
        kw = dict(sm_scale=1 / math.sqrt(D), k_scale=scale, v_scale=scale)
        nbytes = kv_bytes(bs, ctx, H_q, H_kv, D, 1 if fp8 else 2)
        extra = [(f"cur@{c[:4]}", "cur", c, None) for c in configs]
        extra += [(f"cur@{c[:4] if c else 'default'}/{s}", "cur", c, s) for c in [None] + configs for s in splits]
        ref = None
        for label, mname, cfg, sp in _variants(_few(extra)):
            mod = MODS[mname]
            info = {}

            def fn(mod=mod, cfg=cfg, sp=sp, info=info):
                mod.decode_attention_5d(q, case["k5"], case["v5"], case["bt"], case["ctx"], out=out, _config=cfg,
                                        num_splits=sp, _info=info, **kw)

            us = _time(fn, nbytes / rates.read * 1.5e6)
            if ref is None:
                ref = out.float().clone()
            _out(fh, dict(part="decode", kv=kv, geom=list(geom), bs=bs, ctx=ctx, variant=label,
                          config=list(info["config"]), splits=info["num_splits"], us=us,
                          read_fraction=nbytes / (us * 1e-6) / rates.read,
                          max_diff_vs_first=float((out.float() - ref).abs().max())))
        del case
        _free()


def part_bounds(fh, rates, deadline):
    import torch

    from sglang_kv5d.bench.attention_cases import kv_bytes

    rows = [("fp8_e4m3fn", (4, 1, 256), 32, 8192), ("fp8_e4m3fn", (4, 1, 256), 32, 32768),
            ("fp8_e4m3fn", (4, 1, 256), 128, 8192), ("fp8_e4m3fn", (16, 2, 256), 32, 8192),
            ("fp8_e4m3fn", (16, 2, 256), 128, 8192), ("fp8_e4m3fn", (16, 2, 256), 1, 32768),
            ("fp8_e4m3fn", (4, 1, 256), 1, 32768), ("bf16", (4, 1, 256), 32, 8192),
            ("bf16", (16, 2, 256), 32, 8192), ("fp8_e4m3fn", (32, 8, 128), 32, 8192)]
    for kv, geom, bs, ctx in _few(rows):
        if time.time() > deadline:
            _out(fh, dict(part="bounds", skipped="deadline", kv=kv, geom=list(geom), bs=bs, ctx=ctx))
            continue
        H_q, H_kv, D = geom
        bs, ctx = _shape(bs, ctx)
        case = _case(bs, ctx, geom, kv)
        fp8 = case["fp8"]
        scale = torch.ones(1, dtype=torch.float32, device=DEV) if fp8 else None
        q, out = case["q"], torch.empty_like(case["q"])
        kw = dict(sm_scale=1 / math.sqrt(D), k_scale=scale, v_scale=scale)
        nbytes = kv_bytes(bs, ctx, H_q, H_kv, D, 1 if fp8 else 2)
        res = {}
        for _rep in range(1 if DRY else 2):
            for m in ("head", "cur", "nobounds"):
                if m not in MODS:
                    continue
                info = {}

                def fn(mod=MODS[m], info=info):
                    mod.decode_attention_5d(q, case["k5"], case["v5"], case["bt"], case["ctx"], out=out, _info=info,
                                            **kw)

                res.setdefault(m, []).append(_time(fn, nbytes / rates.read * 1.5e6))
                res[m + "_splits"] = info.get("num_splits")
        _out(fh, dict(part="bounds", kv=kv, geom=list(geom), bs=bs, ctx=ctx, bytes=nbytes,
                      read_floor_us=nbytes / rates.read * 1e6, **res))
        del case
        _free()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--parts", default="verify,decode,bounds")
    ap.add_argument("--budget-s", type=float, default=330.0, help="no new row starts after this long")
    ap.add_argument("--dry", action="store_true", help="tiny sizes on the CPU (TRITON_INTERPRET=1), no timing")
    args = ap.parse_args(argv)
    global DEV, DRY
    if args.dry:
        DEV, DRY = "cpu", True
    import torch
    import triton

    _modules()
    deadline = T0 + args.budget_s
    with open(args.out, "w") as fh:
        if DRY:
            from types import SimpleNamespace

            rates, desc = SimpleNamespace(read=4.4e12, to_dict=lambda: {}), {}
        else:
            from sglang_kv5d.bench.common import device_description, memory_rates

            rates, desc = memory_rates(), device_description()
        head_commit = ""
        p = os.path.join(ROOT, ".device", "head", "COMMIT")
        if os.path.exists(p):
            head_commit = open(p).read().strip()
        _out(fh, dict(part="env", device=desc, rates=rates.to_dict(), torch=torch.__version__,
                      triton=triton.__version__, parts=args.parts, head_commit=head_commit,
                      variants=sorted(MODS)))
        parts = args.parts.split(",")
        # each part gets a share of what is left, so a slow part cannot starve the later ones
        for i, p in enumerate(parts):
            share = time.time() + (deadline - time.time()) / (len(parts) - i)
            {"verify": part_verify, "decode": part_decode, "bounds": part_bounds, "table": part_table,
             "splits": part_splits}[p](fh, rates, share)
    return 0


if __name__ == "__main__":
    sys.exit(main())
