"""``sglang-kv5d selftest``: click wiring for sglang_kv5d.selftest."""

from __future__ import annotations

import contextlib
import json
import sys

import click


@click.command()
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True,
              help="Where to run: auto picks the GPU when torch sees one (CUDA or ROCm), else the CPU "
                   "(Triton interpreter).")
@click.option("--json", "as_json", is_flag=True, help="Print the full report as JSON.")
@click.option("--small", is_flag=True, help="On a GPU, run only the small CPU-sized configuration.")
def selftest(device: str, as_json: bool, small: bool) -> None:
    """Run a Qwen3.5-like model's attention through the patched SGLang and check it.

    Builds real SGLang pools (a HybridLinearKVPool around a SHUFFLE 5D fp8 pool,
    and an SWA pool), a real AiterAttnBackend, runs several requests through
    chunked prefill with a shared prefix and then decode steps, all through the
    patched set_kv_buffer and 5D attention dispatch, and compares every
    attention output with a float64 reference. Prints one row per phase (max
    error, tokens/s). Exits 1 on any mismatch. On a GPU it also runs a larger
    configuration. The overlay is activated in this process.
    """
    import os

    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    if device == "auto":
        try:
            import torch

            device = "cuda" if torch.cuda.is_available() else "cpu"
        except Exception:
            device = "cpu"
    from ..selftest import CPU_DEFAULT, GPU_DEFAULT, render, run_selftest

    progress = None if as_json else (lambda m: click.echo(f"... {m}", err=True))
    geometries = [CPU_DEFAULT] if device == "cpu" or small else [CPU_DEFAULT, GPU_DEFAULT]
    reports = []
    # SGLang prints to stdout while importing; keep stdout for our output.
    with contextlib.redirect_stdout(sys.stderr):
        for geo in geometries:
            if progress:
                progress(f"running {geo.name}")
            reports.append(run_selftest(geo, device, progress))
    ok = all(r["ok"] for r in reports)
    if as_json:
        click.echo(json.dumps({"ok": ok, "reports": reports}, indent=2))
    else:
        click.echo(render(reports))
    sys.exit(0 if ok else 1)


def register(group: click.Group) -> None:
    group.add_command(selftest)
