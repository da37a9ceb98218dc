#!/usr/bin/env python
"""Compile candidate launch configurations of the fused FP8 KV write for an
AMD arch (or sm_90) on this CPU and print the compiler's figures, so that the
AMD rules in ``fp8_write.config._launch_config_amd`` can be re-derived.

    PYTHONPATH=.cache/triton/3.9.0:. python lab/write_config_sweep.py --arch gfx942 [--buffer-ops on|off|both]
        [--candidates default,bytes,...] [--layouts 5d,nhd] [--tokens 1,16,...] [--pages 16,32,64]
        [--scales tensor,float] [--large off,on] [--geometries qwen3.5-tp8,...] [--json]

One arch per process: Triton 3.5.1 / 3.6.0 lose gfx950's hardware conversion
when a gfx942 kernel was compiled earlier in the same process. The installed
Triton is used; put another unpacked wheel first on PYTHONPATH for the others.

Every compile goes through the package's public host code (``write_kv_fp8``
with ``_target`` and ``_config`` on ``meta`` tensors, ``kernels.aot``), so the
argument specialisation (T = 1 as a constant, multiples of 16, the 2 GiB
buffer-op range) is Triton's own. ``default`` is what ``launch_config`` picks
for the target; ``h200`` is the sm_90 choice forced onto the AMD target (what
AMD ran before the configuration took a target); the other candidates
override keys of the default (``CANDIDATES``). ``--large on``
sizes the caches past 2 GiB (64-bit offsets, no buffer ops on those tensors).

Per row: VGPRs, SGPRs, spills, scratch, LDS, waves per SIMD, fp32->fp8
conversion instructions, the static instruction count of the kernel and
that count times the waves of a program per element the program quantises
(``i/e``, wave instructions per element: lower is better; a rough figure,
both sides of a branch count and loops are not weighted).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))
os.environ.pop("TRITON_INTERPRET", None)

GEOMETRIES = {"qwen3.5-tp8": (1, 256), "qwen3.5-tp1": (2, 256), "llama-like": (8, 128)}
TOKENS = (1, 16, 37, 2048, 4096, 8192, 32768)
PAGES = (16, 32, 64)

# Overrides of the target's launch_config (None: no override). Keys are
# launch_config's; "h200" is filled in per shape from the sm_90 choice.
CANDIDATES = {
    "default": None,
    "h200": "sm_90",
    # 5D V bytes one by one at every size (no group path), rows split or whole
    "bytes": dict(groups=False, block_t=16, byte_tokens=16),
    "bytes-whole": dict(groups=False, block_t=16, byte_tokens=16, d_split=1),
    "bytes-8": dict(groups=False, block_t=8, byte_tokens=8),
    "bytes-w2": dict(groups=False, block_t=16, byte_tokens=16, num_warps=2),
    "bytes-w8": dict(groups=False, block_t=16, byte_tokens=16, num_warps=8),
    # the group path, transposed through shared memory instead of registers
    "groups-tile": dict(groups=True, v_words=False, block_t=16),
    "groups-w2": dict(groups=True, block_t=16, num_warps=2),
    "groups-w4": dict(groups=True, block_t=16, num_warps=4),
    "groups-whole": dict(groups=True, block_t=16, d_split=1),
    # NHD / decode windows
    "bt4": dict(block_t=4),
    "bt8": dict(block_t=8),
    "bt16": dict(block_t=16),
    "bt16-h1": dict(block_t=16, heads_per_program=1),
    "bt16-w8": dict(block_t=16, num_warps=8),
    "bt32-w8": dict(block_t=32, num_warps=8),
    "bt4-w1": dict(block_t=4, num_warps=1),
    "bt4-w2": dict(block_t=4, num_warps=2),
    # the target's choice with other warps
    "w1": dict(num_warps=1),
    "w2": dict(num_warps=2),
    "w4": dict(num_warps=4),
}

_INST = re.compile(r"^\s+(?:s_|v_|buffer_|global_|ds_|flat_|scratch_)\w+", re.M)


_OTHER_FORMAT = False  # --format other: the format the arch does not convert (integer encoder)


def _fp8(target):
    import torch

    fnuz = target.arch == "gfx942"
    return torch.float8_e4m3fnuz if fnuz != _OTHER_FORMAT else torch.float8_e4m3fn


def _compile(target, layout, H, D, T, page, scale, large, override, buffer_ops):
    import torch

    from sglang_kv5d.kernels.aot import compiling_for, kernel_stats
    from sglang_kv5d.kernels.fp8_write import write_kv_fp8

    def meta(*shape, dtype=torch.uint8):
        return torch.empty(*shape, dtype=dtype, device="meta")

    k = meta(T, H, D, dtype=torch.bfloat16)
    v = meta(T, H, D, dtype=torch.bfloat16)
    per_block = H * D * page
    blocks = max(1024, -(-T // page) * 2)
    if large:
        blocks = max(blocks, (1 << 31) // per_block + 8)  # each cache past 2 GiB
    if layout == "5d":
        kc, vc = meta(blocks, H, D // 16, page, 16), meta(blocks, H, page // 16, D, 16)
    else:
        kc, vc = meta(blocks * page, H, D), meta(blocks * page, H, D)
    loc = meta(T, dtype=torch.int64)
    s = meta(1, dtype=torch.float32) if scale == "tensor" else 0.5
    with compiling_for(target, buffer_ops=buffer_ops) as launches:
        write_kv_fp8(k, v, kc, vc, loc, s, s, fp8_dtype=_fp8(target), _target=target, _config=override)
    (launch,) = launches
    stats = kernel_stats(launch.kernel, target, launch.num_warps)
    if target.is_amd:
        stats["inst"] = len(_INST.findall(launch.kernel.asm.get("amdgcn", "")))
    return stats


def _override(name, target, layout, H, D, T):
    from sglang_kv5d.kernels import fp8_write as fw
    from sglang_kv5d.platform import known_target

    spec = CANDIDATES[name]
    if spec is None:
        return None, fw.launch_config(T, H, D, D, layout == "5d", target.converts(_fp8(target)), target)
    if isinstance(spec, str):
        other = known_target(spec)
        cfg = fw.launch_config(T, H, D, D, layout == "5d", True, other)
        # without num_warps: the host code then halves the warps of the group
        # path for 64-lane waves as it did for the AMD target with these tiles
        return {k: v for k, v in cfg.items() if k != "num_warps"}, cfg
    cfg = dict(fw.launch_config(T, H, D, D, layout == "5d", target.converts(_fp8(target)), target))
    if "groups" in spec and "d_split" not in spec and layout == "5d":
        spec = dict(spec, d_split=max(1, D // 128))  # 5D rows in chunks of about 128 dims, as the kernel's default
    cfg.update(spec)
    return cfg, cfg


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arch", required=True)
    p.add_argument("--buffer-ops", choices=("default", "on", "off", "both"), default="both")
    p.add_argument("--candidates", default="default")
    p.add_argument("--layouts", default="5d,nhd")
    p.add_argument("--geometries", default=",".join(GEOMETRIES))
    p.add_argument("--tokens", default=",".join(map(str, TOKENS)))
    p.add_argument("--pages", default="64")
    p.add_argument("--scales", default="tensor")
    p.add_argument("--large", default="off")
    p.add_argument("--format", choices=("serving", "other"), default="serving",
                   help="FP8 format: the one the arch serves (hardware conversion) or the other (integer encoder)")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    global _OTHER_FORMAT
    _OTHER_FORMAT = a.format == "other"

    import triton

    from sglang_kv5d.platform import known_target

    target = known_target(a.arch)
    modes = {"default": (None,), "on": (True,), "off": (False,), "both": (True, False)}[a.buffer_ops]
    if not target.is_amd:
        modes = (None,)
    rows = []
    for bo in modes:
        for layout in a.layouts.split(","):
            for gname in a.geometries.split(","):
                H, D = GEOMETRIES[gname]
                for T in map(int, a.tokens.split(",")):
                    for page in map(int, a.pages.split(",")) if layout == "5d" else (64,):
                        for scale in a.scales.split(","):
                            for large in a.large.split(","):
                                for cand in a.candidates.split(","):
                                    override, cfg = _override(cand, target, layout, H, D, T)
                                    row = dict(arch=target.arch, triton=triton.__version__, bufops=bo,
                                               layout=layout, geometry=gname, T=T, page=page, scale=scale,
                                               large=large == "on", cand=cand,
                                               cfg={k: cfg[k] for k in ("block_t", "heads_per_program",
                                                                        "d_split", "num_warps", "groups",
                                                                        "v_words", "byte_tokens")})
                                    try:
                                        st = _compile(target, layout, H, D, T, page, scale, large == "on",
                                                      override, bo)
                                    except Exception as exc:  # noqa: BLE001 - a failing compile is a row
                                        row.update(ok=False, error=str(exc).strip().splitlines()[-1][:200])
                                    else:
                                        c = cfg
                                        bd = triton.next_power_of_2(D) // c["d_split"]
                                        elems = c["block_t"] * c["heads_per_program"] * bd * (
                                            1 if c["split_kv"] else 2)
                                        row.update(ok=True, **{k: st.get(k) for k in (
                                            "vgpr", "agpr", "sgpr", "sgpr_spill", "vgpr_spill", "scratch",
                                            "lds", "waves", "cvt_to_fp8", "inst", "num_warps", "registers",
                                            "spills")})
                                        if st.get("inst"):
                                            # every wave of the program issues the kernel's instructions
                                            row["inst_per_elem"] = round(st["inst"] * st["num_warps"] / elems, 3)
                                    rows.append(row)
                                    if not a.json:
                                        print(_fmt(row), flush=True)
    if a.json:
        print(json.dumps(rows, indent=1))
    bad = [r for r in rows if not r["ok"] or r.get("scratch") or r.get("sgpr_spill") or r.get("vgpr_spill")
           or (r["arch"].startswith("gfx") and not r.get("cvt_to_fp8") and not _OTHER_FORMAT)]
    return 1 if bad else 0


def _fmt(r):
    head = (f"{r['arch']} {r['triton']:6s} bo={str(r['bufops'])[0]} {r['layout']:3s} {r['geometry']:11s} "
            f"T={r['T']:<5d} p={r['page']:<2d} {r['scale'][0]} L={int(r['large'])} {r['cand']:12s}")
    c = r["cfg"]
    cfg = (f"bt{c['block_t']:<2d} hb{c['heads_per_program']} ds{c['d_split']} g{int(c['groups'])}"
           f"{'w' if c['v_words'] and c['groups'] else ' '} lt{c['byte_tokens']:<2d}")
    if not r["ok"]:
        return f"{head} {cfg} FAILED {r['error']}"
    if r.get("vgpr") is None:
        return f"{head} {cfg} regs {r['registers']} spills {r['spills']} warps {r['num_warps']}"
    return (f"{head} {cfg} warps {r['num_warps']} vgpr {r['vgpr']:3d} sgpr {r['sgpr']:3d} "
            f"spill {r['sgpr_spill']}/{r['vgpr_spill']} scr {r['scratch']} lds {r['lds'] // 1024:2d}K "
            f"waves {r['waves']} cvt {r['cvt_to_fp8']:3d} inst {r['inst']:5d} i/e {r.get('inst_per_elem')}")


if __name__ == "__main__":
    sys.exit(main())
