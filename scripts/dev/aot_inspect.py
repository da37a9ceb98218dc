#!/usr/bin/env python
"""Compile a kernel for an NVIDIA target on a machine without a GPU and show
how Triton laid out its memory accesses.

    python scripts/dev/aot_inspect.py decode [--kv bf16|fp8] [--d 256] [--g 8] [--page 64] [--out DIR]
    python scripts/dev/aot_inspect.py write  [--h 8] [--d 128] [--t 32768] [--layout 5d|nhd] [--fp8 e4m3fn|e4m3fnuz] [--out DIR]
    python scripts/dev/aot_inspect.py floor  [--h 8] [--d 128] [--layout 5d|nhd] [--block-s 16] [--out DIR]   (the bench's store floor)

Compiles through the package's own host code (``kernels.aot.compiling_for``:
the shipped launch configuration, Triton's own argument specialisation) with
the installed Triton (set PYTHONPATH to another unpacked Triton wheel to
inspect that version; the H200 runs used triton 3.6.0). Writes ``.ttgir``,
``.ptx`` and, when the wheel's ``cuobjdump`` is there, ``.sass`` into DIR, then
prints for every global load, async copy and store the layout it got
(``sizePerThread`` / ``threadsPerWarp`` / ``order``: which axis neighbouring
lanes walk along), and a histogram of SASS opcodes.

Why: the lane order of a tile whose axes show no contiguity is a tie-break in
Triton's coalescing pass. A 3-D K tile of the decode kernel once put the lanes
of a warp on 32 chunks 1 KiB apart, fetching every sector in two halves
(docs/benchmarks.md, decisions: 5D decode attention); nothing in the source shows it.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

SM = 90


def _compiled(run):
    """The kernels ``run(target)`` launches, compiled for sm_90 by the package's
    own host code (``kernels.aot.compiling_for``): (first launch, its config)."""
    from sglang_kv5d.kernels.aot import compiling_for
    from sglang_kv5d.platform import known_target

    target = known_target(f"sm_{SM}")
    with compiling_for(target) as launches:
        run(target)
    return launches[0].kernel


def _decode(args):
    import torch

    from sglang_kv5d.kernels import attention_5d as A

    fp8 = args.kv == "fp8"
    X = 16 if fp8 else 8
    dt = torch.float8_e4m3fn if fp8 else torch.bfloat16
    hkv = 2
    from sglang_kv5d.platform import known_target

    cfg = A.decode_config(args.d, args.g, args.page, X, fp8, known_target(f"sm_{SM}"))

    def run(target):
        m = dict(device="meta")
        k = torch.empty(1024, hkv, args.d // X, args.page, X, dtype=dt, **m)
        v = torch.empty(1024, hkv, args.page // X, args.d, X, dtype=dt, **m)
        q = torch.empty(8, hkv * args.g, args.d, dtype=torch.bfloat16, **m)
        bt = torch.empty(8, 64, dtype=torch.int32, **m)
        ctx = torch.empty(8, dtype=torch.int32, **m)
        sc = torch.empty(1, dtype=torch.float32, **m) if fp8 else None
        A.decode_attention_5d(q, k, v, bt, ctx, sm_scale=0.06, k_scale=sc, v_scale=sc, num_splits=2,
                              _target=target)

    label = f"decode_{args.kv}_d{args.d}_g{args.g}_p{args.page}"
    return label, cfg, _compiled(run)


def _write(args):
    import torch

    from sglang_kv5d.kernels import fp8_write as W

    five = args.layout == "5d"
    fnuz = args.fp8 == "e4m3fnuz"  # as on NVIDIA: fnuz takes the integer encoder
    dt = torch.float8_e4m3fnuz if fnuz else torch.float8_e4m3fn
    from sglang_kv5d.platform import known_target

    cfg = W.launch_config(args.t, args.h, args.d, args.d, five, not fnuz, known_target(f"sm_{SM}"))

    def run(target):
        m = dict(device="meta")
        k = torch.empty(args.t, args.h, args.d, dtype=torch.bfloat16, **m)
        v = torch.empty(args.t, args.h, args.d, dtype=torch.bfloat16, **m)
        blocks = max(1024, 2 * -(-args.t // 64))
        if five:
            kc = torch.empty(blocks, args.h, args.d // 16, 64, 16, dtype=torch.uint8, **m)
            vc = torch.empty(blocks, args.h, 4, args.d, 16, dtype=torch.uint8, **m)
        else:
            kc = torch.empty(blocks * 64, args.h, args.d, dtype=torch.uint8, **m)
            vc = torch.empty(blocks * 64, args.h, args.d, dtype=torch.uint8, **m)
        loc = torch.empty(args.t, dtype=torch.int64, **m)
        sc = torch.empty(1, dtype=torch.float32, **m)
        W.write_kv_fp8(k, v, kc, vc, loc, sc, sc, fp8_dtype=dt, _target=target)

    label = f"write_{args.layout}_h{args.h}_d{args.d}_t{args.t}_{args.fp8}"
    return label, cfg, _compiled(run)


def _floor(args):
    """The benchmark's store floor (sglang_kv5d.bench.store_floor) for one layout."""
    import torch

    from sglang_kv5d.bench import store_floor as F

    five = args.layout == "5d"

    def run(target):
        blocks = 64
        if five:
            kc = torch.zeros(blocks, args.h, args.d // 16, 64, 16, dtype=torch.uint8)
            vc = torch.zeros(blocks, args.h, 4, args.d, 16, dtype=torch.uint8)
        else:
            kc = torch.zeros(blocks * 64, args.h, args.d, dtype=torch.uint8)
            vc = torch.zeros(blocks * 64, args.h, args.d, dtype=torch.uint8)
        loc = torch.cat([torch.arange(64, 104), torch.arange(8) * 97 + 200]).to(torch.int64)
        F.StoreFloor(kc, vc, loc, block_s=args.block_s)()

    label = f"floor_{args.layout}_h{args.h}_d{args.d}_s{args.block_s}"
    warps = F.num_warps(args.block_s, F.triton.next_power_of_2(args.d))
    return label, {"num_warps": warps}, _compiled(run)


def _layouts(ttgir: str):
    """(op, tensor type, layout definitions) for every global load, async copy and store."""
    defs = dict(re.findall(r"^(#\w+) = (#ttg\.\w+<\{.*\}>)", ttgir, re.M))
    out = []
    for line in ttgir.splitlines():
        m = re.search(r"\b(tt\.load|ttg\.async_copy_global_to_local|tt\.store)\b.*?: tensor<(\S+), (.*?)>( ->|\s+loc|$)",
                      line)
        if m:
            names = sorted(set(re.findall(r"#(?:blocked|linear)\d*", m.group(3))))
            out.append((m.group(1), f"{m.group(2)}, {m.group(3)}", "; ".join(defs.get(n, n) for n in names)))
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("kernel", choices=("decode", "write", "floor"))
    p.add_argument("--kv", choices=("bf16", "fp8"), default="bf16")
    p.add_argument("--d", type=int, default=None)
    p.add_argument("--g", type=int, default=8)
    p.add_argument("--page", type=int, default=64)
    p.add_argument("--h", type=int, default=8)
    p.add_argument("--t", type=int, default=32768)
    p.add_argument("--layout", choices=("5d", "nhd"), default="5d")
    p.add_argument("--fp8", choices=("e4m3fn", "e4m3fnuz"), default="e4m3fn",
                   help="write: the cache format (e4m3fnuz compiles the integer encoder, as ROCm runs it)")
    p.add_argument("--block-s", type=int, choices=(1, 4, 16), default=16, help="floor: slots per program")
    p.add_argument("--out", default="aot_out")
    args = p.parse_args()
    if args.d is None:
        args.d = 256 if args.kernel == "decode" else 128
    import triton

    label, cfg, k = {"decode": _decode, "write": _write, "floor": _floor}[args.kernel](args)
    os.makedirs(args.out, exist_ok=True)
    base = os.path.join(args.out, label)
    for ext in ("ttgir", "ptx"):
        with open(f"{base}.{ext}", "w") as f:
            f.write(k.asm[ext])
    print(f"{label}: triton {triton.__version__}, sm_{SM}, config {cfg}, shared {k.metadata.shared} B")
    for op, ty, lay in _layouts(k.asm["ttgir"]):
        print(f"  {op} {ty}\n      {lay}")
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    if os.path.exists(tool):
        with open(f"{base}.cubin", "wb") as f:
            f.write(k.asm["cubin"])
        sass = subprocess.run([tool, "-sass", f"{base}.cubin"], capture_output=True, text=True).stdout
        with open(f"{base}.sass", "w") as f:
            f.write(sass)
        ops = collections.Counter(
            m.group(1).split(".")[0]
            for m in re.finditer(r"^\s+/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", sass, re.M))
        print(f"  SASS: {sum(ops.values())} instructions; " + ", ".join(f"{o} {n}" for o, n in ops.most_common(16)))
    print(f"  files: {base}.*")
    return 0


if __name__ == "__main__":
    sys.exit(main())
