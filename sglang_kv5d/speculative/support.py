"""Speculative decoding over a SHUFFLE 5D target: the support matrix, decided here and nowhere else.

One pure function, :func:`decide`, answers "may this speculative configuration
run on a ``vectorized_5d`` target?" over every dimension the overlay knows:

    algorithm      --speculative-algorithm (every name SGLang has, plugins and typos included)
    topk           --speculative-eagle-topk (a chain, topk 1, is all the 5D verify serves)
    draft tokens   --speculative-num-draft-tokens / --speculative-num-steps / --speculative-dflash-block-size
    target window  the model's sliding window (SWA pools)
    MLA            the model's attention (known only once the backend is built)
    the other speculative options the newest tested SGLang has (:data:`OPTIONS`, each classified)
    SGLang release and the overlay's patches the cell needs

Who reads it:

* rule KV5D005 (sglang_kv5d/rules/speculative.py): ``sglang-kv5d check`` /
  ``launch`` on SGLang's parsed arguments, and inside SGLang through the
  ``server-args-guard`` patch on the resolved ``ServerArgs``;
* readiness at backend build (sglang_kv5d/speculative/readiness.py, called by
  the fail-closed-backend guard): the algorithm the model runner acts on, the
  runner's own (resolved) server arguments, the backend's MLA flag and the
  patches' states in that process;
* the documentation: ``check --explain KV5D005``, docs/rules.md and the
  README's "Speculative decoding with 5D" block are rendered from
  :func:`render_support_table`.

Pure: no SGLang, no torch, no environment. The names below (algorithms,
option names) are SGLang's ``ServerArgs`` field names and
``SpeculativeAlgorithm`` member names, as plain data.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from ..versions import parse_version_or_none

# The only SGLang release whose speculative paths (draft pools, target verify)
# the overlay has read and tests.
SPEC_SGLANG = "0.5.23"

DRAFT_POOL_NHD = "draft-pool-nhd"  # draft workers' KV pools stay NHD while the target is 5D
TARGET_VERIFY_5D = "target-verify-5d"  # TARGET_VERIFY over the 5D cache (the packed decode kernel)
# DFLASH/DSPARK commit writes into a pool that is 5D. Defensive: in every allowed
# cell they go to the draft pool, which draft-pool-nhd builds NHD, so no cell needs it.
PREFIX_VALID_WRITE_5D = "prefix-valid-write-5d"

CHAIN_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN")  # allowed only as a chain (topk 1)

# Algorithms allowed under 5D, and the patches each one needs.
NEEDED_PATCHES: Dict[str, Tuple[str, ...]] = {
    "DFLASH": (DRAFT_POOL_NHD, TARGET_VERIFY_5D),
    **{name: (DRAFT_POOL_NHD, TARGET_VERIFY_5D) for name in CHAIN_ALGORITHMS},
}

# Algorithms refused under 5D, with the reason. Every member of SGLang's
# SpeculativeAlgorithm (but NONE) and its aliases is here or in NEEDED_PATCHES
# (tests/test_speculative_matrix.py enumerates them from SGLang itself).
REFUSED: Dict[str, str] = {
    "STANDALONE": "STANDALONE (a separate draft model on the EAGLE worker path) is not built or verified under 5D",
    "NGRAM": "NGRAM verifies token trees with custom attention masks over the target cache, which the 5D verify "
             "does not build, and its accept path moves the accepted tokens' KV with move_kv_cache on every "
             "verify (whatever the BFS breadth), which on a 5D pool copies whole blocks at slot offsets",
    "DSPARK": "DSPARK's draft and verify paths (ragged verify, its KV inject) are not built or verified under 5D",
    "UNO": "UNO's draft and verify paths (its tree mode included) are not built or verified under 5D",
    "FROZEN_KV_MTP": "FROZEN_KV_MTP (what SGLang makes of NEXTN / EAGLE with a Gemma4 assistant draft) reads the "
                     "target's KV cache from its draft path, which is not built or verified under 5D",
}
_UNKNOWN = "an algorithm the overlay does not know (a plugin's, or a typo): nothing serves it under 5D"

_SERVED = {
    "DFLASH": "DFLASH drafts into an NHD pool (draft-pool-nhd; its commit writes go there too) and verifies "
              "through the overlay's 5D verify (target-verify-5d); SGLang runs DFLASH with topk 1 whatever is "
              "passed",
    "CHAIN": "{name} with topk 1 drafts a chain into an NHD pool (draft-pool-nhd) and verifies it through the "
             "overlay's 5D verify (target-verify-5d)",
}

_TREE = ("drafts a tree: verifying it needs custom attention masks over the 5D cache and a 5D-aware "
         "move_kv_cache, and neither is built")
_USE_CHAIN = "pass --speculative-eagle-topk 1"
_OTHERWISE = "use DFLASH, or EAGLE / EAGLE3 / NEXTN with --speculative-eagle-topk 1, or the nhd layout"


# --------------------------------------------------------------------------
# The other speculative options: each one SGLang has, and what it means under 5D

# Dimensions an option belongs to, with the verdict the docs show for them.
ALGORITHM = "algorithm"
TOPK = "topk"
DRAFT_TOKENS = "draft tokens"
ADAPTIVE = "adaptive draft count"
MULTI_LAYER = "multi-layer EAGLE"
DECOUPLED = "decoupled speculative decoding"
DRAFT_SIDE = "draft side"
ACCEPTANCE = "acceptance"
ATTENTION_MODE = "verify attention mode"
LINEAR_STATE = "linear-attention state"
OBSERVABILITY = "tracing and parallel sync"
OTHER_ALGORITHM = "refused algorithms' options"
# Dimensions that are not options: the model's attention.
TARGET_WINDOW = "target sliding window"
MLA = "MLA"

DIMENSIONS: Dict[str, str] = {
    ALGORITHM: "the rows above",
    TOPK: "1 for EAGLE / EAGLE3 / NEXTN (unset, 2 or more refused); DFLASH: SGLang uses 1",
    DRAFT_TOKENS: "any count of 1 or more (SGLang makes a topk-1 chain steps + 1): the verify page tables are "
                  "cdiv(max_context_len + N, page) wide and the packed verify kernel takes N x G query rows per "
                  "head tile",
    TARGET_WINDOW: "served: each draft is verified under its layer's window, causally, as it is decoded",
    MLA: "refused over a 5D pool (the 5D verify is for MHA pools; known at backend build, not at launch)",
    ADAPTIVE: "refused when on: the draft count changes at run time, each step count gets its own target backend "
              "and graphs, and that switching is not verified under 5D",
    MULTI_LAYER: "refused when on: the multi-layer EAGLE worker is not built or verified under 5D",
    DECOUPLED: "refused unless null: a verifier or drafter of decoupled speculative decoding is not built or "
               "verified under 5D",
    DRAFT_SIDE: "no effect on the 5D target: the draft model's weights, backend, window and KV pool (built NHD "
                "by draft-pool-nhd)",
    ACCEPTANCE: "no effect: sampling and acceptance over logits, no KV access",
    ATTENTION_MODE: "no effect: both backends are aiter under 5D (KV5D009) and TARGET_VERIFY reaches the "
                    "overlay's verify in either",
    LINEAR_STATE: "no effect on the KV cache: the recurrent state of linear-attention layers",
    OBSERVABILITY: "no effect: tracing, weight backups, parallel synchronisation",
    OTHER_ALGORITHM: "no effect on the allowed algorithms (their own algorithms are refused)",
}


def _truthy(value: Any) -> bool:
    return bool(value) and str(value).strip().lower() not in ("0", "false", "no", "off", "none")


def _decoupled(value: Any) -> bool:
    return value is not None and str(value).strip().lower() not in ("", "null", "none")


@dataclass(frozen=True)
class Option:
    """One SGLang speculative option: its dimension and, for a refusing one,
    when its value refuses (the value as argparse or ServerArgs holds it)."""

    dimension: str
    refuses: Optional[Callable[[Any], bool]] = field(default=None, compare=False)


# Every option of the newest tested SGLang's parser whose name matches SPEC_OPTION_PATTERN;
# tests/test_speculative_matrix.py fails, naming it, for one this table lacks.
SPEC_OPTION_PATTERN = re.compile(r"spec|draft|eagle|ngram|dflash|dspark|domino|mtp|^uno_")
OPTIONS: Dict[str, Option] = {
    "speculative_algorithm": Option(ALGORITHM),
    "speculative_eagle_topk": Option(TOPK),
    "speculative_num_steps": Option(DRAFT_TOKENS),
    "speculative_num_draft_tokens": Option(DRAFT_TOKENS),
    "speculative_dflash_block_size": Option(DRAFT_TOKENS),
    "speculative_adaptive": Option(ADAPTIVE, _truthy),
    "speculative_adaptive_config": Option(ADAPTIVE),  # read only with --speculative-adaptive
    "enable_multi_layer_eagle": Option(MULTI_LAYER, _truthy),
    "decoupled_spec_role": Option(DECOUPLED, _decoupled),
    "decoupled_spec_bind_endpoint": Option(DECOUPLED),
    "decoupled_spec_connect_endpoints": Option(DECOUPLED),
    "decoupled_spec_rank": Option(DECOUPLED),
    "speculative_draft_model_path": Option(DRAFT_SIDE),
    "speculative_draft_model_revision": Option(DRAFT_SIDE),
    "speculative_draft_load_format": Option(DRAFT_SIDE),
    "speculative_draft_model_quantization": Option(DRAFT_SIDE),
    "speculative_draft_attention_backend": Option(DRAFT_SIDE),
    "speculative_draft_kv_cache_dtype": Option(DRAFT_SIDE),
    "speculative_draft_window_size": Option(DRAFT_SIDE),
    "speculative_draft_sink_size": Option(DRAFT_SIDE),
    "speculative_token_map": Option(DRAFT_SIDE),
    "speculative_dsa_topk_backend": Option(DRAFT_SIDE),
    "speculative_moe_runner_backend": Option(DRAFT_SIDE),
    "speculative_moe_a2a_backend": Option(DRAFT_SIDE),
    "speculative_enable_w4a4_mxfp4_megamoe": Option(DRAFT_SIDE),
    "speculative_domino_candidate_pool_size": Option(DRAFT_SIDE),  # DFLASH's Domino drafter
    "decrypted_draft_config_file": Option(DRAFT_SIDE),
    "enable_draft_weights_cpu_backup": Option(OBSERVABILITY),
    "speculative_accept_threshold_single": Option(ACCEPTANCE),
    "speculative_accept_threshold_acc": Option(ACCEPTANCE),
    "speculative_use_rejection_sampling": Option(ACCEPTANCE),
    "speculative_use_block_verification": Option(ACCEPTANCE),
    "speculative_attention_mode": Option(ATTENTION_MODE),
    "enable_linear_replayssm_spec": Option(LINEAR_STATE),
    "spec_trace_dir": Option(OBSERVABILITY),
    **{f"speculative_ngram_{n}": Option(OTHER_ALGORITHM) for n in (
        "min_bfs_breadth", "max_bfs_breadth", "match_type", "max_trie_depth", "capacity",
        "external_corpus_path", "external_sam_budget", "external_corpus_max_tokens")},
    **{f"speculative_dspark_{n}": Option(OTHER_ALGORITHM) for n in (
        "block_size", "sps_table_path", "confidence_sts_path", "align_verify_tokens_to_graph_tier")},
    "uno_lora_path": Option(OTHER_ALGORITHM),
}


def flag(dest: str) -> str:
    """SGLang's command-line spelling of a ServerArgs field."""
    return "--" + dest.replace("_", "-")


# --------------------------------------------------------------------------
# A configuration and the decision


@dataclass(frozen=True)
class SpecConfig:
    """What one launch or process says about its speculative decoding.

    ``algorithm``: the name as given (an enum member's name or text); ``topk``
    / ``num_draft_tokens``: as given (None when unset; text or int); ``mla``:
    the target's attention is MLA (None: not known here); ``options``: the
    values of the refusing :data:`OPTIONS` (missing ones are unset).
    """

    algorithm: Any
    topk: Any = None
    num_draft_tokens: Any = None
    mla: Optional[bool] = None
    options: Mapping[str, Any] = field(default_factory=dict)


def _read(args: Any, name: str) -> Any:
    if args is None:
        return None
    if isinstance(args, Mapping):
        return args.get(name)
    return getattr(args, name, None)


def spec_config(args: Any, *, algorithm: Any = None, mla: Optional[bool] = None) -> SpecConfig:
    """A :class:`SpecConfig` from anything carrying SGLang's ServerArgs field
    names (an argparse Namespace from SGLang's parser, SGLang's resolved view of
    a ServerArgs, a mapping). ``algorithm`` overrides the one in ``args`` (the
    process passes the algorithm its model runner acts on)."""
    opts = {name: _read(args, name) for name, o in OPTIONS.items() if o.refuses is not None}
    return SpecConfig(
        algorithm=_read(args, "speculative_algorithm") if algorithm is None else algorithm,
        topk=_read(args, "speculative_eagle_topk"),
        num_draft_tokens=_read(args, "speculative_num_draft_tokens"),
        mla=mla,
        options={k: v for k, v in opts.items() if v is not None},
    )


@dataclass(frozen=True)
class Support:
    allowed: bool
    reason: str  # why it is served, or every reason it is not
    fix: str = ""  # empty when allowed


def normalize_algorithm(algorithm: Any) -> str:
    """``--speculative-algorithm`` as SGLang compares it: an enum's name or the text, upper-cased."""
    return str(getattr(algorithm, "name", algorithm)).strip().upper()


def _integer(value: Any) -> Tuple[Optional[int], Optional[str]]:
    """(value, None), or (None, the value as text) when it is not an integer; (None, None) when unset."""
    if value is None:
        return None, None
    if isinstance(value, bool):
        return None, repr(value)
    try:
        return int(str(value).strip()), None
    except ValueError:
        return None, repr(value)


# Patch gaps: {patch name: its state} for each patch a cell needs that is not usable.
NOT_SELECTED = "not selected"  # left out of SGLANG_KV5D_PATCHES
ABSENT = "absent"  # this sglang-kv5d has no such patch


def selection_gaps(needed, selected, known=None) -> Dict[str, str]:
    """The gaps of a launch: ``selected`` patch names (None: every patch), ``known`` ones (None: unknown)."""
    gaps: Dict[str, str] = {}
    for p in needed:
        if selected is not None and p not in selected:
            gaps[p] = ABSENT if known is not None and p not in known else NOT_SELECTED
    return gaps


def _gap_reason(name: str, needed: Tuple[str, ...], gaps: Mapping[str, str]) -> Tuple[str, List[str]]:
    by_state: Dict[str, List[str]] = {}
    for p in needed:
        if p in gaps:
            by_state.setdefault(gaps[p], []).append(p)
    parts, fixes = [], []
    for state, names in by_state.items():
        listed = ", ".join(names)
        verb = "is" if len(names) == 1 else "are"
        if state == NOT_SELECTED:
            parts.append(f"{listed} {verb} not selected (SGLANG_KV5D_PATCHES)")
            fixes.append(f"add {listed} to SGLANG_KV5D_PATCHES (or unset it to select every patch)")
        elif state == ABSENT:
            parts.append(f"this sglang-kv5d has no {listed}")
            fixes.append(f"install an sglang-kv5d that has {listed} (`sglang-kv5d patches` lists this one's)")
        else:
            parts.append(f"{listed} {verb} {state}")
            fixes.append(f"run `sglang-kv5d doctor` to see why {listed} did not apply")
    return f"{name} under 5D needs the patches {', '.join(needed)}: {'; '.join(parts)}", fixes


def decide(cfg: SpecConfig, sglang_version: Optional[str], patch_gaps: Mapping[str, str]) -> Support:
    """May ``cfg`` run on a ``vectorized_5d`` target?

    ``sglang_version``: the installed SGLang (None when unknown);
    ``patch_gaps``: ``{patch: state}`` for the patches that are not usable
    here (:data:`NOT_SELECTED`, :data:`ABSENT`, or an activation state such
    as ``failed``); patches not named count as usable. Every reason a
    configuration is refused is listed, each with its fix.
    """
    name = normalize_algorithm(cfg.algorithm)
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
    if any(p in patch_gaps for p in needed):
        reason, gap_fixes = _gap_reason(name, needed, patch_gaps)
        reasons.append(reason)
        fixes.extend(gap_fixes)
    if name in CHAIN_ALGORITHMS:
        topk, bad = _integer(cfg.topk)
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
    n, bad = _integer(cfg.num_draft_tokens)
    if bad is not None or (n is not None and n < 1):
        reasons.append(f"--speculative-num-draft-tokens {bad or n} is not a draft count (1 or more)")
        fixes.append("pass a --speculative-num-draft-tokens of 1 or more, or leave it to SGLang")
    if cfg.mla:
        reasons.append("the target is MLA; the 5D verify serves MHA pools only")
        fixes.append("serve this model with the nhd layout")
    for opt, value in sorted(cfg.options.items()):
        o = OPTIONS.get(opt)
        if o is not None and o.refuses is not None and o.refuses(value):
            shown = flag(opt) if value is True else f"{flag(opt)} {value}"
            reasons.append(f"{shown}: {DIMENSIONS[o.dimension].split(': ', 1)[-1]}")
            fixes.append(f"drop {flag(opt)}")
    if reasons:
        fix = "; ".join(dict.fromkeys(fixes))
        return Support(False, "; ".join(reasons), fix if "or use nhd" in fix else f"{fix}; or use nhd")
    return Support(True, _SERVED["DFLASH" if name == "DFLASH" else "CHAIN"].format(name=name))


def speculative_support(
    algorithm: Any,
    eagle_topk: Any,
    sglang_version: Optional[str],
    selected_patches,
    *,
    known_patches=None,
    num_draft_tokens: Any = None,
    mla: Optional[bool] = None,
    options: Optional[Mapping[str, Any]] = None,
) -> Support:
    """:func:`decide` for a launch: ``selected_patches`` the patch names it
    selects (None: every patch), ``known_patches`` those this sglang-kv5d has
    (only to word the reason)."""
    name = normalize_algorithm(algorithm)
    gaps = selection_gaps(NEEDED_PATCHES.get(name, ()), selected_patches, known_patches)
    cfg = SpecConfig(algorithm, eagle_topk, num_draft_tokens, mla, dict(options or {}))
    return decide(cfg, sglang_version, gaps)


# --------------------------------------------------------------------------
# The matrix as tables (docs/rules.md, --explain, README)

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


def _dimension_rows() -> List[Tuple[str, str, str]]:
    rows = []
    for dim, verdict in DIMENSIONS.items():
        if dim == ALGORITHM:
            continue
        names = [n for n, o in OPTIONS.items() if o.dimension == dim]
        shown = "the model" if dim in (TARGET_WINDOW, MLA) else ", ".join(f"`{flag(n)}`" for n in names)
        rows.append((dim, shown, verdict))
    return rows


def render_support_table() -> str:
    rows = ["| `--speculative-algorithm` | `--speculative-eagle-topk` | under `vectorized_5d` | needs | why |",
            "|---|---|---|---|---|"]
    for shown, topk_text, s in support_matrix():
        name = shown.split(" ")[0] if shown != "any other name" else None
        needs = (f"SGLang {SPEC_SGLANG}; " + ", ".join(f"`{p}`" for p in NEEDED_PATCHES[name])) if s.allowed else "-"
        rows.append(f"| {shown} | {topk_text} | {'allowed' if s.allowed else 'refused'} | {needs} | {s.reason} |")
    rows += ["", "The other dimensions, for the allowed rows:", "",
             "| dimension | SGLang options | under `vectorized_5d` |", "|---|---|---|"]
    for dim, shown, verdict in _dimension_rows():
        rows.append(f"| {dim} | {shown} | {verdict} |")
    return "\n".join(rows) + "\n"
