"""The speculative support matrix (sglang_kv5d/speculative/support.py) and its three readers, on real SGLang.

Every algorithm SGLang knows (enumerated from SGLang's own SpeculativeAlgorithm
and its reserved aliases, plus a plugin registered through
``SpeculativeAlgorithm.register``), and cells for the options the matrix
judges, each:

1. parsed and resolved by SGLang's own ``prepare_server_args`` (on a CPU
   machine SGLang is told ``--device cuda``, which several algorithms demand;
   the in-process guard is told the platform is ROCm, as ``check
   --kv5d-platform rocm`` is);
2. with the overlay active, parsed again and checked (``check_server_args``,
   as SGLang's Engine does): the server-args guard inside SGLang refuses the
   refused cells (KV5D005, naming the algorithm);
3. a real ``AiterAttnBackend`` built on the CPU over a 5D pool, for a model
   runner that carries the ServerArgs of step 1 (which the guard never saw)
   and SGLang's algorithm member, as a ModelRunner does: allowed cells build,
   refused cells are refused at build naming the algorithm (readiness reads
   the algorithm from the runner and topk / options from its server args).

With ``server-args-guard`` left out of ``SGLANG_KV5D_PATCHES`` the selection
is refused at the first 5D pool or backend build, naming it; with
``SGLANG_KV5D_STRICT=0`` as well, every cell builds and readiness logs the
refusal of each refused algorithm (the non-strict policy), proving it judges
by algorithm without the guard. Each selection runs in one fresh interpreter.
"""

from __future__ import annotations

import importlib
import json

import pytest

from sglang_kv5d import rules
from sglang_kv5d.speculative import readiness, support
from sglang_kv5d.versions import parse_version
from tests.helpers.subproc import run_py, sglang_version
from tests.helpers.models import TINY_LLAMA

INSTALLED = sglang_version()
SPEC_READY = parse_version(INSTALLED) >= parse_version(support.SPEC_SGLANG)

# What must build under 5D (SGLang 0.5.23, every patch selected); every other cell is refused.
ALLOWED = {"DFLASH", "EAGLE", "EAGLE3", "NEXTN", "DFLASH-options", "EAGLE-options", "no-speculation"}
# Cells SGLang's own parser refuses under the 5D launch shape (aiter backend, paged).
SGLANG_REFUSES = {"EAGLE-topk4": "speculative_eagle_topk > 1 with page_size > 1"}

SCRIPT = r"""
import io, json, logging, os, sys
model, mode = sys.argv[1], sys.argv[2]
os.environ.update(SGLANG_USE_AITER="1", SGLANG_AITER_KV_CACHE_LAYOUT="vectorized_5d")
from sglang_kv5d.patches import BUILTIN_PATCH_MODULES, load_builtin
if mode != "all":  # every selectable patch but the in-process guard
    os.environ["SGLANG_KV5D_PATCHES"] = ",".join(
        n for n in BUILTIN_PATCH_MODULES if not load_builtin(n).internal and n != "server-args-guard")
if mode == "no-guard-nonstrict":
    os.environ["SGLANG_KV5D_STRICT"] = "0"
log = io.StringIO()
handler = logging.StreamHandler(log)
handler.setLevel(logging.WARNING)
logging.getLogger("sglang_kv5d").addHandler(handler)

import argparse, importlib
for m in ("sglang.srt.mem_cache.kv_cache_configurator", "sglang.srt.layers.attention.aiter_backend"):
    importlib.import_module(m)  # a server has both loaded before it builds pools and backends
from sglang.srt.server_args import ServerArgs, prepare_server_args
from sglang.srt.speculative import spec_info, spec_registry
import sglang_kv5d
from sglang_kv5d.rules import guard
from tests.helpers.backend import make_aiter_backend
from tests.helpers.pools import make_mha_pool, memory_pool_module

guard._platform_in_process = lambda: "rocm"  # judge as the ROCm server would (KV5D003 aside)
Algo = spec_info.SpeculativeAlgorithm
names = sorted(getattr(spec_registry, "_reserved_names", lambda: {a.name for a in Algo} | set(
    getattr(spec_registry, "_RESERVED_ALIASES", ())))())
names = [n for n in names if n != "NONE"]
PLUGIN = "KV5D_TEST_SPEC"
Algo.register(PLUGIN)(lambda server_args: object)  # a plugin's algorithm, through SGLang's own API

CHAIN = ["--speculative-eagle-topk", "1", "--speculative-num-steps", "3", "--speculative-num-draft-tokens", "4"]
BASE = ["--model-path", model, "--skip-tokenizer-init", "--device", "cuda", "--attention-backend", "aiter",
        "--page-size", "16"]
# What SGLang itself demands of an algorithm here; the default for any other (a new one included).
NEEDS = {
    "NGRAM": ["--speculative-ngram-max-bfs-breadth", "1"],  # a chain: breadth 10 is a tree SGLang refuses paged
    "UNO": ["--uno-lora-path", model, "--speculative-num-draft-tokens", "4", "--attention-backend", "fa3"],
    "DFLASH": ["--speculative-draft-model-path", model], "DSPARK": ["--speculative-draft-model-path", model],
}

def algo_argv(name, extra=()):
    need = NEEDS.get(name, ["--speculative-draft-model-path", model] + CHAIN)
    return BASE + ["--speculative-algorithm", name] + need + list(extra)

parser = argparse.ArgumentParser()
ServerArgs.add_cli_args(parser)
options = sorted({a.dest for a in parser._actions if a.dest != "help"})

def opts(*pairs):  # the (flag, value or None) pairs this SGLang's parser has (older releases lack some)
    out = []
    for flag, value in pairs:
        if flag[2:].replace("-", "_") in options:
            out += [flag] if value is None else [flag, value]
    return out

cells = {n: algo_argv(n) for n in names + [PLUGIN]}
cells.update({
    "EAGLE-topk4": BASE + ["--speculative-algorithm", "EAGLE", "--speculative-draft-model-path", model,
                           "--speculative-eagle-topk", "4", "--speculative-num-steps", "3",
                           "--speculative-num-draft-tokens", "8"],
    "EAGLE-options": algo_argv("EAGLE", opts(("--speculative-attention-mode", "decode"),
                                             ("--speculative-use-block-verification", None),
                                             ("--speculative-draft-window-size", "64"))),
    "DFLASH-options": algo_argv("DFLASH", opts(("--speculative-num-draft-tokens", "8"),
                                               ("--speculative-draft-window-size", "64"))),
    "no-speculation": BASE,
})
for key, flag in (("EAGLE-adaptive", "--speculative-adaptive"), ("EAGLE-multi-layer", "--enable-multi-layer-eagle")):
    if opts((flag, None)):
        cells[key] = algo_argv("EAGLE", [flag])

def parse(argv):
    sa = prepare_server_args(argv)
    if hasattr(sa, "resolve_once"):
        sa.resolve_once()
    return sa

def error(exc):
    return [type(exc).__name__, str(exc)]

mp = memory_pool_module()
mp._use_aiter = True
pool = make_mha_pool(page_size=16, head_num=1, head_dim=64, size=256)  # 5D, built before activation
pre = {}
for key, argv in cells.items():
    try:
        pre[key] = parse(argv)  # the overlay is not active: the ServerArgs a guard never saw
    except Exception as exc:
        pre[key] = error(exc)

st = sglang_kv5d.activate()
out = {"algorithms": names, "plugin": PLUGIN, "options": options, "cells": {},
       "guard_state": st.patch("server-args-guard").state}
try:
    make_mha_pool(page_size=16, head_num=1, head_dim=64, size=256)
    out["pool_after"] = None
except Exception as exc:
    out["pool_after"] = error(exc)
for key, argv in cells.items():
    r = out["cells"][key] = {}
    if isinstance(pre[key], list):
        r["sglang"] = pre[key]
        continue
    sa = pre[key]
    view = guard.resolved_view(sa)
    r["resolved"] = view.speculative_algorithm
    try:
        parse(argv).check_server_args()  # as the Engine does before it starts (0.5.20+ also resolves through the guard)
        r["guarded_parse"] = None
    except Exception as exc:
        r["guarded_parse"] = error(exc)
    member = Algo.from_string(view.speculative_algorithm)  # what ModelRunner.__init__ does
    spec = None if member.is_none() else member
    start = len(log.getvalue())
    try:
        make_aiter_backend(pool, num_q_heads=4, num_kv_heads=1, head_dim=64, page_size=16, spec_algorithm=spec,
                           num_draft_tokens=view.speculative_num_draft_tokens, server_args=sa)
        r["build"] = None
    except Exception as exc:
        r["build"] = error(exc)
    r["log"] = log.getvalue()[start:]  # what this build logged
out["log"] = log.getvalue()
print(json.dumps(out))
"""



def _run(tmp_path_factory, mode):
    model = tmp_path_factory.mktemp("tiny-llama")
    (model / "config.json").write_text(json.dumps(TINY_LLAMA))
    r = run_py(SCRIPT, args=[str(model), mode], timeout=420)
    assert r.data is not None, r
    return r.data


@pytest.fixture(scope="module")
def selected(tmp_path_factory):
    return _run(tmp_path_factory, "all")


@pytest.fixture(scope="module")
def no_guard(tmp_path_factory):
    return _run(tmp_path_factory, "no-guard")


@pytest.fixture(scope="module")
def no_guard_nonstrict(tmp_path_factory):
    return _run(tmp_path_factory, "no-guard-nonstrict")


def _refusal(resolved):
    return f"--speculative-algorithm {resolved.upper()} over a SHUFFLE 5D target is outside the support matrix"


def _sglang_parsed(data):
    """Cells SGLang's parser took; the cells it refused are exactly SGLANG_REFUSES, with its own message."""
    cells = data["cells"]
    refused = {k: c["sglang"][1] for k, c in cells.items() if "sglang" in c}
    assert set(refused) == set(SGLANG_REFUSES), refused
    for key, words in SGLANG_REFUSES.items():
        assert words in refused[key], refused[key]
    return {k: c for k, c in cells.items() if "sglang" not in c}


# ---------------------------------------------------------------------------
# Every algorithm and option SGLang has has its own cell


def test_every_algorithm_sglang_knows_has_its_own_cell():
    spec_info = importlib.import_module("sglang.srt.speculative.spec_info")
    registry = importlib.import_module("sglang.srt.speculative.spec_registry")
    names = {a.name for a in spec_info.SpeculativeAlgorithm} | set(getattr(registry, "_RESERVED_ALIASES", ()))
    names.discard("NONE")
    assert names >= {"DFLASH", "EAGLE", "NGRAM"}, names  # the enumeration itself works
    unclassified = sorted(n for n in names if n not in support.NEEDED_PATCHES and n not in support.REFUSED)
    assert not unclassified, (f"SGLang {INSTALLED} has speculative algorithm(s) {unclassified} that the support "
                              "matrix (sglang_kv5d/speculative/support.py) does not classify")
    for name in names:  # each is judged on its own reason, not as an unknown name
        s = support.speculative_support(name, 1, support.SPEC_SGLANG, None)
        assert "does not know" not in s.reason, (name, s)


@pytest.mark.skipif(not SPEC_READY, reason=f"the options table is SGLang {support.SPEC_SGLANG}'s; this is {INSTALLED}")
def test_every_speculative_option_of_sglangs_parser_is_classified(selected):
    spec_options = {d for d in selected["options"] if support.SPEC_OPTION_PATTERN.search(d)}
    assert {"speculative_eagle_topk", "speculative_adaptive", "enable_multi_layer_eagle"} <= spec_options
    missing = sorted(spec_options - set(support.OPTIONS))
    assert not missing, f"SGLang {INSTALLED}'s parser has speculative option(s) the matrix does not classify: {missing}"
    stale = sorted(set(support.OPTIONS) - set(selected["options"]))
    assert not stale, f"the matrix classifies option(s) SGLang {INSTALLED} does not have: {stale}"


# ---------------------------------------------------------------------------
# Through SGLang's parser and a real backend build


@pytest.mark.slow
def test_with_server_args_guard_allowed_cells_build_and_refused_ones_stop_twice(selected):
    cells = _sglang_parsed(selected)
    assert selected["guard_state"] == "applied"
    assert selected["pool_after"] is None
    assert set(selected["algorithms"]) <= set(cells) and selected["plugin"] in cells
    for key, c in cells.items():
        allowed = SPEC_READY and key in ALLOWED
        if allowed or key == "no-speculation":
            assert c["guarded_parse"] is None and c["build"] is None, (key, c)
            continue
        # the guard inside SGLang (KV5D005 on the resolved arguments)
        kind, message = c["guarded_parse"]
        assert kind == "Kv5dConfigError" and "KV5D005" in message, (key, c)
        assert f"--speculative-algorithm {c['resolved'].upper()}" in message, (key, c)
        # readiness at backend build, on arguments the guard never saw
        kind, message = c["build"]
        assert kind == "Kv5dNotReadyError" and _refusal(c["resolved"]) in message, (key, c)
        assert "Fix:" in message, (key, c)
    if SPEC_READY:
        assert cells["NEXTN"]["resolved"] == "EAGLE"  # SGLang's alias, served as the EAGLE chain
        assert "move_kv_cache" in cells["NGRAM"]["build"][1]  # breadth 1 included
        assert "--speculative-adaptive" in cells["EAGLE-adaptive"]["build"][1]
        assert "--enable-multi-layer-eagle" in cells["EAGLE-multi-layer"]["build"][1]
        assert "does not know" in cells[selected["plugin"]]["build"][1]
    else:
        assert f"SGLang {INSTALLED} is older than {support.SPEC_SGLANG}" in cells["DFLASH"]["build"][1]


@pytest.mark.slow
def test_without_server_args_guard_the_selection_is_refused_naming_it(no_guard):
    cells = _sglang_parsed(no_guard)
    assert no_guard["guard_state"] == "disabled"
    kind, message = no_guard["pool_after"]
    assert kind == "Kv5dNotReadyError" and "server-args-guard is disabled" in message, no_guard["pool_after"]
    assert "add server-args-guard to SGLANG_KV5D_PATCHES" in message, message
    for key, c in cells.items():
        assert c["guarded_parse"] is None, (key, c)  # nothing inside SGLang judged the arguments
        kind, message = c["build"]
        assert kind == "Kv5dNotReadyError" and "server-args-guard is disabled" in message, (key, c)


@pytest.mark.slow
def test_without_server_args_guard_readiness_still_judges_by_algorithm(no_guard_nonstrict):
    cells = _sglang_parsed(no_guard_nonstrict)
    log = no_guard_nonstrict["log"]
    assert "server-args-guard is disabled" in log, log
    for key, c in cells.items():
        assert c["guarded_parse"] is None and c["build"] is None, (key, c)  # SGLANG_KV5D_STRICT=0: warn, build
        if key == "no-speculation":
            continue
        if SPEC_READY and key in ALLOWED:
            assert _refusal(c["resolved"]) not in c["log"], (key, c)  # this build logged no refusal
        else:  # logged by this build, or by an earlier one with the same message (logged once)
            assert _refusal(c["resolved"]) in log, (key, log)


# ---------------------------------------------------------------------------
# One module decides: every reader goes through support.decide


def test_every_reader_asks_the_one_matrix(monkeypatch):
    from types import SimpleNamespace as NS

    seen = []

    def refuse_everything(cfg, version, gaps):
        seen.append(cfg)
        return support.Support(False, "STUB-REFUSAL", "STUB-FIX")

    monkeypatch.setattr(support, "decide", refuse_everything)
    five_d = {"SGLANG_USE_AITER": "1", "SGLANG_AITER_KV_CACHE_LAYOUT": "vectorized_5d"}
    args = {"speculative_algorithm": "DFLASH", "speculative_eagle_topk": 1, "attention_backend": "aiter"}
    # KV5D005 (check / launch, and the same evaluate() inside SGLang's guard)
    found = rules.evaluate(rules.make_context(five_d, args, "0.5.23", "rocm"), only=["KV5D005"])
    assert [(f.id, "STUB-REFUSAL" in f.message, f.fix) for f in found] == [("KV5D005", True, "STUB-FIX")]
    with pytest.raises(rules.Kv5dConfigError, match="STUB-REFUSAL"):
        rules.guard_server_args(NS(**args), five_d, platform="rocm", sglang_version="0.5.23")
    # readiness at backend build
    runner = NS(spec_algorithm=NS(name="DFLASH", is_none=lambda: False), is_draft_worker=False,
                server_args=NS(speculative_eagle_topk=1))
    backend = NS(use_mla=False, decode_uses_page_table=True, _use_unified_verify=True)
    p = readiness.speculative_problem(runner, backend, pool_is_5d=True, patch_state=lambda n: "applied",
                                      sglang_version="0.5.23")
    assert "STUB-REFUSAL" in p.message and p.fix == "STUB-FIX"
    assert [c.algorithm for c in seen][-1] is runner.spec_algorithm  # the runner's own member
    assert len(seen) == 3


# ---------------------------------------------------------------------------
# The dimensions, pure


def test_dimensions():
    ok = support.speculative_support
    v = support.SPEC_SGLANG
    assert ok("EAGLE", 1, v, None, num_draft_tokens=4).allowed
    assert ok("DFLASH", None, v, None, num_draft_tokens=16).allowed
    for bad in (0, -1, "x"):
        s = ok("DFLASH", None, v, None, num_draft_tokens=bad)
        assert not s.allowed and "is not a draft count" in s.reason, (bad, s)
    s = ok("DFLASH", None, v, None, mla=True)
    assert not s.allowed and "MLA" in s.reason
    assert ok("DFLASH", None, v, None, mla=False).allowed
    for opt, value, word in (("speculative_adaptive", True, "--speculative-adaptive:"),
                             ("enable_multi_layer_eagle", True, "--enable-multi-layer-eagle:"),
                             ("decoupled_spec_role", "verifier", "--decoupled-spec-role verifier:")):
        s = ok("EAGLE", 1, v, None, options={opt: value})
        assert not s.allowed and word in s.reason and f"drop {support.flag(opt)}" in s.fix, (opt, s)
    for opt, value in (("speculative_adaptive", False), ("decoupled_spec_role", "null"),
                       ("enable_multi_layer_eagle", False)):
        assert ok("EAGLE", 1, v, None, options={opt: value}).allowed, opt
    # the configuration as SGLang's parser or resolved view holds it
    cfg = support.spec_config({"speculative_algorithm": "EAGLE", "speculative_eagle_topk": 1,
                               "speculative_num_draft_tokens": 4, "speculative_adaptive": True,
                               "speculative_draft_window_size": 64})
    assert cfg.options == {"speculative_adaptive": True}  # only the refusing options are carried
    assert not support.decide(cfg, v, {}).allowed
    # every option has a dimension the docs explain
    assert all(o.dimension in support.DIMENSIONS for o in support.OPTIONS.values())
    table = support.render_support_table()
    for dim in support.DIMENSIONS:
        if dim != support.ALGORITHM:
            assert f"| {dim} |" in table, dim


def test_prefix_valid_write_5d_is_no_cells_requirement():
    """Item: prefix-valid-write-5d is defensive; DFLASH commits into its NHD draft pool."""
    from sglang_kv5d.patches import load_builtin

    assert all(support.PREFIX_VALID_WRITE_5D not in needed for needed in support.NEEDED_PATCHES.values())
    every_but = {"draft-pool-nhd", "target-verify-5d"}
    assert support.speculative_support("DFLASH", None, support.SPEC_SGLANG, every_but).allowed
    patch = load_builtin(support.PREFIX_VALID_WRITE_5D)
    assert not patch.required_for_5d and "defensive" in patch.problem and "draft-pool-nhd" in patch.why
    assert load_builtin("server-args-guard").required_for_5d
