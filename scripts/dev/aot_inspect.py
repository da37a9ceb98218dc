#!/usr/bin/env python
"""Compile a kernel for an NVIDIA target on a machine without a GPU and show
how Triton laid out its memory accesses.

    python scripts/dev/aot_inspect.py decode [--kv bf16|fp8] [--d 256] [--g 8] [--page 64] [--out DIR]
    python scripts/dev/aot_inspect.py write  [--h 8] [--d 128] [--t 32768] [--layout 5d|nhd] [--fp8 e4m3fn|e4m3fnuz] [--out DIR]
    python scripts/dev/aot_inspect.py floor  [--h 8] [--d 128] [--layout 5d|nhd] [--block-s 16] [--out DIR]   (the bench's store floor)

Uses the shipped launch configuration (``_decode_config`` / ``launch_config``)
and the installed Triton (set PYTHONPATH to another unpacked Triton wheel to
inspect that version; the H200 runs used triton 3.6.0). Writes ``.ttgir``,
``.ptx`` and, when the wheel's ``cuobjdump`` is there, ``.sass`` into DIR, then
prints for every global load, async copy and store the layout it got
(``sizePerThread`` / ``threadsPerWarp`` / ``order``: which axis neighbouring
lanes walk along), and a histogram of SASS opcodes.

Why: the lane order of a tile whose axes show no contiguity is a tie-break in
Triton's coalescing pass. A 3-D K tile of the decode kernel once put the lanes
of a warp on 32 chunks 1 KiB apart, fetching every sector in two halves
(docs/benchmarks-attention.md, fourth session); nothing in the source shows it.
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


def _compile(fn, constexprs: dict, pointer_types: dict, float_args: set, options: dict):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    names = fn.arg_names
    sig = {}
    for n in names:
        if n in constexprs:
            sig[n] = "constexpr"
        elif n in pointer_types:
            sig[n] = pointer_types[n]
        elif n in float_args:
            sig[n] = "fp32"
        else:
            sig[n] = "i32"
    # pointers 16-byte aligned and strides multiples of 16, as at run time for these shapes
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names)
             if n in pointer_types or "stride" in n}
    src = ASTSource(fn, sig, constexprs={(names.index(k),): v for k, v in constexprs.items()}, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", SM, 32), options=options)


def _decode(args):
    import triton.language as tl

    from sglang_kv5d.kernels import attention_5d as A

    fp8 = args.kv == "fp8"
    X = 16 if fp8 else 8
    block_n, block_h, warps, stages, load3d, *rest = A._decode_config(args.d, args.g, args.page, X, fp8)
    const = dict(H_KV=2, G=args.g, HEAD_TILES=-(-args.g // block_h), D=args.d, BLOCK_D=A._pow2(args.d),
                 BLOCK_H=block_h, BLOCK_N=block_n, PAGE=args.page, X=X,
                 PAGE_ALIGNED=args.page % block_n == 0, FP8_MODE=1 if fp8 else 0, FP8_MUL=1.0,
                 K_SCALE_PTR=False, V_SCALE_PTR=False, HAS_WINDOW=False, HAS_CAP=False, HAS_SINK=False,
                 DIRECT=False, COMPUTE=tl.bfloat16, NUM_STAGES=stages, LOAD3D=bool(load3d), USE_PDL=False)
    kv = "*fp8e4nv" if fp8 else "*bf16"
    ptrs = {"Q": "*bf16", "K": kv, "V": kv, "BT": "*i32", "CTX": "*i32", "SINKS": "*bf16", "OUT": "*bf16",
            "MID_O": "*fp32", "MID_LSE": "*fp32", "k_scale_ptr": "*fp32", "v_scale_ptr": "*fp32"}
    floats = {"k_scale_val", "v_scale_val", "sm_scale", "logit_cap"}
    options = {"num_warps": warps, "num_stages": stages}
    if rest and rest[0]:
        options["maxnreg"] = int(rest[0])
    label = f"decode_{args.kv}_d{args.d}_g{args.g}_p{args.page}"
    return label, (block_n, block_h, warps, stages, load3d, *rest), _compile(
        A._decode_5d_kernel, const, ptrs, floats, options)


def _write(args):
    from sglang_kv5d.kernels import fp8_write as W

    five = args.layout == "5d"
    fnuz = args.fp8 == "e4m3fnuz"  # as on NVIDIA: fnuz takes the integer encoder
    cfg = W.launch_config(args.t, args.h, args.d, args.d, five, native_fp8=not fnuz)
    ds = cfg["d_split"]
    bd = W.triton.next_power_of_2(args.d) // ds
    # as write_kv_fp8 does on NVIDIA (32 threads per warp) for 4-byte aligned bf16 rows
    words, spec, chunk, cfg["num_warps"] = W._v_group_launch(cfg, bd, v_ok=five, warp_size=32, warps_fixed=False)
    const = dict(H=args.h, HB=cfg["heads_per_program"], DK=args.d, DV=args.d, D_SPLIT=ds, BDK=bd, BDV=bd,
                 PAGE=64 if five else 1, X=16, LAYOUT_5D=five, BLOCK_T=cfg["block_t"],
                 BYTE_TOKENS=min(cfg["byte_tokens"], cfg["block_t"]),
                 SPLIT_KV=cfg["split_kv"], PART0=0, GROUPS=bool(cfg["groups"]) and five,
                 V_WORDS=words, V_SPEC=spec, CHUNK=chunk, IN_BF16=True,
                 K_SCALE_PTR=True, V_SCALE_PTR=True, FMA_DIV=True, FNUZ=fnuz, NATIVE=not fnuz, LARGE=False,
                 TOKEN_MAJOR=bool(cfg["token_major"]), N_KV=2 if cfg["split_kv"] else 1)
    ptrs = {"k_ptr": "*bf16", "v_ptr": "*bf16", "kc_ptr": "*u8", "vc_ptr": "*u8", "loc_ptr": "*i64",
            "k_scale": "*fp32", "v_scale": "*fp32"}
    label = f"write_{args.layout}_h{args.h}_d{args.d}_t{args.t}_{args.fp8}"
    return label, cfg, _compile(W._write_kv_fp8_kernel, const, ptrs, set(), {"num_warps": cfg["num_warps"]})


def _floor(args):
    """The benchmark's store floor (sglang_kv5d.bench.store_floor) for one layout."""
    from sglang_kv5d.bench import store_floor as F

    five = args.layout == "5d"
    const = dict(H=args.h, DK=args.d, DV=args.d, BDK=F.triton.next_power_of_2(args.d),
                 BDV=F.triton.next_power_of_2(args.d), PAGE=64 if five else 1, XB=F.X, LAYOUT_5D=five,
                 BLOCK_S=args.block_s, LANE_S=min(F._LANE_SLOTS, args.block_s), CODE=F._CODE)
    ptrs = {"slots_ptr": "*i64", "leaders_ptr": "*i64", "loose_ptr": "*i64", "kc_ptr": "*u8", "vc_ptr": "*u8"}
    label = f"floor_{args.layout}_h{args.h}_d{args.d}_s{args.block_s}"
    warps = F.num_warps(args.block_s, const["BDK"])
    return label, {"num_warps": warps}, _compile(F._store_floor_kernel, const, ptrs, set(), {"num_warps": warps})


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
