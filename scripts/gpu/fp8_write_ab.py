"""Device-run helper: the shipped write_kv_fp8 (A) against another version of
the kernel module (B, a copy of sglang_kv5d/kernels/fp8_write.py from another
commit, e.g. `git show REV:sglang_kv5d/kernels/fp8_write.py > FILE`), both at
their default launch configurations, timed alternately in one process on the
same inputs (CUDA-graph replay medians, us), with the NHD peer when importable.

    python scripts/gpu/fp8_write_ab.py OUT.json FILE_B
"""

import importlib.util
import json
import sys

import torch

from sglang_kv5d.bench import common
from sglang_kv5d.bench.fp8_write import _import_peers, decode_loc, prefill_loc
from sglang_kv5d.kernels import fp8_write as mod_a

out_path, file_b = sys.argv[1], sys.argv[2]
spec = importlib.util.spec_from_file_location("fp8_write_b", file_b)
mod_b = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod_b)
dev = torch.device("cuda")
flash = _import_peers()["flash"]
gen = torch.Generator().manual_seed(3)
PAGE, FN = 64, torch.float8_e4m3fn
rows = []
SHAPES = [(8, 128, T, "runs") for T in (1024, 4096, 32768)] + [(2, 256, T, "runs") for T in (1024, 4096, 32768)] \
    + [(8, 128, T, "decode") for T in (512, 2048)] + [(2, 256, 2048, "decode")]
for H, D, T, slots in SHAPES:
    n_pages = (T * 5 // 4) // PAGE + 8
    k = torch.randn(T, H, D, device=dev).to(torch.bfloat16)
    v = torch.randn(T, H, D, device=dev).to(torch.bfloat16)
    loc = (prefill_loc(T, n_pages * PAGE, PAGE, gen=gen, device=dev) if slots == "runs"
           else decode_loc(T, n_pages * PAGE, gen=gen, device=dev))
    ks, vs = torch.tensor([0.75], device=dev), torch.tensor([1.25], device=dev)
    kc = torch.zeros(n_pages, H, D // 16, PAGE, 16, dtype=torch.uint8, device=dev).view(FN)
    vc = torch.zeros(n_pages, H, PAGE // 16, D, 16, dtype=torch.uint8, device=dev).view(FN)
    fns = {"A": lambda: mod_a.write_kv_fp8(k, v, kc, vc, loc, ks, vs),
           "B": lambda: mod_b.write_kv_fp8(k, v, kc, vc, loc, ks, vs)}
    if not isinstance(flash, str):
        kn = torch.zeros(n_pages * PAGE, H, D, dtype=torch.uint8, device=dev).view(FN)
        vn = torch.zeros(n_pages * PAGE, H, D, dtype=torch.uint8, device=dev).view(FN)
        fns["flash"] = lambda: flash(k, v, kn.view(-1, PAGE, H, D), vn.view(-1, PAGE, H, D), loc,
                                     k_scale=ks, v_scale=vs)
    times = {name: [] for name in fns}
    for _ in range(3):  # alternate, three rounds
        for name, fn in fns.items():
            times[name].append(common.graph_replay_median_us(fn, inner=20 if T <= 4096 else 10, reps=15))
    row = dict(H=H, D=D, T=T, slots=slots, **{n: sorted(t)[1] for n, t in times.items()})
    rows.append(row)
    print(" ".join(f"{a}={b:.2f}" if isinstance(b, float) else f"{a}={b}" for a, b in row.items()), flush=True)
    with open(out_path, "w") as f:
        json.dump({"device": common.device_description(dev), "file_b": file_b, "rows": rows}, f, indent=1)
