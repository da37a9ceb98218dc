"""Time the overlay's verify page-table builder against SGLang's, on a GPU (lab only, not packaged).

    PYTHONPATH=<sglang site>:. python lab/verify_table_timing.py [--json OUT]

The builder runs once per verify step, eagerly (before CUDA-graph replay too).
Both build the (bs, width) table from a ReqToTokenPool-shaped req_to_token:
SGLang's Triton scatter (rows cdiv(context, page) wide, unclamped) and
sglang_kv5d.speculative.verify_tables.build_verify_page_tables (rows
cdiv(context + N, page), clamped). Median of CUDA-event timings over 200 calls
after warmup; SGLang's kernel is skipped with the reason where SGLang is not
importable.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

import torch

from sglang_kv5d.speculative.verify_tables import build_verify_page_tables, verify_table_width


def _median_us(fn, iters=200):
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1000.0)
    return statistics.median(times)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args(argv)
    dev = torch.device("cuda")
    try:
        import triton

        from sglang.kernels.ops.attention.aiter_unified_page_table import scatter_req_to_token_to_page_table_kernel
    except Exception as exc:  # noqa: BLE001 - report and time ours alone
        scatter_req_to_token_to_page_table_kernel = None
        print(f"SGLang's builder not importable: {type(exc).__name__}: {exc}", file=sys.stderr)
    page, n = 64, 16
    rows = []
    for ctx in (32768, 262144):
        for bs in (1, 32, 256):
            r2t = torch.randint(0, 1 << 20, (bs, ctx + 4 + n), dtype=torch.int32, device=dev)
            rp = torch.arange(bs, device=dev)
            # below the limit: at it, SGLang's builder writes past its table (the bug being fixed)
            seq = torch.randint(ctx // 2, ctx - 2 * n, (bs,), device=dev)
            width = verify_table_width(ctx, n, page)
            out = torch.zeros(bs, width, dtype=torch.int32, device=dev)
            ours = _median_us(lambda: build_verify_page_tables(r2t, rp, seq, n, page, out))
            row = {"context": ctx, "bs": bs, "drafts": n, "page": page, "overlay_us": round(ours, 2)}
            if scatter_req_to_token_to_page_table_kernel is not None:
                up_w = -(-ctx // page)
                up = torch.zeros(bs, up_w, dtype=torch.int32, device=dev)
                grid = (bs, triton.cdiv(up_w, 1024))

                def upstream():
                    up.zero_()  # SGLang allocates torch.zeros per eager call
                    scatter_req_to_token_to_page_table_kernel[grid](
                        r2t, rp, seq, up, r2t.stride(0), up.stride(0), None, None,
                        DRAFT_NUM=n, PAGE_SIZE=page, BLOCK_SIZE=1024, HAS_SWA=False)

                row["sglang_us"] = round(_median_us(upstream), 2)
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
