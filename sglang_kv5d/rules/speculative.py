"""Speculative decoding under the 5D layout: the support matrix and KV5D005.

:func:`speculative_support` is the one place that decides which speculative
algorithms may run on a ``vectorized_5d`` target; the rule, ``check --explain
KV5D005``, docs/rules.md and the README's "Speculative decoding with 5D" table
are all made from it. Pure: no SGLang, no environment.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Collection, List, Optional, Tuple

from ..versions import parse_version_or_none
from .context import Context
from .registry import ERROR, Rule, rule as _rule

# The only SGLang release whose speculative paths (draft pools, target verify,
# DFLASH's commit writes) the overlay has read and tests.
SPEC_SGLANG = "0.5.23"

DRAFT_POOL_NHD = "draft-pool-nhd"  # draft workers' KV pools stay NHD while the target is 5D
TARGET_VERIFY_5D = "target-verify-5d"  # TARGET_VERIFY over the 5D cache (the packed decode kernel)
PREFIX_VALID_WRITE_5D = "prefix-valid-write-5d"  # DFLASH's commit writes into a 5D pool

CHAIN_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN")  # allowed only as a chain (topk 1)

# Algorithms allowed under 5D, and the patches each one needs.
NEEDED_PATCHES = {
    "DFLASH": (DRAFT_POOL_NHD, TARGET_VERIFY_5D, PREFIX_VALID_WRITE_5D),
    **{name: (DRAFT_POOL_NHD, TARGET_VERIFY_5D) for name in CHAIN_ALGORITHMS},
}

# Algorithms refused under 5D, with the reason.
REFUSED = {
    "STANDALONE": "STANDALONE (a separate draft model on the EAGLE worker path) is not built or verified under 5D",
    "NGRAM": "NGRAM verifies token trees with custom attention masks over the target cache, which the 5D verify "
             "does not build",
    "DSPARK": "DSPARK's draft and verify paths are not built or verified under 5D",
    "UNO": "UNO's draft and verify paths (its tree mode included) are not built or verified under 5D",
    "FROZEN_KV_MTP": "FROZEN_KV_MTP (what SGLang makes of NEXTN / EAGLE with a Gemma4 assistant draft) is not "
                     "built or verified under 5D",
}
_UNKNOWN = "an algorithm the overlay does not know (a plugin's, or a typo): nothing serves it under 5D"

_SERVED = {
    "DFLASH": "DFLASH drafts into an NHD pool (draft-pool-nhd), verifies through the overlay's 5D verify "
              "(target-verify-5d) and commits through a 5D-aware write (prefix-valid-write-5d); SGLang runs "
              "DFLASH with topk 1 whatever is passed",
    "CHAIN": "{name} with topk 1 drafts a chain into an NHD pool (draft-pool-nhd) and verifies it through the "
             "overlay's 5D verify (target-verify-5d)",
}

_TREE = ("drafts a tree: verifying it needs custom attention masks over the 5D cache and a 5D-aware "
         "move_kv_cache, and neither is built")
_USE_CHAIN = "pass --speculative-eagle-topk 1"
_OTHERWISE = "use DFLASH, or EAGLE / EAGLE3 / NEXTN with --speculative-eagle-topk 1, or the nhd layout"


@dataclass(frozen=True)
class Support:
    allowed: bool
    reason: str  # why it is served, or every reason it is not
    fix: str = ""  # empty when allowed


def normalize_algorithm(algorithm: Any) -> str:
    """``--speculative-algorithm`` as SGLang compares it: an enum's name or the text, upper-cased."""
    return str(getattr(algorithm, "name", algorithm)).strip().upper()


def _topk(value: Any) -> Tuple[Optional[int], Optional[str]]:
    """(topk, None) or (None, the value as text) when it is not an integer."""
    if value is None:
        return None, None
    if isinstance(value, bool):
        return None, repr(value)
    try:
        return int(str(value).strip()), None
    except ValueError:
        return None, repr(value)


def speculative_support(
    algorithm: Any,
    eagle_topk: Any,
    sglang_version: Optional[str],
    selected_patches: Optional[Collection[str]],
    *,
    known_patches: Optional[Collection[str]] = None,
) -> Support:
    """May ``algorithm`` run on a ``vectorized_5d`` target?

    ``eagle_topk``: ``--speculative-eagle-topk`` (None when unset; text or an
    int); ``sglang_version``: the installed SGLang (None when unknown);
    ``selected_patches``: the patch names this launch selects (None: every
    patch); ``known_patches``: the patches this sglang-kv5d has, when known
    (only to word the reason). Every reason a configuration is refused is
    listed, each with its fix.
    """
    name = normalize_algorithm(algorithm)
    if name not in NEEDED_PATCHES:
        return Support(False, REFUSED.get(name, _UNKNOWN), _OTHERWISE)
    reasons: List[str] = []
    fixes: List[str] = []
    parsed = parse_version_or_none(sglang_version) if sglang_version else None
    if parsed is None:
        shown = "unknown" if not sglang_version else f"{sglang_version!r}, which is not a version"
        reasons.append(f"the SGLang version is {shown}; speculative decoding under 5D is verified on SGLang "
                       f"{SPEC_SGLANG} only")
        fixes.append(f"install SGLang {SPEC_SGLANG}")
    elif parsed < parse_version_or_none(SPEC_SGLANG):
        reasons.append(f"SGLang {sglang_version} is older than {SPEC_SGLANG}, the only release whose speculative "
                       "paths the overlay reads and tests")
        fixes.append(f"upgrade SGLang to {SPEC_SGLANG} or use nhd")
    needed = NEEDED_PATCHES[name]
    missing = [p for p in needed if selected_patches is not None and p not in selected_patches]
    if missing:
        absent = [p for p in missing if known_patches is not None and p not in known_patches]
        unselected = [p for p in missing if p not in absent]
        parts = []
        if unselected:
            parts.append(f"{', '.join(unselected)} {'is' if len(unselected) == 1 else 'are'} not selected "
                         "(SGLANG_KV5D_PATCHES)")
            fixes.append(f"add {', '.join(unselected)} to SGLANG_KV5D_PATCHES (or unset it to select every patch)")
        if absent:
            parts.append(f"this sglang-kv5d has no {', '.join(absent)}")
            fixes.append(f"install an sglang-kv5d that has {', '.join(absent)} (`sglang-kv5d patches` lists this "
                         "one's)")
        reasons.append(f"{name} under 5D needs the patches {', '.join(needed)}: {'; '.join(parts)}")
    if name in CHAIN_ALGORITHMS:
        topk, bad = _topk(eagle_topk)
        if bad is not None:
            reasons.append(f"--speculative-eagle-topk {bad} is not an integer")
            fixes.append(_USE_CHAIN)
        elif topk is None:
            reasons.append("--speculative-eagle-topk is unset: SGLang then chooses it and picks 4 for some models "
                           "(LlamaForCausalLM, Grok-1), a tree the 5D verify cannot serve")
            fixes.append(_USE_CHAIN)
        elif topk > 1:
            reasons.append(f"--speculative-eagle-topk {topk} {_TREE}")
            fixes.append(_USE_CHAIN)
        elif topk < 1:
            reasons.append(f"--speculative-eagle-topk {topk} is not a draft width (1 is the chain 5D serves)")
            fixes.append(_USE_CHAIN)
    if reasons:
        fix = "; ".join(dict.fromkeys(fixes))
        return Support(False, "; ".join(reasons), fix if "or use nhd" in fix else f"{fix}; or use nhd")
    return Support(True, _SERVED["DFLASH" if name == "DFLASH" else "CHAIN"].format(name=name))


# --------------------------------------------------------------------------
# The matrix as a table (docs/rules.md, --explain, README)

_CELLS = (
    ("DFLASH", None, "any (SGLang uses 1)"),
    *((name, 1, "1") for name in CHAIN_ALGORITHMS),
    ("EAGLE / EAGLE3 / NEXTN", 2, "2 or more"),
    ("EAGLE / EAGLE3 / NEXTN", None, "unset"),
    *((name, None, "any") for name in REFUSED),
    ("any other name", None, "any"),
)


def support_matrix() -> List[Tuple[str, str, Support]]:
    """``(algorithm, topk, Support)`` for each cell of the table, on SGLang
    :data:`SPEC_SGLANG` with every patch selected."""
    out = []
    for shown, topk, topk_text in _CELLS:
        algo = "EAGLE" if shown.startswith("EAGLE /") else ("" if shown == "any other name" else shown)
        out.append((shown, topk_text, speculative_support(algo, topk, SPEC_SGLANG, None)))
    return out


def render_support_table() -> str:
    rows = ["| `--speculative-algorithm` | `--speculative-eagle-topk` | under `vectorized_5d` | needs | why |",
            "|---|---|---|---|---|"]
    for shown, topk_text, s in support_matrix():
        name = shown.split(" ")[0] if shown != "any other name" else None
        needs = (f"SGLang {SPEC_SGLANG}; " + ", ".join(f"`{p}`" for p in NEEDED_PATCHES[name])) if s.allowed else "-"
        rows.append(f"| {shown} | {topk_text} | {'allowed' if s.allowed else 'refused'} | {needs} | {s.reason} |")
    return "\n".join(rows) + "\n"


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
    backend's target-verify branch views the 5D cache as NHD; DFLASH's commit
    writes (`set_kv_buffer_prefix_valid`) land out of bounds under 5D. The
    overlay's patches `{DRAFT_POOL_NHD}` (draft pools NHD, target 5D),
    `{TARGET_VERIFY_5D}` (verify over the 5D cache) and
    `{PREFIX_VALID_WRITE_5D}` (5D commit writes) fix these on SGLang
    {SPEC_SGLANG}, the only release whose speculative paths the overlay reads
    and tests. The matrix (SGLang {SPEC_SGLANG}, every patch selected):

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
    version), or with a patch it needs deselected by `SGLANG_KV5D_PATCHES` (or
    missing from this sglang-kv5d); the message names the algorithm, the topk,
    the version and the patches. Under the nhd layout it never fires.
    """,
    fix=f"use DFLASH, or EAGLE / EAGLE3 / NEXTN with --speculative-eagle-topk 1, on SGLang {SPEC_SGLANG} with "
        f"{DRAFT_POOL_NHD} and {TARGET_VERIFY_5D} selected ({PREFIX_VALID_WRITE_5D} too for DFLASH); "
        "otherwise drop --speculative-algorithm or use the nhd layout.",
)
def _kv5d005(ctx: Context, rule: Rule):
    if not ctx.wants_5d:
        return
    algo = speculative_algorithm(ctx)
    if algo is None:
        return
    s = speculative_support(algo, ctx.arg("speculative_eagle_topk"), ctx.sglang_version, ctx.selected_patches(),
                            known_patches=ctx.known_patches)
    if s.allowed:
        return
    yield rule.finding(f"vectorized_5d with --speculative-algorithm {algo}: {s.reason}", s.fix)
