"""Time the overlay's verify page-table builders against SGLang's, on a GPU (lab only, not packaged).

    PYTHONPATH=<sglang site>:. python lab/verify_table_timing.py [--json OUT] [--swa]

The builder runs once per verify step, eagerly (before CUDA-graph replay too).
All build the (bs, width) table from a ReqToTokenPool-shaped req_to_token:

    overlay_us   build_verify_page_tables on the GPU: the one-launch Triton
                 kernel (sglang_kv5d/kernels/verify_table.py); rows
                 cdiv(context + N, page), clamped
    torch_us     build_verify_page_tables_torch: the torch builder (about 16
                 eager ops; the CPU path and the kernel's fallback)
    sglang_us    SGLang's Triton scatter (rows cdiv(context, page) wide,
                 unclamped), with the zeroing SGLang's eager path does

Median of CUDA-event timings over 200 calls after warmup (one call between
two events, so the host's launch overhead counts, as it does in the eager
step). Each row first checks that the kernel's tables equal the torch
builder's (``tables_equal``). ``--swa`` adds the SWA table (a random
full -> SWA slot mapping) to all three. SGLang's kernel is skipped with the
reason where SGLang is not importable.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

import torch

from sglang_kv5d import kernel_check
from sglang_kv5d.speculative.verify_tables import (build_verify_page_tables, build_verify_page_tables_torch,
                                                   verify_table_width)


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
    ap.add_argument("--swa", action="store_true", help="also build the SWA table")
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
            mapping = torch.randperm(1 << 20, device=dev) if args.swa else None
            width = verify_table_width(ctx, n, page)
            out = torch.zeros(bs, width, dtype=torch.int32, device=dev)
            swa_out = torch.zeros_like(out) if args.swa else None
            ref = torch.full_like(out, -7)
            ref_swa = torch.full_like(out, -7) if args.swa else None
            build_verify_page_tables(r2t, rp, seq, n, page, out, swa_mapping=mapping, swa_out=swa_out)
            build_verify_page_tables_torch(r2t, rp, seq, n, page, ref, mapping, ref_swa)
            equal = bool(torch.equal(out, ref) and (not args.swa or torch.equal(swa_out, ref_swa)))
            ours = _median_us(lambda: build_verify_page_tables(r2t, rp, seq, n, page, out, swa_mapping=mapping,
                                                               swa_out=swa_out))
            theirs = _median_us(lambda: build_verify_page_tables_torch(r2t, rp, seq, n, page, ref, mapping, ref_swa))
            row = {"context": ctx, "bs": bs, "drafts": n, "page": page, "swa": args.swa, "width": width,
                   "tables_equal": equal, "overlay_us": round(ours, 2), "torch_us": round(theirs, 2)}
            if scatter_req_to_token_to_page_table_kernel is not None:
                up_w = -(-ctx // page)
                up = torch.zeros(bs, up_w, dtype=torch.int32, device=dev)
                up_swa = torch.zeros_like(up) if args.swa else None
                grid = (bs, triton.cdiv(up_w, 1024))

                def upstream():
                    up.zero_()  # SGLang allocates torch.zeros per eager call
                    if up_swa is not None:
                        up_swa.zero_()
                    scatter_req_to_token_to_page_table_kernel[grid](
                        r2t, rp, seq, up, r2t.stride(0), up.stride(0), up_swa, mapping,
                        DRAFT_NUM=n, PAGE_SIZE=page, BLOCK_SIZE=1024, HAS_SWA=args.swa)

                row["sglang_us"] = round(_median_us(upstream), 2)
            rows.append(row)
            print(json.dumps(row), flush=True)
    failures = kernel_check.failures()
    if failures:  # the overlay row then timed the torch fallback, not the kernel
        print(f"kernel failures recorded: {failures}", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(),
                       "kernel_failures": {str(k): v for k, v in failures.items()}, "rows": rows}, f, indent=1)
    return 0 if all(r["tables_equal"] for r in rows) and not failures else 1


if __name__ == "__main__":
    sys.exit(main())
