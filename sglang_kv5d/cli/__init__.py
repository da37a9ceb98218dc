"""The ``sglang-kv5d`` command.

    launch    validate, then exec `python -m sglang.launch_server` with the overlay on
    check     the same validation without the exec (exit 0 / 1 errors / 2 usage)
    doctor    is the overlay working here, and why not
    patches   each patch's manifest and its state here
    selftest  run a Qwen3.5-like model's attention through the patched SGLang, check it
    bench     benchmark the kernels against their peers on this GPU

Every subcommand that a machine may read takes ``--json``.
"""

from __future__ import annotations

import json
import sys
from typing import Optional, Sequence

import click

from .._version import __version__
from ..platform import KNOWN_ARCHS
from ..safe_text import printable


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="sglang-kv5d")
def cli() -> None:
    """SGLang overlay for AITER's SHUFFLE 5D (vectorized_5d) KV cache.

    Patches SGLang at import time, in every SGLang process, when SGLANG_KV5D=1
    (the launcher sets it): 5D detection through hybrid pools, a fused FP8 KV
    write and 5D attention dispatch. See `sglang-kv5d COMMAND --help`.
    """


def echo(text: str = "", err: bool = False) -> None:
    """click.echo for text carrying outside values (paths, environment values,
    SGLang's messages): control characters are escaped (sglang_kv5d.safe_text)."""
    click.echo(printable(text), err=err)


def _progress(enabled: bool):
    if not enabled:
        return None
    return lambda msg: echo(f"... {msg}", err=True)


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON (a list of {name, status, detail, fix}).")
@click.option("--no-spawn", is_flag=True, help="Skip the spawn probe (starting a child interpreter).")
@click.option("--kernels-for", "kernels_for", type=click.Choice(list(KNOWN_ARCHS)), default=None,
              help="Compile every kernel for this GPU arch (on any machine, nothing is launched) and report "
                   "registers, LDS / shared memory, waves per SIMD and the path the overlay takes; "
                   "without it the GPU here is used, if any.")
def doctor(as_json: bool, no_spawn: bool, kernels_for: Optional[str]) -> None:
    """Check that the overlay can work on this machine; explain what cannot.

    Reports Python / torch / triton / wrapt / SGLang / aiter versions, the
    platform and GPU arch with its fp8 flavour (e4m3fnuz on gfx942, e4m3fn
    elsewhere), the SGLang version verdict, whether SGLang discovers the
    plugin entry point (and whether SGLANG_PLUGINS filters it out), whether
    the .pth bootstrap is installed, each patch's probe against the installed
    SGLang, a spawn probe, and every kernel compiled for the GPU here (or
    --kernels-for ARCH): one line per kernel with its registers, LDS, waves
    per SIMD and which path the overlay will take (the fused kernel, or its
    fallback). Exits 1 when something required is broken.
    """
    from ..doctor import FAIL, render, run_doctor

    checks = run_doctor(progress=_progress(not as_json), spawn=not no_spawn,
                        options={"kernels_for": kernels_for})
    if as_json:
        click.echo(json.dumps([c.to_dict() for c in checks], indent=2))
    else:
        echo(render(checks))
    sys.exit(1 if any(c.status == FAIL for c in checks) else 0)


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print the manifests and states as JSON.")
def patches(as_json: bool) -> None:
    """List each patch: what it changes, why, when to remove it, and its state here.

    The state is the one activation would reach here: the SGLang version
    verdict and SGLANG_KV5D_PATCHES, then a probe of the installed SGLang
    (targets resolve, parameters match, replacements build); nothing is
    patched. Exits 1 when a 5D-required or internal patch cannot apply.
    """
    from .. import config
    from .. import versions as _versions
    from ..activation import probe_patches
    from ..manifests import manifest_data
    from ..patches import BUILTIN_PATCH_MODULES
    from ..state import APPLIED, FAILED, SKIPPED

    verdict = _versions.verdict(allow_untested=config.allow_untested())
    rows = []
    broken = False
    for p in probe_patches(import_modules=True):
        module = BUILTIN_PATCH_MODULES.get(p.name, "").partition(":")[0] or None
        m = manifest_data(p.patch, module) if p.patch is not None else {
            "summary": "(failed to load)", "surfaces": [], "upstream": "", "removal": "", "why": ""}
        state = "ready" if p.state == APPLIED else p.state  # APPLIED from a probe means "would apply"
        broken |= p.state in (FAILED, SKIPPED) and (p.required_for_5d or p.internal)
        rows.append({"name": p.name, "state": state, "reason": p.state_reason, "required_for_5d": p.required_for_5d,
                     "internal": p.internal, "summary": m["summary"], "surfaces": m["surfaces"],
                     "targets": p.targets, "upstream": m["upstream"], "removal": m["removal"], "why": m["why"]})
    if as_json:
        click.echo(json.dumps({"sglang": verdict.version, "verdict": verdict.kind, "patches": rows}, indent=2))
    else:
        echo(f"SGLang {verdict.version or 'missing'}: {verdict.message}\n")
        for r in rows:
            tag = " (internal)" if r["internal"] else (" (needed for 5D)" if r["required_for_5d"] else "")
            echo(f"{r['name']}{tag}: {r['state']}")
            echo(f"  {r['summary']}")
            echo(f"  state:   {r['reason']}")
            echo(f"  targets: {', '.join(r['targets'] or r['surfaces'])}")
            echo(f"  why:     {r['why']}")
            echo(f"  upstream: {r['upstream'] or 'not given'}; remove {r['removal'] or 'when: not given'}")
            echo("")
    sys.exit(1 if broken else 0)


def _register_optional_commands() -> None:
    from . import launch as _launch

    _launch.register(cli)
    try:
        from . import selftest as _selftest

        _selftest.register(cli)
    except ImportError:
        pass
    try:
        from . import bench as _bench

        _bench.register(cli)
    except ImportError:
        pass


_register_optional_commands()


def main(argv: Optional[Sequence[str]] = None) -> None:
    cli.main(args=list(argv) if argv is not None else None, prog_name="sglang-kv5d")
