"""Rules on how the KV cache is stored and moved: unified memory (KV5D004),
host copies by HiCache / LMCache / HiSparse (KV5D006), the page size (KV5D008)
and the KV cache dtype (KV5D016)."""

from __future__ import annotations

from typing import Optional, Tuple

from ..aiter_pages import PA_DECODE_PAGES
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
    "vectorized_5d with hierarchical cache, LMCache or HiSparse",
    """
    Hierarchical cache (HiCache) and LMCache copy KV between device and host by
    token index, assuming a token-major layout; 5D pages interleave tokens
    (`page // X`, `X`), so the copies move the wrong bytes. Hierarchical sparse
    attention (`--enable-hisparse`) keeps the KV cache on the host and loads the
    selected tokens into a device buffer, token by token, in the same
    token-major addressing. PD disaggregation's decode HiCache
    (`--disaggregation-decode-enable-radix-cache` with the hierarchical cache)
    is HiCache too.

    Fires when 5D is requested and `--enable-hierarchical-cache` (0.5.23 alias
    `--enable-hicache`), `--enable-lmcache` or `--enable-hisparse` is on.
    """,
    fix='drop --enable-hierarchical-cache / --enable-lmcache / --enable-hisparse, or use the nhd layout.',
)
def _kv5d006(ctx: Context, rule: Rule):
    if not ctx.wants_5d:
        return
    flags = [
        flag
        for flag, dest in (("--enable-hierarchical-cache", "enable_hierarchical_cache"), ("--enable-lmcache", "enable_lmcache"),
                           ("--enable-hisparse", "enable_hisparse"))
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

    Every multiple of X is served. With aiter, decode runs on its `pa_decode_gluon`
    at pages {", ".join(str(p) for p in PA_DECODE_PAGES)} (the pages it is written for); at any
    other page (32, 48, 128, ...) decode runs on the overlay's portable kernels
    (`sglang_kv5d/attention/routing.py` says why). Extend runs on aiter's batch
    prefill at every page (it gets the pages gathered to a linear layout).
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
    good = max(x, (max(page, 1) + x - 1) // x * x)  # the next multiple of X
    aiter_pages = [p for p in PA_DECODE_PAGES if p % x == 0 and p <= DEFAULT_5D_PAGE_SIZE]
    fix = f"use --page-size {' or '.join(str(p) for p in sorted(aiter_pages, reverse=True))} (aiter decodes these pages)"
    if good not in aiter_pages:
        fix += f", or another multiple of {x}, e.g. {good} (decoded by the portable kernels)"
    yield rule.finding(
        f"--page-size {page} is not divisible by X={x} ({why}); the 5D pool asserts page_size % X == 0",
        fix,
    )


# --kv-cache-dtype values whose 5D storage the overlay's kernels verify: the fused
# FP8 write (kernels/fp8_write/) takes float8_e4m3fn / float8_e4m3fnuz caches only,
# the portable 5D attention (kernels/attention_5d/) those two and bf16 / fp16.
VERIFIED_5D_KV_DTYPES = ("auto", "fp8_e4m3", "bf16", "bfloat16")
_FP32_MODEL_DTYPES = ("float32", "float", "fp32")
E5M2 = "fp8_e5m2"


@_rule(
    "KV5D016",
    ERROR,
    "vectorized_5d with a KV cache dtype the 5D paths do not verify",
    f"""
    The overlay's 5D paths verify two storage formats: FP8 e4m3 (torch
    `float8_e4m3fnuz` on MI300 / gfx942, `float8_e4m3fn` on MI355 / gfx950),
    which the fused FP8 write and the portable 5D attention accept, and bf16 /
    fp16, which the attention accepts (and SGLang writes without a conversion).
    `--kv-cache-dtype` {", ".join(f"`{d}`" for d in VERIFIED_5D_KV_DTYPES)} select them
    (`auto` stores the model dtype).

    `{E5M2}`: on ROCm every supported SGLang stores it as the GPU's e4m3 format
    (`mem_cache/kv_cache_dtype.py`, "natively supported format"; 0.5.13.post1:
    the model runner), so the cache is not e5m2 at all and KV scales calibrated
    for e5m2's range (max 57344) saturate at e4m3's 240 / 448; elsewhere it is a
    real `float8_e5m2` pool, which the fused write and the portable attention
    refuse (aiter's decode has no e5m2 either). `mxfp8` is a block-scaled
    quantized recipe (the fused write sends it to upstream's write, the 5D
    attention reads per-tensor scales only); `nvfp4` / `fp4_mx_block16` pack two
    values per byte, which no 5D path reads. `auto` with `--dtype float32`
    stores 4-byte elements, which neither kernel takes.

    Fires when 5D is requested and `--kv-cache-dtype` is another value, or `auto`
    with a float32 `--dtype`; the message names the dtype and what runs instead.
    """,
    fix='use --kv-cache-dtype fp8_e4m3 (what SGLang stores on ROCm for fp8_e5m2 anyway), bf16 or auto with a bf16/fp16 model, or the nhd layout.',
)
def _kv5d016(ctx: Context, rule: Rule):
    if not ctx.wants_5d:
        return
    raw = ctx.arg("kv_cache_dtype")
    d = "auto" if raw is None else str(getattr(raw, "value", raw)).strip().lower()
    if d in VERIFIED_5D_KV_DTYPES:
        md = str(ctx.arg("dtype") or "auto").strip().lower()
        if d == "auto" and md in _FP32_MODEL_DTYPES:
            yield rule.finding(
                f"--kv-cache-dtype auto with --dtype {md} stores the KV cache as 4-byte float32, which neither the "
                "portable 5D attention nor the fused write takes (bf16 / fp16 / fp8 e4m3 only)",
                "pass --kv-cache-dtype bf16 or fp8_e4m3, or use a bf16 / fp16 --dtype, or the nhd layout",
            )
        return
    if d == E5M2:
        why = ("on ROCm SGLang stores fp8_e5m2 as the GPU's e4m3 format (float8_e4m3fnuz on MI300, float8_e4m3fn on "
               "MI355), not e5m2: the cache is not what the line asks for, and e5m2-calibrated KV scales saturate"
               if ctx.platform == "rocm" else
               "it is a float8_e5m2 pool, which the fused FP8 write and the portable 5D attention refuse")
    elif d == "mxfp8":
        why = ("a block-scaled quantized recipe: the fused FP8 write hands it to upstream's write and the 5D attention "
               "reads per-tensor scales only")
    elif d in ("nvfp4", "fp4_mx_block16"):
        why = "FP4 packs two values per byte, which no 5D write or attention path reads"
    else:
        why = "sglang-kv5d has not verified this dtype for the 5D layout"
    yield rule.finding(
        f"vectorized_5d with --kv-cache-dtype {d}: {why}",
        "use --kv-cache-dtype fp8_e4m3 (or bf16 / auto with a bf16 or fp16 model), or the nhd layout",
    )
