"""The extend table (ROCm with aiter only): ``extend_attention_5d`` against the
overlay's aiter extend path on one 5D cache."""

from __future__ import annotations

import math

from sglang_kv5d.bench.attention_cases import PAGE
from sglang_kv5d.bench.common import adaptive_median_us as _time

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
    from sglang_kv5d.platform import FP8_E4M3FN, fp8_torch_dtype

    H_q, H_kv, D = geom
    fp8 = kv.startswith("fp8")
    X = 16 if fp8 else 8
    g = torch.Generator().manual_seed(1)
    bt, slots, qo, kvp, kv_lens, nb = extend_layout(bs, new, prefix, gen=g)
    store = fp8_torch_dtype(FP8_E4M3FN) if fp8 else torch.bfloat16
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
    except Exception as exc:  # noqa: BLE001 - a peer fails with any error: reported in the row
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
