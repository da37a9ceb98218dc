"""Rules on the installed SGLang: its version (KV5D010) and whether the
patches 5D needs can apply to it (KV5D011)."""

from __future__ import annotations

from .. import config as _config
from ..versions import BEST_EFFORT_RANGE, SUPPORTED_RANGE
from .context import ALLOW_UNTESTED_ENV, Context
from .registry import ERROR, Rule, rule as _rule


@_rule(
    "KV5D010",
    ERROR,
    "SGLang version outside the supported range",
    f"""
    sglang-kv5d supports SGLang {SUPPORTED_RANGE[0]} .. {SUPPORTED_RANGE[1]}, and {BEST_EFFORT_RANGE[0]} ..
    {BEST_EFFORT_RANGE[1]} on a best-effort basis; older releases have no vectorized_5d
    code to fix, and newer ones are untested (refused unless
    `SGLANG_KV5D_ALLOW_UNTESTED=1`). On the best-effort releases, ROCm forces
    the Mamba radix-cache strategy to `no_buffer`, which forces `page_size=1`,
    which the 5D pool rejects: hybrid models (Qwen3.5, Qwen3-Next) need
    `--disable-radix-cache` there.

    Fires when the installed SGLang is missing, too old, or newer than the tested
    range (without the override); or when it is a best-effort release, the model
    is a linear-attention hybrid (judged from `<model-path>/config.json`, or the
    name when the path is not local) and the radix cache is on.
    """,
    fix=f'install SGLang {SUPPORTED_RANGE[0]} .. {SUPPORTED_RANGE[1]}; on {BEST_EFFORT_RANGE[0]} .. {BEST_EFFORT_RANGE[1]} with a hybrid model add --disable-radix-cache; SGLANG_KV5D_ALLOW_UNTESTED=1 tries a newer SGLang at your own risk.',
)
def _kv5d010(ctx: Context, rule: Rule):
    from ..versions import BEST_EFFORT, SUPPORTED_RANGE, verdict

    allow = _config.allow_untested(ctx.env)
    v = verdict(ctx.sglang_version, allow_untested=allow, _probe=False)
    if not v.allowed:
        yield rule.finding(
            v.message,
            f"install a tested SGLang (pip install 'sglang>={SUPPORTED_RANGE[0]},<=" f"{SUPPORTED_RANGE[1]}')"
            + ("" if v.kind != "untested" else f", or set {ALLOW_UNTESTED_ENV}=1 to try this one"),
        )
        return
    if v.kind == BEST_EFFORT and ctx.hybrid_model and not ctx.arg("disable_radix_cache", False):
        yield rule.finding(
            f"SGLang {v.version} is a best-effort release: with a hybrid (linear-attention) model and the "
            "radix cache on, ROCm forces page_size=1, which the 5D pool rejects",
            f"pass --disable-radix-cache, or upgrade SGLang to {SUPPORTED_RANGE[0]} .. {SUPPORTED_RANGE[1]}",
        )


@_rule(
    "KV5D011",
    ERROR,
    "Patches that 5D needs cannot apply",
    """
    The 5D fixes are patches applied to SGLang at import time. Each one checks
    that its targets exist with the expected signatures on the installed
    SGLang (`sglang-kv5d patches` / `sglang-kv5d doctor` list them). If a
    patch that 5D needs cannot apply, a 5D launch would either fail at startup
    (strict mode, the default) or run upstream's wrong code (non-strict).

    A patch left out of `SGLANG_KV5D_PATCHES` cannot apply either: the
    patches 5D needs (`server-args-guard` among them, since without it nothing
    inside SGLang refuses a launch these rules refuse) are refused at the first
    5D KV pool or AITER backend build when the selection omits one, which is
    after the weights have loaded. The selection is part of every verdict:
    `check`, `launch`, `doctor` and, when `server-args-guard` itself is
    selected, the guard inside SGLang refuse it, naming the patches and the
    variable. With `SGLANG_KV5D_STRICT=0` the server would not stop at that
    build: it would serve the 5D layout with the left-out patches' upstream
    code (silently wrong attention or a corrupted cache); the finding then
    says, for each patch, what would run unpatched, and stays an error (the
    launcher does not start a server whose attention it knows to be wrong).

    Fires when 5D is requested and the probe reports any 5D-required patch that
    cannot apply, or `SGLANG_KV5D_PATCHES` leaves one out; the message names
    each one with the reason. When no probe is available, `check` says so and
    the probe part stays silent.
    """,
    fix='install a supported SGLang release (see KV5D010); add a left-out patch to SGLANG_KV5D_PATCHES (or unset it); `sglang-kv5d doctor` names each patch and why it cannot apply; use the nhd layout until then.',
)
def _kv5d011(ctx: Context, rule: Rule):
    if not ctx.wants_5d:
        return
    chosen = _config.selected_patches(ctx.env)
    left_out = sorted(ctx.required_patches - set(chosen)) if chosen is not None and ctx.required_patches else []
    if left_out:
        names = ", ".join(left_out)
        shown = ctx.env.get(_config.PATCHES, "")
        if _config.strict(ctx.env):
            what = ("building the first 5D KV pool or AITER backend would raise Kv5dNotReadyError, after the "
                    "weights have loaded")
        else:
            what = (f"with {_config.STRICT}=0 SGLang would NOT stop there: it would serve vectorized_5d with these "
                    "running unpatched: " + "; ".join(f"{n} ({_unpatched(n)})" for n in left_out))
        yield rule.finding(
            f"vectorized_5d needs the patch(es) {names}, which {_config.PATCHES}={shown!r} leaves out: {what}",
            f"add {names} to {_config.PATCHES} (or unset it to select every patch), or use the nhd layout",
        )
    if not ctx.patch_problems:
        return
    listing = "; ".join(f"{name}: {reason}" for name, reason in ctx.patch_problems)
    yield rule.finding(
        f"patches that vectorized_5d needs cannot apply on this SGLang ({listing})",
        "install a supported SGLang release (see KV5D010), or run `sglang-kv5d doctor` for details; "
        "use the nhd layout until then",
    )


def _unpatched(name: str) -> str:
    """What runs wrong without patch ``name`` (its ``problem``), for KV5D011's non-strict message."""
    try:
        from ..activation.patch_type import load_builtin

        problem = (load_builtin(name).problem or "").strip()
    except Exception:  # a third-party patch, or one that cannot load: its name says enough
        problem = ""
    return problem.replace("`", "").replace("**", "") or "upstream's code runs in its place"
