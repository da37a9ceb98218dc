"""Speculative target verify over a 5D cache: its cost against the extend kernel and one decode step.

For each geometry, KV dtype, batch and context, ``bs`` requests verify
``N = 16`` draft tokens over ``ctx`` cached tokens (drafts included):

    verify    sglang_kv5d.speculative.verify.forward_target_verify_5d, the path
              the target-verify-5d patch runs (index ops + the extend kernel)
    extend    the prefill (extend) kernel on the same queries and cache: the
              alternative the verify path does not take
    decode    one decode step of the same batch over the same cache (what a
              non-speculative step costs; verify / decode is the price of
              checking 16 tokens instead of producing 1)
    floor     the K/V bytes of every context token at the read rate

Times are CUDA-graph replay medians (the verify step is captured like SGLang's
own verify). ``python -m sglang_kv5d.bench.verify`` or ``sglang-kv5d bench --what verify``.
"""

from __future__ import annotations

import math
import time
from types import SimpleNamespace as NS
from typing import Callable, Optional

from sglang_kv5d.bench.attention_cases import GEOMETRIES, PAGE, build_case, kv_bytes

N = 16
BATCHES = (1, 32, 128)
CONTEXTS = (8192, 32768)
KV_DTYPES = ("bf16", "fp8_e4m3fn")


def _inputs(bs, ctx, geom, kv, device):
    import torch

    H_q, H_kv, D = geom
    case = build_case(bs, ctx, H_q, H_kv, D, kv, device, seed=3)
    store = case["k5"].dtype
    q = torch.randn(bs * N, H_q * D, device=device, dtype=torch.bfloat16)
    scale = torch.tensor([1.0], device=device) if case["fp8"] else None
    layer = NS(layer_id=0, tp_q_head_num=H_q, tp_k_head_num=H_kv, tp_v_head_num=H_kv, qk_head_dim=D, v_head_dim=D,
               scaling=1 / math.sqrt(D), sliding_window_size=-1, logit_cap=0.0, k_scale=scale, v_scale=scale)
    meta = NS(kv_indices=case["bt"], swa_page_table=None, max_q_len=N,
              qo_indptr=torch.arange(0, (bs + 1) * N, N, dtype=torch.int32, device=device))
    backend = NS(token_to_kv_pool=NS(k_buffer=[case["k5"]], v_buffer=[case["v5"]], dtype=store, page_size=PAGE),
                 forward_metadata=meta, input_dtype=torch.bfloat16, kv_cache_dtype=store, k_scale=None, v_scale=None)
    prefix = (case["ctx"] - N).to(torch.int64)
    return case, q, layer, backend, NS(seq_lens=prefix), scale


def run_row(bs, ctx, geom, kv, *, rates, device="cuda") -> dict:
    import torch

    from sglang_kv5d.bench.bandwidth import floor_us
    from sglang_kv5d.bench.common import graph_replay_median_us
    from sglang_kv5d.kernels.attention_5d import decode_attention_5d, extend_attention_5d
    from sglang_kv5d.speculative.verify import forward_target_verify_5d

    H_q, H_kv, D = geom
    case, q, layer, backend, fb, scale = _inputs(bs, ctx, geom, kv, device)
    fp8 = case["fp8"]
    q3 = q.reshape(bs * N, H_q, D)
    out = torch.empty_like(q3)
    kv_lens = case["ctx"].clone()
    dec_q = q3[::N].contiguous()
    dec_out = torch.empty_like(dec_q)
    common = dict(k_scale=scale, v_scale=scale, fp8_dtype=case["k5"].dtype if fp8 else None)
    sm = layer.scaling

    def verify():
        forward_target_verify_5d(backend, q, layer, fb)

    def extend():
        extend_attention_5d(q3, case["k5"], case["v5"], case["bt"], backend.forward_metadata.qo_indptr, kv_lens,
                            sm_scale=sm, out=out, **common)

    def decode():
        decode_attention_5d(dec_q, case["k5"], case["v5"], case["bt"], case["ctx"], sm_scale=sm, out=dec_out,
                            **common)

    row = dict(kv=kv, H_q=H_q, H_kv=H_kv, D=D, bs=bs, ctx=ctx, draft_tokens=N)
    for name, fn in (("verify", verify), ("extend", extend), ("decode", decode)):
        row[f"{name}_us"] = graph_replay_median_us(fn, inner=5, reps=15)
    elem = 1 if fp8 else 2
    read = kv_bytes(bs, ctx, H_q, H_kv, D, elem)
    row["floor_us"] = floor_us("extend", read, 0, rates)
    row["verify_read_fraction"] = row["floor_us"] / row["verify_us"]
    row["verify_vs_extend"] = row["verify_us"] / row["extend_us"]
    row["verify_vs_decode"] = row["verify_us"] / row["decode_us"]
    return row


def run(device: str = "cuda", progress: Optional[Callable[[str], None]] = None, *,
        geometries=None, batches=None, contexts=None, kv_dtypes=None) -> dict:
    import torch

    from sglang_kv5d.bench.common import device_description, memory_rates

    if not torch.cuda.is_available():
        raise RuntimeError("the verify benchmark needs a GPU")
    say = progress or (lambda s: None)
    rates = memory_rates(device)
    rows = []
    t0 = time.time()
    for kv in kv_dtypes or KV_DTYPES:
        for geom in geometries or GEOMETRIES:
            for bs in batches or BATCHES:
                for ctx in contexts or CONTEXTS:
                    row = run_row(bs, ctx, geom, kv, rates=rates, device=device)
                    rows.append(row)
                    say(f"[{time.time() - t0:6.1f}s] verify {kv} {geom[0]}/{geom[1]} D{geom[2]} bs{bs} ctx{ctx}: "
                        f"{row['verify_us']:.1f}us ({100 * row['verify_read_fraction']:.0f}% read rate), "
                        f"extend {row['extend_us']:.1f}us, decode {row['decode_us']:.1f}us")
    return dict(benchmark="target_verify_5d", date=time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                device=device_description(device if device != "cuda" else None), rates=rates.to_dict(),
                draft_tokens=N, page=PAGE, rows=rows)


def format_table(result: dict) -> str:
    dev = result["device"]
    lines = [
        f"target verify over a 5D cache ({result['draft_tokens']} draft tokens per request) - "
        f"{dev.get('gpu', '?')}, torch {dev.get('torch', '?')}, triton {dev.get('triton', '?')}; "
        f"read rate {result['rates']['read_bytes_per_s'] / 1e9:.0f} GB/s; page {result['page']}",
        "",
        "| KV | H_q/H_kv | D | bs | ctx | verify us | % read | extend us | verify/extend | decode us | verify/decode |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['kv']} | {r['H_q']}/{r['H_kv']} | {r['D']} | {r['bs']} | {r['ctx']} | {r['verify_us']:.1f} | "
            f"{100 * r['verify_read_fraction']:.1f}% | {r['extend_us']:.1f} | {r['verify_vs_extend']:.2f} | "
            f"{r['decode_us']:.1f} | {r['verify_vs_decode']:.2f} |"
        )
    lines += ["", "% read = K/V bytes of the context / time / read rate; verify/decode = the price of checking "
              f"{result['draft_tokens']} tokens instead of producing one"]
    return "\n".join(lines)


def main(argv=None) -> int:
    import argparse
    import json

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the result here")
    args = ap.parse_args(argv)
    res = run(progress=lambda s: print(s, flush=True))
    print(format_table(res))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(res, fh, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
