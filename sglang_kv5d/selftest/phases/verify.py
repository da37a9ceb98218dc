"""Speculative target verify: every request checks ``geo.verify_tokens`` drafts at once.

Through the real ``AiterAttnBackend.forward_extend`` in ``TARGET_VERIFY`` mode
(the target-verify-5d patch): SGLang's own verify metadata builder fills the
fixed-width page table from ``req_to_token`` (prefix + drafts), the drafts'
K/V go through the pool's 5D write, and each draft token's output is held
against float64 attention over the logical prefix plus the drafts before it.
Then, for layers without a sliding window, the same drafts block-parallel
(every draft sees every draft: DFLASH's draft semantics) through
sglang_kv5d.speculative.verify. The drafts are not accepted: this phase runs
last and leaves ``Request.done`` as it is.
"""

from __future__ import annotations

import time
import types

import torch

from ...kernels.attention_reference import attention_ref
from ...surface import attr_name, import_object

NAME = "verify"
NON_CAUSAL = "verify-nc"
NS = types.SimpleNamespace


def run(run) -> None:
    from ...patches.target_verify import FLAG

    n = run.geo.verify_tokens
    for case in run.cases.values():
        if not getattr(case.backend, FLAG, False):
            run.result(NAME, case.name).skipped = (
                "target-verify-5d is not on for this backend (needs SGLang 0.5.23 or later, a 5D non-MLA pool, topk 1)"
            )
            continue
        _prepare(run, case, n)
        for lid in case.layers:
            _layer_step(run, case, lid, n)
    run.say(f"verify of {n} draft tokens per request done")


def _prepare(run, case, n) -> None:
    """req_to_token rows for prefix + drafts, the SWA slot mapping, SGLang's verify metadata."""
    reqs, page, device = run.reqs, run.geo.page, run.device
    backend = case.backend
    table = backend.req_to_token
    for i, r in enumerate(reqs):
        table[i, : r.done + n] = torch.tensor([r.slot(p, page) for p in range(r.done + n)], dtype=table.dtype)
    pool = case.pool
    if getattr(pool, "full_to_swa_index_mapping", False) is None:
        # the SWA allocator registers this in a server; here full and SWA slots coincide
        pool.register_mapping(torch.arange(pool.size + 2 * page, dtype=torch.int64, device=device))
    bs = len(reqs)
    seq_lens = torch.tensor([r.done for r in reqs], dtype=torch.int64, device=device)
    draft_loc = torch.tensor([r.slot(r.done + t, page) for r in reqs for t in range(n)], dtype=torch.int64,
                             device=device)
    case.verify_batch = NS(
        batch_size=bs, forward_mode=import_object("forward_batch_info.ForwardMode").TARGET_VERIFY,
        spec_info=NS(draft_token_num=n, custom_mask=None), req_pool_indices=torch.arange(bs, device=device),
        seq_lens=seq_lens, seq_lens_cpu=seq_lens.cpu(), seq_lens_sum=int(seq_lens.sum()),
        input_ids=torch.zeros(bs * n, dtype=torch.int64, device=device), out_cache_loc=draft_loc,
        out_cache_loc_is_physical=False, attn_attend_prefix_cache=False, encoder_out_cache_loc=None,
    )
    if case.fp8 is not None:
        backend.kv_cache_dtype = case.fp8  # a server's runner passes the cache dtype (the 5D write scales by it)
    backend.qo_indptr = torch.zeros(bs + 1, dtype=torch.int32, device=device)  # the extend phase replaced it
    build = getattr(backend, attr_name("aiter_backend.AiterAttnBackend._build_verify_unified_metadata"))
    page_table, qo_indptr, max_q_len, swa_page_table = build(bs, seq_lens, case.verify_batch.req_pool_indices, n)
    swa_loc = pool.translate_loc_from_full_to_swa(draft_loc) if swa_page_table is not None else None
    backend.forward_metadata = NS(kv_indptr=None, kv_indices=page_table, qo_indptr=qo_indptr, max_q_len=max_q_len,
                                  max_kv_len=page_table.shape[1] * page, swa_page_table=swa_page_table,
                                  swa_out_cache_loc=swa_loc)


def _layer_step(run, case, lid, n) -> None:
    from ...speculative.verify import forward_target_verify_5d

    geo, reqs = run.geo, run.reqs
    layer = case.layer_objs[lid]
    bs = len(reqs)
    q, k, v = run.model.qkv(bs * n)
    res = run.result(NAME, case.name)
    t0 = time.perf_counter()
    out = case.backend.forward_extend(q.reshape(bs * n, -1), k, v, layer, case.verify_batch)
    run.sync()
    res.seconds += time.perf_counter() - t0
    res.calls += 1
    res.tokens += bs * n
    window = case.window(lid)
    nc = None
    if window < 0:
        nc_res = run.result(NON_CAUSAL, case.name)
        t0 = time.perf_counter()
        nc = forward_target_verify_5d(case.backend, q.reshape(bs * n, -1), layer, case.verify_batch, causal=False)
        run.sync()
        nc_res.seconds += time.perf_counter() - t0
        nc_res.calls += 1
        nc_res.tokens += bs * n
    for i, r in enumerate(reqs):
        rows = slice(i * n, (i + 1) * n)
        lk, lv = case.kv[(r.rid, lid)]
        from ..workload import logical

        keys = torch.cat(lk + [logical(k[rows], case.fp8, layer.k_scale_float)])
        vals = torch.cat(lv + [logical(v[rows], case.fp8, layer.v_scale_float)])
        pos = torch.arange(r.done, r.done + n)
        q64 = q[rows].cpu().double()
        ref = attention_ref(q64, keys, vals, pos, sm_scale=layer.scaling, sliding_window=window)
        res.compare(out[rows], ref, f"layer {lid} request {r.rid} drafts {r.done}..{r.done + n - 1}")
        if nc is not None:
            ref_nc = attention_ref(q64, keys, vals, pos, sm_scale=layer.scaling, causal=False)
            nc_res.compare(nc[rows], ref_nc, f"layer {lid} request {r.rid} block-parallel drafts")
