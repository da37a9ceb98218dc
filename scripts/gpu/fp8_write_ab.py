"""Device-run helper: the shipped write_kv_fp8 (A) against other versions of
the kernel module (B, C, ...: copies of sglang_kv5d/kernels/fp8_write.py from
other commits, e.g. `git show REV:sglang_kv5d/kernels/fp8_write.py > FILE`),
all at their default launch configurations, timed alternately in one process
on the same inputs (CUDA-graph replay medians, us, under each row's "us"),
with the NHD peer when importable.

    python scripts/gpu/fp8_write_ab.py OUT.json FILE_B [FILE_C ...]

AB_DTYPE=float8_e4m3fnuz writes e4m3fnuz caches (the integer encoder on
NVIDIA, the path ROCm takes; the peer is left out then, it has no such
format on NVIDIA). AB_NHD=1 adds NHD rows.
"""

import importlib.util
import json
import os
import sys

import torch

from sglang_kv5d.bench import common
from sglang_kv5d.bench.fp8_write import _import_peers, decode_loc, prefill_loc
from sglang_kv5d.kernels import fp8_write as mod_a

out_path, files = sys.argv[1], sys.argv[2:]
mods = {"A": mod_a}
for i, path in enumerate(files):
    spec = importlib.util.spec_from_file_location(f"fp8_write_{i}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mods[chr(ord("B") + i)] = mod
dev = torch.device("cuda")
FP8 = getattr(torch, os.environ.get("AB_DTYPE", "float8_e4m3fn"))
flash = _import_peers()["flash"] if FP8 == torch.float8_e4m3fn else "not run for this format"
gen = torch.Generator().manual_seed(3)
PAGE = 64
rows = []
SHAPES = [(8, 128, T, "runs", "5d") for T in (1024, 4096, 32768)] + [(2, 256, T, "runs", "5d") for T in (1024, 4096, 32768)] \
    + [(8, 128, T, "decode", "5d") for T in (512, 2048)] + [(2, 256, 2048, "decode", "5d")]
if os.environ.get("AB_NHD") == "1":
    SHAPES += [(8, 128, T, "runs", "nhd") for T in (4096, 32768)] + [(2, 256, 32768, "runs", "nhd")]
for H, D, T, slots, layout in SHAPES:
    n_pages = (T * 5 // 4) // PAGE + 8
    k = torch.randn(T, H, D, device=dev).to(torch.bfloat16)
    v = torch.randn(T, H, D, device=dev).to(torch.bfloat16)
    loc = (prefill_loc(T, n_pages * PAGE, PAGE, gen=gen, device=dev) if slots == "runs"
           else decode_loc(T, n_pages * PAGE, gen=gen, device=dev))
    ks, vs = torch.tensor([0.75], device=dev), torch.tensor([1.25], device=dev)
    if layout == "5d":
        kc = torch.zeros(n_pages, H, D // 16, PAGE, 16, dtype=torch.uint8, device=dev).view(FP8)
        vc = torch.zeros(n_pages, H, PAGE // 16, D, 16, dtype=torch.uint8, device=dev).view(FP8)
    else:
        kc = torch.zeros(n_pages * PAGE, H, D, dtype=torch.uint8, device=dev).view(FP8)
        vc = torch.zeros(n_pages * PAGE, H, D, dtype=torch.uint8, device=dev).view(FP8)
    fns = {name: (lambda m=m: m.write_kv_fp8(k, v, kc, vc, loc, ks, vs)) for name, m in mods.items()}
    if not isinstance(flash, str):
        kn = torch.zeros(n_pages * PAGE, H, D, dtype=torch.uint8, device=dev).view(FP8)
        vn = torch.zeros(n_pages * PAGE, H, D, dtype=torch.uint8, device=dev).view(FP8)
        fns["flash"] = lambda: flash(k, v, kn.view(-1, PAGE, H, D), vn.view(-1, PAGE, H, D), loc,
                                     k_scale=ks, v_scale=vs)
    times = {name: [] for name in fns}
    for _ in range(3):  # alternate, three rounds
        for name, fn in fns.items():
            times[name].append(common.graph_replay_median_us(fn, inner=20 if T <= 4096 else 10, reps=15))
    # times per contender under "us" (contender letters run past B, C into D, which is also a shape key)
    row = dict(H=H, D=D, T=T, slots=slots, layout=layout, us={n: sorted(t)[1] for n, t in times.items()})
    rows.append(row)
    print(f"H={H} D={D} T={T} slots={slots} layout={layout} "
          + " ".join(f"{a}={b:.2f}" for a, b in row["us"].items()), flush=True)
    with open(out_path, "w") as f:
        json.dump({"device": common.device_description(dev), "fp8_dtype": str(FP8),
                   "files": dict(zip([chr(ord("B") + i) for i in range(len(files))], files)), "rows": rows},
                  f, indent=1)
