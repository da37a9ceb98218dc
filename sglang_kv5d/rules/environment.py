"""Rules on the launch environment's variables: names SGLang never reads
(KV5D012), invalid values of sglang-kv5d's switches (KV5D013) and variables
that change which code programs load (KV5D014)."""

from __future__ import annotations

import difflib

from .. import config as _config
from ..surface import ENV_PREFIX, LAUNCH_SERVER
from .context import USE_AITER_ENV, Context
from .registry import ERROR, WARNING, Rule, rule as _rule

# Variables that change which code a program loads: a profile or --kv5d-env that
# sets one gets KV5D014 (a pasted or planted profile must not do it unnoticed).
CODE_LOADING_ENV = ("LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "PYTHONPATH", "PYTHONSTARTUP", "PYTHONHOME",
                    "BASH_ENV", "ENV")
# Examples in KV5D012's text of names SGLang does NOT read (a typo of one of its
# variables, a fork's variable); composed from the table's names, which are SGLang's.
_TYPO_EXAMPLE = USE_AITER_ENV.replace("AITER", "AITR")
_FORK_EXAMPLE = f"{ENV_PREFIX}ROCM_USE_AITER_LINEAR_SHUFFLE"


@_rule(
    "KV5D012",
    WARNING,
    f"{ENV_PREFIX}* variable the installed SGLang never reads",
    f"""
    SGLang silently ignores environment variables it does not know, so a typo
    (`{_TYPO_EXAMPLE}`) or a variable that only a fork reads (for example
    `{_FORK_EXAMPLE}`) does nothing. The names SGLang reads
    come from a scan of the installed package's sources (the `Envs`
    declarations in `environ.py` and every `{ENV_PREFIX}*` name in its code), done
    once per process. sglang-kv5d's own `SGLANG_KV5D*` variables are judged by
    its switch registry instead: a `SGLANG_KV5D_*` name that is not a switch
    (`SGLANG_KV5D_STRICTT`) fires too.

    Fires (as a warning) for each such variable in the launch environment and
    suggests the closest known name when there is one.
    """,
    fix='rename the variable to the suggested name, or remove it (ignore the warning if another program reads it).',
)
def _kv5d012(ctx: Context, rule: Rule):
    for name, close in _config.unknown_own_names(ctx.env):
        yield rule.finding(
            f"{name} is set but sglang-kv5d has no such switch" + (f"; did you mean {close}?" if close else ""),
            (f"rename it to {close}" if close else f"remove {name}") + " (the README lists every switch)",
        )
    known = ctx.known_env
    if known is None:
        return
    names = sorted(n for n in ctx.env if n.startswith(ENV_PREFIX))
    exact = {k for k in known if not k.endswith("_")}
    prefixes = tuple(k for k in known if k.endswith("_") and len(k) > len(ENV_PREFIX))
    for name in names:
        if name == "SGLANG_KV5D" or name.startswith("SGLANG_KV5D_"):
            continue
        if name in exact or (prefixes and name.startswith(prefixes)):
            continue
        close = difflib.get_close_matches(name, sorted(exact), n=1, cutoff=0.85)
        hint = f"; did you mean {close[0]}?" if close else ""
        yield rule.finding(
            f"{name} is set but the installed SGLang never reads it (a typo, or a variable only a fork reads){hint}",
            (f"rename it to {close[0]}" if close else f"remove {name}") + " (or ignore this warning if another program reads it)",
        )


@_rule(
    "KV5D013",
    ERROR,
    "An sglang-kv5d switch has a value it does not accept",
    f"""
    Every `SGLANG_KV5D*` variable has a type and a set of accepted values (the
    README's switch table, generated from `sglang_kv5d.config`). An invalid one
    would otherwise be read as something the operator did not ask for:
    `SGLANG_KV5D=maybe` leaves the overlay off (so SGLang's unpatched 5D code
    runs), `SGLANG_KV5D_ATTN_IMPL=cuda` falls back to `auto`. Inside SGLang,
    activation logs one warning per invalid switch naming what it assumed.

    Fires for each such variable in the launch environment, and for an
    `SGLANG_KV5D` value in the shell or the profile that the launcher replaces
    with `1` (a plain `python -m {LAUNCH_SERVER}` from the same shell
    would run without the overlay). Patch names in `SGLANG_KV5D_PATCHES` must
    be known patches.
    """,
    fix="set the variable to one of the values the message lists, or unset it; the README's switch table lists every switch.",
)
def _kv5d013(ctx: Context, rule: Rule):
    if ctx.in_sglang:
        return
    for p in _config.problems(ctx.env, owners=(_config.OURS,), known_patches=ctx.known_patches):
        yield rule.finding(f"{p.message()} (sglang-kv5d would assume {p.switch.assumed})", p.fix)
    for name, value, origin in ctx.replaced:
        if name != _config.GATE:
            continue
        _, problem = _config.read(name, {name: value})
        if problem is not None:
            yield rule.finding(
                f"{problem.message()} (from the {origin}); the launcher sets {name}=1 for SGLang, but any "
                "other program started with this value runs without the overlay",
                problem.fix,
            )


@_rule(
    "KV5D014",
    WARNING,
    "The launch sets a variable that changes which code programs load",
    f"""
    A profile is a file that may have been pasted or planted; `--kv5d-env` may
    come from a script. Variables such as `LD_PRELOAD` or `PYTHONPATH` make
    every process of the server load code from somewhere else, which is rarely
    what a launch profile is for.

    Fires (as a warning) for each of {", ".join(f"`{n}`" for n in CODE_LOADING_ENV)}
    that the profile's `[env]` or `--kv5d-env` sets. Values exported in the
    shell are the operator's own and do not fire.
    """,
    fix="remove the variable from the profile's [env] / --kv5d-env unless you meant to load that code.",
)
def _kv5d014(ctx: Context, rule: Rule):
    if ctx.in_sglang or not ctx.env_origins:
        return
    for name in CODE_LOADING_ENV:
        origin = ctx.env_origins.get(name)
        if origin is None:
            continue
        yield rule.finding(
            f"{name}={ctx.env.get(name, '')!r} is set by the {origin}: it changes which code every SGLang "
            "process (and any shell it starts) loads",
            f"remove {name} from the {origin} unless you meant it",
        )
