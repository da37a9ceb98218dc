"""``sglang-kv5d bench``: click wiring for sglang_kv5d.bench.*"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys

import click

SUITES = {
    "fp8-write": "sglang_kv5d.bench.fp8_write",
    "attention": "sglang_kv5d.bench.attention",
    "verify": "sglang_kv5d.bench.verify",
    "layout": "sglang_kv5d.bench.layout",
}
#: suites that ``--what all`` leaves out (they ask for a geometry; run them by name)
NOT_IN_ALL = ("layout",)


def _device(ctx, param, value):
    from sglang_kv5d.bench.common import DeviceError, parse_gpu_device

    try:
        parse_gpu_device(value)
    except DeviceError as exc:
        raise click.BadParameter(str(exc)) from None
    return value.strip().lower()


def _out_path(ctx, param, value):
    """--out: a file we can create or replace, checked before anything is measured."""
    if value is None:
        return None
    if value == "" or "\x00" in value:
        raise click.BadParameter("expected a file path")
    path = os.path.abspath(value)
    folder = os.path.dirname(path)
    if os.path.isdir(path):
        raise click.BadParameter(f"{value!r} is a directory; name a file in it")
    if not os.path.isdir(folder):
        raise click.BadParameter(f"the folder {folder!r} does not exist; create it (mkdir -p) or pick another path")
    if not os.access(folder, os.W_OK | os.X_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise click.BadParameter(f"{value!r} is not writable here; pick a path in a folder you can write")
    return value


def _layout_kwargs(what, model_path, heads, kv_heads, head_dim, page_size, tp, kv_dtype, batches, contexts,
                   prefill) -> dict:
    """``run()`` keywords of the layout suite from its options, validated
    (click.UsageError naming the option); {} for the other suites, which
    take none of them."""
    given = {"--model-path": model_path, "--heads": heads, "--kv-heads": kv_heads, "--head-dim": head_dim,
             "--page-size": page_size, "--tp": tp, "--kv-dtype": kv_dtype, "--batches": batches,
             "--contexts": contexts, "--prefill": prefill}
    if what != "layout":
        used = [k for k, v in given.items() if v is not None]
        if used:
            raise click.UsageError(f"{', '.join(used)}: only for --what layout")
        return {}
    from sglang_kv5d.bench import layout_cases as lc
    from sglang_kv5d.bench.layout import DEFAULT_GEOMETRY

    kv_dtypes = {"fp8": ("fp8",), "bf16": ("bf16",), "both": ("fp8", "bf16")}[kv_dtype or "fp8"]
    page = lc.DEFAULT_PAGE if page_size is None else page_size
    try:
        if model_path is not None:
            if heads is not None or kv_heads is not None or head_dim is not None:
                raise lc.GeometryError("--model-path gives the heads and head dim: drop --heads/--kv-heads/--head-dim")
            geom = lc.geometry_from_config(model_path, tp=tp or 1, page=page, kv_dtypes=kv_dtypes)
        elif heads is not None or kv_heads is not None or head_dim is not None:
            if heads is None or head_dim is None:
                raise lc.GeometryError("give --heads and --head-dim (and --kv-heads, default --heads), "
                                       "or --model-path")
            geom = lc.validate(lc.Geometry(heads, heads if kv_heads is None else kv_heads, head_dim, tp or 1, page),
                               kv_dtypes)
        else:
            d = DEFAULT_GEOMETRY
            geom = lc.validate(lc.Geometry(d.heads, d.kv_heads, d.head_dim, tp or d.tp, page,
                                           source=d.source if tp in (None, d.tp) else "default heads (Qwen3.5)"),
                               kv_dtypes)
        kw = dict(geometry=geom, kv_dtypes=kv_dtypes)
        if batches is not None:
            kw["decode_batches"] = lc.parse_ints(batches, "--batches")
        if contexts is not None:
            kw["decode_contexts"] = lc.parse_ints(contexts, "--contexts")
        if prefill is not None:
            kw["prefill_shapes"] = lc.parse_prefill(prefill)
        lc.shapes(kw.get("decode_batches", lc.DECODE_BATCHES), kw.get("decode_contexts", lc.DECODE_CONTEXTS),
                  kw.get("prefill_shapes", lc.PREFILL_SHAPES))
    except lc.GeometryError as exc:
        raise click.UsageError(str(exc)) from None
    return kw


def _finite(ctx, param, value):
    if not math.isfinite(value):
        raise click.BadParameter(f"expected a finite size in GiB, got {value}")
    return value


@click.command()
@click.option("--what", type=click.Choice(["all", *SUITES]), default="all", show_default=True,
              help="Which benchmark: the fused FP8 KV write, 5D decode attention, speculative target verify over 5D (against the extend kernel and one decode step), the layout verdict (5D or NHD: one layer's write + attention per layout for a geometry; not part of all), or all.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON instead of tables.")
@click.option("--out", "out_path", callback=_out_path,
              help="Also write the JSON results to this file (its folder must exist and be writable: checked "
                   "before the run).")
@click.option("--device", default="cuda", show_default=True, callback=_device,
              help="torch device of the GPU to measure: cuda or cuda:N (CUDA or ROCm); anything else, or a GPU "
                   "index torch does not see, exits 2.")
@click.option("--cache-gib", type=click.FloatRange(min=0, max=4096), default=0.0, show_default=True, callback=_finite,
              help="fp8-write: make every KV cache buffer at least this many GiB, slots spread over it, as in "
                   "serving. 0 sizes them to about 1.25 x T slots, which keeps the written lines in the L2 cache "
                   "and flatters scattered (decode) writes.")
@click.option("--model-path", type=click.Path(file_okay=False), default=None,
              help="layout: a local model directory; its config.json (read as JSON only, bounded, validated; "
                   "no code runs) gives the heads, KV heads, head dim and attention layers.")
@click.option("--heads", type=click.IntRange(1, 1024), default=None, help="layout: query heads of the model.")
@click.option("--kv-heads", type=click.IntRange(1, 1024), default=None,
              help="layout: KV heads of the model (default: --heads).")
@click.option("--head-dim", type=click.IntRange(16, 1024), default=None, help="layout: head dim D (K and V).")
@click.option("--page-size", type=click.IntRange(1, 1024), default=None,
              help="layout: KV page size in tokens (default 64); the 5D layout needs a multiple of 16 for fp8, "
                   "8 for bf16.")
@click.option("--tp", type=click.IntRange(1, 64), default=None,
              help="layout: tensor-parallel ranks; one rank's heads are timed (default 1; 8 for the default "
                   "Qwen3.5 geometry).")
@click.option("--kv-dtype", type=click.Choice(["fp8", "bf16", "both"]), default=None,
              help="layout: KV cache dtype (default fp8: this GPU's format).")
@click.option("--batches", default=None, help="layout: decode batch sizes, e.g. 1,32,128 (the default).")
@click.option("--contexts", default=None, help="layout: decode context lengths, e.g. 4096,32768 (the default).")
@click.option("--prefill", default=None,
              help="layout: prefill chunks as REQUESTSxNEW+PREFIX, e.g. 1x4096+0,1x4096+28672,4x1024+8192 "
                   "(the default).")
def bench(what: str, as_json: bool, out_path, device: str, cache_gib: float, model_path=None, heads=None,
          kv_heads=None, head_dim=None, page_size=None, tp=None, kv_dtype=None, batches=None, contexts=None,
          prefill=None) -> None:
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

    layout_kw = _layout_kwargs(what, model_path, heads, kv_heads, head_dim, page_size, tp, kv_dtype, batches,
                               contexts, prefill)
    if what in ("all", "attention", "layout"):
        try:
            peer_path()  # SGLANG_KV5D_PEER_PATH, checked before anything is imported or measured
        except PeerPathError as exc:
            raise click.UsageError(str(exc))
    try:
        import torch
    except (ImportError, OSError) as exc:  # not installed, or its shared libraries do not load
        raise click.ClickException(f"bench needs torch: {exc}")
    if not torch.cuda.is_available():
        click.echo("sglang-kv5d bench needs a GPU (CUDA or ROCm); none is visible here.", err=True)
        sys.exit(2)
    from sglang_kv5d.bench.common import DeviceError, check_gpu_index, parse_gpu_device

    try:
        check_gpu_index(parse_gpu_device(device), torch.cuda.device_count())
    except DeviceError as exc:
        raise click.BadParameter(str(exc), param_hint="'--device'") from None
    progress = lambda m: click.echo(f"... {m}", err=True)  # noqa: E731
    results = {}
    with contextlib.redirect_stdout(sys.stderr):  # SGLang prints while importing
        for name, module in SUITES.items():
            if what not in ("all", name) or (what == "all" and name in NOT_IN_ALL):
                continue
            mod = importlib.import_module(module)
            progress(f"{name}: starting")
            kwargs = {"cache_gib": cache_gib} if name == "fp8-write" else {}
            kwargs = layout_kw if name == "layout" else kwargs
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
