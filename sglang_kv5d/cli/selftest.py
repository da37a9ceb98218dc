"""``sglang-kv5d selftest``: click wiring for sglang_kv5d.selftest."""

from __future__ import annotations

import contextlib
import json
import sys

import click


DEVICES = ("auto", "cpu", "cuda", "rocm")


def resolve_device(device: str) -> str:
    """'auto' | 'cpu' | 'cuda' | 'rocm' -> the torch device to run on ('cpu' or 'cuda').

    ``rocm`` is the GPU device on a ROCm build of torch (which calls it cuda).
    A device that is not there is a click.UsageError (exit 2, one line).
    """
    if device == "cpu":
        return "cpu"
    try:
        import torch
    except (ImportError, OSError) as exc:  # not installed, or its shared libraries do not load
        if device == "auto":
            return "cpu"
        raise click.UsageError(f"--device {device}: torch is not importable here ({type(exc).__name__}: {exc})")
    try:
        has_gpu = bool(torch.cuda.is_available())
    except RuntimeError:  # a broken driver install: no usable GPU
        has_gpu = False
    if device == "auto":
        return "cuda" if has_gpu else "cpu"
    hip = getattr(getattr(torch, "version", None), "hip", None)
    if device == "rocm" and not hip:
        raise click.UsageError(
            "--device rocm: this torch is not a ROCm build (torch.version.hip is unset); use --device cuda for an "
            "NVIDIA GPU, or --device cpu")
    if not has_gpu:
        kind = "ROCm" if hip else "CUDA"
        raise click.UsageError(
            f"--device {device}: torch sees no {kind} GPU here (torch.cuda.is_available() is False); "
            "use --device cpu (Triton interpreter) or --device auto")
    return "cuda"


def _check_switches() -> None:
    """Invalid sglang-kv5d / SGLang switches are usage errors here (the selftest activates the overlay)."""
    from .. import config

    problems = config.problems()
    if problems:
        p = problems[0]
        more = f" (and {len(problems) - 1} more; `sglang-kv5d doctor` lists them)" if len(problems) > 1 else ""
        raise click.UsageError(f"{p.rule}: {p.message()}; fix: {p.fix}{more}")


@click.command()
@click.option("--device", type=click.Choice(DEVICES), default="auto", show_default=True,
              help="Where to run: auto picks the GPU when torch sees one (CUDA or ROCm), else the CPU "
                   "(Triton interpreter); rocm is the GPU of a ROCm build of torch. A device that is not "
                   "there exits 2.")
@click.option("--json", "as_json", is_flag=True, help="Print the full report as JSON.")
@click.option("--small", is_flag=True, help="On a GPU, run only the small CPU-sized configuration.")
def selftest(device: str, as_json: bool, small: bool) -> None:
    """Run a Qwen3.5-like model's attention through the patched SGLang and check it.

    Builds real SGLang pools (a HybridLinearKVPool around a SHUFFLE 5D fp8 pool,
    and an SWA pool), a real AiterAttnBackend, runs several requests through
    chunked prefill with a shared prefix and then decode steps, all through the
    patched set_kv_buffer and 5D attention dispatch, and compares every
    attention output with a float64 reference. Prints one row per phase (max
    error, tokens/s). Exits 1 on any mismatch, 2 on a usage error (a device
    that is not there, an invalid switch). On a GPU it also runs a larger
    configuration. The overlay is activated in this process.
    """
    import os

    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    try:
        _check_switches()
        device = resolve_device(device)
    except click.UsageError as exc:  # one line, exit 2 (1 is reserved for a mismatch)
        click.echo(f"Error: {exc.format_message()}", err=True)
        sys.exit(2)
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
