"""Verify page tables at the context limit (target-verify-5d's table builder), on real SGLang 0.5.23 classes.

Upstream's ``_build_verify_unified_metadata`` sizes each row
``cdiv(max_context_len, page)`` and writes ``cdiv(seq_len + N, page)`` block
ids: a request at the limit writes into the next row. These tests show that on
the real backend (eager and CUDA-graph metadata paths, the SWA table too), then
that the overlay's tables are wide enough, stay in their rows and leave every
other row and buffer untouched, and that verify attention at the limit equals
float64 for every request.
"""

from __future__ import annotations

import importlib
import inspect
import math
from types import SimpleNamespace as NS

import pytest
import torch

import sglang_kv5d
from sglang_kv5d.kernels.fp8_reference import quantize_fp8_fp32
from sglang_kv5d.patches import target_verify
from sglang_kv5d.speculative import verify
from sglang_kv5d.speculative.verify_tables import build_verify_page_tables, verify_table_width
from tests.helpers.backend import make_aiter_backend
from tests.helpers.pools import enable_5d, make_hybrid_pool, make_swa_pool, read_tokens, ref_attention
from tests.helpers.subproc import sglang_version
from sglang_kv5d.versions import parse_version

PAGE, HQ, D, CTX, N = 16, 4, 64, 64, 4
FP8 = torch.float8_e4m3fn
POISON = -7

needs_0523 = pytest.mark.skipif(parse_version(sglang_version()) < parse_version("0.5.23"),
                                reason="the 5D verify path (decode_uses_page_table) exists from SGLang 0.5.23")


# ---------------------------------------------------------------------------
# the builder on its own


def _expected(r2t, rp, seq, n, page, width):
    out = torch.zeros(len(rp), width, dtype=torch.int32)
    for i, (r, s) in enumerate(zip(rp.tolist(), seq.tolist())):
        pages = max(0, min(-(-(s + n) // page), width, -(-r2t.shape[1] // page)))
        for j in range(pages):
            out[i, j] = r2t[r, j * page] // page
    return out


def test_width_is_context_plus_drafts():
    assert verify_table_width(64, 4, 16) == 5 and verify_table_width(64, 0, 16) == 4
    assert verify_table_width(262144, 16, 64) == 4097
    with pytest.raises(ValueError, match="page_size > 0"):
        verify_table_width(64, 4, 0)


def test_builder_fills_each_row_and_never_leaves_it():
    gen = torch.Generator().manual_seed(3)
    r2t = torch.randint(0, 4096, (6, CTX + 4 + N), generator=gen, dtype=torch.int32)
    width = verify_table_width(CTX, N, PAGE)
    seq = torch.tensor([CTX - 1, 0, 17, CTX - 1])
    rp = torch.tensor([5, 0, 3, 2])
    out = torch.full((6, width), POISON, dtype=torch.int32)
    mapping = torch.randperm(4096, generator=gen)
    swa = torch.full((6, width), POISON, dtype=torch.int32)
    table, swa_table = build_verify_page_tables(r2t, rp, seq, N, PAGE, out, swa_mapping=mapping, swa_out=swa)
    assert table.data_ptr() == out.data_ptr() and table.shape == (4, width)
    assert torch.equal(table, _expected(r2t, rp, seq, N, PAGE, width))
    assert (out[4:] == POISON).all() and (swa[4:] == POISON).all()  # rows past bs untouched
    exp_swa = _expected(mapping[r2t.long()].to(torch.int32), rp, seq, N, PAGE, width)
    assert torch.equal(swa_table, exp_swa)


def test_builder_clamps_hostile_metadata():
    r2t = torch.arange(2 * 40, dtype=torch.int32).reshape(2, 40)
    out = torch.full((3, 8), POISON, dtype=torch.int32)
    seq = torch.tensor([10**9, -50, 7])  # past every row, negative, fine
    rp = torch.tensor([1, -3, 99])  # clamped to rows 1, 0, 1
    table, _ = build_verify_page_tables(r2t, rp, seq, 2, PAGE, out)
    pages_row = -(-40 // PAGE)  # req_to_token names 3 pages per row
    assert table[0, :pages_row].tolist() == [r2t[1, j * PAGE].item() // PAGE for j in range(pages_row)]
    assert (table[0, pages_row:] == 0).all() and (table[1] == 0).all()
    assert table[2, 0].item() == r2t[1, 0].item() // PAGE and (table[2, 1:] == 0).all()
    with pytest.raises(ValueError, match="fewer than 3 rows"):
        build_verify_page_tables(r2t, rp, seq, 2, PAGE, torch.zeros(2, 8, dtype=torch.int32))
    with pytest.raises(ValueError, match="both swa_mapping and swa_out"):
        build_verify_page_tables(r2t, rp, seq, 2, PAGE, out, swa_mapping=torch.arange(10))


# ---------------------------------------------------------------------------
# the real backend: upstream overflows, the overlay does not


@pytest.fixture
def overlay():
    for module in ("sglang.srt.mem_cache.kv_cache_configurator", "sglang.srt.layers.attention.aiter_backend"):
        importlib.import_module(module)
    st = sglang_kv5d.activate()
    assert st.patch("target-verify-5d").state == "applied", st.patch("target-verify-5d")
    yield st
    sglang_kv5d.deactivate()


def _mode():
    return importlib.import_module("sglang.srt.model_executor.forward_batch_info").ForwardMode


def _backend(monkeypatch, pool, max_bs=4):
    backend = make_aiter_backend(pool, num_q_heads=HQ, num_kv_heads=1, head_dim=D, page_size=PAGE,
                                 context_len=CTX, max_bs=max_bs)
    assert getattr(backend, target_verify.FLAG)
    backend.num_draft_tokens = N  # what the server's spec config gives the target backend
    mp = importlib.import_module("sglang.srt.mem_cache.memory_pool")
    # SGLang's own request table: rows context_len + 4 + num_draft_tokens wide (kv_cache_configurator)
    backend.req_to_token = mp.ReqToTokenPool(size=max_bs, max_context_len=CTX + 4 + N, device="cpu",
                                             enable_memory_saver=False).req_to_token
    ab = importlib.import_module("sglang.srt.layers.attention.aiter_backend")
    monkeypatch.setattr(ab, "reset_verify_attn_plan_cache", lambda: None, raising=False)  # imported on HIP only
    return backend


def _pages(bs, seq):
    """Distinct pages per request (request r owns pages 1 + r*8 ..), slots for prefix + drafts."""
    return {r: [1 + r * 8 + j for j in range(-(-(seq[r] + N) // PAGE))] for r in range(bs)}


def _fill_req_to_token(backend, seq):
    pages = _pages(len(seq), seq)
    slot = lambda r, p: pages[r][p // PAGE] * PAGE + p % PAGE  # noqa: E731
    backend.req_to_token.zero_()
    for r, s in enumerate(seq):
        backend.req_to_token[r, : s + N] = torch.tensor([slot(r, p) for p in range(s + N)], dtype=torch.int32)
    return pages, slot


def _batch(seq, out_loc=None):
    bs = len(seq)
    return NS(batch_size=bs, forward_mode=_mode().TARGET_VERIFY, spec_info=NS(draft_token_num=N, custom_mask=None),
              req_pool_indices=torch.arange(bs), seq_lens=torch.tensor(seq), seq_lens_cpu=torch.tensor(seq),
              seq_lens_sum=sum(seq), input_ids=torch.zeros(bs * N, dtype=torch.int64), out_cache_loc=out_loc,
              out_cache_loc_is_physical=False, attn_attend_prefix_cache=False, encoder_out_cache_loc=None)


def _revert(mp, cls, name):
    """Put upstream's function back on ``cls`` (the overlay's wrapt wrapper keeps it as __wrapped__).

    ``mp`` must be undone before the overlay deactivates (a ``monkeypatch.context()``): undone
    after, it would put the wrapper back on a class the overlay has already restored."""
    mp.setattr(cls, name, inspect.getattr_static(cls, name).__wrapped__)


SEQ = [5, CTX - 1]  # the second (last) request is at the limit: seq_len + N drafts needs 5 pages of 16


@needs_0523
def test_upstream_graph_tables_overflow_into_the_next_row(monkeypatch, overlay):
    enable_5d(monkeypatch)
    backend = _backend(monkeypatch, make_hybrid_pool(dtype=FP8, page_size=PAGE, head_num=1, head_dim=D, size=1024))
    backend.init_cuda_graph_state(4, 4 * N)
    pages, _ = _fill_req_to_token(backend, SEQ)
    backend.cuda_graph_page_table.fill_(POISON)
    with monkeypatch.context() as mp:
        _revert(mp, type(backend), "_build_verify_unified_metadata")
        backend.init_forward_metadata_out_graph(_batch(SEQ), in_capture=False)
    assert hasattr(inspect.getattr_static(type(backend), "_build_verify_unified_metadata"), "__wrapped__")
    width = backend.cuda_graph_page_table.shape[1]
    assert width == CTX // PAGE  # upstream: cdiv(max_context_len, page)
    # request 1's fifth page id lands in row 2 (a row no request owns): the overflow
    assert backend.cuda_graph_page_table[2, 0].item() == pages[1][4]


@needs_0523
@pytest.mark.parametrize("path", ["eager", "graph"])
def test_overlay_tables_fit_at_the_limit(monkeypatch, overlay, path):
    enable_5d(monkeypatch)
    pool = make_swa_pool(dtype=torch.bfloat16, page_size=PAGE, head_num=1, head_dim=D, size=1024, size_swa=1024)
    pool.register_mapping(torch.arange(2048, dtype=torch.int64))  # the SWA allocator does this in a server
    backend = _backend(monkeypatch, pool)
    assert backend.use_sliding_window_kv_pool
    width = verify_table_width(CTX, N, PAGE)
    seq = [CTX - 1, 5, CTX - 1]  # at the limit, a neighbour, at the limit in the last row
    pages, _ = _fill_req_to_token(backend, seq)
    if path == "graph":
        backend.init_cuda_graph_state(4, 4 * N)
        for buf in (backend.cuda_graph_page_table, backend.cuda_graph_swa_page_table,
                    getattr(backend, target_verify.GRAPH_TABLE), getattr(backend, target_verify.GRAPH_SWA_TABLE)):
            buf.fill_(POISON)
        backend.init_forward_metadata_out_graph(_batch(seq), in_capture=False)
        graph = getattr(backend, target_verify.GRAPH_TABLE)
        assert backend.forward_metadata.kv_indices.data_ptr() == graph.data_ptr()  # capture = replay storage
        assert (graph[len(seq):] == POISON).all()
        assert (getattr(backend, target_verify.GRAPH_SWA_TABLE)[len(seq):] == POISON).all()
        assert (backend.cuda_graph_page_table == POISON).all()  # upstream's narrow buffers are not used
    else:
        backend.init_forward_metadata(_batch(seq))
    meta = backend.forward_metadata
    for table in (meta.kv_indices, meta.swa_page_table):
        assert table.shape == (len(seq), width)
        for r, s in enumerate(seq):
            assert table[r].tolist() == pages[r] + [0] * (width - len(pages[r])), (path, r)


@needs_0523
def test_graph_table_too_narrow_for_the_drafts_is_refused(monkeypatch, overlay):
    enable_5d(monkeypatch)
    backend = _backend(monkeypatch, make_hybrid_pool(dtype=FP8, page_size=PAGE, head_num=1, head_dim=D, size=1024))
    backend.num_draft_tokens = None  # the graph tables are sized for no drafts; the batch has N
    backend.init_cuda_graph_state(4, 4 * N)
    backend.num_draft_tokens = N
    _fill_req_to_token(backend, SEQ)
    with pytest.raises(verify.VerifyLayoutError, match=r"needs a \(2, 5\) page table"):
        backend.init_forward_metadata_out_graph(_batch(SEQ), in_capture=False)


def _layer(lid, fp8):
    ks = torch.tensor([0.75], dtype=torch.float32) if fp8 else None
    vs = torch.tensor([1.25], dtype=torch.float32) if fp8 else None
    return NS(layer_id=lid, tp_q_head_num=HQ, tp_k_head_num=1, tp_v_head_num=1, qk_head_dim=D, v_head_dim=D,
              scaling=1.0 / math.sqrt(D), sliding_window_size=-1, logit_cap=0.0, k_scale=ks, v_scale=vs,
              is_cross_attention=False)


def _logical(x, fp8, scale):
    if not fp8:
        return x.double()
    return quantize_fp8_fp32(x.float(), float(scale), FP8).view(FP8).double() * float(scale)


@needs_0523
@pytest.mark.parametrize("path", ["eager", "graph"])
def test_verify_at_the_limit_matches_float64_for_every_request(monkeypatch, overlay, path):
    enable_5d(monkeypatch)
    pool = make_hybrid_pool(dtype=FP8, page_size=PAGE, head_num=1, head_dim=D, size=1024)
    backend = _backend(monkeypatch, pool)
    backend.kv_cache_dtype = FP8
    seq = [CTX - 1, 9, CTX - 1]
    bs = len(seq)
    _, slot = _fill_req_to_token(backend, seq)
    mp = importlib.import_module("sglang.srt.mem_cache.memory_pool")
    gen = torch.Generator().manual_seed(11)
    layer = _layer(3, True)
    prefix_kv = []
    for r, s in enumerate(seq):
        k = (torch.randn(s, 1, D, generator=gen) * 2).bfloat16()
        v = (torch.randn(s, 1, D, generator=gen) * 2).bfloat16()
        loc = torch.tensor([slot(r, p) for p in range(s)])
        pool.set_kv_buffer(layer, mp.KVWriteLoc(loc=loc, swa_loc=loc), k, v, layer.k_scale, layer.v_scale)
        prefix_kv.append((_logical(k, True, 0.75), _logical(v, True, 1.25)))
    draft_loc = torch.tensor([slot(r, seq[r] + i) for r in range(bs) for i in range(N)])
    fb = _batch(seq, draft_loc)
    if path == "graph":
        backend.init_cuda_graph_state(4, 4 * N)
        backend.init_forward_metadata_out_graph(fb, in_capture=False)
    else:
        backend.init_forward_metadata(fb)
    q = (torch.randn(bs * N, HQ, D, generator=gen) * 1.5).bfloat16()
    k = (torch.randn(bs * N, 1, D, generator=gen) * 2).bfloat16()
    v = (torch.randn(bs * N, 1, D, generator=gen) * 2).bfloat16()
    out = backend.forward_extend(q.reshape(bs * N, -1), k, v, layer, fb)
    from sglang_kv5d.pools import resolve_kv_subpool

    leaf, local = resolve_kv_subpool(pool, layer.layer_id)
    got_k, _ = read_tokens(leaf, local, draft_loc, 0.75, 1.25)
    assert torch.equal(got_k, _logical(k, True, 0.75).reshape(got_k.shape))
    for r, s in enumerate(seq):
        lk, lv = prefix_kv[r]
        keys = torch.cat([lk, _logical(k[r * N:(r + 1) * N], True, 0.75)])
        vals = torch.cat([lv, _logical(v[r * N:(r + 1) * N], True, 1.25)])
        ref = ref_attention(q[r * N:(r + 1) * N].double(), keys, vals, torch.arange(s, s + N),
                            sm_scale=layer.scaling, sliding_window=-1)
        got = out[r * N:(r + 1) * N].double().reshape(ref.shape)
        err = (got - ref).abs().max().item()
        assert err < 2e-2 * max(1.0, ref.abs().max().item()), (path, r, err)


@needs_0523
def test_deactivate_restores_the_table_builders(overlay):
    ab = importlib.import_module("sglang.srt.layers.attention.aiter_backend")
    cls = ab.AiterAttnBackend
    assert hasattr(inspect.getattr_static(cls, "_build_verify_unified_metadata"), "__wrapped__")
    originals = {n: inspect.getattr_static(cls, n).__wrapped__
                 for n in ("_build_verify_unified_metadata", "init_cuda_graph_state")}
    sglang_kv5d.deactivate()
    for name, fn in originals.items():
        assert inspect.getattr_static(cls, name) is fn, name
    sglang_kv5d.activate()  # the fixture deactivates again
