"""KV5D rules through ``sglang-kv5d check``: for every rule a case that fires and
a near miss that does not.

The matrix runs through the real click ``check`` command and the installed
SGLang's parser, in ONE helper subprocess (tests/helpers/cli.py --batch: each
case gets its own environment); separate real subprocesses cover most rules
firing together, KV5D001, KV5D010 (with a fake SGLang version in the
distribution metadata), --explain, and the shipped profile.
"""

from __future__ import annotations

import glob
import json
import os
import sys
import tempfile

import pytest

from tests.helpers.cli import PROFILE, ROOT, run_batch, run_cli
from tests.helpers.models import tiny_llama

from sglang_kv5d import rules
from sglang_kv5d.versions import installed_sglang_version, parse_version

FIVE_D = {"SGLANG_USE_AITER": "1", "SGLANG_AITER_KV_CACHE_LAYOUT": "vectorized_5d"}
NHD = {"SGLANG_USE_AITER": "1"}
MODEL = ["--model-path", "/models/Llama-3.1-8B-Instruct"]
GOOD = MODEL + ["--attention-backend", "aiter", "--kv-cache-dtype", "fp8_e4m3", "--page-size", "64"]
ROCM = ["check", "--kv5d-json", "--kv5d-platform", "rocm"]
# The matrix allows cells only on SGLang 0.5.23+ (scripts/test.sh runs this file on 0.5.16 too).
_INSTALLED = installed_sglang_version()
SPEC_READY = bool(_INSTALLED) and parse_version(_INSTALLED) >= parse_version("0.5.23")


def _case(rule_id, fires, argv, env, probe=()):
    c = {"rule": rule_id, "fires": fires, "argv": argv, "env": env}
    if probe != ():
        c["probe"] = probe
    else:
        c["probe"] = []  # no patch problems: keep KV5D011 out of unrelated cases
    return c


CASES = [
    # KV5D001: the layout value, compared case-insensitively, no trimming.
    _case("KV5D001", True, ROCM + GOOD, {**NHD, "SGLANG_AITER_KV_CACHE_LAYOUT": "vectorised_5d"}),
    _case("KV5D001", False, ROCM + GOOD, {**NHD, "SGLANG_AITER_KV_CACHE_LAYOUT": "NHD"}),
    # KV5D002: SGLANG_USE_AITER must be 1/true.
    _case("KV5D002", True, ROCM + GOOD, {"SGLANG_AITER_KV_CACHE_LAYOUT": "vectorized_5d"}),
    _case("KV5D002", True, ROCM + GOOD, {**FIVE_D, "SGLANG_USE_AITER": "yes"}),
    _case("KV5D002", False, ROCM + GOOD, {**FIVE_D, "SGLANG_USE_AITER": "TRUE"}),
    # KV5D003: platform.
    _case("KV5D003", True, ["check", "--kv5d-json", "--kv5d-platform", "cuda"] + GOOD, FIVE_D),
    _case("KV5D003", False, ["check", "--kv5d-json", "--kv5d-platform", "cuda"] + GOOD, NHD),
    # KV5D004: unified memory.
    _case("KV5D004", True, ROCM + GOOD + ["--enable-unified-memory"], FIVE_D),
    _case("KV5D004", False, ROCM + GOOD + ["--enable-unified-memory"], NHD),
    # KV5D005: the speculative support matrix (rules/speculative.py); more cells in SPEC_CASES below.
    _case("KV5D005", True, ROCM + GOOD + ["--speculative-algorithm", "NGRAM"], FIVE_D),
    _case("KV5D005", True, ROCM + GOOD + ["--speculative-algorithm", "EAGLE", "--speculative-eagle-topk", "4"], FIVE_D),
    _case("KV5D005", not SPEC_READY, ROCM + GOOD + ["--speculative-algorithm", "EAGLE", "--speculative-eagle-topk", "1"],
          FIVE_D),
    _case("KV5D005", False, ROCM + GOOD + ["--speculative-algorithm", "NGRAM"], NHD),
    # KV5D006: hierarchical cache / LMCache.
    _case("KV5D006", True, ROCM + GOOD + ["--enable-hierarchical-cache"], FIVE_D),
    _case("KV5D006", True, ROCM + GOOD + ["--enable-lmcache"], FIVE_D),
    _case("KV5D006", False, ROCM + GOOD + ["--hicache-ratio", "2"], FIVE_D),
    # KV5D007: HND wins silently.
    _case("KV5D007", True, ROCM + GOOD, {**FIVE_D, "SGLANG_USE_HND_KVCACHE": "1"}),
    _case("KV5D007", False, ROCM + GOOD, {**FIVE_D, "SGLANG_USE_HND_KVCACHE": "0"}),
    # KV5D008: page size vs X (16 for fp8, 8 for bf16); unset -> 64.
    _case("KV5D008", True, ROCM + MODEL + ["--attention-backend", "aiter", "--kv-cache-dtype", "fp8_e4m3",
                                           "--page-size", "8"], FIVE_D),
    _case("KV5D008", False, ROCM + MODEL + ["--attention-backend", "aiter", "--kv-cache-dtype", "bf16",
                                            "--page-size", "8"], FIVE_D),
    _case("KV5D008", False, ROCM + MODEL + ["--attention-backend", "aiter", "--kv-cache-dtype", "fp8_e4m3"], FIVE_D),
    # ... pages 16 and 32 for fp8 (X=16), 8 for the model dtype (bf16: X=8); 24 and 12 are not multiples of X
    _case("KV5D008", False, ROCM + MODEL + ["--attention-backend", "aiter", "--kv-cache-dtype", "fp8_e4m3",
                                            "--page-size", "16"], FIVE_D),
    _case("KV5D008", False, ROCM + MODEL + ["--attention-backend", "aiter", "--kv-cache-dtype", "fp8_e4m3",
                                            "--page-size", "32"], FIVE_D),
    _case("KV5D008", False, ROCM + MODEL + ["--attention-backend", "aiter", "--page-size", "8"], FIVE_D),
    _case("KV5D008", True, ROCM + MODEL + ["--attention-backend", "aiter", "--kv-cache-dtype", "fp8_e4m3",
                                           "--page-size", "24"], FIVE_D),
    _case("KV5D008", True, ROCM + MODEL + ["--attention-backend", "aiter", "--kv-cache-dtype", "bf16",
                                           "--page-size", "12"], FIVE_D),
    # KV5D009: attention backends, overrides included.
    _case("KV5D009", True, ROCM + GOOD + ["--decode-attention-backend", "triton"], FIVE_D),
    _case("KV5D009", True, ROCM + MODEL + ["--attention-backend", "triton"], FIVE_D),
    _case("KV5D009", False, ROCM + GOOD + ["--decode-attention-backend", "aiter"], FIVE_D),
    # KV5D011: patch probe problems (injected probe; the real one is used by the profile test).
    _case("KV5D011", True, ROCM + GOOD, FIVE_D, probe=[["fp8-kv-write", "MHATokenToKVPool.set_kv_buffer: no parameter 'loc'"]]),
    _case("KV5D011", False, ROCM + GOOD, NHD, probe=[["fp8-kv-write", "MHATokenToKVPool.set_kv_buffer: no parameter 'loc'"]]),
    _case("KV5D011", False, ROCM + GOOD, FIVE_D, probe=None),
    # KV5D012: SGLANG_* names the installed SGLang never reads.
    _case("KV5D012", True, ROCM + GOOD, {**FIVE_D, "SGLANG_USE_AITR": "1"}),
    _case("KV5D012", False, ROCM + GOOD, {**FIVE_D, "SGLANG_USE_AITER_UNIFIED_ATTN": "0", "SGLANG_KV5D_ATTN_IMPL": "auto"}),
    _case("KV5D012", True, ROCM + GOOD, {**FIVE_D, "SGLANG_KV5D_STRICTT": "0"}),  # not one of our switches
    # KV5D013: our switches' values, through the registry (the gate also when the launcher replaces it).
    _case("KV5D013", True, ROCM + GOOD, {**FIVE_D, "SGLANG_KV5D_ATTN_IMPL": "cuda"}),
    _case("KV5D013", True, ROCM + GOOD, {**FIVE_D, "SGLANG_KV5D": "maybe"}),
    _case("KV5D013", True, ROCM + GOOD, {**FIVE_D, "SGLANG_KV5D_PATCHES": "fp8-kv-writ"}),
    _case("KV5D013", True, ROCM + GOOD + ["--kv5d-env", "SGLANG_KV5D_STATUS_DIR=relative/dir"], FIVE_D),
    _case("KV5D013", False, ROCM + GOOD, {**FIVE_D, "SGLANG_KV5D_ATTN_IMPL": " Triton ", "SGLANG_KV5D": "off",
                                          "SGLANG_KV5D_PATCHES": "fp8-kv-write", "SGLANG_KV5D_STRICT": "no"}),
    # KV5D014: code-loading variables set by the profile or --kv5d-env (exported ones are the operator's).
    _case("KV5D014", True, ROCM + GOOD + ["--kv5d-env", "LD_PRELOAD=/tmp/x.so"], FIVE_D),
    # ... and the ROCm / CUDA / NCCL / Triton / Python ones (issue 26 item 6), by what each one loads:
    _case("KV5D014", True, ROCM + GOOD + ["--kv5d-env", "HSA_TOOLS_LIB=/opt/rocm/lib/libtool.so"], FIVE_D),
    _case("KV5D014", True, ROCM + GOOD + ["--kv5d-env", "CUDA_INJECTION64_PATH=/opt/inject.so"], FIVE_D),
    _case("KV5D014", True, ROCM + GOOD + ["--kv5d-env", "NCCL_NET_PLUGIN=/opt/net.so"], FIVE_D),
    _case("KV5D014", True, ROCM + GOOD + ["--kv5d-env", "TRITON_CACHE_MANAGER=evil:Manager"], FIVE_D),
    _case("KV5D014", False, ROCM + GOOD + ["--kv5d-env", "NCCL_TUNER_PLUGIN=none"], FIVE_D),  # turns it off
    # exported values fire only where a path is unsafe: a world-writable or relative place
    _case("KV5D014", True, ROCM + GOOD, {**FIVE_D, "PYTHONSTARTUP": "/tmp/x.py"}),
    _case("KV5D014", True, ROCM + GOOD, {**FIVE_D, "TRITON_CACHE_DIR": "/tmp/planted-triton-cache"}),
    _case("KV5D014", True, ROCM + GOOD, {**FIVE_D, "GCONV_PATH": "gconv"}),
    _case("KV5D014", True, ROCM + GOOD, {**FIVE_D, "SGLANG_KV5D_PEER_PATH": "/tmp"}),
    _case("KV5D014", False, ROCM + GOOD, {**FIVE_D, "PYTHONSTARTUP": os.path.join(ROOT, "x.py")}),
    # search paths are judged by where they point, not by who set them
    _case("KV5D014", False, ROCM + GOOD + ["--kv5d-env", "LD_LIBRARY_PATH=/usr/lib"], FIVE_D),
    _case("KV5D014", True, ROCM + GOOD + ["--kv5d-env", "LD_LIBRARY_PATH=/usr/lib::/tmp"], FIVE_D),
    # Python ignores a PYTHON* variable set to "" (as if unset); an empty entry inside one is the cwd
    _case("KV5D014", False, ROCM + GOOD, {**FIVE_D, "PYTHONPATH": ""}),
    _case("KV5D014", True, ROCM + GOOD, {**FIVE_D, "PYTHONPATH": "/usr/lib::/usr/share"}),
    # KV5D015: PD disaggregation (the full matrix is tests/test_rules_pd.py).
    _case("KV5D015", True, ROCM + GOOD + ["--disaggregation-mode", "prefill", "--disaggregation-transfer-backend",
                                          "mori"], FIVE_D),
    _case("KV5D015", False, ROCM + GOOD + ["--disaggregation-mode", "decode"], FIVE_D),
    # KV5D016: the KV cache dtype the 5D paths verify (issue 26 item 8).
    _case("KV5D016", True, ROCM + MODEL + ["--attention-backend", "aiter", "--kv-cache-dtype", "fp8_e5m2"], FIVE_D),
    _case("KV5D016", True, ROCM + MODEL + ["--attention-backend", "aiter", "--kv-cache-dtype", "mxfp8"], FIVE_D),
    _case("KV5D016", True, ROCM + MODEL + ["--attention-backend", "aiter", "--kv-cache-dtype", "nvfp4"], FIVE_D),
    _case("KV5D016", True, ROCM + MODEL + ["--attention-backend", "aiter", "--dtype", "float32"], FIVE_D),
    _case("KV5D016", False, ROCM + MODEL + ["--attention-backend", "aiter", "--kv-cache-dtype", "bf16"], FIVE_D),
    _case("KV5D016", False, ROCM + MODEL + ["--attention-backend", "aiter", "--kv-cache-dtype", "fp8_e5m2"], NHD),
    # KV5D006 also covers HiSparse (host copies by token).
    _case("KV5D006", True, ROCM + GOOD + ["--enable-hisparse"], FIVE_D),
]


# Verdicts beyond a rule's id (issue 26 items 3 and 8): (argv, env), run in the same batch.
_LEFT_OUT = {**FIVE_D, "SGLANG_KV5D_PATCHES": "pool-layout-detection"}
EXTRA = {
    "selection-strict": (ROCM + GOOD, _LEFT_OUT),
    "selection-no-strict": (ROCM + GOOD + ["--kv5d-no-strict"], _LEFT_OUT),
    "selection-dry-run": (["launch", "--kv5d-dry-run", "--kv5d-platform", "rocm", "--kv5d-env",
                           "SGLANG_KV5D_PATCHES=pool-layout-detection"] + GOOD, FIVE_D),
    "help": (["check", "--kv5d-platform", "rocm", "--"] + GOOD + ["--help"], FIVE_D),  # SGLang's --help
    "help-json": (ROCM + ["--"] + GOOD + ["-h"], FIVE_D),
    "help-ours": (["check", "--kv5d-platform", "rocm"] + GOOD + ["--help"], FIVE_D),  # ours, with SGLang args
    "help-alone": (["check", "--help"], {}),
    "help-dry-run": (["launch", "--kv5d-dry-run", "--kv5d-platform", "rocm"] + GOOD + ["--help"], FIVE_D),
}


@pytest.fixture(scope="module")
def _both():
    # One process (SGLang's parser imports once): the rule matrix, the speculative cells, the extra verdicts.
    spec = [_case("KV5D005", not allowed, SPEC + algo, env) for algo, env, allowed, _, _ in SPEC_CASES]
    extra = [_case(None, None, argv, env) for argv, env in EXTRA.values()]
    results = run_batch(CASES + spec + extra)
    n, m = len(CASES), len(CASES) + len(spec)
    return results[:n], results[n:m], dict(zip(EXTRA, results[m:]))


@pytest.fixture(scope="module")
def extra(_both):
    return _both[2]


def test_selection_leaving_out_required_patches_is_refused_naming_them(extra):
    """Issue 26 item 3: check and launch --kv5d-dry-run refuse SGLANG_KV5D_PATCHES=pool-layout-detection
    under 5D, naming the patches and the variable; --kv5d-no-strict says what would run unpatched."""
    for key in ("selection-strict", "selection-no-strict"):
        r = extra[key]
        found = {f["id"]: f for f in json.loads(r["out"])}
        assert r["code"] == 1 and "KV5D011" in found, (key, r)
        msg = found["KV5D011"]["message"]
        assert "SGLANG_KV5D_PATCHES='pool-layout-detection'" in msg, msg
        for name in ("attention-dispatch-5d", "cpu-copy-5d", "fp8-kv-write", "server-args-guard"):
            assert name in msg, (name, msg)
    strict = {f["id"]: f for f in json.loads(extra["selection-strict"]["out"])}["KV5D011"]["message"]
    loose = {f["id"]: f for f in json.loads(extra["selection-no-strict"]["out"])}["KV5D011"]["message"]
    assert "Kv5dNotReadyError" in strict and "unpatched" not in strict, strict
    assert "SGLANG_KV5D_STRICT=0" in loose and "would NOT stop" in loose and "running unpatched" in loose, loose
    assert "divides the caller's k/v in place" in loose, loose  # fp8-kv-write's problem, said plainly
    d = extra["selection-dry-run"]
    assert d["code"] == 1 and "KV5D011" in d["out"] and "not run: launch would refuse it" in d["out"], d


def test_a_line_with_help_is_not_reported_as_checked(extra):
    """Issue 26 item 8: `check ... --help` checked nothing: exit 2 (usage) and say so, never "passed"."""
    for key in ("help", "help-json", "help-ours"):
        r = extra[key]
        assert r["code"] == 2, (key, r)
        assert "nothing checked" in r["err"] and "passed" not in r["out"] + r["err"], (key, r)
    assert extra["help-alone"]["code"] == 0 and "nothing checked" not in extra["help-alone"]["err"]
    # launch --kv5d-dry-run still shows the line (launch execs SGLang's own --help)
    d = extra["help-dry-run"]
    assert d["code"] == 0 and "--help" in d["out"], d


@pytest.fixture(scope="module")
def batch(_both):
    return _both[0]


def _ids(result):
    assert result["code"] in (0, 1), result
    return {f["id"] for f in json.loads(result["out"])}, json.loads(result["out"])


@pytest.mark.parametrize("index", range(len(CASES)), ids=[f"{c['rule']}-{'fires' if c['fires'] else 'near-miss'}-{i}" for i, c in enumerate(CASES)])
def test_rule_matrix(batch, index):
    case, result = CASES[index], batch[index]
    ids, findings = _ids(result)
    assert (case["rule"] in ids) == case["fires"], (case, result)
    has_error = any(f["severity"] == "error" for f in findings)
    assert result["code"] == (1 if has_error else 0), result
    for f in findings:
        assert set(f) == {"id", "severity", "message", "fix"} and f["message"] and f["fix"]


def test_matrix_covers_every_rule():
    fired = {c["rule"] for c in CASES if c["fires"]}
    missed = {c["rule"] for c in CASES if not c["fires"]}
    # KV5D010 needs another SGLang version in the metadata: real subprocesses below.
    assert fired | {"KV5D010"} == set(rules.RULES)
    assert missed | {"KV5D010"} == set(rules.RULES)


def test_messages_name_specifics(batch):
    by = {i: {f["id"]: f for f in json.loads(r["out"])} for i, r in enumerate(batch)}
    ngram = by[CASES.index(next(c for c in CASES if "NGRAM" in c["argv"]))]["KV5D005"]
    assert "NGRAM" in ngram["message"] and "custom attention masks" in ngram["message"]
    typo = by[CASES.index(next(c for c in CASES if "SGLANG_USE_AITR" in c["env"]))]["KV5D012"]
    assert typo["severity"] == "warning" and "SGLANG_USE_AITER" in typo["message"]
    layout = by[0]["KV5D001"]
    assert "'vectorized_5d'" in layout["message"]  # the suggestion


def test_page_size_messages(batch):
    """KV5D008 names X and where it comes from, and suggests the pages aiter decodes
    (16, 64) before other multiples of X (decoded by the portable kernels)."""
    def finding(page, dtype_args):
        i = next(i for i, c in enumerate(CASES) if c["rule"] == "KV5D008" and c["argv"][-2:] == ["--page-size", page]
                 and all(a in c["argv"] for a in dtype_args))
        return {f["id"]: f for f in json.loads(batch[i]["out"])}["KV5D008"]

    f8 = finding("8", ["fp8_e4m3"])
    assert "--page-size 8 is not divisible by X=16" in f8["message"] and "fp8_e4m3" in f8["message"], f8
    assert f8["fix"] == "use --page-size 64 or 16 (aiter decodes these pages)", f8
    f24 = finding("24", ["fp8_e4m3"])
    assert "--page-size 24 is not divisible by X=16" in f24["message"], f24
    assert f24["fix"] == ("use --page-size 64 or 16 (aiter decodes these pages), or another multiple of 16, e.g. 32 "
                          "(decoded by the portable kernels)"), f24
    f12 = finding("12", ["bf16"])
    assert "--page-size 12 is not divisible by X=8" in f12["message"] and "2-byte" in f12["message"], f12
    assert f12["fix"] == "use --page-size 64 or 16 (aiter decodes these pages)", f12


def test_no_probe_is_reported_as_such(batch):
    i = next(i for i, c in enumerate(CASES) if c.get("probe") is None)
    assert "KV5D011 not checked" in batch[i]["err"]


# ---------------------------------------------------------------------------
# KV5D005: the speculative support matrix, cell by cell, through `check` and
# SGLang's own parser (one batch process), then the pure function.

SPEC = ROCM + GOOD + ["--speculative-algorithm"]
# Every patch but the named one(s), as SGLANG_KV5D_PATCHES.
_ALL_PATCHES = ("pool-layout-detection", "attention-dispatch-5d", "fp8-kv-write", "draft-pool-nhd",
                "target-verify-5d", "prefix-valid-write-5d", "cpu-copy-5d", "server-args-guard")


def _without(*names):
    return ",".join(p for p in _ALL_PATCHES if p not in names)


# (algorithm argv, env, allowed, words the KV5D005 message must contain, words its fix must contain)
SPEC_CASES = [
    (["DFLASH"], FIVE_D, True, (), ()),
    (["dflash", "--speculative-eagle-topk", "4"], FIVE_D, True, (), ()),  # SGLang runs DFLASH with topk 1
    (["EAGLE", "--speculative-eagle-topk", "1"], FIVE_D, True, (), ()),
    (["EAGLE3", "--speculative-eagle-topk", "1"], FIVE_D, True, (), ()),
    (["NEXTN", "--speculative-eagle-topk", "1"], FIVE_D, True, (), ()),
    (["EAGLE", "--speculative-eagle-topk", "4"], FIVE_D, False,
     ("EAGLE", "--speculative-eagle-topk 4", "tree", "custom attention masks", "move_kv_cache"),
     ("--speculative-eagle-topk 1",)),
    (["NEXTN", "--speculative-eagle-topk", "2"], FIVE_D, False, ("NEXTN", "--speculative-eagle-topk 2"), ()),
    (["EAGLE3"], FIVE_D, False, ("EAGLE3", "--speculative-eagle-topk is unset", "4"),
     ("pass --speculative-eagle-topk 1",)),
    (["STANDALONE", "--speculative-eagle-topk", "1"], FIVE_D, False, ("STANDALONE", "not built or verified"), ()),
    (["NGRAM"], FIVE_D, False, ("NGRAM", "custom attention masks"), ()),
    (["DSPARK"], FIVE_D, False, ("DSPARK", "not built or verified"), ()),
    (["UNO"], FIVE_D, False, ("UNO", "not built or verified"), ()),
    (["MY_PLUGIN_ALGO"], FIVE_D, False, ("MY_PLUGIN_ALGO", "does not know"), ()),
    # prefix-valid-write-5d is defensive: DFLASH commits into its NHD draft pool, no cell needs it
    (["DFLASH"], {**FIVE_D, "SGLANG_KV5D_PATCHES": _without("prefix-valid-write-5d")}, True, (), ()),
    (["DFLASH"], {**FIVE_D, "SGLANG_KV5D_PATCHES": _without("target-verify-5d")}, False,
     ("DFLASH", "target-verify-5d is not selected", "SGLANG_KV5D_PATCHES"),
     ("add target-verify-5d to SGLANG_KV5D_PATCHES",)),
    # options the matrix refuses, whatever the algorithm's cell
    (["EAGLE", "--speculative-eagle-topk", "1", "--speculative-adaptive"], FIVE_D, False,
     ("--speculative-adaptive: the draft count changes at run time",), ("drop --speculative-adaptive",)),
    (["EAGLE3", "--speculative-eagle-topk", "1", "--enable-multi-layer-eagle"], FIVE_D, False,
     ("--enable-multi-layer-eagle",), ("drop --enable-multi-layer-eagle",)),
    (["DFLASH", "--speculative-num-draft-tokens", "0"], FIVE_D, False, ("is not a draft count",), ()),
    # options with no effect on the 5D target
    (["DFLASH", "--speculative-draft-window-size", "64", "--speculative-attention-mode", "decode"], FIVE_D, True,
     (), ()),
    (["EAGLE", "--speculative-eagle-topk", "1"],
     {**FIVE_D, "SGLANG_KV5D_PATCHES": _without("draft-pool-nhd", "target-verify-5d")}, False,
     ("draft-pool-nhd, target-verify-5d are not selected",), ("draft-pool-nhd, target-verify-5d",)),
    # EAGLE does not need the DFLASH commit write
    (["EAGLE", "--speculative-eagle-topk", "1"], {**FIVE_D, "SGLANG_KV5D_PATCHES": _without("prefix-valid-write-5d")},
     True, (), ()),
    # nhd: never
    (["NGRAM"], NHD, True, (), ()),
    (["EAGLE", "--speculative-eagle-topk", "8"], NHD, True, (), ()),
]


@pytest.fixture(scope="module")
def spec_batch(_both):
    return _both[1]


@pytest.mark.parametrize("index", range(len(SPEC_CASES)),
                         ids=[f"{'-'.join(c[0])}-{'allowed' if c[2] else 'refused'}-{i}" for i, c in enumerate(SPEC_CASES)])
def test_speculative_matrix_through_check(spec_batch, index):
    algo, env, allowed, words, fix_words = SPEC_CASES[index]
    result = spec_batch[index]
    if allowed and not SPEC_READY and env.get("SGLANG_AITER_KV_CACHE_LAYOUT") == "vectorized_5d":
        allowed, words, fix_words = False, (f"SGLang {_INSTALLED} is older than 0.5.23",), ("upgrade SGLang to 0.5.23",)
    assert result["code"] in (0, 1), result
    found = {f["id"]: f for f in json.loads(result["out"])}
    assert ("KV5D005" not in found) == allowed, (SPEC_CASES[index], result)
    if not allowed:
        f = found["KV5D005"]
        assert f["severity"] == "error" and result["code"] == 1
        assert f"--speculative-algorithm {algo[0]}" in f["message"], f
        for w in words:
            assert w in f["message"], (w, f)
        for w in fix_words:
            assert w in f["fix"], (w, f)


def test_speculative_support_cells():
    ok = rules.speculative_support
    every = None  # every patch selected
    assert ok("DFLASH", None, "0.5.23", every).allowed
    assert ok("dflash", 7, "0.5.23", every).allowed  # SGLang forces topk 1 for DFLASH
    for algo in ("EAGLE", "EAGLE3", "NEXTN", "eagle"):
        assert ok(algo, 1, "0.5.23", every).allowed, algo
        assert ok(algo, "1", "0.5.23", every).allowed, algo  # a mapping may carry text
        s = ok(algo, 3, "0.5.23", every)
        assert not s.allowed and "--speculative-eagle-topk 3" in s.reason and "move_kv_cache" in s.reason
        s = ok(algo, None, "0.5.23", every)
        assert not s.allowed and "unset" in s.reason and "pass --speculative-eagle-topk 1" in s.fix
        for bad in (0, "x", True):
            assert not ok(algo, bad, "0.5.23", every).allowed, (algo, bad)
    for algo in ("STANDALONE", "NGRAM", "DSPARK", "UNO", "FROZEN_KV_MTP", "whatever", ""):
        s = ok(algo, 1, "0.5.23", every)
        assert not s.allowed and s.reason and "nhd" in s.fix, algo
    assert "custom attention masks" in ok("NGRAM", 1, "0.5.23", every).reason
    # allowed cells are exactly DFLASH and the topk-1 chains, and say what serves them
    assert ok("DFLASH", None, "0.5.23", every).reason.startswith("DFLASH drafts into an NHD pool")
    assert ok("EAGLE3", 1, "0.5.23", every).fix == ""


def test_speculative_support_version():
    ok = rules.speculative_support
    for v in ("0.5.16", "0.5.22", "0.5.13.post1"):
        for algo, topk in (("DFLASH", None), ("EAGLE", 1)):
            s = ok(algo, topk, v, None)
            assert not s.allowed and f"SGLang {v} is older than 0.5.23" in s.reason, s
            assert "upgrade SGLang to 0.5.23 or use nhd" in s.fix, s
    assert ok("DFLASH", None, "0.5.23.post1", None).allowed
    assert ok("DFLASH", None, "0.5.24", None).allowed  # KV5D010 judges untested releases
    for v in (None, "", "not-a-version"):
        s = ok("DFLASH", None, v, None)
        assert not s.allowed and "0.5.23" in s.reason and "install SGLang 0.5.23" in s.fix, (v, s)


def test_speculative_support_patches():
    ok = rules.speculative_support
    needed = ("draft-pool-nhd", "target-verify-5d")  # prefix-valid-write-5d is defensive: no cell needs it
    assert ok("DFLASH", None, "0.5.23", set(needed)).allowed
    for missing in needed:
        s = ok("DFLASH", None, "0.5.23", set(needed) - {missing}, known_patches=set(needed))
        assert not s.allowed and f"{missing} is not selected" in s.reason, s
        assert f"add {missing} to SGLANG_KV5D_PATCHES" in s.fix and "or use nhd" in s.fix, s
    assert ok("EAGLE", 1, "0.5.23", {"draft-pool-nhd", "target-verify-5d"}).allowed
    s = ok("EAGLE", 1, "0.5.23", {"target-verify-5d"})
    assert not s.allowed and "draft-pool-nhd is not selected" in s.reason
    # a patch this sglang-kv5d does not have is named as missing, not as deselected
    s = ok("DFLASH", None, "0.5.23", {"draft-pool-nhd"}, known_patches={"draft-pool-nhd"})
    assert "has no target-verify-5d" in s.reason and "not selected" not in s.reason, s
    # every reason at once: version, patch and topk
    s = ok("EAGLE", 4, "0.5.16", {"draft-pool-nhd"}, known_patches=needed)
    assert all(w in s.reason for w in ("0.5.16", "target-verify-5d", "--speculative-eagle-topk 4")), s


def test_speculative_matrix_is_what_the_docs_show():
    text = rules.explain("KV5D005")
    matrix = rules.speculative.support_matrix()
    assert {shown for shown, topk, s in matrix if s.allowed} == {"DFLASH", "EAGLE", "EAGLE3", "NEXTN"}
    for shown, topk, s in matrix:
        assert f"| {shown} | {topk} | {'allowed' if s.allowed else 'refused'} |" in text, shown
        assert s.reason in text, shown
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as fh:
        assert rules.speculative.render_support_table() in fh.read()
    assert "arg_groups/speculative_hook.py" in text  # where SGLang's own topk defaulting was read


def test_context_selected_patches():
    ctx = rules.make_context({}, {}, "0.5.23", "rocm", known_patches=["a", "b"])
    assert ctx.selected_patches() == {"a", "b"}
    ctx = rules.make_context({"SGLANG_KV5D_PATCHES": "b, c"}, {}, "0.5.23", "rocm", known_patches=["a", "b"])
    assert ctx.selected_patches() == {"b", "c"}
    assert rules.make_context({}, {}, "0.5.23", "rocm").selected_patches() is None


# ---------------------------------------------------------------------------
# Real subprocesses


@pytest.mark.slow
def test_many_rules_fire_in_one_real_check_subprocess():
    env = {"SGLANG_AITER_KV_CACHE_LAYOUT": "vectorized_5d", "SGLANG_USE_HND_KVCACHE": "true",
           "SGLANG_ROCM_USE_AITER_LINEAR_SHUFFLE": "1"}
    args = ["check", "--kv5d-json", "--kv5d-platform", "cpu", *MODEL, "--attention-backend", "triton",
            "--kv-cache-dtype", "fp8_e4m3", "--page-size", "24", "--enable-unified-memory",
            "--speculative-algorithm", "NGRAM", "--enable-lmcache"]
    p = run_cli(args, env)
    assert p.returncode == 1, p
    ids = {f["id"] for f in json.loads(p.stdout)}
    assert {"KV5D002", "KV5D003", "KV5D004", "KV5D005", "KV5D006", "KV5D007", "KV5D008", "KV5D009",
            "KV5D012"} <= ids, p.stdout


@pytest.mark.slow
def test_kv5d001_real_subprocess_human_output():
    p = run_cli(["check", "--kv5d-platform", "rocm", *GOOD], {**NHD, "SGLANG_AITER_KV_CACHE_LAYOUT": "5d"})
    assert p.returncode == 1, p
    assert "KV5D001 error:" in p.stdout and "fix:" in p.stdout and "failed: 1 error(s)" in p.stdout


_RELABEL_INIT = """
import os as _os
_REAL = {real!r}
__path__.append(_REAL)  # every submodule but _version comes from the real SGLang
with open(_os.path.join(_REAL, "__init__.py"), encoding="utf-8") as _fh:
    exec(compile(_fh.read(), _os.path.join(_REAL, "__init__.py"), "exec"))
"""


def _fake_sglang_version(tmp: str, version: str) -> str:
    """A directory holding the installed SGLang relabelled as ``version``: a
    ``sglang`` package whose own ``_version.py`` and dist-info both say
    ``version`` and whose other modules are the real ones. (sglang-kv5d reads
    the version from the package first, so metadata alone no longer fakes it.)"""
    from sglang_kv5d.versions import sglang_package_dir

    d = os.path.join(tmp, version)
    info = os.path.join(d, f"sglang-{version}.dist-info")
    os.makedirs(info)
    with open(os.path.join(info, "METADATA"), "w") as fh:
        fh.write(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n")
    pkg = os.path.join(d, "sglang")
    os.makedirs(pkg)
    with open(os.path.join(pkg, "__init__.py"), "w") as fh:
        fh.write(_RELABEL_INIT.format(real=sglang_package_dir()))
    with open(os.path.join(pkg, "_version.py"), "w") as fh:
        fh.write(f"__version__ = version = {version!r}\n")
    return d


@pytest.fixture(scope="module")
def fake_versions():
    with tempfile.TemporaryDirectory() as tmp:
        yield {v: _fake_sglang_version(tmp, v) for v in ("0.5.12", "0.5.14", "0.5.16", "0.5.99")}


@pytest.mark.slow
def test_kv5d010_refused_version(fake_versions):
    p = run_cli(ROCM + GOOD, FIVE_D, pythonpath=fake_versions["0.5.12"])
    assert p.returncode == 1, p
    f = {f["id"]: f for f in json.loads(p.stdout)}
    assert "KV5D010" in f and "0.5.12" in f["KV5D010"]["message"] and "too old" in f["KV5D010"]["message"]


@pytest.mark.slow
def test_kv5d010_untested_version_and_override(fake_versions):
    p = run_cli(ROCM + GOOD, FIVE_D, pythonpath=fake_versions["0.5.99"])
    assert p.returncode == 1 and "KV5D010" in p.stdout, p
    p = run_cli(ROCM + GOOD, {**FIVE_D, "SGLANG_KV5D_ALLOW_UNTESTED": "1"}, pythonpath=fake_versions["0.5.99"])
    assert "KV5D010" not in {f["id"] for f in json.loads(p.stdout)}, p


@pytest.mark.slow
def test_kv5d010_best_effort_hybrid_needs_disable_radix_cache(fake_versions, tmp_path):
    model = tmp_path / "some-model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"architectures": ["Qwen3_5MoeForConditionalGeneration"]}))
    args = ROCM + ["--model-path", str(model), "--attention-backend", "aiter", "--kv-cache-dtype", "fp8_e4m3"]
    p = run_cli(args, FIVE_D, pythonpath=fake_versions["0.5.14"])
    ids = {f["id"] for f in json.loads(p.stdout)}
    assert "KV5D010" in ids and p.returncode == 1, p
    p = run_cli(args + ["--disable-radix-cache"], FIVE_D, pythonpath=fake_versions["0.5.14"])
    assert "KV5D010" not in {f["id"] for f in json.loads(p.stdout)}, p


@pytest.mark.slow
def test_kv5d005_speculative_needs_sglang_0_5_23(fake_versions):
    """DFLASH under 5D on a supported SGLang older than the one whose speculative paths are tested."""
    p = run_cli(SPEC + ["DFLASH"], FIVE_D, pythonpath=fake_versions["0.5.16"])
    found = {f["id"]: f for f in json.loads(p.stdout)}
    assert p.returncode == 1 and "KV5D005" in found and "KV5D010" not in found, p
    assert "SGLang 0.5.16 is older than 0.5.23" in found["KV5D005"]["message"]
    assert "upgrade SGLang to 0.5.23 or use nhd" in found["KV5D005"]["fix"]


_SPEC_GUARD_SCRIPT = """
import json, os, sys
from sglang.srt.server_args import prepare_server_args
from sglang_kv5d.rules import Kv5dConfigError, guard_server_args
from sglang_kv5d.rules.guard import _resolved_view
m = sys.argv[1]
five_d = dict(os.environ, SGLANG_USE_AITER="1", SGLANG_AITER_KV_CACHE_LAYOUT="vectorized_5d")
base = ["--model-path", m, "--skip-tokenizer-init", "--device", "cpu", "--speculative-algorithm", "NEXTN",
        "--speculative-draft-model-path", m]
out = {}
for key, extra in (("unset", []), ("one", ["--attention-backend", "aiter", "--page-size", "64",
                                          "--speculative-eagle-topk", "1", "--speculative-num-steps", "3",
                                          "--speculative-num-draft-tokens", "4"])):
    sa = prepare_server_args(base + extra)
    if hasattr(sa, "resolve_once"):
        sa.resolve_once()
    view = _resolved_view(sa)
    out[key] = {"algorithm": view.speculative_algorithm, "topk": view.speculative_eagle_topk}
    try:
        guard_server_args(sa, five_d, platform="rocm")
        out[key]["findings"] = []
    except Kv5dConfigError as exc:
        out[key]["findings"] = [[f.id, f.message] for f in exc.findings]
print(json.dumps(out))
"""


@pytest.mark.slow
def test_kv5d005_inside_sglang_sees_the_topk_sglang_chose(tmp_path):
    """Why an unset topk is refused: SGLang 0.5.23 itself resolves NEXTN on a
    LlamaForCausalLM to EAGLE with topk 4 (_auto_choose_speculative_params), and
    the guard inside SGLang refuses that tree; an explicit topk 1 chain passes."""
    from tests.helpers.subproc import run_py

    if not SPEC_READY:
        pytest.skip(f"SGLang {_INSTALLED}: the speculative cells are allowed on 0.5.23 only (the version cell is "
                    "test_speculative_matrix_through_check)")
    model = tiny_llama(tmp_path)
    r = run_py(_SPEC_GUARD_SCRIPT, args=[str(model)], timeout=300)
    assert r.data is not None, r
    unset, one = r.data["unset"], r.data["one"]
    assert unset["algorithm"] == "EAGLE" and unset["topk"] == 4, r.data  # SGLang's own choice
    spec = dict(unset["findings"]).get("KV5D005", "")
    assert "--speculative-algorithm EAGLE" in spec and "--speculative-eagle-topk 4" in spec, r.data
    assert one["topk"] == 1 and one["findings"] == [], r.data


@pytest.mark.slow
def test_explain_real_subprocess():
    p = run_cli(["check", "--explain", "KV5D005"])
    assert p.returncode == 0, p
    assert p.stdout.startswith("KV5D005 (error)") and "DFLASH" in p.stdout
    assert p.stdout.strip() == rules.explain("KV5D005").strip()
    p = run_cli(["check", "--explain", "KV5D05"])
    assert p.returncode == 2 and "unknown rule" in p.stderr, p


#: Every shipped deployment profile (single node at pages 64 and 16, the PD prefill and decode roles):
#: a profile added to launch/ is checked without editing this list.
PROFILES = sorted(glob.glob(os.path.join(ROOT, "launch", "*.toml")))
assert PROFILE in PROFILES and len(PROFILES) >= 4, PROFILES


@pytest.mark.slow
@pytest.mark.parametrize("profile", PROFILES, ids=os.path.basename)
def test_shipped_profile_passes_on_rocm(profile):
    """The acceptance check: the deployment profiles pass with the real patch probe."""
    if "-pd-" in os.path.basename(profile) and not SPEC_READY:
        pytest.skip("the PD profiles are for SGLang 0.5.23: they pass its decode-side options "
                    "(--disaggregation-decode-retraction-backup) and rely on its layout handshake")
    p = run_cli(["check", "--kv5d-profile", profile, "--kv5d-platform", "rocm"])
    assert p.returncode == 0, p
    assert "passed: 0 error(s), 0 warning(s)" in p.stdout, p


# ---------------------------------------------------------------------------
# In-process: pure functions and the generated docs


def test_docs_rules_md_is_generated_from_the_registry():
    with open(os.path.join(ROOT, "docs", "rules.md"), encoding="utf-8") as fh:
        assert fh.read() == rules.render_markdown(), (
            "docs/rules.md is stale: run `python -m sglang_kv5d.rules --markdown > docs/rules.md`"
        )


def test_rule_ids_and_severities_are_stable():
    assert sorted(rules.RULES) == [f"KV5D{i:03d}" for i in range(1, 17)]
    assert {r for r, v in rules.RULES.items() if v.severity == "warning"} == {"KV5D012", "KV5D014"}
    assert all(r.fix for r in rules.RULES.values())  # --explain and docs/rules.md show a fix for each


def test_readme_tables_are_generated_from_the_registries():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as fh:
        text = fh.read()
    assert text == rules.render_readme(text), (
        "README.md's rules/switches tables are stale: run `python -m sglang_kv5d.rules --update-readme README.md`"
    )
    from sglang_kv5d import config

    for name in config.SWITCHES:  # every registry entry has a row
        assert f"| `{name}` |" in text, name


def test_vector_x():
    assert rules.kv_vector_x("fp8_e4m3")[0] == 16
    assert rules.kv_vector_x("fp8_e5m2")[0] == 16
    assert rules.kv_vector_x("bf16")[0] == 8
    assert rules.kv_vector_x("auto")[0] == 8
    assert rules.kv_vector_x("auto", "float32")[0] == 4


def test_context_accepts_namespace_and_mapping():
    import argparse

    for args in (argparse.Namespace(enable_unified_memory=True), {"enable_unified_memory": True}):
        ctx = rules.make_context(FIVE_D, args, "0.5.23", "rocm")
        assert [f.id for f in rules.evaluate(ctx)] == ["KV5D004"]


def test_hybrid_guess(tmp_path):
    assert rules.guess_hybrid_model("/models/Qwen3.5-397B-A17B-PTPC-FP8") is True
    assert rules.guess_hybrid_model("/models/Llama-3.1-8B") is None
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    assert rules.guess_hybrid_model(str(tmp_path)) is False


def test_env_scan_knows_sglang_names():
    names = rules.sglang_env_names()
    assert names is not None
    assert {"SGLANG_USE_AITER", "SGLANG_AITER_KV_CACHE_LAYOUT", "SGLANG_VLM_CACHE_SIZE_MB"} <= names
    assert "SGLANG_ROCM_USE_AITER_LINEAR_SHUFFLE" not in names


def test_doctor_refuses_a_selection_that_leaves_out_required_patches():
    """Issue 26 item 3: doctor's verdict includes the selection: FAIL (exit 1) naming the patches and the
    variable when this environment asks for 5D; under nhd a warning and a summary that says 5D would not serve."""
    env = {**_LEFT_OUT}
    p = run_cli(["doctor", "--json", "--no-spawn"], env)
    checks = {c["name"]: c for c in json.loads(p.stdout)}
    sel = checks["patch selection"]
    assert p.returncode == 1 and sel["status"] == "fail", (p.returncode, sel)
    assert "SGLANG_KV5D_PATCHES='pool-layout-detection'" in sel["detail"], sel
    for name in ("attention-dispatch-5d", "cpu-copy-5d", "fp8-kv-write", "server-args-guard"):
        assert name in sel["detail"] and checks[f"patch {name}"]["status"] == "fail", name
    p = run_cli(["doctor", "--no-spawn"], {"SGLANG_KV5D_PATCHES": "pool-layout-detection", "SGLANG_KV5D_STRICT": "0"})
    last = p.stdout.strip().splitlines()[-1]
    assert "but not serve vectorized_5d" in last, p.stdout[-2000:]
    assert "unpatched" in p.stdout and "WARN  patch selection" in p.stdout, p.stdout[-2000:]
