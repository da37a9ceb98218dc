"""Chunked prefill: each step takes up to ``chunk`` tokens of every unfinished
request; requests after the first reuse its page-aligned prefix (a radix-cache
hit: the prefix pages are not written again)."""

from __future__ import annotations

import time
import types

import torch

from ...kernels.attention_reference import attention_ref

NAME = "extend"
NS = types.SimpleNamespace


def run(run) -> None:
    geo, reqs = run.geo, run.reqs
    steps = 0
    while any(r.done < r.length for r in reqs):
        batch = []
        for r in reqs:
            if r.done >= r.length:
                continue
            if r.prefix_shared and r.rid > 0:
                if reqs[0].done < geo.prefix:
                    continue  # request 0 has not written the shared prefix yet
                if r.done == 0:
                    r.done = geo.prefix  # the prefix pages are reused, not rewritten
            batch.append((r, r.done, min(geo.chunk, r.length - r.done)))
        steps += 1
        for case in run.cases.values():
            for lid in case.layers:
                _layer_step(run, case, lid, batch)
        for r, start, n in batch:
            r.done = start + n
    run.say(f"prefill done in {steps} chunked steps")


def _layer_step(run, case, lid, batch) -> None:
    """One layer of one extend batch: write, attend, compare per request."""
    device, page = run.device, run.geo.page
    layer = case.layer_objs[lid]
    qs, ks, vs, locs, slots, qo, kvp, seq_lens, prefix_lens = [], [], [], [], [], [0], [0], [], []
    for r, start, n in batch:
        q, k, v = run.model.qkv(n)
        qs.append(q)
        ks.append(k)
        vs.append(v)
        locs.extend(r.slot(p, page) for p in range(start, start + n))
        slots.extend(r.slot(p, page) for p in range(start + n))
        qo.append(qo[-1] + n)
        kvp.append(kvp[-1] + start + n)
        seq_lens.append(start + n)
        prefix_lens.append(start)
    q, k, v = torch.cat(qs), torch.cat(ks), torch.cat(vs)
    loc = torch.tensor(locs, dtype=torch.int64, device=device)
    res = run.result(NAME, case.name)
    t0 = time.perf_counter()
    case.pool.set_kv_buffer(layer, run.loc_arg(loc), k, v, layer.k_scale, layer.v_scale)
    window = case.window(lid)
    meta = NS(
        kv_indices=torch.tensor(slots, dtype=torch.int32, device=device),
        kv_indptr=torch.tensor(kvp, dtype=torch.int32, device=device),
        qo_indptr=torch.tensor(qo, dtype=torch.int32, device=device),
        max_q_len=max(n for _, _, n in batch), max_kv_len=max(seq_lens),
        swa_page_table=torch.tensor(slots, dtype=torch.int32, device=device) if lid in case.windows else None,
    )
    case.backend.forward_metadata = meta
    case.backend.qo_indptr = meta.qo_indptr  # SGLang <= 0.5.22 reads it from the backend
    fb = NS(batch_size=len(batch), seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=device),
            seq_lens_cpu=torch.tensor(seq_lens), seq_lens_sum=sum(seq_lens),
            extend_prefix_lens_cpu=prefix_lens, extend_seq_lens_cpu=[n for _, _, n in batch])
    out = run.extend_fn(case.backend, q.reshape(q.shape[0], -1), k, v, layer, fb, len(batch) + 1,
                        (window, -1) if window >= 0 else (-1, -1), None)
    run.sync()
    res.seconds += time.perf_counter() - t0
    res.calls += 1
    res.tokens += q.shape[0]

    # the reference, one request at a time
    fresh = all(start == 0 for _, start, _ in batch)
    aiter_fp8 = run.path == "aiter" and case.fp8 is not None
    q_ref = _aiter_extend_query(q, case.fp8) if aiter_fp8 and not fresh else None
    row = 0
    for (r, start, n), q_r, k_r, v_r in zip(batch, qs, ks, vs):
        _append_chunk(run, case, r, lid, start, k_r, v_r)
        lk, lv = case.kv[(r.rid, lid)]
        keys, vals = torch.cat(lk)[: start + n], torch.cat(lv)[: start + n]
        if aiter_fp8 and fresh:
            # aiter path, no request with a prefix: attention over the new bf16 k/v (no cache read)
            keys, vals = k_r.cpu().double(), v_r.cpu().double()
        q64 = q_r.cpu().double() if q_ref is None else q_ref[row: row + n]
        ref = attention_ref(q64, keys, vals, torch.arange(start, start + n), sm_scale=layer.scaling,
                            sliding_window=window)
        res.compare(out[row: row + n], ref, f"layer {lid} request {r.rid} tokens {start}..{start + n - 1}")
        row += n


def _aiter_extend_query(q, fp8_dtype):
    """The query the aiter extend path attends with over an fp8 cache: the
    batch quantized per tensor (``attention.quantize_per_tensor``: aiter's
    batch prefill takes q, k and v of one dtype), dequantized, float64."""
    from ...attention import quantize_per_tensor

    qq, scale = quantize_per_tensor(q, fp8_dtype)
    return (qq.float() * scale).cpu().double()


def _append_chunk(run, case, r, lid, start, k_r, v_r) -> None:
    """This chunk's logical K/V; a shared-prefix request first copies request 0's prefix."""
    lk, lv = case.kv[(r.rid, lid)]
    have = sum(x.shape[0] for x in lk)
    if have < start and r.prefix_shared and r.rid > 0:
        src_k, src_v = case.kv[(run.reqs[0].rid, lid)]
        lk.append(torch.cat(src_k)[have:start])
        lv.append(torch.cat(src_v)[have:start])
    case.append_logical(r.rid, lid, k_r, v_r)
