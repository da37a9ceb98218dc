"""5D decode attention (``decode_attention_5d``) against SGLang's Triton decode kernel.

Each row builds one random KV cache in the SHUFFLE 5D layout (page 64) and the
same data in SGLang's NHD token layout, then times, as CUDA-graph replay medians
(:mod:`sglang_kv5d.bench.common`):

* ours: :func:`sglang_kv5d.kernels.attention_5d.decode_attention_5d`, default
  (shape-derived) split count;
* the peer: SGLang's ``decode_attention_fwd`` (``kernels/ops/attention/
  decode_attention.py`` in 0.5.23) on the NHD cache with one ``kv_indices``
  entry per token, as SGLang's Triton backend calls it, at every split count in
  a candidate list; the fastest is reported.

Throughput is KV bytes read (K + V of every context token, plus q / out / block
table) per second, as a fraction of the measured read rate: a sum over one
buffer by a kernel on the compute units (:mod:`sglang_kv5d.bench.bandwidth`).
A decode reads the cache and writes a few rows, so reading is its floor. (The
copy bandwidth used before was a ``copy_`` in a CUDA graph, which the copy
engine runs as a memcpy node at about 0.63x of that rate on an H200.)

On ROCm with aiter importable, each row also times aiter's ``pa_decode_gluon``
on the same 5D cache, with the overlay's aiter arguments and split rule
(:mod:`sglang_kv5d.bench.aiter_peers`), and an extend table times
``extend_attention_5d`` against the overlay's aiter extend path
(``mha_batch_prefill_func`` after the gather to linear rows); when aiter is not
importable the result says why. On CUDA there is no aiter peer and no extend
table.

The peer is imported from an installed SGLang, else from a copy made by
``scripts/gpu/attention_prepare_peer.py`` (``SGLANG_KV5D_PEER_PATH`` or
``./.peer_sglang``). Run: ``python -m sglang_kv5d.bench.attention --json out.json``.
"""

from __future__ import annotations

import math
import os
import sys
import time
from typing import Callable, Optional

GEOMETRIES = [  # (H_q, H_kv, D): Qwen3.5 TP8 rank, Qwen3.5 TP1, Llama-like
    (4, 1, 256),
    (16, 2, 256),
    (32, 8, 128),
]
BATCHES = (1, 32, 128)
CONTEXTS = (1024, 8192, 32768)
KV_DTYPES = ("bf16", "fp8_e4m3fn")
PAGE = 64
PEER_SPLITS = (1, 2, 4, 8, 16, 32, 64)

TARGET_BW_FRACTION = 0.70
TARGET_BW_TOKENS = 256 * 1024
TARGET_BS1_SPEEDUP = 3.0


def load_peer():
    """SGLang's ``decode_attention_fwd`` and where it came from."""
    try:
        from sglang.kernels.ops.attention.decode_attention import decode_attention_fwd

        return decode_attention_fwd, "sglang.kernels.ops.attention.decode_attention"
    except Exception:
        pass
    for path in (os.environ.get("SGLANG_KV5D_PEER_PATH"), os.path.join(os.getcwd(), ".peer_sglang")):
        if path and os.path.isdir(path):
            if path not in sys.path:
                sys.path.insert(0, path)
            from sglang_peer.decode_attention import decode_attention_fwd  # type: ignore

            src = ""
            try:
                with open(os.path.join(path, "sglang_peer", "SOURCE")) as f:
                    src = f.read().strip()
            except OSError:
                pass
            return decode_attention_fwd, f"copy of {src or 'SGLang decode_attention.py'}"
    raise RuntimeError(
        "SGLang's decode_attention_fwd is not importable: install SGLang or run "
        "scripts/gpu/attention_prepare_peer.py and carry .peer_sglang"
    )


def build_case(bs, ctx, H_q, H_kv, D, kv, device, *, seed=0, page=PAGE):
    """Random 5D cache + the same data in NHD token layout, tables, q."""
    import torch

    g = torch.Generator(device=device)
    g.manual_seed(seed)
    fp8 = kv.startswith("fp8")
    X = 16 if fp8 else 8
    pages_per_seq = -(-ctx // page)
    nb = bs * pages_per_seq + 1
    store = torch.float8_e4m3fn if fp8 else torch.bfloat16

    def rnd(shape):
        t = torch.randn(shape, generator=g, device=device, dtype=torch.bfloat16)
        return t.to(store)

    k5 = rnd((nb, H_kv, D // X, page, X))
    v5 = rnd((nb, H_kv, page // X, D, X))
    perm = torch.randperm(nb, generator=g, device=device)[: bs * pages_per_seq]
    bt = perm.reshape(bs, pages_per_seq).to(torch.int32)
    ctx_lens = torch.full((bs,), ctx, dtype=torch.int32, device=device)
    q = torch.randn((bs, H_q, D), generator=g, device=device, dtype=torch.bfloat16)
    return dict(q=q, k5=k5, v5=v5, bt=bt, ctx=ctx_lens, X=X, page=page, fp8=fp8)


def nhd_for_peer(case):
    """The same K/V as ``(num_blocks * page, H_kv, D)`` + per-token indices."""
    import torch

    k5, v5, page, bt = case["k5"], case["v5"], case["page"], case["bt"]
    nb, H, C, P, X = k5.shape
    D = C * X
    k_nhd = k5.permute(0, 3, 1, 2, 4).reshape(nb * P, H, D).contiguous()
    v_nhd = v5.permute(0, 2, 4, 1, 3).reshape(nb * P, H, D).contiguous()
    bs = bt.shape[0]
    ctx = int(case["ctx"][0].item()) if bs else 0
    tok = bt.long()[:, :, None] * P + torch.arange(P, device=bt.device)[None, None, :]
    kv_indices = tok.reshape(bs, -1)[:, :ctx].reshape(-1).contiguous()
    kv_indptr = torch.arange(bs + 1, device=bt.device, dtype=torch.int32) * ctx
    return k_nhd, v_nhd, kv_indptr, kv_indices


def peer_call(decode_attention_fwd, q, k_nhd, v_nhd, kv_indptr, kv_indices, out, splits, sm_scale):
    import torch

    bs, H_q, D = q.shape
    num_kv_splits = torch.full((bs,), splits, dtype=torch.int32, device=q.device)
    logits = torch.empty((bs, H_q, splits, D), dtype=torch.float32, device=q.device)
    lse = torch.empty((bs, H_q, splits), dtype=torch.float32, device=q.device)

    def fn():
        decode_attention_fwd(
            q, k_nhd, v_nhd, out, kv_indptr, kv_indices, logits, lse, num_kv_splits,
            splits, sm_scale, 1.0, 1.0,
        )

    return fn


def peer_split_times(peer, q, nhd, out, sm_scale, splits, time_fn) -> dict:
    """SGLang's Triton decode at each split count of ``splits`` on the NHD copy
    ``nhd`` = (k, v, kv_indptr, kv_indices) of a case (``nhd_for_peer``):
    {splits: us from ``time_fn(call)``, or "error: ..." when it failed}."""
    tried = {}
    for s in splits:
        fn = peer_call(peer, q, *nhd, out, s, sm_scale)
        try:
            tried[s] = time_fn(fn)
        except Exception as exc:  # noqa: BLE001 - reported to the caller
            tried[s] = f"error: {type(exc).__name__}: {exc}"[:200]
    return tried


def fastest(tried: dict):
    """(us, splits) of the fastest entry of ``peer_split_times``; None if every one failed."""
    times = [(us, s) for s, us in tried.items() if not isinstance(us, str)]
    return min(times) if times else None


def peer_best_us(peer, case, out, sm_scale, *, splits=PEER_SPLITS, inner=5, reps=10, errors=None):
    """(us, splits): SGLang's Triton decode on an NHD copy of ``case``'s cache at
    its fastest split count among ``splits`` (those of fewer than 64 tokens per
    split are skipped), CUDA-graph replay medians. Failures go to ``errors``
    (a list of (splits, message)) when given, else raise RuntimeError after
    trying every count; None if none ran."""
    from sglang_kv5d.bench.common import graph_replay_median_us

    ctx = int(case["ctx"].max().item()) if case["ctx"].numel() else 0
    tried = peer_split_times(
        peer, case["q"], nhd_for_peer(case), out, sm_scale, [s for s in splits if s <= max(1, ctx // 64)],
        lambda fn: graph_replay_median_us(fn, inner=inner, reps=reps, warmup=2))
    failed = [(s, msg) for s, msg in tried.items() if isinstance(msg, str)]
    if failed and errors is None:
        raise RuntimeError(f"peer failed at split counts {[s for s, _ in failed]}: {failed[0][1]}")
    if errors is not None:
        errors.extend(failed)
    return fastest(tried)


def _time(fn, est_us: float) -> float:
    from sglang_kv5d.bench.common import graph_replay_median_us

    inner = int(min(20, max(1, 3000.0 / max(est_us, 1.0))))
    reps = 10 if est_us * inner > 20000 else 20
    return graph_replay_median_us(fn, inner=inner, reps=reps, warmup=2)


def _kv_bytes(bs, ctx, H_q, H_kv, D, elem):
    kv = 2 * bs * ctx * H_kv * D * elem
    qo = 2 * bs * H_q * D * 2
    table = bs * (-(-ctx // PAGE)) * 4
    return kv + qo + table


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
    nbytes = _kv_bytes(bs, ctx, H_q, H_kv, D, elem)
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
    except Exception as exc:  # noqa: BLE001 - reported in the row
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


#: extend rows (ROCm with aiter only): (requests, new tokens per request, cached prefix per request)
EXTEND_SHAPES = ((1, 2048, 2048), (4, 512, 4096), (16, 128, 8192))


def extend_layout(bs, new, prefix, page=PAGE, *, gen=None):
    """Page tables and metadata for ``bs`` requests of ``prefix`` cached plus
    ``new`` tokens each, on distinct random pages: (block_tables int32
    (bs, pages), slots int64 (bs * (prefix + new),) request by request,
    qo_indptr, kv_indptr, kv_lens (int32), pages in the cache)."""
    import torch

    total = prefix + new
    per = -(-total // page)
    nb = bs * per + 1
    bt = torch.randperm(nb, generator=gen)[: bs * per].view(bs, per).to(torch.int32)
    t = torch.arange(total)
    slots = (bt.long()[:, t // page] * page + t % page).reshape(-1)
    qo = (torch.arange(bs + 1) * new).to(torch.int32)
    kvp = (torch.arange(bs + 1) * total).to(torch.int32)
    return bt, slots, qo, kvp, torch.full((bs,), total, dtype=torch.int32), nb


def run_extend_row(bs, new, prefix, geom, kv, *, aiter, device="cuda", check=True):
    """extend_attention_5d against the overlay's aiter extend path (gather the
    requests' tokens from the 5D cache into linear rows, per-tensor fp8 query
    for fp8 caches, ``mha_batch_prefill_func``) on one 5D cache."""
    import torch

    from sglang_kv5d.bench import aiter_peers
    from sglang_kv5d.bench.common import eager_median_us
    from sglang_kv5d.kernels.attention_5d import extend_attention_5d

    H_q, H_kv, D = geom
    fp8 = kv.startswith("fp8")
    X = 16 if fp8 else 8
    g = torch.Generator().manual_seed(1)
    bt, slots, qo, kvp, kv_lens, nb = extend_layout(bs, new, prefix, gen=g)
    store = torch.float8_e4m3fn if fp8 else torch.bfloat16
    gd = torch.Generator(device=device).manual_seed(1)
    k5 = torch.randn((nb, H_kv, D // X, PAGE, X), generator=gd, device=device, dtype=torch.bfloat16).to(store)
    v5 = torch.randn((nb, H_kv, PAGE // X, D, X), generator=gd, device=device, dtype=torch.bfloat16).to(store)
    q = torch.randn((bs * new, H_q, D), generator=gd, device=device, dtype=torch.bfloat16)
    bt, slots, qo, kvp, kv_lens = (t.to(device) for t in (bt, slots, qo, kvp, kv_lens))
    one = torch.ones(1, dtype=torch.float32, device=device) if fp8 else None
    sm_scale = 1.0 / math.sqrt(D)
    out = torch.empty((bs * new, H_q, D), dtype=torch.bfloat16, device=device)

    def ours():
        extend_attention_5d(q, k5, v5, bt, qo, kv_lens, sm_scale=sm_scale, causal=True, k_scale=one, v_scale=one,
                            fp8_dtype=store if fp8 else None, out=out)

    ours()
    torch.cuda.synchronize()
    row = dict(kv=kv, H_q=H_q, H_kv=H_kv, D=D, bs=bs, new=new, prefix=prefix, page=PAGE,
               ours_us=_time(ours, 1000.0))
    k_in, v_in, fp8_in, reinterpreted = k5, v5, store if fp8 else None, False
    if fp8:
        want = aiter_peers.aiter_fp8()
        if want is not None and want != store:
            k_in, v_in, fp8_in, reinterpreted = k5.view(want), v5.view(want), want, True
    call = aiter_peers.extend_callable(aiter, q, k_in, v_in, slots, PAGE, qo, kvp, sm_scale=sm_scale, max_q=new,
                                       max_kv=prefix + new, fp8_dtype=fp8_in, k_scale=one, v_scale=one)
    try:
        res = call()
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - reported in the row
        row["aiter_note"] = "failed: " + aiter_peers.error_line(exc)
        return row
    try:
        row["aiter_us"] = _time(call, 1000.0)
    except Exception:  # noqa: BLE001 - not capturable in a CUDA graph: eager events instead
        row["aiter_us"] = eager_median_us(call)
        row["aiter_timing"] = "eager (not capturable in a CUDA graph)"
    row["speedup_vs_aiter"] = row["aiter_us"] / row["ours_us"]
    if reinterpreted:
        row["aiter_note"] = "fp8 cache bytes read as aiter's fp8 type (timing only, no comparison)"
    elif check:
        ours()
        torch.cuda.synchronize()
        row["max_abs_diff_vs_aiter"] = float((out.float() - res.reshape(out.shape).float()).abs().max())
    return row


def format_extend_table(rows, aiter_src: str) -> str:
    lines = [f"extend_attention_5d vs the overlay's aiter extend path ({aiter_src}: gather 5D -> linear rows, "
             "per-tensor fp8 query for fp8 caches)", "",
             "| KV | H_q/H_kv | D | requests | new | prefix | ours us | aiter us | aiter / ours | max |diff| |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    nan = float("nan")
    for r in rows:
        lines.append(f"| {r['kv']} | {r['H_q']}/{r['H_kv']} | {r['D']} | {r['bs']} | {r['new']} | {r['prefix']} | "
                     f"{r['ours_us']:.1f} | {r.get('aiter_us', nan):.1f} | {r.get('speedup_vs_aiter', nan):.2f}x | "
                     f"{r.get('max_abs_diff_vs_aiter', nan):.3g} |")
    for n in sorted({r["aiter_note"] for r in rows if "aiter_note" in r}
                    | {r["aiter_timing"] for r in rows if "aiter_timing" in r}):
        lines.append(f"aiter: {n}")
    return "\n".join(lines)


def evaluate_targets(row) -> dict:
    t = {}
    if "peer_us" in row:
        t["ge_peer"] = row["ours_us"] <= row["peer_us"] * 1.0
    if "aiter_us" in row:
        t["ge_aiter"] = row["ours_us"] <= row["aiter_us"]
    if row["bs"] * row["ctx"] >= TARGET_BW_TOKENS:
        t["read_ge_70pct"] = row["ours_read_fraction"] >= TARGET_BW_FRACTION
    if row["bs"] == 1 and row["ctx"] >= 8192 and "peer_us" in row:
        t["bs1_3x_peer"] = row["peer_us"] / row["ours_us"] >= TARGET_BS1_SPEEDUP
    return t


def run(device: str = "cuda", progress: Optional[Callable[[str], None]] = None, *,
        geometries=None, batches=None, contexts=None, kv_dtypes=None) -> dict:
    """Run the whole table. Returns a JSON-serialisable dict."""
    import torch

    from sglang_kv5d.bench import aiter_peers
    from sglang_kv5d.bench.common import device_description, memory_rates

    if not torch.cuda.is_available():
        raise RuntimeError("the attention benchmark needs a GPU")
    say = progress or (lambda s: None)
    info = device_description(device if device != "cuda" else None)
    rates = memory_rates(device)
    bw = rates.read
    try:
        peer, peer_src = load_peer()
    except Exception as exc:
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


def summarize(rows) -> dict:
    s = {}
    for key in ("ge_peer", "ge_aiter", "read_ge_70pct", "bs1_3x_peer"):
        vals = [r["targets"][key] for r in rows if key in r.get("targets", {})]
        if vals or key != "ge_aiter":  # no aiter rows (CUDA): no aiter line
            s[key] = dict(met=sum(vals), of=len(vals))
    return s


def format_table(result: dict) -> str:
    dev = result.get("device", {})
    bw = result.get("read_bytes_per_s", 0.0)
    aiter_src = result.get("aiter_peer", "none (not ROCm)")
    rows = result.get("rows", [])
    # aiter columns on ROCm only (off ROCm there is no aiter peer and the table is as before)
    show_aiter = not aiter_src.startswith("none") or any("aiter_us" in r or "aiter_note" in r for r in rows)
    lines = [
        f"decode_attention_5d vs SGLang Triton decode ({result.get('peer', '?')})"
        + (f"; aiter peer: {aiter_src}" if show_aiter else ""),
        f"{dev.get('gpu', '?')} driver {dev.get('driver', '?')}, torch {dev.get('torch', '?')}, "
        f"triton {dev.get('triton', '?')}; read rate {bw / 1e9:.0f} GB/s (a sum kernel on the compute units); "
        f"page {result.get('page')}",
        "",
        "| KV | H_q/H_kv | D | bs | ctx | ours us | ours % read | splits | SGLang us (splits) | SGLang % read "
        "| vs SGLang | " + ("aiter us (splits) | aiter % read | vs aiter | " if show_aiter else "") + "targets |",
        "|---|---|---|---|---|---|---|---|---|---|---|" + ("---|---|---|" if show_aiter else "") + "---|",
    ]
    nan = float("nan")
    for r in rows:
        t = r.get("targets", {})
        marks = ", ".join(f"{k} {'met' if v else 'NOT met'}" for k, v in t.items())
        peer = f"{r['peer_us']:.1f} ({r['peer_splits']})" if "peer_us" in r else "n/a"
        aiter = f"{r['aiter_us']:.1f} ({r['aiter_splits']})" if "aiter_us" in r else (
            "failed" if "aiter_note" in r else "n/a")
        lines.append(
            f"| {r['kv']} | {r['H_q']}/{r['H_kv']} | {r['D']} | {r['bs']} | {r['ctx']} | "
            f"{r['ours_us']:.1f} | {100 * r['ours_read_fraction']:.1f}% | {r.get('ours_splits', '')} | {peer} | "
            f"{100 * r.get('peer_read_fraction', nan):.1f}% | {r.get('speedup_vs_peer', nan):.2f}x | "
            + (f"{aiter} | {100 * r.get('aiter_read_fraction', nan):.1f}% | {r.get('speedup_vs_aiter', nan):.2f}x | "
               if show_aiter else "")
            + f"{marks} |"
        )
    notes = sorted({r["aiter_note"] for r in result.get("rows", []) if "aiter_note" in r})
    for n in notes:
        lines.append(f"aiter: {n}")
    lines.append("")
    lines.append("% read = bytes read / time / read rate; vs X = X's time / ours (above 1: ours is faster)")
    s = result.get("summary", {})
    if s:
        lines.append(
            "targets: "
            + "; ".join(f"{k}: {v['met']}/{v['of']} rows met" for k, v in s.items())
        )
    if result.get("extend_rows"):
        lines += ["", format_extend_table(result["extend_rows"], result.get("extend_peer", "?"))]
    return "\n".join(lines)


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
    res = run(progress=lambda s: print(s, flush=True), **kw)
    res["command"] = "python -m sglang_kv5d.bench.attention" + (" " + " ".join(argv or sys.argv[1:])).rstrip()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    print(format_table(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
