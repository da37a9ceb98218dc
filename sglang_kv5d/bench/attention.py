"""5D decode attention (``decode_attention_5d``) against SGLang's Triton decode kernel.

Each row builds one random KV cache in the SHUFFLE 5D layout (page 64) and the
same data in SGLang's NHD token layout, then times, as CUDA-graph replay medians
(:mod:`sglang_kv5d.bench.common`):

* ours: :func:`sglang_kv5d.kernels.attention_5d.decode_attention_5d`, default
  (shape-derived) split count;
* the peer: SGLang's ``decode_attention_fwd`` (surface row
  ``kernels.decode_attention_fwd``) on the NHD cache with one ``kv_indices``
  entry per token, as SGLang's Triton backend calls it, at every split count in
  a candidate list; the fastest is reported (:mod:`.attention_peer`).

Throughput is KV bytes read (K + V of every context token, plus q / out / block
table) per second, as a fraction of the measured read rate: a sum over one
buffer by a kernel on the compute units (:mod:`sglang_kv5d.bench.bandwidth`).
A decode reads the cache and writes a few rows, so reading is its floor. A
``copy_`` in a CUDA graph is not used as the rate: the copy engine runs it as a
memcpy node at about 0.63x of the compute units' rate on an H200.

On ROCm with aiter importable, each row also times aiter's ``pa_decode_gluon``
on the same 5D cache, with the overlay's aiter arguments and split rule
(:mod:`sglang_kv5d.bench.aiter_peers`), and an extend table times
``extend_attention_5d`` against the overlay's aiter extend path
(:mod:`.attention_extend`); when aiter is not importable the result says why.
On CUDA there is no aiter peer and no extend table.

The peer is imported from an installed SGLang, else from a copy made by
``lab/prepare_peers.py`` in the directory ``SGLANG_KV5D_PEER_PATH`` names.
Run: ``python -m sglang_kv5d.bench.attention --json out.json``.
"""

from __future__ import annotations

import math
import sys
import time
from typing import Callable, Optional

from sglang_kv5d.bench.attention_cases import (  # noqa: F401  (the suite's public names)
    BATCHES, CONTEXTS, GEOMETRIES, KV_DTYPES, PAGE, PEER_SPLITS, TARGET_BS1_SPEEDUP, TARGET_BW_FRACTION,
    TARGET_BW_TOKENS, build_case, kv_bytes,
)
from sglang_kv5d.bench.attention_extend import (  # noqa: F401
    EXTEND_SHAPES, extend_layout, format_extend_table, run_extend_row,
)
from sglang_kv5d.bench.attention_peer import (  # noqa: F401
    fastest, load_peer, nhd_for_peer, peer_best_us, peer_call, peer_split_times,
)
from sglang_kv5d.bench.attention_report import evaluate_targets, format_table, summarize  # noqa: F401
from sglang_kv5d.bench.common import adaptive_median_us as _time


def run_row(bs, ctx, geom, kv, *, bw, peer, device="cuda", peer_splits=PEER_SPLITS, check=True, aiter=None):
    """One row. ``bw``: the read rate (bytes/s) the fractions are of; ``peer``:
    SGLang's decode or None; ``aiter``: ``aiter_peers.load()``'s result or None."""
    import torch

    from sglang_kv5d.kernels.attention_5d import decode_attention_5d

    H_q, H_kv, D = geom
    case = build_case(bs, ctx, H_q, H_kv, D, kv, device)
    sm_scale = 1.0 / math.sqrt(D)
    q = case["q"]
    out = torch.empty_like(q)
    scale = torch.ones(1, dtype=torch.float32, device=device) if case["fp8"] else None

    def ours():
        decode_attention_5d(
            q, case["k5"], case["v5"], case["bt"], case["ctx"], sm_scale=sm_scale,
            k_scale=scale, v_scale=scale, out=out,
        )

    elem = 1 if case["fp8"] else 2
    nbytes = kv_bytes(bs, ctx, H_q, H_kv, D, elem)
    est = nbytes / (0.6 * bw) * 1e6
    ours()
    torch.cuda.synchronize()
    ours_us = _time(ours, est)
    row = dict(
        kv=kv, H_q=H_q, H_kv=H_kv, D=D, bs=bs, ctx=ctx, page=PAGE, bytes=nbytes,
        ours_us=ours_us, ours_read_fraction=nbytes / (ours_us * 1e-6) / bw,
    )
    info = {}
    decode_attention_5d(
        q, case["k5"], case["v5"], case["bt"], case["ctx"], sm_scale=sm_scale,
        k_scale=scale, v_scale=scale, out=out, _info=info,
    )
    row["ours_splits"] = info.get("num_splits")

    if peer is not None:
        nhd = nhd_for_peer(case)
        out_peer = torch.empty_like(q)
        sm = torch.cuda.get_device_properties(q.device).multi_processor_count
        tiles = -(-H_q // min(16, H_q // H_kv))
        cands = [s for s in peer_splits if s == 1 or bs * tiles * s <= 8 * sm]
        if len(cands) < 2:
            cands = list(peer_splits[:2])

        def warm_then_time(fn):
            fn()
            torch.cuda.synchronize()
            return _time(fn, est)

        tried = peer_split_times(peer, q, nhd, out_peer, sm_scale, cands, warm_then_time)
        row["peer_tried"] = {str(s): us for s, us in tried.items()}
        best = fastest(tried)
        if best is not None:
            row["peer_us"], row["peer_splits"] = best
            row["peer_read_fraction"] = nbytes / (best[0] * 1e-6) / bw
            row["speedup_vs_peer"] = best[0] / ours_us
            if check:
                fn = peer_call(peer, q, *nhd, out_peer, best[1], sm_scale)
                fn()
                ours()
                torch.cuda.synchronize()
                row["max_abs_diff_vs_peer"] = float((out.float() - out_peer.float()).abs().max())
        del nhd
    if aiter is not None and not isinstance(aiter.get("pa_decode_gluon"), str):
        _aiter_decode(row, aiter, case, q, out, ours, sm_scale, scale, nbytes, bw, est, check)
    if check:
        from sglang_kv5d.kernels.attention_reference import decode_attention_5d_ref

        ref = decode_attention_5d_ref(
            q[:1], case["k5"], case["v5"], case["bt"][:1], case["ctx"][:1], sm_scale=sm_scale,
            k_scale=scale, v_scale=scale,
        )
        row["max_abs_err_seq0_vs_fp64"] = float((out[:1].double() - ref).abs().max())
    row["targets"] = evaluate_targets(row)
    del case
    torch.cuda.empty_cache()
    return row


def _aiter_decode(row, aiter, case, q, out, ours, sm_scale, scale, nbytes, bw, est, check):
    """aiter's pa_decode_gluon on the row's 5D cache (the overlay's arguments and splits)."""
    import torch

    from sglang_kv5d.bench import aiter_peers

    out_aiter = torch.empty_like(q)
    try:
        fn, splits, reinterpreted = aiter_peers.decode_callable(
            aiter, q, case["k5"], case["v5"], case["bt"], case["ctx"], out_aiter, sm_scale=sm_scale,
            k_scale=scale, v_scale=scale)
        fn()
        torch.cuda.synchronize()
        row["aiter_us"] = _time(fn, est)
    except Exception as exc:  # noqa: BLE001 - a peer fails with any error: reported in the row
        row["aiter_note"] = "failed: " + aiter_peers.error_line(exc)
        return
    row["aiter_splits"] = splits
    row["aiter_read_fraction"] = nbytes / (row["aiter_us"] * 1e-6) / bw
    row["speedup_vs_aiter"] = row["aiter_us"] / row["ours_us"]
    if reinterpreted:
        row["aiter_note"] = "fp8 cache bytes read as aiter's fp8 type (timing only, no comparison)"
    elif check:
        fn()
        ours()
        torch.cuda.synchronize()
        row["max_abs_diff_vs_aiter"] = float((out.float() - out_aiter.float()).abs().max())


def run(device: str = "cuda", progress: Optional[Callable[[str], None]] = None, *,
        geometries=None, batches=None, contexts=None, kv_dtypes=None) -> dict:
    """Run the whole table. Returns a JSON-serialisable dict."""
    import torch

    from sglang_kv5d.bench import aiter_peers, sglang_peers
    from sglang_kv5d.bench.common import device_description, memory_rates

    sglang_peers.peer_path()  # a bad SGLANG_KV5D_PEER_PATH fails before anything is measured
    if not torch.cuda.is_available():
        raise RuntimeError("the attention benchmark needs a GPU")
    say = progress or (lambda s: None)
    info = device_description(device if device != "cuda" else None)
    rates = memory_rates(device)
    bw = rates.read
    try:
        peer, peer_src = load_peer()
    except RuntimeError as exc:  # no peer here: the rows say so; a bad SGLANG_KV5D_PEER_PATH raises
        peer, peer_src = None, f"unavailable: {exc}"
    aiter = aiter_peers.load()
    aiter_src = aiter_peers.describe(aiter, "pa_decode_gluon")
    say(f"read rate {bw / 1e9:.0f} GB/s; peer: {peer_src}; aiter peer: {aiter_src}")
    rows = []
    t0 = time.time()
    for kv in kv_dtypes or KV_DTYPES:
        for geom in geometries or GEOMETRIES:
            for bs in batches or BATCHES:
                for ctx in contexts or CONTEXTS:
                    row = run_row(bs, ctx, geom, kv, bw=bw, peer=peer, device=device, aiter=aiter or None)
                    rows.append(row)
                    say(
                        f"[{time.time() - t0:6.1f}s] {kv} {geom[0]}/{geom[1]} D{geom[2]} bs{bs} ctx{ctx}: "
                        f"ours {row['ours_us']:.1f}us ({100 * row['ours_read_fraction']:.0f}% read rate) "
                        f"peer {row.get('peer_us', float('nan')):.1f}us"
                    )
    extend_rows = []
    if aiter_peers.available(aiter, "mha_batch_prefill_func"):
        for kv in kv_dtypes or KV_DTYPES:
            for geom in geometries or GEOMETRIES:
                for bs, new, prefix in EXTEND_SHAPES:
                    row = run_extend_row(bs, new, prefix, geom, kv, aiter=aiter, device=device)
                    extend_rows.append(row)
                    say(f"extend {kv} {geom[0]}/{geom[1]} D{geom[2]} bs{bs} new{new} prefix{prefix}: "
                        f"ours {row['ours_us']:.1f}us aiter {row.get('aiter_us', float('nan')):.1f}us")
    summary = summarize(rows)
    return dict(
        extend_rows=extend_rows,
        extend_peer=aiter_peers.describe(aiter, "mha_batch_prefill_func"),
        benchmark="decode_attention_5d",
        date=time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        device=info,
        rates=rates.to_dict(),
        read_bytes_per_s=bw,
        peer=peer_src,
        aiter_peer=aiter_src,
        page=PAGE,
        rows=rows,
        summary=summary,
    )


def main(argv=None) -> int:
    import argparse
    import json

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the result here")
    ap.add_argument("--quick", action="store_true", help="one geometry, bf16, ctx 8k only")
    args = ap.parse_args(argv)
    kw = {}
    if args.quick:
        kw = dict(geometries=GEOMETRIES[:1], kv_dtypes=KV_DTYPES[:1], contexts=(8192,))
    from sglang_kv5d.bench.sglang_peers import PeerPathError

    try:
        res = run(progress=lambda s: print(s, flush=True), **kw)
    except PeerPathError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    res["command"] = "python -m sglang_kv5d.bench.attention" + (" " + " ".join(argv or sys.argv[1:])).rstrip()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    print(format_table(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
