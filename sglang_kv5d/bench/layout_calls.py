"""The layout verdict's contenders: every writer and attention kernel of one
layer's KV path, per layout and phase, as a callable over a case of
:func:`sglang_kv5d.bench.layout_cases.build_case`, or a string saying why it
is not here ("unavailable: ...").

    NHD write      sglang_flash: SGLang's Triton ``launch_reshape_and_cache_flash``
                   (scales for fp8; the writer AiterAttnBackend uses on NHD);
                   kv5d_fused: the overlay's fused FP8 write on the NHD cache (fp8);
                   aiter_flash: aiter's ``reshape_and_cache_flash`` (ROCm)
    5D write       kv5d_fused: the overlay's fused FP8 write (fp8);
                   sglang_shuffle_5d: SGLang's ``launch_reshape_and_cache_shuffle_5d``
                   (bf16: what a 5D bf16 pool writes with);
                   aiter_5d: aiter's ``reshape_and_cache(asm_layout=True)`` (ROCm, fp8)
    NHD decode     sglang_triton: SGLang's ``decode_attention_fwd`` (per-token
                   indices; fastest split count); aiter_unified: ``unified_attention``
                   (SGLang's unified path, page table); aiter_ragged:
                   ``paged_attention_ragged`` (page size 1, ATOM's choice for D=256)
    5D decode      kv5d_portable: ``decode_attention_5d``; aiter_gluon: ``pa_decode_gluon``
    NHD prefill    aiter_unified: ``unified_attention`` (ROCm); aiter_prefill:
                   ``mha_batch_prefill_func`` on the NHD rows (page size 1, the
                   requests' slots as page ids, padded for CK's read-ahead)
    5D prefill     kv5d_portable: ``extend_attention_5d``; aiter_prefill: the
                   overlay's aiter extend path (gather 5D -> linear rows,
                   ``mha_batch_prefill_func``)

aiter is called by keyword only, with the names of its Python signatures
(``../shared/aiter-src``; ``unified_attention`` and ``paged_attention_ragged``
as aiter's ``ops/triton/attention/unified_attention.py`` and ``ops/attention.py``
declare them). fp8 queries for aiter's fp8 paths are quantized per tensor, as
the overlay and SGLang do.
"""

from __future__ import annotations

import functools
import importlib
from typing import Callable, Dict, List, Tuple, Union

from sglang_kv5d.bench.aiter_peers import error_line
from sglang_kv5d.bench.attention_cases import PEER_SPLITS

#: extra aiter peers of this benchmark: name -> (module, function)
AITER_NHD_PEERS = {
    "unified_attention": ("aiter.ops.triton.attention.unified_attention", "unified_attention"),
    "paged_attention_ragged": ("aiter", "paged_attention_ragged"),
    "reshape_and_cache_flash": ("aiter", "reshape_and_cache_flash"),
}
#: ``paged_attention_ragged``'s partition size (SGLang's _AITER_PARTITION_SIZE_ROCM)
RAGGED_PARTITION = 256

Cell = Union[Callable[[], object], str]
#: (layout, part, name) -> callable or "unavailable: why"
Contenders = Dict[Tuple[str, str, str], Cell]


def load_nhd_peers(*, rocm: bool, importer: Callable = importlib.import_module) -> Dict[str, Union[Callable, str]]:
    """{name: function or "unavailable: why"} for :data:`AITER_NHD_PEERS`;
    every one "unavailable: not ROCm" off ROCm."""
    out: Dict[str, Union[Callable, str]] = {}
    for name, (module, fn) in AITER_NHD_PEERS.items():
        if not rocm:
            out[name] = "unavailable: not ROCm (aiter runs on AMD GPUs only)"
            continue
        try:
            obj = getattr(importer(module), fn, None)
        except Exception as exc:  # noqa: BLE001 - ImportError, or a ROCm runtime error
            out[name] = f"unavailable: import {module} failed: {error_line(exc)}"
            continue
        out[name] = obj if callable(obj) else f"unavailable: {module} has no {fn}"
    return out


def _peer(peers: dict, name: str, why: str = "unavailable: not ROCm (aiter runs on AMD GPUs only)"):
    """(function or None, note) for an aiter_peers.load() entry."""
    if not peers:
        return None, why
    p = peers.get(name, "unavailable: not looked up")
    return (None, p) if isinstance(p, str) else (p, None)


def _quant_q(q, c):
    """(q, q_descale): q as the cache's fp8 per tensor for an fp8 cache, else (q, None)."""
    if not c["fp8"]:
        return q, None
    from sglang_kv5d.attention import quantize_per_tensor

    return quantize_per_tensor(q, c["store"])


def writers(c, *, sglang: dict, aiter: dict, nhd: dict, kv5d_write=None) -> Contenders:
    """The write contenders of case ``c`` (its new tokens into both layouts)."""
    if kv5d_write is None:
        from sglang_kv5d.kernels.fp8_write import write_kv_fp8 as kv5d_write
    k, v, loc, one, page, H, D = c["k_new"], c["v_new"], c["new_slots"], c["one"], c["page"], c["H_kv"], c["D"]
    scale = one if c["fp8"] else None
    out: Contenders = {}
    flash = sglang.get("flash", "unavailable: not looked up")
    if isinstance(flash, str):
        out[("nhd", "write", "sglang_flash")] = flash.replace("skipped:", "unavailable:")
    else:
        out[("nhd", "write", "sglang_flash")] = functools.partial(
            flash, k, v, c["k_nhd"].view(-1, page, H, D), c["v_nhd"].view(-1, page, H, D), loc, k_scale=scale,
            v_scale=scale)
    if c["fp8"]:
        out[("nhd", "write", "kv5d_fused")] = lambda: kv5d_write(k, v, c["k_nhd"], c["v_nhd"], loc, one, one)
        out[("5d", "write", "kv5d_fused")] = lambda: kv5d_write(k, v, c["k5"], c["v5"], loc, one, one)
    else:
        out[("nhd", "write", "kv5d_fused")] = "unavailable: the fused write is for fp8 caches (bf16 cache here)"
        out[("5d", "write", "kv5d_fused")] = "unavailable: the fused write is for fp8 caches (bf16 cache here)"
    shuffle = sglang.get("shuffle_5d", "unavailable: not looked up")
    if c["fp8"]:
        out[("5d", "write", "sglang_shuffle_5d")] = ("unavailable: upstream writes fp8 5D unfused "
                                                    "(div_ + to + scatter; see bench --what fp8-write)")
    elif isinstance(shuffle, str):
        out[("5d", "write", "sglang_shuffle_5d")] = shuffle.replace("skipped:", "unavailable:")
    else:
        out[("5d", "write", "sglang_shuffle_5d")] = lambda: shuffle(k, v, c["k5"], c["v5"], loc)
    af = nhd.get("reshape_and_cache_flash")
    if isinstance(af, str):
        out[("nhd", "write", "aiter_flash")] = af
    else:
        kn, vn = c["k_nhd"].view(-1, page, H, D), c["v_nhd"].view(-1, page, H, D)
        kw = dict(key=k, value=v, key_cache=kn, value_cache=vn, slot_mapping=loc,
                  kv_cache_dtype="fp8" if c["fp8"] else "auto", k_scale=one, v_scale=one)
        out[("nhd", "write", "aiter_flash")] = functools.partial(af, **kw)
    fn, note = _peer(aiter, "reshape_and_cache")
    if fn is None:
        out[("5d", "write", "aiter_5d")] = note
    elif not c["fp8"]:
        out[("5d", "write", "aiter_5d")] = "unavailable: the bench's aiter 5D writer call is fp8 (bf16 cache here)"
    else:
        import torch

        from sglang_kv5d.bench import aiter_peers

        ku, vu = c["k5"].view(torch.uint8), c["v5"].view(torch.uint8)
        out[("5d", "write", "aiter_5d")] = aiter_peers.write_callable(aiter, k, v, ku, vu, loc, k_scale=one,
                                                                      v_scale=one)
    return out


def decoders(c, out, *, sm_scale: float, decode_peer, aiter: dict, nhd: dict, peer_splits=PEER_SPLITS):
    """Decode attention contenders of case ``c`` (new = 1) writing ``out``
    ``(bs, H_q, D)``. SGLang's Triton decode comes as {splits: callable} under
    ("nhd", "attn", "sglang_triton") (the caller times each, keeps the fastest; split counts of
    fewer than 64 keys per split are left out)."""
    import torch

    from sglang_kv5d.bench.attention_peer import peer_call
    from sglang_kv5d.attention.routing import decode_page_unsupported
    from sglang_kv5d.kernels.attention_5d import decode_attention_5d

    q, bs, page, H_q, H_kv, D = c["q"], c["bs"], c["page"], c["H_q"], c["H_kv"], c["D"]
    ctx = c["prior"] + c["new"]
    one = c["one"] if c["fp8"] else None
    res: dict = {}
    res[("5d", "attn", "kv5d_portable")] = lambda: decode_attention_5d(
        q, c["k5"], c["v5"], c["bt"], c["kv_lens"], sm_scale=sm_scale, k_scale=one, v_scale=one, out=out)
    fns, note = _peer(aiter, "pa_decode_gluon")
    if fns is None:
        res[("5d", "attn", "aiter_gluon")] = note
    elif decode_page_unsupported(page):  # the routing's own rule: serving never hands aiter this page
        res[("5d", "attn", "aiter_gluon")] = f"unavailable: {decode_page_unsupported(page)}"
    else:
        from sglang_kv5d.bench import aiter_peers

        res[("5d", "attn", "aiter_gluon")] = aiter_peers.decode_callable(
            aiter, q, c["k5"], c["v5"], c["bt"], c["kv_lens"], out, sm_scale=sm_scale, k_scale=one, v_scale=one)[0]
    if isinstance(decode_peer, str):
        res[("nhd", "attn", "sglang_triton")] = decode_peer
    else:
        tok = c["slots"]
        kv_indptr = c["kv_indptr"]
        res[("nhd", "attn", "sglang_triton")] = {
            s: peer_call(decode_peer, q, c["k_nhd"], c["v_nhd"], kv_indptr, tok, out, s, sm_scale)
            for s in peer_splits if s == 1 or ctx // s >= 64}
    ua = nhd.get("unified_attention")
    if isinstance(ua, str):
        res[("nhd", "attn", "aiter_unified")] = ua
    else:
        qq, qd = _quant_q(q, c)
        kw = dict(q=qq, k=c["k_nhd"].view(-1, page, H_kv, D), v=c["v_nhd"].view(-1, page, H_kv, D), out=out,
                  cu_seqlens_q=torch.arange(bs + 1, dtype=torch.int32, device=q.device), seqused_k=c["kv_lens"],
                  max_seqlen_q=1, max_seqlen_k=c["bt"].shape[1] * page, softmax_scale=float(sm_scale), causal=True,
                  window_size=(-1, -1), block_table=c["bt"], softcap=0.0, q_descale=qd, k_descale=one,
                  v_descale=one, sinks=None)
        res[("nhd", "attn", "aiter_unified")] = functools.partial(ua, **kw)
    pr = nhd.get("paged_attention_ragged")
    if isinstance(pr, str):
        res[("nhd", "attn", "aiter_ragged")] = pr
    else:
        parts = -(-ctx // RAGGED_PARTITION)
        ws = torch.empty(bs * H_q * parts * D * 4 + 2 * bs * H_q * parts * 4, dtype=torch.uint8, device=q.device)
        ones = torch.ones(1, dtype=torch.float32, device=q.device)
        kw = dict(out=out, workspace_buffer=ws, query=q, key_cache=c["k_nhd"].view(-1, 1, H_kv, D),
                  value_cache=c["v_nhd"].view(-1, 1, H_kv, D), scale=float(sm_scale), kv_indptr=c["kv_indptr"],
                  kv_page_indices=c["slots"].to(torch.int32),
                  kv_last_page_lens=torch.ones(bs, dtype=torch.int32, device=q.device), block_size=1,
                  max_num_partitions=parts, alibi_slopes=None, kv_cache_dtype="fp8_e4m3" if c["fp8"] else "auto",
                  kv_cache_layout="NHD", logits_soft_cap=0.0, k_scale=ones, v_scale=ones, fp8_out_scale=None,
                  partition_size=RAGGED_PARTITION)
        res[("nhd", "attn", "aiter_ragged")] = functools.partial(pr, **kw)
    return res


def prefillers(c, out, *, sm_scale: float, aiter: dict, nhd: dict) -> Contenders:
    """Prefill (extend) attention contenders of case ``c`` writing ``out`` ``(bs * new, H_q, D)``."""
    import torch

    from sglang_kv5d.attention.page_indices import CK_PAGE_TABLE_PAD
    from sglang_kv5d.bench import aiter_peers
    from sglang_kv5d.kernels.attention_5d import extend_attention_5d

    q, page, H_kv, D, new = c["q"], c["page"], c["H_kv"], c["D"], c["new"]
    total = c["prior"] + new
    one = c["one"] if c["fp8"] else None
    res: Contenders = {}
    res[("5d", "attn", "kv5d_portable")] = lambda: extend_attention_5d(
        q, c["k5"], c["v5"], c["bt"], c["qo_indptr"], c["kv_lens"], sm_scale=sm_scale, causal=True, k_scale=one,
        v_scale=one, fp8_dtype=c["store"] if c["fp8"] else None, out=out)
    fns, note = _peer(aiter, "mha_batch_prefill_func")
    if fns is None:
        res[("5d", "attn", "aiter_prefill")] = note
        res[("nhd", "attn", "aiter_prefill")] = note + (
            "; no other NHD prefill attention peer runs here (SGLang's Triton extend kernel is not among the "
            "bench's peers)" if not aiter else "")
    else:
        res[("5d", "attn", "aiter_prefill")] = aiter_peers.extend_callable(
            aiter, q, c["k5"], c["v5"], c["slots"], page, c["qo_indptr"], c["kv_indptr"], sm_scale=sm_scale,
            max_q=new, max_kv=total, fp8_dtype=c["store"] if c["fp8"] else None, k_scale=one, v_scale=one)
        slots = c["slots"].to(torch.int32)
        pages = torch.cat([slots, slots[-1:].expand(CK_PAGE_TABLE_PAD)])
        qq, qd = _quant_q(q, c)
        desc = dict(q_descale=qd, k_descale=one, v_descale=one) if c["fp8"] else {}
        kw = aiter_peers.extend_kwargs(qq, c["k_nhd"], c["v_nhd"], c["qo_indptr"], c["kv_indptr"], sm_scale=sm_scale,
                                       max_q=new, max_kv=total, **desc)
        kw["kv_page_indices"] = pages
        pf = fns["mha_batch_prefill_func"]
        res[("nhd", "attn", "aiter_prefill")] = functools.partial(pf, **kw)
    ua = nhd.get("unified_attention")
    if isinstance(ua, str):
        res[("nhd", "attn", "aiter_unified")] = ua
    else:
        qq, qd = _quant_q(q, c)
        kw2 = dict(q=qq, k=c["k_nhd"].view(-1, page, H_kv, D), v=c["v_nhd"].view(-1, page, H_kv, D), out=out,
                   cu_seqlens_q=c["qo_indptr"], seqused_k=c["kv_lens"], max_seqlen_q=new, max_seqlen_k=total,
                   softmax_scale=float(sm_scale), causal=True, window_size=(-1, -1), block_table=c["bt"],
                   softcap=0.0, q_descale=qd, k_descale=one, v_descale=one, sinks=None)
        res[("nhd", "attn", "aiter_unified")] = functools.partial(ua, **kw2)
    return res


def time_cells(cells: dict, time_fn: Callable[[Callable], float]) -> Dict[Tuple[str, str, str], dict]:
    """{key: {"us": t} | {"note": why}}: each callable timed with ``time_fn``
    (us, or a dict with "us" and more, such as "timing"; a failure is the
    cell's note); {splits: callable} entries timed at each split count, the
    fastest kept (``"splits"``)."""
    res: Dict[Tuple[str, str, str], dict] = {}
    for key, cell in cells.items():
        if isinstance(cell, str):
            res[key] = {"note": cell}
        elif isinstance(cell, dict):
            tried = {}
            for s, fn in cell.items():
                try:
                    t = time_fn(fn)
                    tried[s] = t["us"] if isinstance(t, dict) else t
                except Exception as exc:  # noqa: BLE001 - a peer fails with any error: reported in the cell
                    tried[s] = "failed: " + error_line(exc)
            ok = [(us, s) for s, us in tried.items() if not isinstance(us, str)]
            if ok:
                us, s = min(ok)
                res[key] = {"us": us, "splits": s}
            else:
                res[key] = {"note": next(iter(tried.values()), "failed: no split count to try")}
        else:
            try:
                t = time_fn(cell)
                res[key] = dict(t) if isinstance(t, dict) else {"us": t}
            except Exception as exc:  # noqa: BLE001 - a peer fails with any error: reported in the cell
                res[key] = {"note": "failed: " + error_line(exc)}
    return res


def cells_by_part(timed: Dict[Tuple[str, str, str], dict]) -> List[dict]:
    """JSON rows [{layout, part, name, us | note, ...}] in a stable order."""
    order = {"nhd": 0, "5d": 1, "write": 0, "attn": 1}
    return [dict(layout=k[0], part=k[1], name=k[2], **v)
            for k, v in sorted(timed.items(), key=lambda kv: (order[kv[0][0]], order[kv[0][1]], kv[0][2]))]
