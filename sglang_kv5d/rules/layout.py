"""Rules on the layout request and what makes it count: the layout value
(KV5D001), SGLANG_USE_AITER (KV5D002), the platform (KV5D003) and
SGLANG_USE_HND_KVCACHE (KV5D007)."""

from __future__ import annotations

import difflib

from .context import HND_ENV, LAYOUT_ENV, USE_AITER_ENV, VALID_LAYOUTS, Context, env_bool
from .registry import ERROR, Rule, rule as _rule


@_rule(
    "KV5D001",
    ERROR,
    f"Unknown {LAYOUT_ENV}",
    f"""
    SGLang's AITER pool reads `{LAYOUT_ENV}` with `.lower()` and accepts only
    `nhd` (the default) and `vectorized_5d`; anything else (a typo, `5d`,
    `shuffle`, an empty string, surrounding spaces) raises `ValueError` when the
    KV pool is built, after the weights have loaded.

    Fires when the variable is set to a value other than `nhd` or
    `vectorized_5d` (compared case-insensitively, without trimming, as SGLang
    does). Unset is fine (it means `nhd`).
    """,
    fix=f"export {LAYOUT_ENV}=vectorized_5d for the SHUFFLE 5D layout, or nhd (or unset it) for the default.",
)
def _kv5d001(ctx: Context, rule: Rule):
    raw = ctx.env.get(LAYOUT_ENV)
    if raw is None or raw.lower() in VALID_LAYOUTS:
        return
    close = difflib.get_close_matches(raw.strip().lower(), VALID_LAYOUTS, n=1, cutoff=0.5)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    yield rule.finding(
        f"{LAYOUT_ENV}={raw!r} is not a layout SGLang knows{hint}; SGLang accepts only "
        "'nhd' and 'vectorized_5d' (any case) and raises when it builds the KV pool",
        f"export {LAYOUT_ENV}=vectorized_5d for the SHUFFLE 5D layout, or nhd (or unset it) for the default",
    )


@_rule(
    "KV5D002",
    ERROR,
    f"vectorized_5d without {USE_AITER_ENV}",
    f"""
    SGLang's memory pool decides whether the AITER layout switch counts at all
    from `{USE_AITER_ENV}`, read once when `memory_pool` is imported
    (`_use_aiter = envs.{USE_AITER_ENV}.get() and is_hip()`). Without it the
    layout request is silently ignored and the pool is NHD.

    Fires when `{LAYOUT_ENV}=vectorized_5d` and `{USE_AITER_ENV}` is not `1` or
    `true` (any case) in the launch environment. `yes` / `y` fire too: the pool
    (`Envs`) reads them as true, but the many modules that read the variable with
    `get_bool_env_var` (fp8_utils, unquant, vision, ...) read them as false.
    """,
    fix=f"export {USE_AITER_ENV}=1 in the launch environment (the profile's [env] or --kv5d-env {USE_AITER_ENV}=1).",
)
def _kv5d002(ctx: Context, rule: Rule):
    if not ctx.wants_5d:
        return
    raw = ctx.env.get(USE_AITER_ENV)
    if raw is not None and raw.lower() in ("1", "true"):
        return
    if env_bool(raw):
        yield rule.finding(
            f"{USE_AITER_ENV}={raw!r} is read as true by SGLang's Envs (the KV pool) but as false by the "
            "modules that use get_bool_env_var (fp8_utils, unquant, vision, ...): AITER would be half on",
            f"export {USE_AITER_ENV}=1",
        )
        return
    state = "is not set" if raw is None else f"is {raw!r}, which SGLang reads as false"
    yield rule.finding(
        f"{LAYOUT_ENV}=vectorized_5d is requested but {USE_AITER_ENV} {state}; SGLang ignores "
        "the layout and builds an NHD pool",
        f"export {USE_AITER_ENV}=1 in the launch environment (it is read once, at import)",
    )


@_rule(
    "KV5D003",
    ERROR,
    "vectorized_5d on a platform that is not ROCm",
    f"""
    The SHUFFLE 5D layout is read only by AITER kernels (`pa_decode_gluon` and
    the AITER extend path), which exist only on ROCm. On CUDA or CPU SGLang
    ignores the variable (0.5.23 says so in `memory_pool.py`), so asking for it
    there is a configuration mistake, usually a ROCm script run on the wrong host.

    Fires when `{LAYOUT_ENV}=vectorized_5d` and the platform is not ROCm. The
    launcher detects the platform (`torch.version.hip`, then `/opt/rocm`);
    `--kv5d-platform rocm` lints a ROCm launch from another machine.
    """,
    fix='run on a ROCm host, or unset the layout variable; to lint a ROCm launch from another machine pass --kv5d-platform rocm.',
)
def _kv5d003(ctx: Context, rule: Rule):
    if not ctx.wants_5d or ctx.platform == "rocm":
        return
    yield rule.finding(
        f"{LAYOUT_ENV}=vectorized_5d is requested on platform {ctx.platform!r}; the layout has "
        "consumers (AITER kernels) only on ROCm",
        "run on a ROCm host, unset the layout variable here, or pass --kv5d-platform rocm to lint "
        "a ROCm launch from this machine",
    )


@_rule(
    "KV5D007",
    ERROR,
    f"vectorized_5d with {HND_ENV}",
    f"""
    `MHATokenToKVPool` checks `{HND_ENV}` before the AITER layout: when it is
    true the pool is HND and the 5D request is silently dropped.

    Fires when 5D is requested and `{HND_ENV}` is true (`1`, `true`, `yes`,
    `y`, any case).
    """,
    fix=f"unset {HND_ENV} (or set it to 0) when serving vectorized_5d.",
)
def _kv5d007(ctx: Context, rule: Rule):
    if ctx.wants_5d and env_bool(ctx.env.get(HND_ENV)):
        yield rule.finding(
            f"{HND_ENV}={ctx.env.get(HND_ENV)} takes precedence over {LAYOUT_ENV}=vectorized_5d: the pool "
            "would silently be HND",
            f"unset {HND_ENV} (or set it to 0)",
        )
