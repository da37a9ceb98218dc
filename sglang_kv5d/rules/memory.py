"""Rules on how the KV cache is stored and moved: unified memory (KV5D004),
host copies by HiCache / LMCache (KV5D006) and the page size (KV5D008)."""

from __future__ import annotations

from typing import Optional, Tuple

from .context import Context
from .registry import ERROR, Rule, rule as _rule

# What SGLang does with an unset --page-size when the 5D layout is requested on
# ROCm (arg_groups/overrides.py::_page_size_default, 0.5.15.post1+).
DEFAULT_5D_PAGE_SIZE = 64


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
