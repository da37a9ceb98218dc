"""Speculative decoding under the 5D layout: rule KV5D005.

The support matrix itself lives in sglang_kv5d/speculative/support.py, the one
module that decides which speculative configurations may run on a
``vectorized_5d`` target; this rule, readiness at backend build
(sglang_kv5d/speculative/readiness.py), ``check --explain KV5D005``,
docs/rules.md and the README's "Speculative decoding with 5D" block all read
it. Its names are re-exported here. Pure: no SGLang, no environment.
"""

from __future__ import annotations

from typing import Optional

from ..speculative import support as _support
from ..speculative.support import (  # noqa: F401  (re-exported: the rules' public names)
    CHAIN_ALGORITHMS,
    DRAFT_POOL_NHD,
    NEEDED_PATCHES,
    PREFIX_VALID_WRITE_5D,
    REFUSED,
    SPEC_SGLANG,
    TARGET_VERIFY_5D,
    Support,
    normalize_algorithm,
    render_support_table,
    selection_gaps,
    spec_config,
    speculative_support,
    support_matrix,
)
from .context import Context
from .registry import ERROR, Rule, rule as _rule


# --------------------------------------------------------------------------
# The rule


def speculative_algorithm(ctx: Context) -> Optional[str]:
    algo = ctx.arg("speculative_algorithm")
    if algo is None:
        return None
    name = str(getattr(algo, "name", algo)).strip()
    if not name or name.upper() == "NONE":
        return None
    return name


@_rule(
    "KV5D005",
    ERROR,
    "vectorized_5d with speculative decoding outside the support matrix",
    f"""
    Speculative decoding on a 5D target works only where every part of it
    reads and writes the 5D cache correctly. Upstream, draft workers build their
    own KV pool without a layout argument, so it is 5D too (the layout variable
    is process-wide) and DFLASH's triton draft backend raises on it; the AITER
    backend's target-verify branch views the 5D cache as NHD. The overlay's
    patches `{DRAFT_POOL_NHD}` (draft pools NHD, target 5D) and
    `{TARGET_VERIFY_5D}` (verify over the 5D cache) fix these on SGLang
    {SPEC_SGLANG}, the only release whose speculative paths the overlay reads
    and tests. (`{PREFIX_VALID_WRITE_5D}` is defensive and no cell needs it:
    DFLASH's commit writes, `set_kv_buffer_prefix_valid`, go to its own draft
    pool, which `{DRAFT_POOL_NHD}` builds NHD; the patch only matters for a
    pool explicitly labelled 5D.) The matrix (SGLang {SPEC_SGLANG}, every patch
    selected) is decided in one module, sglang_kv5d/speculative/support.py,
    which the server-args guard inside SGLang and the AITER backend's build
    (fail closed, from the model runner's own server arguments, whether or not
    the guard ran) read too:

    {render_support_table().rstrip().replace(chr(10), chr(10) + "    ")}

    An unset `--speculative-eagle-topk` is refused for EAGLE / EAGLE3 / NEXTN:
    with `--speculative-num-steps` unset too, SGLang {SPEC_SGLANG} chooses the
    draft parameters itself (`_handle_eagle_family` calls
    `_auto_choose_speculative_params`, SGLang's `arg_groups/speculative_hook.py`),
    and picks topk 4 for `LlamaForCausalLM` and Grok-1, 1 for other models; with
    a page size above 1 on the aiter backend (as 5D runs) SGLang then stops at
    start-up by itself, since `_handle_eagle_family` accepts topk > 1 with paging
    only on flashinfer, fa3 and triton. Inside SGLang the server-args guard sees
    the resolved value. DFLASH's topk does not matter: SGLang sets it to 1
    (`_handle_dflash`, same file).

    Fires when 5D is requested and `--speculative-algorithm` is a refused cell,
    or an allowed one on an SGLang older than {SPEC_SGLANG} (or of unknown
    version), with a topk, draft count or option the table refuses, or with a
    patch it needs deselected by `SGLANG_KV5D_PATCHES` (or missing from this
    sglang-kv5d); the message names the algorithm, the topk, the version, the
    options and the patches. Under the nhd layout it never fires.
    """,
    fix=f"use DFLASH, or EAGLE / EAGLE3 / NEXTN with --speculative-eagle-topk 1, on SGLang {SPEC_SGLANG} with "
        f"{DRAFT_POOL_NHD} and {TARGET_VERIFY_5D} selected; otherwise drop --speculative-algorithm or use the "
        "nhd layout.",
)
def _kv5d005(ctx: Context, rule: Rule):
    if not ctx.wants_5d:
        return
    algo = speculative_algorithm(ctx)
    if algo is None:
        return
    cfg = spec_config(ctx.args, algorithm=algo)  # the launch cannot tell MLA: the backend build does
    name = normalize_algorithm(algo)
    gaps = selection_gaps(NEEDED_PATCHES.get(name, ()), ctx.selected_patches(), ctx.known_patches)
    s = _support.decide(cfg, ctx.sglang_version, gaps)  # through the module: the one decision
    if s.allowed:
        return
    yield rule.finding(f"vectorized_5d with --speculative-algorithm {algo}: {s.reason}", s.fix)
