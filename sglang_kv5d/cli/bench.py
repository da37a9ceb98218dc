"""``sglang-kv5d bench``: click wiring for sglang_kv5d.bench.*"""

from __future__ import annotations

import contextlib
import json
import math
import sys

import click

SUITES = {
    "fp8-write": "sglang_kv5d.bench.fp8_write",
    "attention": "sglang_kv5d.bench.attention",
    "verify": "sglang_kv5d.bench.verify",
}


def _finite(ctx, param, value):
    if not math.isfinite(value):
        raise click.BadParameter(f"expected a finite size in GiB, got {value}")
    return value


@click.command()
@click.option("--what", type=click.Choice(["all", *SUITES]), default="all", show_default=True,
              help="Which benchmark: the fused FP8 KV write, 5D decode attention, speculative target verify over 5D (against the extend kernel and one decode step), or all.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON instead of tables.")
@click.option("--out", "out_path", type=click.Path(dir_okay=False, writable=True),
              help="Also write the JSON results to this file.")
@click.option("--device", default="cuda", show_default=True, help="torch device of the GPU to measure (CUDA or ROCm).")
@click.option("--cache-gib", type=click.FloatRange(min=0, max=4096), default=0.0, show_default=True, callback=_finite,
              help="fp8-write: make every KV cache buffer at least this many GiB, slots spread over it, as in "
                   "serving. 0 sizes them to about 1.25 x T slots, which keeps the written lines in the L2 cache "
                   "and flatters scattered (decode) writes.")
def bench(what: str, as_json: bool, out_path, device: str, cache_gib: float) -> None:
    """Benchmark the kernels against their peers on this GPU (CUDA or ROCm).

    Measures the memory rates with kernels on the compute units (read, write,
    read+write: the byte floors; decode is held against the read rate, the
    FP8 write against read+write), then each kernel and the peers that can run
    here (SGLang's upstream unfused FP8 write and its writer / decode kernels
    when importable; on ROCm also aiter's pa_decode_gluon, its 5D
    reshape_and_cache and an extend table against mha_batch_prefill_func,
    each named with its failure when aiter is not importable), with CUDA-graph replay medians, and prints ratios to the
    floor and to each peer. The FP8 write also gets
    the store floor of each row's layout (its bytes written with a constant,
    nothing read): a row whose store floor alone misses a target is marked
    layout-bound. Progress goes to stderr. Needs a GPU; exits 2 without one.
    """
    import importlib

    from sglang_kv5d.bench.sglang_peers import PeerPathError, peer_path

    if what in ("all", "attention"):
        try:
            peer_path()  # SGLANG_KV5D_PEER_PATH, checked before anything is imported or measured
        except PeerPathError as exc:
            raise click.UsageError(str(exc))
    try:
        import torch
    except Exception as exc:
        raise click.ClickException(f"bench needs torch: {exc}")
    if not torch.cuda.is_available():
        click.echo("sglang-kv5d bench needs a GPU (CUDA or ROCm); none is visible here.", err=True)
        sys.exit(2)
    progress = lambda m: click.echo(f"... {m}", err=True)  # noqa: E731
    results = {}
    with contextlib.redirect_stdout(sys.stderr):  # SGLang prints while importing
        for name, module in SUITES.items():
            if what not in ("all", name):
                continue
            mod = importlib.import_module(module)
            progress(f"{name}: starting")
            kwargs = {"cache_gib": cache_gib} if name == "fp8-write" else {}
            results[name] = mod.run(device=device, progress=progress, **kwargs)
    if out_path:
        with open(out_path, "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=2)
    if as_json:
        click.echo(json.dumps(results, indent=2))
    else:
        for name, result in results.items():
            click.echo(importlib.import_module(SUITES[name]).format_table(result))
            click.echo("")


def register(group: click.Group) -> None:
    group.add_command(bench)
