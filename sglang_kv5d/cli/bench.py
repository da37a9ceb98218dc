"""``sglang-kv5d bench``: click wiring for sglang_kv5d.bench.*"""

from __future__ import annotations

import contextlib
import json
import sys

import click

SUITES = {
    "fp8-write": "sglang_kv5d.bench.fp8_write",
    "attention": "sglang_kv5d.bench.attention",
}


@click.command()
@click.option("--what", type=click.Choice(["all", *SUITES]), default="all", show_default=True,
              help="Which benchmark: the fused FP8 KV write, 5D decode attention, or both.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON instead of tables.")
@click.option("--out", "out_path", type=click.Path(dir_okay=False, writable=True),
              help="Also write the JSON results to this file.")
@click.option("--device", default="cuda", show_default=True, help="torch device of the GPU to measure (CUDA or ROCm).")
def bench(what: str, as_json: bool, out_path, device: str) -> None:
    """Benchmark the kernels against their peers on this GPU (CUDA or ROCm).

    Measures the device copy bandwidth (the byte floor), then each kernel and
    the peers that can run here (SGLang's upstream unfused FP8 write and its
    writer / decode kernels when importable), with CUDA-graph replay medians,
    and prints ratios to the floor and to each peer. Progress goes to stderr.
    Needs a GPU; exits 2 without one.
    """
    import importlib

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
            results[name] = mod.run(device=device, progress=progress)
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
