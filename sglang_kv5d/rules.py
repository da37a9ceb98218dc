"""Launch rules: which SGLang configurations cannot serve a SHUFFLE 5D KV cache.

Each rule is a pure function over a :class:`Context` (the launch environment,
the parsed SGLang arguments, the SGLang version, the platform, the patch
probes) and returns zero or more :class:`Finding` objects. Rules have stable
IDs (KV5D001 ..), a severity, a message that says what is wrong, and a fix.

The same rules run in three places:

* ``sglang-kv5d check`` / ``sglang-kv5d launch`` before anything starts
  (sglang_kv5d.launcher builds the context from argv and a profile);
* inside SGLang, through :func:`guard_server_args`, which the
  ``server-args-guard`` patch calls from ``ServerArgs.check_server_args`` and
  (0.5.20+) a resolution hook, so ``python -m sglang.launch_server`` and
  ``sgl.Engine(...)`` scripts get them too;
* ``python -m sglang_kv5d.rules --markdown`` renders docs/rules.md.

Importing this module imports neither SGLang nor torch.
"""

from __future__ import annotations

import argparse
import difflib
import functools
import json
import logging
import os
import re
import sys
import textwrap
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence, Tuple

from . import config as _config

logger = logging.getLogger("sglang_kv5d.rules")

ERROR = "error"
WARNING = "warning"

LAYOUT_ENV = _config.LAYOUT
USE_AITER_ENV = _config.USE_AITER
HND_ENV = _config.HND
ALLOW_UNTESTED_ENV = _config.ALLOW_UNTESTED
VALID_LAYOUTS = _config.LAYOUTS
# Variables that change which code a program loads: a profile or --kv5d-env that
# sets one gets KV5D014 (a pasted or planted profile must not do it unnoticed).
CODE_LOADING_ENV = ("LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "PYTHONPATH", "PYTHONSTARTUP", "PYTHONHOME",
                    "BASH_ENV", "ENV")
VEC5D = "vectorized_5d"
PLATFORMS = ("rocm", "cuda", "cpu")
# What SGLang does with an unset --page-size when the 5D layout is requested on
# ROCm (arg_groups/overrides.py::_page_size_default, 0.5.15.post1+).
DEFAULT_5D_PAGE_SIZE = 64


# --------------------------------------------------------------------------
# Findings and context


@dataclass(frozen=True)
class Finding:
    id: str
    severity: str  # ERROR | WARNING
    message: str
    fix: str

    def to_dict(self) -> Dict[str, str]:
        return {"id": self.id, "severity": self.severity, "message": self.message, "fix": self.fix}

    def format(self) -> str:
        return f"{self.id} {self.severity}: {self.message}\n  fix: {self.fix}"


@dataclass
class Context:
    """Everything a rule may look at. Build it with :func:`make_context`.

    ``args``: an ``argparse.Namespace`` from SGLang's own parser, SGLang's
    resolving view of a ``ServerArgs``, or a plain mapping of values. Missing
    names read as the rule's default (older SGLang releases lack some flags).

    ``patch_problems``: ``[(patch_name, reason)]`` for patches that 5D needs and
    that cannot apply on this SGLang; ``None`` means no probe was available
    (KV5D011 then cannot judge and stays silent).

    ``known_env``: names (and ``PREFIX_`` families) of ``SGLANG_*`` variables the
    installed SGLang reads; ``None`` skips KV5D012.

    ``hybrid_model``: True / False when known (linear-attention hybrid such as
    Qwen3.5), None when it cannot be told from the arguments.

    ``env_origins``: for the launcher, the origin (``profile``, ``command
    line``) of each variable it sets; ``replaced``: ``(name, value, origin)``
    of values the launch environment replaced (an exported ``SGLANG_KV5D``
    the launcher overrides). ``known_patches``: patch names, to judge
    ``SGLANG_KV5D_PATCHES``. ``in_sglang``: the rules run inside SGLang (the
    server-args guard), where activation has already warned about invalid
    sglang-kv5d switches and KV5D013/KV5D014 stay silent.
    """

    env: Mapping[str, str]
    args: Any
    sglang_version: Optional[str]
    platform: str
    patch_problems: Optional[Sequence[Tuple[str, str]]] = None
    known_env: Optional[FrozenSet[str]] = None
    hybrid_model: Optional[bool] = None
    env_origins: Optional[Mapping[str, str]] = None
    replaced: Sequence[Tuple[str, str, str]] = ()
    known_patches: Optional[FrozenSet[str]] = None
    in_sglang: bool = False

    def arg(self, name: str, default: Any = None) -> Any:
        a = self.args
        if a is None:
            return default
        if isinstance(a, Mapping):
            return a.get(name, default)
        try:
            return getattr(a, name)
        except AttributeError:
            return default

    # Read the environment exactly as SGLang does (environ.EnvStr / EnvBool).
    @property
    def layout(self) -> Optional[str]:
        raw = self.env.get(LAYOUT_ENV)
        return None if raw is None else raw.lower()

    @property
    def wants_5d(self) -> bool:
        return self.layout == VEC5D


def make_context(
    env: Mapping[str, str],
    args: Any,
    sglang_version: Optional[str],
    platform: str,
    patch_problems: Optional[Sequence[Tuple[str, str]]] = None,
    known_env: Optional[Iterable[str]] = None,
    hybrid_model: Optional[bool] = None,
    *,
    env_origins: Optional[Mapping[str, str]] = None,
    replaced: Sequence[Tuple[str, str, str]] = (),
    known_patches: Optional[Iterable[str]] = None,
    in_sglang: bool = False,
) -> Context:
    if platform not in PLATFORMS:
        raise ValueError(f"platform must be one of {PLATFORMS}, not {platform!r}")
    if hybrid_model is None:
        hybrid_model = guess_hybrid_model(_get(args, "model_path"))
    return Context(
        env=dict(env),
        args=args,
        sglang_version=sglang_version,
        platform=platform,
        patch_problems=None if patch_problems is None else [tuple(p) for p in patch_problems],
        known_env=None if known_env is None else frozenset(known_env),
        hybrid_model=hybrid_model,
        env_origins=None if env_origins is None else dict(env_origins),
        replaced=[tuple(r) for r in replaced],
        known_patches=None if known_patches is None else frozenset(known_patches),
        in_sglang=in_sglang,
    )


def _get(args: Any, name: str, default: Any = None) -> Any:
    if args is None:
        return default
    if isinstance(args, Mapping):
        return args.get(name, default)
    try:
        return getattr(args, name)
    except AttributeError:
        return default


env_bool = _config.sglang_env_bool  # SGLang's EnvBool parse, from the switch registry


# --------------------------------------------------------------------------
# Registry


@dataclass(frozen=True)
class Rule:
    id: str
    severity: str
    title: str
    doc: str  # markdown: why, and what fires
    check: Callable[[Context], List[Finding]] = field(compare=False)
    fix: str = ""  # the general fix (each finding carries a specific one)

    def finding(self, message: str, fix: str) -> Finding:
        return Finding(self.id, self.severity, message, fix)


RULES: Dict[str, Rule] = {}


def _rule(rule_id: str, severity: str, title: str, doc: str, *, fix: str):
    def deco(fn: Callable[[Context, "Rule"], Iterable[Finding]]):
        def check(ctx: Context, _fn=fn, _id=rule_id) -> List[Finding]:
            return list(_fn(ctx, RULES[_id]) or ())

        RULES[rule_id] = Rule(rule_id, severity, title, textwrap.dedent(doc).strip(), check, fix)
        return fn

    return deco


def evaluate(ctx: Context, only: Optional[Iterable[str]] = None) -> List[Finding]:
    """Run every rule (or those in ``only``) in ID order; errors and warnings mixed."""
    wanted = None if only is None else set(only)
    out: List[Finding] = []
    for rid in sorted(RULES):
        if wanted is not None and rid not in wanted:
            continue
        out.extend(RULES[rid].check(ctx))
    return out


def errors(findings: Iterable[Finding]) -> List[Finding]:
    return [f for f in findings if f.severity == ERROR]


# --------------------------------------------------------------------------
# Helpers the rules share


def kv_vector_x(kv_cache_dtype: Optional[str], dtype: Optional[str] = None) -> Tuple[int, str]:
    """X = 16 bytes / storage element size, as MHATokenToKVPool computes it.

    Returns (X, explanation). ``auto`` stores the KV cache in the model dtype,
    which is 2 bytes (bf16/fp16) for every model this overlay targets; a
    float32 ``--dtype`` makes it 4 bytes.
    """
    d = (kv_cache_dtype or "auto").lower()
    if d.startswith("fp8") or d in ("mxfp8", "nvfp4", "int8", "uint8") or d.startswith("fp4"):
        return 16, f"--kv-cache-dtype {d} stores 1-byte elements, X=16"
    if d in ("bf16", "bfloat16", "fp16", "float16", "half"):
        return 8, f"--kv-cache-dtype {d} stores 2-byte elements, X=8"
    md = (dtype or "auto").lower()
    if md in ("float32", "float", "fp32"):
        return 4, f"--kv-cache-dtype {d} with --dtype {md} stores 4-byte elements, X=4"
    return 8, f"--kv-cache-dtype {d} stores the model dtype (bf16/fp16: 2-byte elements), X=8"


def speculative_algorithm(ctx: Context) -> Optional[str]:
    algo = ctx.arg("speculative_algorithm")
    if algo is None:
        return None
    name = str(getattr(algo, "name", algo)).strip()
    if not name or name.upper() == "NONE":
        return None
    return name


_HYBRID_ARCHS = (
    "Qwen3NextForCausalLM",
    "Qwen3_5ForCausalLM",
    "Qwen3_5MoeForCausalLM",
    "Qwen3_5ForConditionalGeneration",
    "Qwen3_5MoeForConditionalGeneration",
)
_HYBRID_MODEL_TYPES = ("qwen3_next", "qwen3_5", "qwen3_5_moe", "qwen3_5_text", "qwen3_5_moe_text")
_HYBRID_NAME_RE = re.compile(r"qwen3[._-]?5|qwen3[._-]?next", re.IGNORECASE)


def _config_is_hybrid(cfg: Mapping[str, Any]) -> Optional[bool]:
    configs = [cfg]
    for sub in ("text_config", "language_config"):
        if isinstance(cfg.get(sub), Mapping):
            configs.append(cfg[sub])
    for c in configs:
        if any(a in _HYBRID_ARCHS for a in (c.get("architectures") or ())):
            return True
        if c.get("model_type") in _HYBRID_MODEL_TYPES:
            return True
        if "linear_attention" in (c.get("layer_types") or ()):
            return True
        if c.get("full_attention_interval") or c.get("linear_num_value_heads"):
            return True
    return False


def guess_hybrid_model(model_path: Optional[str]) -> Optional[bool]:
    """Is the model a linear-attention hybrid (Qwen3.5, Qwen3-Next)?

    Reads ``<model_path>/config.json`` when the path is a local directory;
    otherwise judges by the name. None when it cannot tell.
    """
    if not model_path:
        return None
    cfg_path = os.path.join(str(model_path), "config.json")
    if os.path.isfile(cfg_path):
        try:
            with open(cfg_path, encoding="utf-8") as fh:
                cfg = json.load(fh)
            if isinstance(cfg, Mapping):
                return _config_is_hybrid(cfg)
        except (OSError, ValueError):
            pass
    if _HYBRID_NAME_RE.search(os.path.basename(str(model_path).rstrip("/")) or str(model_path)):
        return True
    return None


# --------------------------------------------------------------------------
# The rules


@_rule(
    "KV5D001",
    ERROR,
    "Unknown SGLANG_AITER_KV_CACHE_LAYOUT",
    f"""
    SGLang's AITER pool reads `{LAYOUT_ENV}` with `.lower()` and accepts only
    `nhd` (the default) and `vectorized_5d`; anything else (a typo, `5d`,
    `shuffle`, an empty string, surrounding spaces) raises `ValueError` when the
    KV pool is built, after the weights have loaded.

    Fires when the variable is set to a value other than `nhd` or
    `vectorized_5d` (compared case-insensitively, without trimming, as SGLang
    does). Unset is fine (it means `nhd`).
    """,
    fix='export SGLANG_AITER_KV_CACHE_LAYOUT=vectorized_5d for the SHUFFLE 5D layout, or nhd (or unset it) for the default.',
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
    "vectorized_5d without SGLANG_USE_AITER",
    f"""
    SGLang's memory pool decides whether the AITER layout switch counts at all
    from `{USE_AITER_ENV}`, read once when `memory_pool` is imported
    (`_use_aiter = envs.SGLANG_USE_AITER.get() and is_hip()`). Without it the
    layout request is silently ignored and the pool is NHD.

    Fires when `{LAYOUT_ENV}=vectorized_5d` and `{USE_AITER_ENV}` is not `1` or
    `true` (any case) in the launch environment. `yes` / `y` fire too: the pool
    (`Envs`) reads them as true, but the many modules that read the variable with
    `get_bool_env_var` (fp8_utils, unquant, vision, ...) read them as false.
    """,
    fix="export SGLANG_USE_AITER=1 in the launch environment (the profile's [env] or --kv5d-env SGLANG_USE_AITER=1).",
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
    "KV5D004",
    ERROR,
    "vectorized_5d with --enable-unified-memory",
    """
    The unified-memory pool (`--enable-unified-memory`) keeps the layout label
    but exposes 4-D / 3-D page-major views of its buffers, which the 5D kernels
    cannot read; SGLang also rejects the aiter backend with unified memory.

    Fires when 5D is requested and `--enable-unified-memory` is on.
    """,
    fix='drop --enable-unified-memory, or use the nhd layout.',
)
def _kv5d004(ctx: Context, rule: Rule):
    if ctx.wants_5d and ctx.arg("enable_unified_memory", False):
        yield rule.finding(
            "vectorized_5d cannot be used with --enable-unified-memory: the unified pool exposes "
            "4-D/3-D page-major views, not 5D buffers",
            "drop --enable-unified-memory, or use the nhd layout",
        )


@_rule(
    "KV5D005",
    ERROR,
    "vectorized_5d with speculative decoding",
    """
    No speculative path reads a 5D cache: the `target_verify` / `draft_extend`
    branches of the AITER backend view the cache as 4-D/3-D NHD, and DFLASH
    drafts build their own KV pool (5D too, since the variable is process-wide)
    on the triton attention backend, which cannot read it.

    Fires when 5D is requested and any `--speculative-algorithm` is set
    (EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM, DFLASH, ...).
    """,
    fix='drop --speculative-algorithm and the --speculative-* options, or use the nhd layout.',
)
def _kv5d005(ctx: Context, rule: Rule):
    if not ctx.wants_5d:
        return
    algo = speculative_algorithm(ctx)
    if algo is None:
        return
    why = (
        "DFLASH drafts build their own KV pool (5D under this variable) on the triton backend, "
        "which cannot read it"
        if algo.upper() == "DFLASH"
        else "the AITER verify/draft-extend paths read the cache as NHD"
    )
    yield rule.finding(
        f"vectorized_5d cannot be used with --speculative-algorithm {algo}: {why}",
        "drop --speculative-algorithm (and the --speculative-* options), or use the nhd layout",
    )


@_rule(
    "KV5D006",
    ERROR,
    "vectorized_5d with hierarchical cache or LMCache",
    """
    Hierarchical cache (HiCache) and LMCache copy KV between device and host by
    token index, assuming a token-major layout; 5D pages interleave tokens
    (`page // X`, `X`), so the copies move the wrong bytes.

    Fires when 5D is requested and `--enable-hierarchical-cache` (0.5.23 alias
    `--enable-hicache`) or `--enable-lmcache` is on.
    """,
    fix='drop --enable-hierarchical-cache / --enable-lmcache, or use the nhd layout.',
)
def _kv5d006(ctx: Context, rule: Rule):
    if not ctx.wants_5d:
        return
    flags = [
        flag
        for flag, dest in (("--enable-hierarchical-cache", "enable_hierarchical_cache"), ("--enable-lmcache", "enable_lmcache"))
        if ctx.arg(dest, False)
    ]
    if flags:
        yield rule.finding(
            f"vectorized_5d cannot be used with {' and '.join(flags)}: host copies index the KV cache "
            "by token, which a 5D page does not store contiguously",
            f"drop {' and '.join(flags)}, or use the nhd layout",
        )


@_rule(
    "KV5D007",
    ERROR,
    "vectorized_5d with SGLANG_USE_HND_KVCACHE",
    f"""
    `MHATokenToKVPool` checks `{HND_ENV}` before the AITER layout: when it is
    true the pool is HND and the 5D request is silently dropped.

    Fires when 5D is requested and `{HND_ENV}` is true (`1`, `true`, `yes`,
    `y`, any case).
    """,
    fix='unset SGLANG_USE_HND_KVCACHE (or set it to 0) when serving vectorized_5d.',
)
def _kv5d007(ctx: Context, rule: Rule):
    if ctx.wants_5d and env_bool(ctx.env.get(HND_ENV)):
        yield rule.finding(
            f"{HND_ENV}={ctx.env.get(HND_ENV)} takes precedence over {LAYOUT_ENV}=vectorized_5d: the pool "
            "would silently be HND",
            f"unset {HND_ENV} (or set it to 0)",
        )


@_rule(
    "KV5D008",
    ERROR,
    "Page size not divisible by X",
    f"""
    A 5D page holds `page // X` vectors of `X = 16 / element bytes` tokens, so
    the pool asserts `page_size % X == 0` (X = 16 for an fp8 KV cache, 8 for
    bf16/fp16; `--kv-cache-dtype auto` stores the model dtype). The assertion
    fires when the KV pool is built, after the weights have loaded.

    Fires when 5D is requested and `--page-size` is not a multiple of X. An unset
    `--page-size` counts as {DEFAULT_5D_PAGE_SIZE}, what SGLang picks for this layout on ROCm.
    """,
    fix='use --page-size 64 (any multiple of 16 for an fp8 KV cache, of 8 for bf16), or leave it unset.',
)
def _kv5d008(ctx: Context, rule: Rule):
    if not ctx.wants_5d:
        return
    page = ctx.arg("page_size")
    if page is None:
        page = DEFAULT_5D_PAGE_SIZE
    try:
        page = int(page)
    except (TypeError, ValueError):
        return
    x, why = kv_vector_x(ctx.arg("kv_cache_dtype"), ctx.arg("dtype"))
    if page > 0 and page % x == 0:
        return
    good = max(x, (max(page, 1) + x - 1) // x * x)
    yield rule.finding(
        f"--page-size {page} is not divisible by X={x} ({why}); the 5D pool asserts page_size % X == 0",
        f"use --page-size {DEFAULT_5D_PAGE_SIZE} (or another multiple of {x}, e.g. {good})",
    )


@_rule(
    "KV5D009",
    ERROR,
    "vectorized_5d with an attention backend other than aiter",
    """
    Only the aiter attention backend reads the 5D layout; triton, torch_native,
    wave and the others index the cache as NHD. The prefill and decode backend
    overrides count separately.

    Fires when 5D is requested and `--attention-backend`,
    `--prefill-attention-backend` or `--decode-attention-backend` resolves to
    something other than `aiter` (an override falls back to
    `--attention-backend`). Unset backends are left to SGLang, whose ROCm
    default for MHA models (Qwen3.5, Llama) is aiter; pass
    `--attention-backend aiter` explicitly for MLA models.
    """,
    fix='pass --attention-backend aiter and drop --prefill-attention-backend / --decode-attention-backend (or set them to aiter).',
)
def _kv5d009(ctx: Context, rule: Rule):
    if not ctx.wants_5d:
        return
    parts = []
    for flag, dest in (
        ("--attention-backend", "attention_backend"),
        ("--prefill-attention-backend", "prefill_attention_backend"),
        ("--decode-attention-backend", "decode_attention_backend"),
    ):
        value = ctx.arg(dest)
        if value is not None and value != "aiter":
            parts.append(f"{flag} {value}")
    if not parts:
        return
    yield rule.finding(
        f"vectorized_5d needs the aiter attention backend, but {', '.join(parts)} "
        "would read the cache as NHD",
        "use --attention-backend aiter and drop (or set to aiter) --prefill-attention-backend / "
        "--decode-attention-backend",
    )


@_rule(
    "KV5D010",
    ERROR,
    "SGLang version outside the supported range",
    """
    sglang-kv5d supports SGLang 0.5.16 .. 0.5.23, and 0.5.13.post1 ..
    0.5.15.post1 on a best-effort basis; older releases have no vectorized_5d
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
    fix='install SGLang 0.5.16 .. 0.5.23; on 0.5.13.post1 .. 0.5.15.post1 with a hybrid model add --disable-radix-cache; SGLANG_KV5D_ALLOW_UNTESTED=1 tries a newer SGLang at your own risk.',
)
def _kv5d010(ctx: Context, rule: Rule):
    from .versions import BEST_EFFORT, SUPPORTED_RANGE, verdict

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

    Fires when 5D is requested and the probe reports any 5D-required patch that
    cannot apply; the message names each one with the reason. When no probe is
    available, `check` says so and this rule stays silent.
    """,
    fix='install a supported SGLang release (see KV5D010); `sglang-kv5d doctor` names each patch and why it cannot apply; use the nhd layout until then.',
)
def _kv5d011(ctx: Context, rule: Rule):
    if not ctx.wants_5d or not ctx.patch_problems:
        return
    listing = "; ".join(f"{name}: {reason}" for name, reason in ctx.patch_problems)
    yield rule.finding(
        f"patches that vectorized_5d needs cannot apply on this SGLang ({listing})",
        "install a supported SGLang release (see KV5D010), or run `sglang-kv5d doctor` for details; "
        "use the nhd layout until then",
    )


@_rule(
    "KV5D012",
    WARNING,
    "SGLANG_* variable the installed SGLang never reads",
    """
    SGLang silently ignores environment variables it does not know, so a typo
    (`SGLANG_USE_AITR`) or a variable that only a fork reads (for example
    `SGLANG_ROCM_USE_AITER_LINEAR_SHUFFLE`) does nothing. The names SGLang reads
    come from a scan of the installed package's sources (the `Envs`
    declarations in `environ.py` and every `SGLANG_*` name in its code), done
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
    names = sorted(n for n in ctx.env if n.startswith("SGLANG_"))
    exact = {k for k in known if not k.endswith("_")}
    prefixes = tuple(k for k in known if k.endswith("_") and len(k) > len("SGLANG_"))
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
    """
    Every `SGLANG_KV5D*` variable has a type and a set of accepted values (the
    README's switch table, generated from `sglang_kv5d.config`). An invalid one
    would otherwise be read as something the operator did not ask for:
    `SGLANG_KV5D=maybe` leaves the overlay off (so SGLang's unpatched 5D code
    runs), `SGLANG_KV5D_ATTN_IMPL=cuda` falls back to `auto`. Inside SGLang,
    activation logs one warning per invalid switch naming what it assumed.

    Fires for each such variable in the launch environment, and for an
    `SGLANG_KV5D` value in the shell or the profile that the launcher replaces
    with `1` (a plain `python -m sglang.launch_server` from the same shell
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


# --------------------------------------------------------------------------
# Which SGLANG_* variables does the installed SGLang read?

_SGLANG_NAME_RE = re.compile(rb"SGLANG_[A-Z0-9_]+")


def _sglang_package_dir() -> Optional[str]:
    import importlib.util

    try:
        spec = importlib.util.find_spec("sglang")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


@functools.lru_cache(maxsize=4)
def _scan_env_names(root: str) -> FrozenSet[str]:
    names = set()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for fn in filenames:
            if not fn.endswith(".py"):
                continue
            try:
                with open(os.path.join(dirpath, fn), "rb") as fh:
                    data = fh.read()
            except OSError:
                continue
            if b"SGLANG_" in data:
                names.update(m.decode("ascii") for m in _SGLANG_NAME_RE.findall(data))
    return frozenset(names)


def sglang_env_names(root: Optional[str] = None) -> Optional[FrozenSet[str]]:
    """Names of ``SGLANG_*`` variables the installed SGLang reads (cached per process).

    Every ``SGLANG_*`` token in the package's ``.py`` sources counts: the
    ``Envs`` declarations in ``environ.py`` and the string literals passed to
    ``get_bool_env_var`` / ``os.environ`` / ``os.getenv`` elsewhere. A token
    ending in ``_`` is a prefix SGLang builds names from. Errs towards "known"
    (a name that only appears in a comment counts), so the warning never fires
    for a variable SGLang does read. None when SGLang is not installed.
    """
    root = root or _sglang_package_dir()
    if not root or not os.path.isdir(root):
        return None
    return _scan_env_names(os.path.realpath(root))


# --------------------------------------------------------------------------
# Inside SGLang: the server-args guard


class Kv5dConfigError(ValueError):
    """One or more KV5D rules failed for a ServerArgs; lists every error finding."""

    def __init__(self, findings: Sequence[Finding]):
        self.findings = list(findings)
        lines = [f"sglang-kv5d: {len(self.findings)} launch rule(s) failed for this configuration:"]
        for f in self.findings:
            lines.append(f"  {f.id}: {f.message}\n    fix: {f.fix}")
        lines.append("  (sglang-kv5d check --explain KV5Dnnn explains a rule)")
        super().__init__("\n".join(lines))


_WARNED: set = set()


def _resolved_view(server_args: Any) -> Any:
    """SGLang's read view of resolved values (0.5.19+), else the record itself."""
    for mod in ("sglang.srt.arg_groups.overrides", "sglang.srt.arg_groups.model_override_base"):
        m = sys.modules.get(mod)
        if m is None:
            try:
                import importlib

                m = importlib.import_module(mod)
            except Exception:
                continue
        fn = getattr(m, "resolving_view", None)
        if callable(fn):
            try:
                return fn(server_args)
            except Exception:
                break
    return server_args


def _platform_in_process() -> str:
    """The platform of this SGLang process, judged the way SGLang does (is_hip)."""
    try:
        from sglang.srt.utils import is_hip  # type: ignore

        if is_hip():
            return "rocm"
    except Exception:
        pass
    torch = sys.modules.get("torch")
    if torch is None:
        try:
            import torch  # type: ignore  # noqa: F811  (SGLang has imported it already)
        except Exception:
            return "cpu"
    if getattr(getattr(torch, "version", None), "hip", None):
        return "rocm"
    try:
        if torch.cuda.is_available():
            return "cuda"
    except Exception:
        pass
    return "cpu"


def guard_server_args(
    server_args: Any,
    environ: Mapping[str, str] = os.environ,
    *,
    platform: Optional[str] = None,
    patch_problems: Optional[Sequence[Tuple[str, str]]] = None,
    sglang_version: Optional[str] = None,
) -> None:
    """Run the rules on a ``ServerArgs`` inside SGLang.

    Reads resolved values through ``resolving_view(server_args)`` where SGLang
    has it (0.5.19+) and raw fields otherwise; never assigns to
    ``server_args``. Warnings are logged once per process; every error is
    raised together as one :class:`Kv5dConfigError`.

    ``patch_problems`` defaults to None (KV5D011 silent): inside SGLang the
    activation itself fails closed on a missing patch.
    """
    from .versions import installed_sglang_version

    view = _resolved_view(server_args)
    ctx = make_context(
        env=dict(environ),
        args=view,
        sglang_version=sglang_version or installed_sglang_version(),
        platform=platform or _platform_in_process(),
        patch_problems=patch_problems,
        known_env=sglang_env_names(),
        in_sglang=True,
    )
    found = evaluate(ctx)
    pid = os.getpid()
    for f in found:
        if f.severity == WARNING:
            key = (pid, f.id, f.message)
            if key not in _WARNED:
                _WARNED.add(key)
                logger.warning("sglang-kv5d %s: %s (fix: %s)", f.id, f.message, f.fix)
    errs = errors(found)
    if errs:
        raise Kv5dConfigError(errs)


# --------------------------------------------------------------------------
# Documentation


def explain(rule_id: str) -> str:
    """A rule's documentation as text (for ``check --explain``). KeyError if unknown."""
    rid = rule_id.strip().upper()
    if rid not in RULES:
        raise KeyError(rule_id)
    r = RULES[rid]
    return f"{r.id} ({r.severity}): {r.title}\n\n{r.doc}\n\nFix: {r.fix}\n"


def suggest_rule(rule_id: str) -> Optional[str]:
    close = difflib.get_close_matches(rule_id.strip().upper(), sorted(RULES), n=1, cutoff=0.6)
    return close[0] if close else None


def render_markdown() -> str:
    """docs/rules.md, generated from the registry (tests keep the file in sync)."""
    out = [
        "# sglang-kv5d launch rules",
        "",
        "<!-- Generated by `python -m sglang_kv5d.rules --markdown > docs/rules.md`; do not edit by hand. -->",
        "",
        "`sglang-kv5d check` and `sglang-kv5d launch` run these rules before SGLang starts;",
        "the `server-args-guard` patch runs them again inside SGLang (`ServerArgs.check_server_args`,",
        "and a resolution hook on 0.5.20+). Errors stop the launch; warnings are printed.",
        "`sglang-kv5d check --explain KV5D005` prints one rule.",
        "",
        "| ID | severity | rule |",
        "|---|---|---|",
    ]
    for rid in sorted(RULES):
        r = RULES[rid]
        out.append(f"| [{r.id}](#{r.id.lower()}) | {r.severity} | {r.title} |")
    for rid in sorted(RULES):
        r = RULES[rid]
        out += ["", f"## {r.id}", "", f"**{r.title}** ({r.severity})", "", r.doc, "", f"**Fix:** {r.fix}"]
    return "\n".join(out) + "\n"


README_RULES_BEGIN = "<!-- rules table: generated by `python -m sglang_kv5d.rules --update-readme README.md`; a test keeps it in sync -->"
README_RULES_END = "<!-- end of rules table -->"


def render_readme_table() -> str:
    """The README's launch-rules table (one row per rule)."""
    rows = ["| ID | severity | rule | fix |", "|---|---|---|---|"]
    for rid in sorted(RULES):
        r = RULES[rid]
        rows.append(f"| {r.id} | {r.severity} | {r.title} | {r.fix} |")
    return "\n".join(rows) + "\n"


def _replace_block(text: str, begin: str, end: str, body: str) -> str:
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise ValueError(f"the README must contain the markers {begin!r} and {end!r} once each, in order")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{begin}\n{body}{end}{tail}"


def render_readme(text: str) -> str:
    """``text`` (the README) with both generated tables (rules, switches) refreshed."""
    text = _replace_block(text, README_RULES_BEGIN, README_RULES_END, render_readme_table())
    return _replace_block(text, _config.README_BEGIN, _config.README_END, _config.render_markdown_table())


def _main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m sglang_kv5d.rules", description="Print the KV5D rules.")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--markdown", action="store_true", help="docs/rules.md (the default)")
    g.add_argument("--explain", metavar="ID", help="one rule's documentation")
    g.add_argument("--update-readme", metavar="README", help="rewrite the README's generated tables in place")
    a = p.parse_args(argv)
    if a.update_readme:
        with open(a.update_readme, encoding="utf-8") as fh:
            text = fh.read()
        new = render_readme(text)
        if new != text:
            with open(a.update_readme, "w", encoding="utf-8") as fh:
                fh.write(new)
        return 0
    if a.explain:
        try:
            sys.stdout.write(explain(a.explain))
        except KeyError:
            sys.stderr.write(f"unknown rule {a.explain!r}\n")
            return 2
        return 0
    sys.stdout.write(render_markdown())
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(_main())
