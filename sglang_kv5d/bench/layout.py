""""5D or NHD?": one layer's whole KV path, per layout, for the operator's geometry.

For each decode row (batch x context) and prefill row (requests x new tokens
+ cached prefix) it builds one random KV cache holding the same data in
SGLang's NHD token layout and in the SHUFFLE 5D layout
(:func:`layout_cases.build_case`), then times, as CUDA-graph replay medians
(:mod:`sglang_kv5d.bench.common`), every writer of the step's new K/V and every
attention kernel of each layout that runs here (:mod:`.layout_calls`: SGLang's
writers and Triton decode on NHD, aiter's on ROCm, the overlay's 5D path).
A layout's layer time is its fastest writer plus its fastest attention; the
verdict per row says how much faster or slower 5D is (:mod:`.layout_report`).

Geometry: one rank's heads (``heads / tp`` query heads, ``max(1, kv_heads / tp)``
KV heads), D, the page size; from the command line or a local config.json
(validated, never executed: :func:`layout_cases.geometry_from_config`). The
cache dtype is fp8 (this GPU's format: e4m3fnuz on gfx942, e4m3fn elsewhere)
or bf16; the inputs are bf16; scales are one-element fp32 tensors of 1.0.

A contender that cannot run here is a named cell ("unavailable: why", or
"failed: error" when its call raised), never a silent gap. The SGLang peers
come from an installed SGLang or the copies of ``lab/prepare_peers.py``
(SGLANG_KV5D_PEER_PATH; the FP8 write peers on PYTHONPATH), as in
``bench --what attention`` / ``fp8-write``.
"""

from __future__ import annotations

import math
import time
from typing import Callable, Optional

from sglang_kv5d.bench.layout_cases import (  # noqa: F401  (the suite's public names)
    DECODE_BATCHES, DECODE_CONTEXTS, KV_DTYPES, PREFILL_SHAPES, Geometry, GeometryError, build_case,
    geometry_from_config, shapes, validate,
)
from sglang_kv5d.bench.layout_calls import cells_by_part, decoders, load_nhd_peers, prefillers, time_cells, writers
from sglang_kv5d.bench.layout_report import NOISE, format_table, row_label, verdict  # noqa: F401

#: the default geometry: one rank of Qwen3.5 at TP8 (32 query / 2 KV heads, D=256; 1 KV head per rank)
DEFAULT_GEOMETRY = Geometry(heads=32, kv_heads=2, head_dim=256, tp=8, source="default (Qwen3.5, TP8)")


def _gpu_time(fn):
    """CUDA-graph replay median (us) of ``fn``, sized from one eager call; a
    call that cannot be captured is timed eagerly and says so."""
    import torch

    from sglang_kv5d.bench.common import adaptive_median_us, eager_median_us

    fn()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    try:
        return adaptive_median_us(fn, start.elapsed_time(end) * 1000.0)
    except Exception:  # noqa: BLE001 - not capturable (aiter's host-side work): eager events instead
        torch.cuda.synchronize()
        return {"us": eager_median_us(fn), "timing": "eager (not capturable in a CUDA graph)"}


def load_peers(*, rocm: Optional[bool] = None) -> dict:
    """Every peer this benchmark may call: {"sglang": fp8 write peers, "decode":
    SGLang's Triton decode or "unavailable: why", "aiter": aiter_peers.load(),
    "nhd": aiter's NHD peers (layout_calls.load_nhd_peers), "sources": one line each}."""
    from sglang_kv5d.bench import aiter_peers, sglang_peers

    rocm = aiter_peers.is_rocm() if rocm is None else rocm
    sg = sglang_peers.fp8_write_peers()
    try:
        dec, dec_src = sglang_peers.decode_peer()
    except RuntimeError as exc:  # no peer here; a bad SGLANG_KV5D_PEER_PATH raises PeerPathError
        dec, dec_src = f"unavailable: {exc}", None
    aiter = aiter_peers.load(rocm=rocm)
    nhd = load_nhd_peers(rocm=rocm)
    sources = {
        "sglang_flash": sg["flash"] if isinstance(sg["flash"], str) else sg["flash_module"],
        "sglang_shuffle_5d": sg["shuffle_5d"] if isinstance(sg["shuffle_5d"], str) else sg["shuffle_5d_module"],
        "sglang_triton_decode": dec if dec_src is None else dec_src,
    } | {f"aiter {n}": aiter_peers.describe(aiter, n) if aiter else "unavailable: not ROCm"
         for n in aiter_peers.PEERS} | {f"aiter {n}": (v if isinstance(v, str) else "aiter") for n, v in nhd.items()}
    return dict(sglang=sg, decode=dec, aiter=aiter, nhd=nhd, sources=sources)


def run_row(geom: Geometry, phase: str, bs: int, prior: int, new: int, kv: str, *, peers: dict, device="cuda",
            time_fn: Callable = _gpu_time, fp8_dtype=None, seed: int = 0) -> dict:
    """One row: every contender of both layouts timed (or named), the layer
    totals and the verdict. ``time_fn(call) -> us`` (tests pass a CPU stub)."""
    import torch

    c = build_case(geom, bs, prior, new, kv, device, fp8_dtype=fp8_dtype, seed=seed)
    sm_scale = 1.0 / math.sqrt(geom.head_dim)
    out = torch.empty_like(c["q"])
    cells = writers(c, sglang=peers["sglang"], aiter=peers["aiter"], nhd=peers["nhd"])
    if phase == "decode":
        cells |= decoders(c, out, sm_scale=sm_scale, decode_peer=peers["decode"], aiter=peers["aiter"],
                          nhd=peers["nhd"])
        row = dict(phase=phase, kv=kv, bs=bs, ctx=prior + new)
    else:
        cells |= prefillers(c, out, sm_scale=sm_scale, aiter=peers["aiter"], nhd=peers["nhd"])
        row = dict(phase=phase, kv=kv, bs=bs, new=new, prefix=prior)
    row["cells"] = cells_by_part(time_cells(cells, time_fn))
    row["verdict"] = verdict(phase, row_label(row), row["cells"], attention_layers=geom.attention_layers)
    del c, out
    return row


def run(device: str = "cuda", progress: Optional[Callable[[str], None]] = None, *,
        geometry: Optional[Geometry] = None, kv_dtypes=("fp8",), decode_batches=DECODE_BATCHES,
        decode_contexts=DECODE_CONTEXTS, prefill_shapes=PREFILL_SHAPES) -> dict:
    """Run every row; a JSON-serialisable dict (``format_table`` prints it)."""
    import torch

    from sglang_kv5d.bench import sglang_peers
    from sglang_kv5d.bench.common import device_description
    from sglang_kv5d.platform import fp8_dtype

    sglang_peers.peer_path()  # a bad SGLANG_KV5D_PEER_PATH fails before anything is measured
    geom = validate(geometry or DEFAULT_GEOMETRY, kv_dtypes)
    dec, pre = shapes(decode_batches, decode_contexts, prefill_shapes)
    if not torch.cuda.is_available():
        raise RuntimeError("the layout benchmark needs a GPU (CUDA or ROCm)")
    say = progress or (lambda s: None)
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    torch.cuda.set_device(dev)
    info = device_description(dev)
    f8 = fp8_dtype(info.get("arch") if getattr(torch.version, "hip", None) else None)
    peers = load_peers()
    for name, src in peers["sources"].items():
        say(f"peer {name}: {src}")
    jobs = [(kv, "decode", bs, ctx - 1, 1) for kv in kv_dtypes for bs, ctx in dec]
    jobs += [(kv, "prefill", r, p, n) for kv in kv_dtypes for r, n, p in pre]
    rows, t0 = [], time.time()
    for i, (kv, phase, bs, prior, new) in enumerate(jobs, 1):
        row = run_row(geom, phase, bs, prior, new, kv, peers=peers, device=dev, fp8_dtype=f8)
        rows.append(row)
        torch.cuda.empty_cache()
        say(f"[{i}/{len(jobs)}] [{time.time() - t0:6.1f}s] {row['verdict']['line']}")
    return dict(
        benchmark="layout", date=time.strftime("%Y-%m-%d %H:%M:%S %Z"), device=info,
        geometry=geom.to_dict(), kv_dtypes=list(kv_dtypes), fp8_dtype=str(f8).replace("torch.", ""),
        timing="CUDA-graph replay medians, us per call; scales 1.0 (fp32 tensors); inputs bf16",
        noise=NOISE,
        peers=peers["sources"], rows=rows, elapsed_s=time.time() - t0,
    )
