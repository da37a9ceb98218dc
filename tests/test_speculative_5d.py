"""Speculative decoding with a 5D target on real SGLang classes (CPU, Triton interpreter).

draft-pool-nhd: pools built in a draft worker's configure() are NHD (plain,
hybrid and SWA inner pools) while the target's stay 5D; without the patch the
draft's buffer hits SGLang's triton ``unexpected KV buffer ndim=5``.
target-verify-5d: TARGET_VERIFY through the real ``AiterAttnBackend`` with
SGLang's own verify metadata (``init_forward_metadata``), against float64, on
a hybrid fp8 pool and an SWA bf16 pool, ragged prefixes crossing pages; the
drafts' bytes in the cache; the host side reads no device value.
"""

from __future__ import annotations

import importlib
import math
from types import SimpleNamespace as NS

import pytest
import torch

import sglang_kv5d
from sglang_kv5d.kernels.attention_reference import extend_attention_5d_ref
from sglang_kv5d.kernels.fp8_reference import quantize_fp8_fp32
from sglang_kv5d.patches import target_verify
from sglang_kv5d.speculative import draft_scope, verify
from tests.helpers.backend import make_aiter_backend
from tests.helpers.pools import enable_5d, make_hybrid_pool, make_mha_pool, make_swa_pool, read_tokens, ref_attention
from tests.helpers.subproc import sglang_version
from sglang_kv5d.versions import parse_version

pytestmark = pytest.mark.skipif(parse_version(sglang_version()) < parse_version("0.5.23"),
                                reason="the speculative 5D surfaces are read on SGLang 0.5.23")

PAGE, HQ, D = 16, 4, 64
FP8 = torch.float8_e4m3fn


def _activate():
    for module in ("sglang.srt.mem_cache.kv_cache_configurator", "sglang.srt.layers.attention.aiter_backend"):
        importlib.import_module(module)  # a server has both loaded before it builds pools
    st = sglang_kv5d.activate()
    for name in ("draft-pool-nhd", "target-verify-5d", "pool-layout-detection", "fp8-kv-write"):
        assert st.patch(name).state == "applied", (name, st.patch(name))
    return st


@pytest.fixture
def overlay():
    yield _activate()
    sglang_kv5d.deactivate()


def _dims(pool):
    return pool.k_buffer[0].dim(), pool.v_buffer[0].dim()


# ---------------------------------------------------------------------------
# draft-pool-nhd


def test_draft_layout_rules():
    idx = 12
    assert draft_scope.draft_layout({}, 3, idx, wants_5d=True) is None  # not in a draft scope
    with draft_scope.draft_pool_scope(True):
        assert draft_scope.draft_layout({}, 3, idx, wants_5d=True) == "nhd"
        assert draft_scope.draft_layout({"kv_cache_layout": None}, 3, idx, wants_5d=True) == "nhd"
        assert draft_scope.draft_layout({"kv_cache_layout": "hnd"}, 3, idx, wants_5d=True) is None  # explicit wins
        assert draft_scope.draft_layout({}, idx + 1, idx, wants_5d=True) is None  # given positionally
        assert draft_scope.draft_layout({}, 3, None, wants_5d=True) is None  # no such parameter
        assert draft_scope.draft_layout({}, 3, idx, wants_5d=False) is None  # 5D not requested
        with draft_scope.draft_pool_scope(False):  # a target configurator inside resets it
            assert draft_scope.draft_layout({}, 3, idx, wants_5d=True) is None
        assert draft_scope.in_draft_scope()
    assert not draft_scope.in_draft_scope()


def test_without_the_patch_a_draft_pool_is_5d_and_triton_refuses_it(monkeypatch):
    enable_5d(monkeypatch)
    decode = importlib.import_module("sglang.kernels.ops.attention.decode_attention")
    with draft_scope.draft_pool_scope(True):  # the scope alone changes nothing
        draft = make_mha_pool(page_size=PAGE)
    assert _dims(draft) == (5, 5)
    with pytest.raises(ValueError, match="unexpected KV buffer ndim=5"):
        decode._extract_kv_strides(draft.k_buffer[0], PAGE)


def test_draft_scoped_pools_are_nhd_while_the_target_stays_5d(monkeypatch, overlay):
    enable_5d(monkeypatch)
    decode = importlib.import_module("sglang.kernels.ops.attention.decode_attention")
    target = make_mha_pool(page_size=PAGE)
    with draft_scope.draft_pool_scope(True):
        draft = make_mha_pool(page_size=PAGE)
        hybrid = make_hybrid_pool(dtype=FP8, page_size=PAGE)
        swa = make_swa_pool(page_size=PAGE)
    assert _dims(target) == (5, 5) and target.kv_cache_layout == "vectorized_5d"
    assert _dims(draft) == (3, 3) and draft.kv_cache_layout == "nhd"
    assert _dims(hybrid.full_kv_pool) == (3, 3)
    assert _dims(swa.full_kv_pool) == (3, 3) and _dims(swa.swa_kv_pool) == (3, 3)
    decode._extract_kv_strides(draft.k_buffer[0], PAGE)  # the upstream error is gone
    from sglang_kv5d.pools import is_vectorized_5d

    assert is_vectorized_5d(target) and not is_vectorized_5d(draft) and not is_vectorized_5d(hybrid)


def test_a_draft_workers_configure_builds_nhd_pools(monkeypatch):
    """configure() of an is_draft_worker configurator is the scope; a target's is not."""
    enable_5d(monkeypatch)
    kc = importlib.import_module("sglang.srt.mem_cache.kv_cache_configurator")
    built = []

    def configure(self, *, pre_model_load_memory):  # stands in for SGLang's pool building
        built.append(make_mha_pool(page_size=PAGE))
        return built[-1]

    monkeypatch.setattr(kc.KVCacheConfigurator, "configure", configure)
    _activate()
    try:
        for is_draft in (True, False):
            cfg = object.__new__(kc.KVCacheConfigurator)
            cfg.is_draft_worker = is_draft
            pool = cfg.configure(pre_model_load_memory=0)
            assert _dims(pool) == ((3, 3) if is_draft else (5, 5)), is_draft
        assert not draft_scope.in_draft_scope()
    finally:
        sglang_kv5d.deactivate()
    assert kc.KVCacheConfigurator.configure is configure  # restored exactly


# ---------------------------------------------------------------------------
# target-verify-5d


def _layer(lid, fp8, window=-1):
    ks = torch.tensor([0.75], dtype=torch.float32) if fp8 else None
    vs = torch.tensor([1.25], dtype=torch.float32) if fp8 else None
    return NS(layer_id=lid, tp_q_head_num=HQ, tp_k_head_num=1, tp_v_head_num=1, qk_head_dim=D, v_head_dim=D,
              scaling=1.0 / math.sqrt(D), sliding_window_size=window, logit_cap=0.0, k_scale=ks, v_scale=vs,
              is_cross_attention=False)


def _logical(x, fp8, scale):
    if not fp8:
        return x.double()
    return quantize_fp8_fp32(x.float(), float(scale), FP8).view(FP8).double() * float(scale)


def _mode():
    return importlib.import_module("sglang.srt.model_executor.forward_batch_info").ForwardMode


POOLS = {
    # name: (builder, fp8, (layer id, sliding window) pairs)
    "hybrid-fp8": (lambda: make_hybrid_pool(dtype=FP8, page_size=PAGE, head_num=1, head_dim=D, size=512), True,
                   ((3, -1), (7, -1))),
    "swa-bf16": (lambda: make_swa_pool(dtype=torch.bfloat16, page_size=PAGE, head_num=1, head_dim=D, size=512,
                                       size_swa=512), False, ((0, 9), (1, -1))),
}


@pytest.mark.parametrize("pool_name", sorted(POOLS))
def test_target_verify_through_the_backend_matches_float64(monkeypatch, overlay, pool_name):
    enable_5d(monkeypatch)
    build, fp8, layers = POOLS[pool_name]
    pool = build()
    if hasattr(pool, "full_to_swa_index_mapping"):  # the SWA allocator registers it in a server
        pool.register_mapping(torch.arange(1024, dtype=torch.int64))  # identity: swa slot = full slot
    backend = make_aiter_backend(pool, num_q_heads=HQ, num_kv_heads=1, head_dim=D, page_size=PAGE,
                                 context_len=256, max_bs=4)
    assert backend.kv_cache_is_vectorized_5d and backend._use_unified_verify
    assert getattr(backend, target_verify.FLAG)
    backend.kv_cache_dtype = FP8 if fp8 else torch.bfloat16  # a server's runner passes the cache dtype

    gen = torch.Generator().manual_seed(7)
    prefix, n = [5, 16, 29], 6  # drafts cross a page boundary in requests 1 and 2
    bs = len(prefix)
    pages = {0: [2, 5, 9], 1: [1, 7, 3], 2: [4, 11, 6]}  # scattered, non-monotonic pages
    slot = lambda r, p: pages[r][p // PAGE] * PAGE + p % PAGE  # noqa: E731
    req_to_token = backend.req_to_token
    req_to_token.fill_(0)
    for r in range(bs):
        req_to_token[r, : prefix[r] + n] = torch.tensor([slot(r, p) for p in range(prefix[r] + n)])

    mp = importlib.import_module("sglang.srt.mem_cache.memory_pool")
    logical = {}
    for lid, _w in layers:
        layer = _layer(lid, fp8)
        for r in range(bs):  # the cached prefix, through the pool's (patched) write
            k = torch.randn(prefix[r], 1, D, generator=gen) * 2
            v = torch.randn(prefix[r], 1, D, generator=gen) * 2
            loc = torch.tensor([slot(r, p) for p in range(prefix[r])])
            pool.set_kv_buffer(layer, mp.KVWriteLoc(loc=loc, swa_loc=loc), k.bfloat16(), v.bfloat16(),
                               layer.k_scale, layer.v_scale)
            logical[(lid, r)] = (_logical(k.bfloat16(), fp8, 0.75 if fp8 else 1), _logical(v.bfloat16(), fp8, 1.25 if fp8 else 1))

    draft_loc = torch.tensor([slot(r, prefix[r] + i) for r in range(bs) for i in range(n)])
    fb = NS(batch_size=bs, forward_mode=_mode().TARGET_VERIFY, spec_info=NS(draft_token_num=n, custom_mask=None),
            req_pool_indices=torch.arange(bs), seq_lens=torch.tensor(prefix), seq_lens_cpu=torch.tensor(prefix),
            seq_lens_sum=sum(prefix), input_ids=torch.zeros(bs * n, dtype=torch.int64), out_cache_loc=draft_loc,
            out_cache_loc_is_physical=False, attn_attend_prefix_cache=False, encoder_out_cache_loc=None)
    ab = importlib.import_module("sglang.srt.layers.attention.aiter_backend")
    monkeypatch.setattr(ab, "reset_verify_attn_plan_cache", lambda: None, raising=False)  # imported on HIP only
    backend.init_forward_metadata(fb)  # SGLang's own verify metadata (unified verify: 2-D page table)
    assert backend.forward_metadata.kv_indices.dim() == 2

    for lid, window in layers:
        layer = _layer(lid, fp8, window)
        q = (torch.randn(bs * n, HQ, D, generator=gen) * 1.5).bfloat16()
        k = (torch.randn(bs * n, 1, D, generator=gen) * 2).bfloat16()
        v = (torch.randn(bs * n, 1, D, generator=gen) * 2).bfloat16()
        k_in, v_in = k.clone(), v.clone()
        out = backend.forward_extend(q.reshape(bs * n, -1), k, v, layer, fb)
        assert torch.equal(k, k_in) and torch.equal(v, v_in)  # inputs untouched
        assert out.shape == (bs * n, HQ * D) and out.dtype == torch.bfloat16
        assert torch.isfinite(out.float()).all()
        from sglang_kv5d.pools import resolve_kv_subpool

        leaf, local = resolve_kv_subpool(pool, lid)
        ks, vs = (0.75, 1.25) if fp8 else (1.0, 1.0)
        got_k, got_v = read_tokens(leaf, local, draft_loc, ks, vs)  # the drafts' bytes in the 5D cache
        assert torch.equal(got_k, _logical(k, fp8, ks).reshape(got_k.shape))
        assert torch.equal(got_v, _logical(v, fp8, vs).reshape(got_v.shape))
        for r in range(bs):
            lk, lv = logical[(lid, r)]
            keys = torch.cat([lk, _logical(k[r * n:(r + 1) * n], fp8, ks)])
            vals = torch.cat([lv, _logical(v[r * n:(r + 1) * n], fp8, vs)])
            ref = ref_attention(q[r * n:(r + 1) * n].double(), keys, vals, torch.arange(prefix[r], prefix[r] + n),
                                sm_scale=layer.scaling, sliding_window=window)
            got = out[r * n:(r + 1) * n].double().reshape(ref.shape)
            err = (got - ref).abs().max().item()
            assert err < 2e-2 * max(1.0, ref.abs().max().item()), (pool_name, lid, r, err)

        # block-parallel (non-causal) drafts over the same cache and table: every key visible
        if window >= 0:
            with pytest.raises(verify.VerifyLayoutError, match="not defined"):
                verify.forward_target_verify_5d(backend, q, layer, fb, causal=False)
            continue
        nc = verify.forward_target_verify_5d(backend, q, layer, fb, causal=False)
        table, _ = verify.verify_tables(backend, layer)
        _, k_cache, v_cache, *_ = importlib.import_module("sglang_kv5d.attention").layer_cache(backend, layer)
        ref = extend_attention_5d_ref(q.double(), k_cache, v_cache, table[:bs], backend.forward_metadata.qo_indptr[: bs + 1],
                                      torch.tensor(prefix) + n, sm_scale=layer.scaling, causal=False,
                                      k_scale=layer.k_scale, v_scale=layer.v_scale, fp8_dtype=FP8 if fp8 else None,
                                      sliding_window=window)
        err = (nc.double().reshape(ref.shape) - ref).abs().max().item()
        assert err < 2e-2 * max(1.0, ref.abs().max().item()), ("non-causal", pool_name, lid, err)


def test_other_modes_and_nhd_backends_reach_the_original(monkeypatch, overlay):
    enable_5d(monkeypatch, layout="nhd")
    pool = make_mha_pool(page_size=PAGE, head_num=1, head_dim=D)
    backend = make_aiter_backend(pool, num_q_heads=HQ, num_kv_heads=1, head_dim=D, page_size=PAGE)
    assert not backend.kv_cache_is_vectorized_5d and not getattr(backend, target_verify.FLAG)
    calls = []
    monkeypatch.setattr(verify, "forward_target_verify_5d", lambda *a, **k: calls.append(a))
    fb = NS(forward_mode=_mode().TARGET_VERIFY)
    with pytest.raises(Exception):  # upstream's own path runs (and fails on this bare batch)
        backend.forward_extend(torch.zeros(1, HQ * D), None, None, _layer(0, False), fb)
    assert calls == []


def test_verify_host_side_reads_no_device_value(monkeypatch):
    """What a CUDA graph would freeze: the verify call's host code never syncs."""
    kernels = importlib.import_module("sglang_kv5d.kernels")
    seen = {}
    monkeypatch.setattr(kernels, "decode_attention_5d", lambda *a, **k: seen.update(args=a, kw=k))
    k5 = torch.zeros(4, 1, D // 8, PAGE, 8, dtype=torch.bfloat16)
    v5 = torch.zeros(4, 1, PAGE // 8, D, 8, dtype=torch.bfloat16)
    sub = NS(k_buffer=[k5], v_buffer=[v5], dtype=torch.bfloat16, page_size=PAGE)
    monkeypatch.setattr(importlib.import_module("sglang_kv5d.attention.common"), "resolve_kv_subpool", lambda pool, lid: (sub, 0))
    meta = NS(kv_indices=torch.zeros(2, 4, dtype=torch.int32), swa_page_table=None,
              qo_indptr=torch.tensor([0, 3, 6], dtype=torch.int32), max_q_len=3)
    backend = NS(forward_metadata=meta, token_to_kv_pool=None, input_dtype=torch.bfloat16, kv_cache_dtype=torch.bfloat16)
    fb = NS(seq_lens=torch.tensor([5, 9]))
    q = torch.randn(6, HQ * D).bfloat16()

    def no_sync(*a, **k):
        raise AssertionError("host read of a device value")

    for name in ("item", "tolist", "__bool__", "__int__", "__index__", "__float__", "cpu", "numpy"):
        monkeypatch.setattr(torch.Tensor, name, no_sync)
    verify.forward_target_verify_5d(backend, q, _layer(0, False), fb)
    monkeypatch.undo()
    a = seen["args"]
    assert a[3].shape == (2, 4) and a[4].tolist() == [6, 7, 8, 10, 11, 12]  # one length per draft row
    assert seen["kw"]["queries_per_seq"] == 3


def test_verify_refuses_bad_metadata_with_a_message(monkeypatch):
    k5 = torch.zeros(4, 1, D // 8, PAGE, 8, dtype=torch.bfloat16)
    v5 = torch.zeros(4, 1, PAGE // 8, D, 8, dtype=torch.bfloat16)
    sub = NS(k_buffer=[k5], v_buffer=[v5], dtype=torch.bfloat16, page_size=PAGE)
    monkeypatch.setattr(importlib.import_module("sglang_kv5d.attention.common"), "resolve_kv_subpool", lambda pool, lid: (sub, 0))
    q = torch.randn(6, HQ * D).bfloat16()
    fb = NS(seq_lens=torch.tensor([5, 9]))
    flat = NS(forward_metadata=NS(kv_indices=torch.zeros(20, dtype=torch.int32), swa_page_table=None,
                                  qo_indptr=torch.tensor([0, 3, 6]), max_q_len=3),
              token_to_kv_pool=None, input_dtype=torch.bfloat16)
    with pytest.raises(verify.VerifyLayoutError, match="2-D page table"):
        verify.forward_target_verify_5d(flat, q, _layer(0, False), fb)
    ragged = NS(forward_metadata=NS(kv_indices=torch.zeros(2, 4, dtype=torch.int32), swa_page_table=None,
                                    qo_indptr=torch.tensor([0, 4, 6]), max_q_len=4),
                token_to_kv_pool=None, input_dtype=torch.bfloat16)
    with pytest.raises(verify.VerifyLayoutError, match="whole number"):
        verify.forward_target_verify_5d(ragged, q, _layer(0, False), fb)


# ---------------------------------------------------------------------------
# fail closed: what only the process knows


def _spec(name="DFLASH"):
    """SGLang's own SpeculativeAlgorithm member, as a ModelRunner holds it."""
    return importlib.import_module("sglang.srt.speculative.spec_info").SpeculativeAlgorithm[name]


def test_speculative_readiness_rules():
    from sglang_kv5d.speculative.readiness import speculative_problem

    applied = lambda name: "applied"  # noqa: E731
    ok_backend = NS(use_mla=False, topk=1, decode_uses_page_table=True, _use_unified_verify=True)
    chain = NS(speculative_eagle_topk=1, speculative_num_draft_tokens=4)
    target = NS(spec_algorithm=_spec(), is_draft_worker=False, server_args=chain)
    draft = NS(spec_algorithm=_spec(), is_draft_worker=True)

    def problem(runner, backend=ok_backend, pool_is_5d=True, state=applied, version="0.5.23"):
        p = speculative_problem(runner, backend, pool_is_5d=pool_is_5d, patch_state=state, sglang_version=version)
        return None if p is None else f"{p.message} | fix: {p.fix}"

    assert problem(NS(spec_algorithm=_spec("NONE"))) is None
    assert problem(target) is None
    assert problem(target, pool_is_5d=False) is None  # an NHD target is SGLang's business
    assert problem(draft, pool_is_5d=False) is None
    assert "explicit 5D label" in problem(draft)
    assert "draft-pool-nhd is failed" in problem(draft, state=lambda n: "failed")
    p = problem(target, state=lambda n: "disabled")
    assert "draft-pool-nhd, target-verify-5d are not selected" in p and "add draft-pool-nhd" in p, p
    assert "target-verify-5d is failed" in problem(target, state=lambda n: "applied" if n != "target-verify-5d" else "failed")
    assert problem(target, state=lambda n: "upstream") is None  # provided by the installed SGLang
    # the algorithm and topk come from the runner and its server args, not from backend.topk (always 1)
    for name in ("NGRAM", "FROZEN_KV_MTP", "UNO", "DSPARK", "STANDALONE"):
        p = problem(NS(spec_algorithm=_spec(name), is_draft_worker=False, server_args=chain))
        assert p and f"--speculative-algorithm {name} over a SHUFFLE 5D target" in p, (name, p)
    tree = NS(spec_algorithm=_spec("EAGLE"), is_draft_worker=False, server_args=NS(speculative_eagle_topk=4))
    assert "--speculative-eagle-topk 4 drafts a tree" in problem(tree)
    adaptive = NS(spec_algorithm=_spec("EAGLE"), is_draft_worker=False,
                  server_args=NS(speculative_eagle_topk=1, speculative_adaptive=True))
    assert "--speculative-adaptive" in problem(adaptive)
    assert "0.5.23" in problem(target, version="0.5.16")
    assert "MLA" in problem(target, NS(use_mla=True, topk=1, decode_uses_page_table=True, _use_unified_verify=True))
    old = NS(use_mla=False, topk=1, use_triton_unified_attention=True, _use_unified_verify=False)
    assert "0.5.23" in problem(target, old)
    # a plugin's algorithm (SGLang's CustomSpecAlgo has a name and is_none)
    plugin = NS(name="MY_SPEC", is_none=lambda: False)
    assert "does not know" in problem(NS(spec_algorithm=plugin, is_draft_worker=False, server_args=chain))


def test_a_5d_draft_pool_stops_the_backend(monkeypatch, overlay):
    from sglang_kv5d.activation import Kv5dNotReadyError
    from sglang_kv5d.patches import fail_closed

    enable_5d(monkeypatch)
    pool = make_mha_pool(page_size=PAGE, head_num=1, head_dim=D)  # 5D: built outside a draft scope
    backend = make_aiter_backend(pool, num_q_heads=HQ, num_kv_heads=1, head_dim=D, page_size=PAGE)
    runner = NS(spec_algorithm=_spec("DFLASH"), is_draft_worker=True, token_to_kv_pool=pool)
    with pytest.raises(Kv5dNotReadyError, match="draft worker's KV pool is SHUFFLE 5D"):
        fail_closed._check_speculative(backend, runner)
    runner.is_draft_worker = False  # the same pool as a target: verify is served
    fail_closed._check_speculative(backend, runner)
