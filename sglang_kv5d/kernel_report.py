"""Static figures of every kernel the package launches, compiled for a GPU arch
that need not be here (``sglang-kv5d doctor --kernels-for``, the AMD compile
gate in tests/test_amd_gate.py, the ROCm table in docs/benchmarks.md).

    python -m sglang_kv5d.kernel_report --arch gfx942 [--buffer-ops on|off|both] [--json]

Each case calls the package's own host code (``write_kv_fp8``,
``decode_attention_5d``, ``extend_attention_5d``, the bench's ``StoreFloor``,
``verify_page_tables``) on ``meta`` tensors of a serving geometry, so the launch configuration is the
one that code picks for the target; ``kernels.aot.compiling_for`` turns each
launch into a compile for that target. A row per compiled kernel: whether it
compiled (or the error's first line), registers, spills, scratch, LDS, waves
per SIMD (AMD) and the FP8 conversion instructions it uses.

Geometries (page 64): Qwen3.5 full-attention layers at TP8 (4 query heads / 1
KV head, D=256) and TP1 (32 / 2), and a Llama-like layer (32 / 8, D=128).
Token counts: 16 (decode), 2048 and 32768 (prefill), which reach every branch
of ``launch_config``. The FP8 format is the one the arch serves: e4m3fnuz on
gfx942, e4m3fn on gfx950 and sm_90. Verify page tables (``verify-table``):
256 requests, rows of 4097, 2049 and 65 block ids, with and without the SWA
table, ``req_to_token`` int32 (SGLang's pool) and int64; its "kv" column is
``req_to_token``'s dtype and its "geometry" the context and page.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Callable, Dict, Iterable, List, NamedTuple, Optional, Sequence

__all__ = ["Geometry", "GEOMETRIES", "Case", "cases", "run_cases", "report", "report_in_subprocess",
           "summarize", "main"]

PAGE = 64
WRITE_TOKENS = (16, 2048, 32768)


class Geometry(NamedTuple):
    name: str
    hq: int
    hkv: int
    d: int


GEOMETRIES = (
    Geometry("qwen3.5-tp8", 4, 1, 256),
    Geometry("qwen3.5-tp1", 32, 2, 256),
    Geometry("llama-like", 32, 8, 128),
)


class Case(NamedTuple):
    kernel: str  # "write", "decode", "verify", "extend", "store-floor", "verify-table"
    label: str  # what was compiled, e.g. "5d fp8 qwen3.5-tp8 T=16"
    geometry: Geometry
    kv: str  # "fp8" or "bf16"
    run: Callable[[Any], None]  # run(target): the host call, on meta tensors


def _fp8_dtype(target):
    import torch

    return torch.float8_e4m3fnuz if target.arch == "gfx942" else torch.float8_e4m3fn


def _meta(*shape, dtype):
    import torch

    return torch.empty(*shape, dtype=dtype, device="meta")


def _write_case(layout: str, g: Geometry, T: int) -> Case:
    def run(target):
        import torch

        from .kernels.fp8_write import write_kv_fp8

        k = _meta(T, g.hkv, g.d, dtype=torch.bfloat16)
        v = _meta(T, g.hkv, g.d, dtype=torch.bfloat16)
        blocks = max(1024, -(-T // PAGE) * 2)
        if layout == "5d":
            kc = _meta(blocks, g.hkv, g.d // 16, PAGE, 16, dtype=torch.uint8)
            vc = _meta(blocks, g.hkv, PAGE // 16, g.d, 16, dtype=torch.uint8)
        else:
            kc = _meta(blocks * PAGE, g.hkv, g.d, dtype=torch.uint8)
            vc = _meta(blocks * PAGE, g.hkv, g.d, dtype=torch.uint8)
        loc = _meta(T, dtype=torch.int64)
        scale = _meta(1, dtype=torch.float32)
        write_kv_fp8(k, v, kc, vc, loc, scale, scale, fp8_dtype=_fp8_dtype(target), _target=target)

    return Case("write", f"{layout} fp8 {g.name} T={T}", g, "fp8", run)


def _kv_caches(g: Geometry, kv: str, blocks: int, target):
    import torch

    if kv == "fp8":
        dt, X = _fp8_dtype(target), 16
    else:
        dt, X = torch.bfloat16, 8
    k = _meta(blocks, g.hkv, g.d // X, PAGE, X, dtype=dt)
    v = _meta(blocks, g.hkv, PAGE // X, g.d, X, dtype=dt)
    return k, v


def _decode_case(g: Geometry, kv: str, batch: int, context: int, window: int = -1, drafts: int = 1) -> Case:
    """batch 1 at a long context splits the context (decode + reduce kernels);
    a large batch runs one split per sequence (the direct kernel). ``drafts`` >
    1: speculative verify, that many query rows per sequence packed in the tile."""

    def run(target):
        import torch

        from .kernels.attention_5d import decode_attention_5d

        width = -(-context // PAGE)
        k, v = _kv_caches(g, kv, max(1024, batch * width), target)
        q = _meta(batch * drafts, g.hq, g.d, dtype=torch.bfloat16)
        bt = _meta(batch, width, dtype=torch.int32)
        ctx = _meta(batch * drafts, dtype=torch.int32)
        scale = _meta(1, dtype=torch.float32) if kv == "fp8" else None
        decode_attention_5d(q, k, v, bt, ctx, sm_scale=g.d ** -0.5, k_scale=scale, v_scale=scale,
                            sliding_window=window, queries_per_seq=drafts, _target=target)

    what = "split" if batch == 1 else "direct"
    win = f" window={window}" if window > 0 else ""
    spec = f" verify x{drafts}" if drafts > 1 else ""
    return Case("verify" if drafts > 1 else "decode", f"{kv} {g.name} {what} bs={batch} ctx={context}{win}{spec}",
                g, kv, run)


def _extend_case(g: Geometry, kv: str, window: int = -1, causal: bool = True) -> Case:
    def run(target):
        import torch

        from .kernels.attention_5d import extend_attention_5d

        B, T = 4, 4096
        k, v = _kv_caches(g, kv, 1024, target)
        q = _meta(T, g.hq, g.d, dtype=torch.bfloat16)
        bt = _meta(B, 256, dtype=torch.int32)
        qo = _meta(B + 1, dtype=torch.int32)
        lens = _meta(B, dtype=torch.int32)
        scale = _meta(1, dtype=torch.float32) if kv == "fp8" else None
        extend_attention_5d(q, k, v, bt, qo, lens, sm_scale=g.d ** -0.5, k_scale=scale, v_scale=scale,
                            sliding_window=window, causal=causal, _target=target)

    win = f" window={window}" if window > 0 else ""
    return Case("extend", f"{kv} {g.name}{win}{'' if causal else ' non-causal'}", g, kv, run)


def _floor_case(layout: str, g: Geometry, block_s: int) -> Case:
    def run(target):
        import torch

        from .bench.store_floor import StoreFloor

        blocks = 64
        if layout == "5d":
            kc = torch.zeros(blocks, g.hkv, g.d // 16, PAGE, 16, dtype=torch.uint8)
            vc = torch.zeros(blocks, g.hkv, PAGE // 16, g.d, 16, dtype=torch.uint8)
        else:
            kc = torch.zeros(blocks * PAGE, g.hkv, g.d, dtype=torch.uint8)
            vc = torch.zeros(blocks * PAGE, g.hkv, g.d, dtype=torch.uint8)
        # a run of 40 slots and 8 scattered ones: K rows, whole V groups and loose V bytes
        loc = torch.cat([torch.arange(64, 104), torch.arange(8) * 97 + 200]).to(torch.int64)
        StoreFloor(kc, vc, loc, block_s=block_s)()

    return Case("store-floor", f"{layout} {g.name} block_s={block_s}", g, "fp8", run)


#: Verify page tables (kernels/verify_table.py): (page, max context, drafts, SWA, req_to_token dtype). Rows of
#: 4097 and 2049 block ids (BLOCK 1024, 4 warps), and of 65 (BLOCK 128, one wavefront on AMD).
VERIFY_TABLES = ((64, 262144, 16, False, "int32"), (64, 262144, 16, True, "int32"), (16, 32768, 4, True, "int32"),
                 (64, 4096, 4, False, "int32"), (16, 32768, 16, False, "int64"))


def _verify_table_case(page: int, context: int, drafts: int, swa: bool, r2t_dtype: str, bs: int = 256) -> Case:
    """The speculative-verify page-table builder for ``bs`` requests of a
    ReqToTokenPool-shaped ``req_to_token`` (rows context + 4 + drafts wide)."""

    def run(target):
        import torch

        from .kernels.verify_table import verify_page_tables
        from .speculative.verify_tables import verify_table_width

        width = verify_table_width(context, drafts, page)
        r2t = _meta(bs, context + 4 + drafts, dtype=getattr(torch, r2t_dtype))
        idx = _meta(bs, dtype=torch.int64)
        out = _meta(bs, width, dtype=torch.int32)
        mapping = _meta(1 << 22, dtype=torch.int64) if swa else None  # 4M pool slots
        swa_out = _meta(bs, width, dtype=torch.int32) if swa else None
        verify_page_tables(r2t, idx, idx, drafts, page, out, mapping, swa_out, _target=target)

    geometry = Geometry(f"ctx{context // 1024}k-page{page}", 0, 0, 0)
    return Case("verify-table", f"{r2t_dtype} ctx={context} page={page} N={drafts}{' swa' if swa else ''}",
                geometry, r2t_dtype, run)


def cases(kinds: Optional[Iterable[str]] = None) -> List[Case]:
    """Every case, or those of the kernel families in ``kinds``."""
    out: List[Case] = []
    for g in GEOMETRIES:
        for layout in ("5d", "nhd"):
            out += [_write_case(layout, g, T) for T in WRITE_TOKENS]
        for kv in ("bf16", "fp8"):
            out += [_decode_case(g, kv, 1, 32768), _decode_case(g, kv, 256, 4096)]
            out.append(_extend_case(g, kv))
    g0 = GEOMETRIES[0]
    out += [_decode_case(g0, "bf16", 1, 32768, window=127), _extend_case(g0, "bf16", window=127)]
    # speculative verify: 16 draft rows per sequence packed with the heads (decode kernel)
    out += [_decode_case(g, kv, b, 32768, drafts=16) for g in GEOMETRIES for kv in ("bf16", "fp8") for b in (1, 128)]
    # block-parallel speculative drafts (DFLASH) attend without the causal mask
    out += [_extend_case(g, "fp8", causal=False) for g in (g0, GEOMETRIES[2])]
    for layout in ("5d", "nhd"):
        out += [_floor_case(layout, GEOMETRIES[2], b) for b in (1, 16)]
    out += [_verify_table_case(*spec) for spec in VERIFY_TABLES]
    if kinds is not None:
        wanted = set(kinds)
        out = [c for c in out if c.kernel in wanted]
    return out


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in lines:  # MLIR failures: the line that says what failed
        if "error:" in ln or "failed to" in ln:
            return f"{type(exc).__name__}: {ln[:300]}"
    return f"{type(exc).__name__}: {lines[0][:300] if lines else ''}"


def run_cases(target, selected: Sequence[Case], *, buffer_ops: Optional[bool]) -> List[Dict[str, Any]]:
    """Compile each case for ``target``; one row per compiled kernel (one per
    failing case, with ``ok`` False and the error)."""
    from .kernels.aot import compiling_for, kernel_stats, triton_version

    rows: List[Dict[str, Any]] = []
    for case in selected:
        base = {"arch": target.arch, "triton": triton_version(), "buffer_ops": buffer_ops,
                "kernel": case.kernel, "case": case.label, "geometry": case.geometry.name,
                "kv": case.kv, "d": case.geometry.d}
        try:
            with compiling_for(target, buffer_ops=buffer_ops) as launches:
                case.run(target)
        except Exception as exc:  # noqa: BLE001 - a failing compile is a row, not a crash
            rows.append(dict(base, ok=False, error=_first_line(exc), name=case.kernel))
            continue
        for launch in launches:
            rows.append(dict(base, ok=True, error=None, name=launch.name,
                             **kernel_stats(launch.kernel, target, launch.num_warps)))
    return rows


def _target_named(arch: str):
    """``known_target(arch)``, or the GPU of this process for ``"device"``."""
    from .kernels.target import known_target, target_of

    if arch == "device":
        import torch

        if not torch.cuda.is_available():
            raise ValueError("--arch device: no GPU is visible to torch here")
        return target_of(torch.device("cuda"))
    return known_target(arch)


def report(arch: str, *, buffer_ops: Sequence[Optional[bool]] = (None,),
           kinds: Optional[Iterable[str]] = None) -> List[Dict[str, Any]]:
    """Rows for every case on ``arch`` ("gfx942", "gfx950", "sm_90", or
    "device": the GPU here) and each buffer-ops setting (AMD only: True,
    False, or None for Triton's default)."""
    target = _target_named(arch)
    selected = cases(kinds)
    rows: List[Dict[str, Any]] = []
    settings = buffer_ops if target.is_amd else (None,)
    for setting in settings:
        rows += run_cases(target, selected, buffer_ops=setting)
    return rows


def format_rows(rows: Sequence[Dict[str, Any]]) -> str:
    """A fixed-width table of ``rows`` (AMD and NVIDIA columns)."""
    lines = []
    for r in rows:
        head = f"{r['arch']:7s} triton {r['triton']:6s} bufops={str(r['buffer_ops'])[0]} {r['name']:24s} {r['case']:44s}"
        if not r["ok"]:
            lines.append(f"{head} FAILED {r['error']}")
        elif "vgpr" in r:
            lines.append(
                f"{head} vgpr {r['vgpr']:3d} agpr {r['agpr']:3d} sgpr {r['sgpr']:3d} spill {r['spills']:3d} "
                f"scratch {r['scratch']:4d} lds {r['lds'] // 1024:3d}K warps {r['num_warps']} "
                f"waves {r['waves']} (regs {r['by_registers']}, lds {r['by_lds']}) cvt {r['cvt_to_fp8']}/{r['cvt_from_fp8']}")
        else:
            lines.append(f"{head} regs {r['registers']:3d} spill {r['spills']:3d} shared {r['lds'] // 1024:3d}K "
                         f"warps {r['num_warps']}")
    return "\n".join(lines)


def report_in_subprocess(arch: str, *, timeout: float = 1200.0) -> List[Dict[str, Any]]:
    """``report(arch)`` in a fresh interpreter without Triton's CPU interpreter
    (a process that imported Triton with ``TRITON_INTERPRET=1`` cannot
    compile; a crashing compiler takes only the child down). RuntimeError
    naming the cause when the child gives no report."""
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    cmd = [sys.executable, "-m", "sglang_kv5d.kernel_report", "--arch", arch, "--json"]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"compiling the kernels for {arch} took over {timeout:.0f} s") from None
    try:
        rows = json.loads(proc.stdout)
    except ValueError:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RuntimeError(f"the kernel report for {arch} failed (exit {proc.returncode}): {tail[:300]}") from None
    if not isinstance(rows, list):
        raise RuntimeError(f"the kernel report for {arch} is not a list of rows")
    return rows


_PATHS = {
    "write": ("fused FP8 write", "SGLang's own FP8 write (the overlay falls back)"),
    "decode": ("portable 5D decode ready", "no portable decode: aiter only (Kv5dNotReadyError without it)"),
    "extend": ("portable 5D extend ready", "no portable extend: aiter only (Kv5dNotReadyError without it)"),
    "verify": ("5D speculative verify ready", "no 5D speculative verify (target-verify-5d cannot serve)"),
    "store-floor": ("bench only", "bench only: the store floor cannot be timed"),
    "verify-table": ("one-launch verify page tables", "the torch verify-table builder (about 16 device ops)"),
}


def summarize(rows: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """One entry per kernel, KV dtype, geometry (and layout for the write):
    ``name``, ``status`` (ok | warn), ``detail`` (worst figures over its
    cases, and the path the overlay takes), ``fix``."""
    groups: Dict[tuple, List[Dict[str, Any]]] = {}
    for r in rows:
        layout = r["case"].split()[0] if r["kernel"] in ("write", "store-floor") else ""
        groups.setdefault((r["kernel"], r.get("name", ""), layout, r["kv"], r["geometry"]), []).append(r)
    out = []
    for (kernel, name, layout, kv, geometry), rs in groups.items():
        label = f"{name.strip('_')} {layout} {kv} {geometry}".replace("  ", " ")
        bad = [r for r in rs if not r["ok"]]
        ok_path, bad_path = _PATHS.get(kernel, ("", ""))
        if bad:
            out.append({"name": label, "status": "warn",
                        "detail": f"{len(bad)}/{len(rs)} cases do not compile ({bad[0]['error']}); path: {bad_path}",
                        "fix": "report it with `sglang-kv5d doctor --json` and the Triton version; "
                               "try another Triton (pytorch-triton-rocm) build"})
            continue
        arch = rs[0]["arch"]
        if "vgpr" in rs[0]:
            figures = (f"vgpr+agpr {max(r['vgpr'] + r['agpr'] for r in rs)}, sgpr {max(r['sgpr'] for r in rs)}, "
                       f"LDS {max(r['lds'] for r in rs) // 1024} KiB, {min(r['waves'] for r in rs)} waves/SIMD")
            if kv == "fp8" and kernel in ("write", "decode", "verify", "extend") and "reduce" not in name:
                key = "cvt_to_fp8" if kernel == "write" else "cvt_from_fp8"
                figures += ", fp8 " + ("hardware conversion" if all(r[key] for r in rs) else "integer encoder")
        else:
            figures = f"{max(r['registers'] for r in rs)} registers, {max(r['lds'] for r in rs) // 1024} KiB shared"
        scratch = max(r.get("scratch", 0) for r in rs)
        status, fix = "ok", ""
        if scratch:
            status, fix = "warn", "spills to scratch memory: slower than intended; report the figures"
            figures += f", {scratch} B scratch"
        out.append({"name": label, "status": status, "detail": f"{arch}: {figures}; path: {ok_path}", "fix": fix})
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m sglang_kv5d.kernel_report", description=__doc__.split("\n\n")[0])
    p.add_argument("--arch", required=True, help="gfx942, gfx950, sm_90, or device (the GPU here)")
    p.add_argument("--buffer-ops", choices=("default", "on", "off", "both"), default="default",
                   help="AMD: Triton's buffer-ops knob (default: the installed Triton's own default)")
    p.add_argument("--kernels", default=None,
                   help="comma-separated: write,decode,verify,extend,store-floor,verify-table")
    p.add_argument("--json", action="store_true", help="one JSON document (a list of rows)")
    a = p.parse_args(argv)
    modes = {"default": (None,), "on": (True,), "off": (False,), "both": (True, False)}[a.buffer_ops]
    try:
        rows = report(a.arch, buffer_ops=modes, kinds=a.kernels.split(",") if a.kernels else None)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(rows, indent=1) if a.json else format_rows(rows))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
