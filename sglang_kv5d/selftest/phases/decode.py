"""Decode steps: one new token for every request per step, through the page table."""

from __future__ import annotations

import time
import types

import torch

from ...kernels.attention_reference import attention_ref

NAME = "decode"
NS = types.SimpleNamespace


def run(run) -> None:
    for _ in range(run.geo.decode_steps):
        for case in run.cases.values():
            for lid in case.layers:
                _layer_step(run, case, lid)
        for r in run.reqs:
            r.done += 1
    run.say(f"{run.geo.decode_steps} decode steps done")


def _layer_step(run, case, lid) -> None:
    """One layer of one decode step: write, attend, compare per request."""
    geo, device, reqs, page = run.geo, run.device, run.reqs, run.geo.page
    layer = case.layer_objs[lid]
    bs = len(reqs)
    q, k, v = run.model.qkv(bs)
    loc = torch.tensor([r.slot(r.done, page) for r in reqs], dtype=torch.int64, device=device)
    res = run.result(NAME, case.name)
    t0 = time.perf_counter()
    case.pool.set_kv_buffer(layer, run.loc_arg(loc), k, v, layer.k_scale, layer.v_scale)
    table = torch.zeros(bs, max(len(r.pages) for r in reqs), dtype=torch.int32, device=device)
    for i, r in enumerate(reqs):
        table[i, : len(r.pages)] = torch.tensor(r.pages, dtype=torch.int32)
    case.backend.forward_metadata = NS(kv_indices=table, kv_indptr=None, qo_indptr=None,
                                       swa_page_table=table if lid in case.windows else None,
                                       max_kv_len=max(r.done + 1 for r in reqs))
    seq_lens = [r.done + 1 for r in reqs]
    fb = NS(batch_size=bs, seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=device),
            seq_lens_cpu=torch.tensor(seq_lens), seq_lens_sum=sum(seq_lens))
    o = torch.full((bs, geo.hq * geo.head_dim), float("nan"), dtype=torch.bfloat16, device=device)
    k_cache = case.pool.get_key_buffer(layer.layer_id)
    v_cache = case.pool.get_value_buffer(layer.layer_id)
    run.decode_fn(case.backend, q.reshape(bs, -1), layer, fb, k_cache, v_cache, o, None)
    run.sync()
    res.seconds += time.perf_counter() - t0
    res.calls += 1
    res.tokens += bs
    for i, r in enumerate(reqs):
        case.append_logical(r.rid, lid, k[i: i + 1], v[i: i + 1])
        lk, lv = case.kv[(r.rid, lid)]
        ref = attention_ref(q[i: i + 1].cpu().double(), torch.cat(lk), torch.cat(lv), torch.tensor([r.done]),
                            sm_scale=layer.scaling, sliding_window=case.window(lid))
        res.compare(o[i], ref, f"layer {lid} request {r.rid} decode position {r.done}")
