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
per SIMD (AMD), the FP8 conversion instructions it uses, the launch's
constexprs and options (``config``) and the pointer arguments Triton gave the
32-bit pointer-range attribute (``pointer_range``).

Geometries: Qwen3.5 full-attention layers at TP8 (4 query heads / 1 KV head,
D=256) and TP1 (32 / 2), and a Llama-like layer (32 / 8, D=128); page 64, and
pages 16 and 32 for the Qwen3.5 geometries (Qwen3.5 MI355X recipes serve page
16). The FP8 format is the one the arch serves: e4m3fnuz on gfx942, e4m3fn on
gfx950 and sm_90.

Two tiers of cases (``Case.tier``; the spec tables ``WRITES`` and
``ATTENTION`` list them). ``core``: the write at T = 16, 2048 and 32768 with
tensor scales; decode (batch 1 at 32k: split context; batch 256 at 4k:
direct); verify with 16 drafts; extend (causal, a window, non-causal); the
store floor; the verify page tables. ``serving``: what SGLang's runtime also
launches: the write with a Python float scale (SGLang's default without
checkpoint KV scales) at T = 1, 16, 37 (not a multiple of 16), 2048, 4096 and
8192 (chunked prefill) and 32768; decode with int64 sequence lengths
(SGLang's ``seq_lens``; the core cases keep int32); verify with 4 and 8
drafts; caches whose storage exceeds 2 GiB for the write, decode, verify and
extend (per-layer pools of that size are normal on MI300X / MI355X: Triton's
ROCm JIT then leaves the cache pointers without the 32-bit pointer-range
attribute, so no buffer ops on them, and the write switches to 64-bit
offsets; the meta cache is sized so and the JIT decides per tensor, as at run
time); pages 16 and 32 at the Qwen3.5 geometries. ``report`` compiles the
serving tier only with the buffer-ops setting the installed Triton defaults
to (the one the JIT runs with), the core tier with every setting asked for.
The other caches stay at most 2**31 - 1 bytes (checked when a case runs).

Verify page tables (``verify-table``): 256 requests, rows of 4097, 2049 and
65 block ids, with and without the SWA table, ``req_to_token`` int32
(SGLang's pool) and int64; its "kv" column is ``req_to_token``'s dtype and its
"geometry" the context and page.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Callable, Dict, Iterable, List, NamedTuple, Optional, Sequence

__all__ = ["Geometry", "GEOMETRIES", "Case", "WriteSpec", "AttnSpec", "WRITES", "ATTENTION", "cases", "run_cases",
           "report", "report_in_subprocess", "summarize", "main"]

PAGE = 64
#: bytes of storage above which Triton's ROCm JIT drops the 32-bit pointer-range attribute (2**31 - 1 is kept)
RANGE_32 = 2**31 - 1


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
QWEN = GEOMETRIES[:2]
LLAMA = GEOMETRIES[2]


class Case(NamedTuple):
    kernel: str  # "write", "decode", "verify", "extend", "store-floor", "verify-table"
    label: str  # what was compiled, e.g. "5d fp8 qwen3.5-tp8 T=16"
    geometry: Geometry
    kv: str  # "fp8" or "bf16"
    run: Callable[[Any], None]  # run(target): the host call, on meta tensors
    tier: str = "core"  # "core" or "serving" (see the module docstring)
    page: int = PAGE
    big_cache: bool = False  # the cache's storage exceeds 2 GiB


def _fp8_dtype(target):
    from .platform import fp8_dtype

    return fp8_dtype(target.arch)  # e4m3fnuz on gfx942, e4m3fn elsewhere


def _meta(*shape, dtype):
    import torch

    return torch.empty(*shape, dtype=dtype, device="meta")


def _blocks(least: int, block_bytes: int, big: bool) -> int:
    """Cache blocks: ``least``, or with ``big`` enough that one cache's storage
    exceeds 2 GiB. Without ``big`` the storage stays at most 2**31 - 1 bytes
    (ValueError otherwise: the case's label would not say what was compiled)."""
    if big:
        return max(least, RANGE_32 // block_bytes + 1)
    if least * block_bytes > RANGE_32:
        raise ValueError(f"{least} blocks of {block_bytes} B exceed 2 GiB: use fewer, or big=True")
    return least


def _suffix(page: int, big: bool) -> str:
    return (f" page={page}" if page != PAGE else "") + (" cache>2GiB" if big else "")


class WriteSpec(NamedTuple):
    """A ``write_kv_fp8`` launch: layout ("5d" or "nhd"), geometry, token count,
    scale kind ("tensor": one-element fp32 tensors, "float": Python floats),
    page, cache over 2 GiB."""
    layout: str
    geometry: Geometry
    T: int
    scale: str = "tensor"
    page: int = PAGE
    big: bool = False
    tier: str = "core"


def _write_case(spec: WriteSpec) -> Case:
    layout, g, T, page, big = spec.layout, spec.geometry, spec.T, spec.page, spec.big

    def run(target):
        import torch

        from .kernels.fp8_write import write_kv_fp8

        k = _meta(T, g.hkv, g.d, dtype=torch.bfloat16)
        v = _meta(T, g.hkv, g.d, dtype=torch.bfloat16)
        blocks = _blocks(max(1024, -(-T // page) * 2), page * g.hkv * g.d, big)
        if layout == "5d":
            kc = _meta(blocks, g.hkv, g.d // 16, page, 16, dtype=torch.uint8)
            vc = _meta(blocks, g.hkv, page // 16, g.d, 16, dtype=torch.uint8)
        else:
            kc = _meta(blocks * page, g.hkv, g.d, dtype=torch.uint8)
            vc = _meta(blocks * page, g.hkv, g.d, dtype=torch.uint8)
        loc = _meta(T, dtype=torch.int64)
        scale = _meta(1, dtype=torch.float32) if spec.scale == "tensor" else 0.5
        write_kv_fp8(k, v, kc, vc, loc, scale, scale, fp8_dtype=_fp8_dtype(target), _target=target)

    label = f"{layout} fp8 {g.name} T={T}{' scale=float' if spec.scale == 'float' else ''}{_suffix(page, big)}"
    return Case("write", label, g, "fp8", run, spec.tier, page, big)


def _kv_caches(g: Geometry, kv: str, blocks: int, target, page: int = PAGE, big: bool = False):
    import torch

    if kv == "fp8":
        dt, X = _fp8_dtype(target), 16
    else:
        dt, X = torch.bfloat16, 8
    blocks = _blocks(blocks, page * g.hkv * g.d * (16 // X), big)
    k = _meta(blocks, g.hkv, g.d // X, page, X, dtype=dt)
    v = _meta(blocks, g.hkv, page // X, g.d, X, dtype=dt)
    return k, v


class AttnSpec(NamedTuple):
    """A decode / verify / extend launch. Decode and verify: ``batch``
    sequences at ``context`` tokens (batch 1 splits the context; a large
    batch runs the direct kernel), ``drafts`` > 1 for speculative verify (that
    many query rows per sequence packed in the tile), ``lens`` the dtype of
    the context lengths. Extend: 4 sequences of 1024 new tokens over 16k-token
    tables (batch and context unused), ``causal`` False for block-parallel drafts."""
    kernel: str  # "decode", "verify" or "extend"
    geometry: Geometry
    kv: str
    batch: int = 1
    context: int = 32768
    drafts: int = 1
    window: int = -1
    causal: bool = True
    lens: str = "int32"
    page: int = PAGE
    big: bool = False
    tier: str = "core"


def _decode_case(spec: AttnSpec) -> Case:
    g, kv, batch, context, drafts, page, big = (spec.geometry, spec.kv, spec.batch, spec.context, spec.drafts,
                                                spec.page, spec.big)

    def run(target):
        import torch

        from .kernels.attention_5d import decode_attention_5d

        width = -(-context // page)
        # 1024 blocks (16-128 MiB per cache): table entries may repeat, the compile does not see them
        k, v = _kv_caches(g, kv, 1024, target, page, big)
        q = _meta(batch * drafts, g.hq, g.d, dtype=torch.bfloat16)
        bt = _meta(batch, width, dtype=torch.int32)
        ctx = _meta(batch * drafts, dtype=getattr(torch, spec.lens))
        scale = _meta(1, dtype=torch.float32) if kv == "fp8" else None
        decode_attention_5d(q, k, v, bt, ctx, sm_scale=g.d ** -0.5, k_scale=scale, v_scale=scale,
                            sliding_window=spec.window, queries_per_seq=drafts, _target=target)

    what = "split" if batch == 1 else "direct"
    win = f" window={spec.window}" if spec.window > 0 else ""
    verify = f" verify x{drafts}" if drafts > 1 else ""
    lens = " lens=int64" if spec.lens == "int64" else ""
    label = f"{kv} {g.name} {what} bs={batch} ctx={context}{win}{verify}{lens}{_suffix(page, big)}"
    return Case("verify" if drafts > 1 else "decode", label, g, kv, run, spec.tier, page, big)


def _extend_case(spec: AttnSpec) -> Case:
    g, kv, page, big = spec.geometry, spec.kv, spec.page, spec.big

    def run(target):
        import torch

        from .kernels.attention_5d import extend_attention_5d

        B, T = 4, 4096
        k, v = _kv_caches(g, kv, 1024, target, page, big)
        q = _meta(T, g.hq, g.d, dtype=torch.bfloat16)
        bt = _meta(B, 16384 // page, dtype=torch.int32)
        qo = _meta(B + 1, dtype=torch.int32)
        lens = _meta(B, dtype=torch.int32)
        scale = _meta(1, dtype=torch.float32) if kv == "fp8" else None
        extend_attention_5d(q, k, v, bt, qo, lens, sm_scale=g.d ** -0.5, k_scale=scale, v_scale=scale,
                            sliding_window=spec.window, causal=spec.causal, _target=target)

    win = f" window={spec.window}" if spec.window > 0 else ""
    label = f"{kv} {g.name}{win}{'' if spec.causal else ' non-causal'}{_suffix(page, big)}"
    return Case("extend", label, g, kv, run, spec.tier, page, big)


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
                geometry, r2t_dtype, run, page=page)


_KVS = ("bf16", "fp8")
_LAYOUTS = ("5d", "nhd")
_S = "serving"

#: Every FP8 write the report compiles. To keep the gate's compile time down, the serving tier takes
#: Qwen3.5 TP8 and Llama-like (TP1's write differs from TP8's only in its 2 KV heads).
WRITES = (
    # core: checkpoint (tensor) scales; 16 tokens (decode), 2048 and 32768 (prefill)
    *(WriteSpec(lay, g, T) for g in GEOMETRIES for lay in _LAYOUTS for T in (16, 2048, 32768)),
    # serving: SGLang's default Python float scales at every token count launch_config branches on
    # (1, a decode batch, not a multiple of 16, prefill, the 4096 / 8192-token chunked prefill, 32k)
    *(WriteSpec(lay, g, T, "float", tier=_S) for g in (QWEN[0], LLAMA) for lay in _LAYOUTS
      for T in (1, 16, 37, 2048, 4096, 8192, 32768)),
    # serving: per-layer caches over 2 GiB (64-bit offsets, no buffer ops on the caches)
    *(WriteSpec(lay, g, T, "float", big=True, tier=_S) for g in (QWEN[0], LLAMA) for lay in _LAYOUTS
      for T in (16, 32768)),
    # serving: pages 16 and 32 (5D only: NHD has no page)
    *(WriteSpec("5d", QWEN[0], T, "float", page=p, tier=_S) for p in (16, 32) for T in (16, 2048)),
)

_SPLIT, _DIRECT = (1, 32768), (256, 4096)
#: (kv, batch and context) of the serving tier's decode cases: fp8 split and direct, bf16 direct
_DECODE_MODES = (("fp8", _SPLIT), ("fp8", _DIRECT), ("bf16", _DIRECT))

#: Every decode, verify and extend launch the report compiles. Verify at batch 128 and 32k splits the
#: context as batch 1 does (the same kernel), so the serving tier compiles batch 128 only.
ATTENTION = (
    # core: decode, batch 1 at 32k (split) and batch 256 at 4k (direct), int32 lengths
    *(AttnSpec("decode", g, kv, *bc) for g in GEOMETRIES for kv in _KVS for bc in (_SPLIT, _DIRECT)),
    *(AttnSpec("extend", g, kv) for g in GEOMETRIES for kv in _KVS),
    AttnSpec("decode", GEOMETRIES[0], "bf16", *_SPLIT, window=127),
    AttnSpec("extend", GEOMETRIES[0], "bf16", window=127),
    # core: speculative verify, 16 draft rows per sequence packed with the heads (decode kernel)
    *(AttnSpec("verify", g, kv, b, 32768, drafts=16) for g in GEOMETRIES for kv in _KVS for b in (1, 128)),
    # core: block-parallel speculative drafts (DFLASH) attend without the causal mask
    *(AttnSpec("extend", g, "fp8", causal=False) for g in (GEOMETRIES[0], LLAMA)),
    # serving: decode with SGLang's int64 seq_lens, caches under and over 2 GiB
    *(AttnSpec("decode", g, kv, *bc, lens="int64", big=big, tier=_S) for big in (False, True) for g in GEOMETRIES
      for kv, bc in _DECODE_MODES),
    # serving: verify with 4 and 8 drafts; over 2 GiB: fp8 at 4, 8, 16 drafts, bf16 at 8 (Llama-like)
    *(AttnSpec("verify", g, kv, 128, 32768, drafts=n, tier=_S) for n in (4, 8) for g in GEOMETRIES for kv in _KVS),
    *(AttnSpec("verify", g, "fp8", 128, 32768, drafts=n, big=True, tier=_S) for g in GEOMETRIES for n in (4, 8, 16)),
    AttnSpec("verify", LLAMA, "bf16", 128, 32768, drafts=8, big=True, tier=_S),
    # serving: extend over 2 GiB (fp8; bf16 at Llama-like)
    *(AttnSpec("extend", g, "fp8", big=True, tier=_S) for g in GEOMETRIES),
    AttnSpec("extend", LLAMA, "bf16", big=True, tier=_S),
    # serving: pages 16 and 32, Qwen3.5: decode (int64 lengths; page 32: direct only), verify (page 16:
    # TP8 at 4, 8, 16 drafts, i.e. 16, 32, 64 packed rows, and TP1 at 8; page 32: TP8 at 16, TP1 at 8), extend
    *(AttnSpec("decode", g, kv, *bc, lens="int64", page=16, tier=_S) for g in QWEN for kv, bc in _DECODE_MODES),
    *(AttnSpec("decode", g, kv, *_DIRECT, lens="int64", page=32, tier=_S) for g in QWEN for kv in _KVS),
    *(AttnSpec("verify", g, kv, 128, 32768, drafts=n, page=16, tier=_S) for kv in _KVS
      for g, n in ((QWEN[0], 4), (QWEN[0], 8), (QWEN[0], 16), (QWEN[1], 8))),
    *(AttnSpec("verify", g, kv, 128, 32768, drafts=n, page=32, tier=_S) for kv in _KVS
      for g, n in ((QWEN[0], 16), (QWEN[1], 8))),
    *(AttnSpec("extend", g, kv, page=p, tier=_S) for p in (16, 32) for g in QWEN for kv in _KVS),
)


def cases(kinds: Optional[Iterable[str]] = None, tiers: Iterable[str] = ("core",)) -> List[Case]:
    """The cases of the tiers in ``tiers`` (the core tier unless asked: what
    ``doctor --kernels-for`` summarises per kernel in a few minutes; ``report``,
    the CLI and the gate ask for both), or those of the kernel families in ``kinds``."""
    out: List[Case] = [_write_case(w) for w in WRITES]
    out += [(_extend_case if a.kernel == "extend" else _decode_case)(a) for a in ATTENTION]
    for layout in _LAYOUTS:
        out += [_floor_case(layout, LLAMA, b) for b in (1, 16)]
    out += [_verify_table_case(*spec) for spec in VERIFY_TABLES]
    wanted_tiers = set(tiers)
    out = [c for c in out if c.tier in wanted_tiers]
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
                "kv": case.kv, "d": case.geometry.d, "tier": case.tier, "page": case.page,
                "big_cache": case.big_cache}
        try:
            with compiling_for(target, buffer_ops=buffer_ops) as launches:
                case.run(target)
        except Exception as exc:  # noqa: BLE001 - a compile fails with any error type: a row, not a crash
            rows.append(dict(base, ok=False, error=_first_line(exc), name=case.kernel))
            continue
        for launch in launches:
            config = dict(launch.constexprs, **launch.options)
            config.setdefault("num_warps", launch.num_warps)
            rows.append(dict(base, ok=True, error=None, name=launch.name, config=config,
                             pointer_range=list(launch.pointer_range) if launch.pointer_range is not None else None,
                             **kernel_stats(launch.kernel, target, launch.num_warps)))
    return rows


def default_buffer_ops() -> Optional[bool]:
    """The installed Triton's AMD buffer-ops knob (``AMDGCN_USE_BUFFER_OPS`` or its
    default: off on 3.5, on from 3.6); None where the Triton has no such knob."""
    import triton

    amd = getattr(getattr(triton, "knobs", None), "amd", None)
    value = getattr(amd, "use_buffer_ops", None) if amd is not None else None
    return None if value is None else bool(value)


def _target_named(arch: str):
    """``known_target(arch)``, or the GPU of this process for ``"device"``."""
    from .platform import known_target, target_of

    if arch == "device":
        import torch

        if not torch.cuda.is_available():
            raise ValueError("--arch device: no GPU is visible to torch here")
        return target_of(torch.device("cuda"))
    return known_target(arch)


def report(arch: str, *, buffer_ops: Sequence[Optional[bool]] = (None,),
           kinds: Optional[Iterable[str]] = None,
           tiers: Iterable[str] = ("core", "serving")) -> List[Dict[str, Any]]:
    """Rows for every case on ``arch`` ("gfx942", "gfx950", "sm_90", or
    "device": the GPU here) and each buffer-ops setting (AMD only: True,
    False, or None for Triton's default). The serving tier is compiled once,
    with the setting that equals the installed Triton's default (the one the
    JIT runs with; None counts as it), or with the first setting when none does."""
    target = _target_named(arch)
    selected = cases(kinds, tiers)
    rows: List[Dict[str, Any]] = []
    settings = list(buffer_ops) if target.is_amd else [None]
    default = default_buffer_ops()
    serving_at = next((s for s in settings if s is None or s == default), settings[0])
    for setting in settings:
        chosen = [c for c in selected if c.tier == "core" or setting is serving_at]
        rows += run_cases(target, chosen, buffer_ops=setting)
    return rows


def format_rows(rows: Sequence[Dict[str, Any]]) -> str:
    """A fixed-width table of ``rows`` (AMD and NVIDIA columns)."""
    lines = []
    for r in rows:
        head = f"{r['arch']:7s} triton {r['triton']:6s} bufops={str(r['buffer_ops'])[0]} {r['name']:24s} {r['case']:56s}"
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
    p.add_argument("--tier", choices=("core", "serving", "all"), default="all",
                   help="core cases, the serving shapes, or both (default)")
    p.add_argument("--json", action="store_true", help="one JSON document (a list of rows)")
    a = p.parse_args(argv)
    tiers = ("core", "serving") if a.tier == "all" else (a.tier,)
    modes = {"default": (None,), "on": (True,), "off": (False,), "both": (True, False)}[a.buffer_ops]
    try:
        rows = report(a.arch, buffer_ops=modes, kinds=a.kernels.split(",") if a.kernels else None, tiers=tiers)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(rows, indent=1) if a.json else format_rows(rows))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
