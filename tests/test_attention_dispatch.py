"""5D attention dispatch (sglang_kv5d.attention) over REAL SGLang pools on CPU.

aiter is the fake under tests/fake_aiter (float64 results, strict keyword-only
mode); the portable kernels are replaced by float64 stand-ins
(tests/helpers/pools.PortableRecorder) unless a test says otherwise.
Runs on SGLang 0.5.23 and 0.5.16.
"""

from __future__ import annotations

import inspect
import logging
from types import SimpleNamespace

import pytest
import torch

import sglang_kv5d.kernels as kernels
from sglang_kv5d import attention as attn
from sglang_kv5d import config
from sglang_kv5d.pools import PoolLayoutError, resolve_kv_subpool
from tests.helpers import pools as hp
from tests.helpers.fake_aiter import fake_aiter, no_aiter  # noqa: F401  (fixtures)

FP8 = torch.float8_e4m3fn
BF16 = torch.bfloat16


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    monkeypatch.delenv(config.ATTN_IMPL, raising=False)
    attn.reset_state()
    yield
    attn.reset_state()


@pytest.fixture
def portable(monkeypatch):
    rec = hp.PortableRecorder()
    # setitem on the module dict: setattr would first read the lazy attribute and
    # import the Triton module (possibly without TRITON_INTERPRET)
    monkeypatch.setitem(vars(kernels), "decode_attention_5d", rec.decode_attention_5d)
    monkeypatch.setitem(vars(kernels), "extend_attention_5d", rec.extend_attention_5d)
    return rec


@pytest.fixture
def strict_aiter(fake_aiter):
    fake_aiter._fake.set_strict(True)
    return fake_aiter


# ---------------------------------------------------------------- scenarios


def _cdiv(a, b):
    return -(-a // b)


def build(monkeypatch, *, kind="hybrid", dtype=BF16, hq=8, hkv=2, d=64, page=16, lens=(5, 40, 17),
          prefix=None, window=-1, cap=0.0, k_scale=None, v_scale=None, mode="decode", table="2d",
          seed=0, sm_scale=0.125):
    """A pool with K/V written for ``lens`` tokens per request, plus SGLang-shaped
    backend / forward_batch / layer objects, the query and a float64 reference."""
    hp.enable_5d(monkeypatch)
    g = torch.Generator().manual_seed(seed)
    size = 1024
    if kind == "hybrid":
        pool = hp.make_hybrid_pool(num_layers=8, dtype=dtype, page_size=page, head_num=hkv, head_dim=d, size=size)
        layer_id = 7
    elif kind == "swa":
        pool = hp.make_swa_pool(dtype=dtype, page_size=page, head_num=hkv, head_dim=d, size=size, size_swa=size)
        layer_id = 2 if window >= 0 else 3
    elif kind == "mha":
        pool = hp.make_mha_pool(dtype=dtype, page_size=page, head_num=hkv, head_dim=d, size=size, layer_num=2)
        layer_id = 1
    elif kind == "nested":
        pool = hp.make_nested_pool(dtype=dtype, page_size=page, head_dim=d)
        layer_id = 11 if window >= 0 else 15
    else:
        raise ValueError(kind)
    sub, local = resolve_kv_subpool(pool, layer_id)

    bs = len(lens)
    nblocks = [_cdiv(n, page) for n in lens]
    page_ids = (torch.randperm(sum(nblocks) + 4, generator=g)[: sum(nblocks)] + 1).tolist()
    rows, i = [], 0
    for nb in nblocks:
        rows.append(page_ids[i : i + nb])
        i += nb
    ks = 1.0 if k_scale is None else k_scale
    vs = 1.0 if v_scale is None else v_scale
    k_log, v_log, slots = [], [], []
    for b, n in enumerate(lens):
        t = torch.arange(n)
        s = torch.tensor(rows[b])[t // page] * page + t % page
        k = torch.randn(n, hkv, d, generator=g).to(BF16).double()
        v = torch.randn(n, hkv, d, generator=g).to(BF16).double()
        hp.write_tokens(sub, local, s, (k / ks).float(), (v / vs).float())
        kl, vl = hp.read_tokens(sub, local, s, ks, vs)
        k_log.append((k, kl))
        v_log.append((v, vl))
        slots.append(s)
    flat_slots = torch.cat(slots).to(torch.int32)
    kv_indptr = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32)
    width = _cdiv(max(lens), page)
    table2d = torch.zeros(bs, width, dtype=torch.int32)
    for b, r in enumerate(rows):
        table2d[b, : len(r)] = torch.tensor(r, dtype=torch.int32)

    layer = hp_layer(hq, hkv, d, layer_id, window, cap, sm_scale)
    if k_scale is not None:
        layer.k_scale = torch.tensor(k_scale, dtype=torch.float32)
    if v_scale is not None:
        layer.v_scale = torch.tensor(v_scale, dtype=torch.float32)

    is_swa_layer = kind in ("swa",) and window >= 0
    if mode == "decode":
        qlens = [1] * bs
        prefix = [n - 1 for n in lens]
    else:
        prefix = list(prefix) if prefix is not None else [0] * bs
        qlens = [n - p for n, p in zip(lens, prefix)]
    qo_indptr = torch.tensor([0] + torch.tensor(qlens).cumsum(0).tolist(), dtype=torch.int32)
    q = torch.randn(sum(qlens), hq * d, generator=g).to(BF16)

    if mode == "decode":
        kv_indices = table2d if table == "2d" else flat_slots
    else:
        kv_indices = flat_slots
    # the other table (full vs swa) holds nonsense for the layer under test
    decoy = torch.zeros_like(kv_indices)
    meta = SimpleNamespace(
        kv_indptr=kv_indptr,
        kv_indices=decoy if is_swa_layer else kv_indices,
        swa_page_table=kv_indices if is_swa_layer else None,
        qo_indptr=qo_indptr,
        max_q_len=max(qlens),
        max_kv_len=max(lens),
    )
    backend = SimpleNamespace(
        token_to_kv_pool=pool,
        forward_metadata=meta,
        input_dtype=BF16,
        k_scale=torch.tensor([1.0]),
        v_scale=torch.tensor([1.0]),
    )
    fb = SimpleNamespace(
        batch_size=bs,
        seq_lens=torch.tensor(lens, dtype=torch.int64),
        seq_lens_sum=sum(lens),
        seq_lens_cpu=torch.tensor(lens, dtype=torch.int64),
        extend_prefix_lens_cpu=prefix if mode != "decode" else None,
    )
    # new tokens' k / v (as the model computed them, before any fp8 rounding)
    k_new = torch.cat([k[0][p:] for k, p in zip(k_log, prefix)]).to(BF16).reshape(-1, hkv * d)
    v_new = torch.cat([v[0][p:] for v, p in zip(v_log, prefix)]).to(BF16).reshape(-1, hkv * d)

    def reference(*, use_fresh=False, sinks=None, q_override=None):
        qq = q if q_override is None else q_override
        outs = []
        for b, n in enumerate(lens):
            kk = k_log[b][0] if use_fresh else k_log[b][1]
            vv = v_log[b][0] if use_fresh else v_log[b][1]
            qb = qq[int(qo_indptr[b]) : int(qo_indptr[b + 1])].reshape(-1, hq, d)
            outs.append(hp.ref_attention(qb, kk, vv, list(range(prefix[b], n)), sm_scale=sm_scale,
                                         sliding_window=window, sinks=sinks, logit_cap=cap))
        return torch.cat(outs).reshape(-1, hq * d)

    return SimpleNamespace(pool=pool, sub=sub, local=local, layer=layer, backend=backend, fb=fb, q=q,
                           k_new=k_new, v_new=v_new, reference=reference, bs=bs, hq=hq, hkv=hkv, d=d,
                           page=page, window=window, meta=meta)


def hp_layer(hq, hkv, d, layer_id, window, cap, sm_scale):
    from sglang.srt.layers.radix_attention import RadixAttention

    return RadixAttention(num_heads=hq, head_dim=d, scaling=sm_scale, num_kv_heads=hkv, layer_id=layer_id,
                          sliding_window_size=window, logit_cap=cap)


def run_decode(s, sinks=None, k_cache="pool"):
    o = torch.empty(s.bs, s.hq * s.d, dtype=BF16)
    if k_cache == "pool":
        kc, vc = s.pool.get_kv_buffer(s.layer.layer_id)
    else:
        kc = vc = None
    assert attn.forward_decode_vectorized_5d(s.backend, s.q, s.layer, s.fb, kc, vc, o, sinks) is None
    return o


def run_extend(s, sinks=None):
    window_size = (s.window, -1) if s.window >= 0 else (-1, -1)
    return attn.forward_extend_vectorized_5d(s.backend, s.q, s.k_new, s.v_new, s.layer, s.fb, s.bs + 1,
                                             window_size, sinks)


def close(out, ref, tol=2e-2):
    torch.testing.assert_close(out.double(), ref, atol=tol, rtol=tol)


def _fake_params(fn):
    return list(inspect.signature(fn).parameters)


# ------------------------------------------------------------------ decode


@pytest.mark.parametrize("dtype,k_scale,v_scale", [(BF16, None, None), (FP8, 0.5, 0.25), (FP8, None, None)])
def test_decode_aiter_keywords_scales_numbers(monkeypatch, strict_aiter, portable, dtype, k_scale, v_scale):
    s = build(monkeypatch, dtype=dtype, k_scale=k_scale, v_scale=v_scale)
    o = run_decode(s)
    calls = strict_aiter._fake.calls("pa_decode_gluon")
    assert len(calls) == 1 and not portable.calls
    c = calls[0]
    from aiter.ops.triton.gluon.pa_decode_gluon import pa_decode_gluon

    assert c.args == () and sorted(c.kwargs) == sorted(_fake_params(pa_decode_gluon))
    kw = c.kwargs
    assert kw["query_scale"] is None and kw["ps"] is True and kw["context_partition_size"] == 256
    assert kw["compute_type"] == torch.bfloat16 and kw["query_length"] == 1
    assert kw["temporary_output"].dtype == torch.bfloat16
    assert kw["sliding_window"] == 0 and kw["alibi_slopes"] is None
    assert kw["max_context_partition_num"] == 8  # get_recommended_splits(3, 2) on 304 CUs
    assert strict_aiter._fake.calls("get_recommended_splits")[-1].kwargs == {"num_sequences": 3, "num_kv_heads": 2}
    assert kw["block_tables"].dtype == torch.int32 and kw["context_lengths"].dtype == torch.int32
    if dtype == FP8:
        assert kw["key_cache"].dtype == FP8
        for name, want in (("key_scale", k_scale or 1.0), ("value_scale", v_scale or 1.0)):
            t = kw[name]
            assert t.dtype == torch.float32 and tuple(t.shape) == (1,) and t.device == s.q.device
            assert float(t) == want
    else:
        assert kw["key_scale"] is None and kw["value_scale"] is None
    close(o, s.reference())


def test_decode_flat_token_table(monkeypatch, strict_aiter, portable):
    """Decode metadata without a page table (SGLang <= 0.5.22 w/o unified attention)."""
    s = build(monkeypatch, table="flat", lens=(1, 16, 17, 33))
    o = run_decode(s)
    bt = strict_aiter._fake.calls("pa_decode_gluon")[0].kwargs["block_tables"]
    assert bt.shape == (4, 3)
    close(o, s.reference())


def test_decode_swa_layer_window_and_sinks(monkeypatch, strict_aiter, portable):
    s = build(monkeypatch, kind="swa", window=7, lens=(30, 9, 41))
    sinks = torch.linspace(-1.0, 1.0, s.hq)
    o = run_decode(s, sinks=sinks)
    kw = strict_aiter._fake.calls("pa_decode_gluon")[0].kwargs
    assert kw["sliding_window"] == 7 + 2 and kw["max_context_partition_num"] == 1
    assert kw["sinks"] is sinks
    assert kw["key_cache"].data_ptr() == s.pool.swa_kv_pool.k_buffer[1].data_ptr()
    close(o, s.reference(sinks=sinks))


def test_decode_nested_pool(monkeypatch, strict_aiter, portable):
    s = build(monkeypatch, kind="nested", lens=(12, 3))
    close(run_decode(s), s.reference())


def test_decode_logit_cap_uses_portable_once(monkeypatch, strict_aiter, portable, caplog):
    s = build(monkeypatch, cap=3.0)
    with caplog.at_level(logging.WARNING, logger="sglang_kv5d.attention"):
        close(run_decode(s), s.reference())
        close(run_decode(s), s.reference())
    assert not strict_aiter._fake.calls("pa_decode_gluon")
    assert len(portable.calls) == 2 and portable.calls[0][1]["logit_cap"] == 3.0
    assert len([r for r in caplog.records if "soft-cap" in r.getMessage()]) == 1
    # the portable path takes SGLang's int64 seq_lens as they are (no cast kernel per layer)
    lens = portable.calls[0][1]["context_lens"]
    assert lens.dtype == torch.int64 and lens.data_ptr() == s.fb.seq_lens.data_ptr()


def test_decode_no_matching_kernel_falls_back_once(monkeypatch, strict_aiter, portable, caplog):
    s = build(monkeypatch, dtype=FP8, k_scale=0.5, v_scale=0.5)
    strict_aiter._fake.inject_error(
        "pa_decode_gluon", RuntimeError("invalid argument for pa: no matching kernel found (page_size=16)"))
    with caplog.at_level(logging.WARNING, logger="sglang_kv5d.attention"):
        o1 = run_decode(s)
        o2 = run_decode(s)
    assert len(strict_aiter._fake.calls("pa_decode_gluon")) == 1  # tried once, then remembered
    assert len(portable.calls) == 2
    warns = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warns) == 1 and "pa_decode_gluon" in warns[0] and "no matching kernel" in warns[0]
    assert "float8_e4m3fn" in warns[0] and "page 16" in warns[0]
    (key, reason), = attn.fallback_configs().items()
    assert key.function == "pa_decode_gluon" and key.kv_dtype == "float8_e4m3fn" and key.page_size == 16
    kw = portable.calls[0][1]
    assert kw["fp8_dtype"] == FP8 and float(kw["k_scale"]) == 0.5 and kw["sliding_window"] == -1
    close(o1, s.reference())
    close(o2, s.reference())
    # another configuration still goes to aiter
    strict_aiter._fake.reset()
    strict_aiter._fake.set_strict(True)
    s2 = build(monkeypatch, dtype=BF16)
    close(run_decode(s2), s2.reference())
    assert len(strict_aiter._fake.calls("pa_decode_gluon")) == 1


def test_other_aiter_errors_propagate(monkeypatch, strict_aiter, portable):
    s = build(monkeypatch)
    strict_aiter._fake.inject_error("pa_decode_gluon", RuntimeError("HIP error: out of memory"))
    with pytest.raises(RuntimeError, match="out of memory"):
        run_decode(s)
    assert not attn.fallback_configs() and not portable.calls


@pytest.mark.parametrize("mode", ["aiter", "auto"])
def test_missing_aiter_function(monkeypatch, strict_aiter, portable, caplog, mode):
    import aiter.ops.triton.gluon.pa_decode_gluon as pdg

    monkeypatch.setenv(config.ATTN_IMPL, mode)
    monkeypatch.delattr(pdg, "pa_decode_gluon")
    s = build(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="sglang_kv5d.attention"):
        close(run_decode(s), s.reference())
        close(run_decode(s), s.reference())
    warns = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    if mode == "aiter":  # asked for aiter explicitly: say once that it cannot be used
        assert len(warns) == 1 and "aiter has no pa_decode_gluon" in warns[0]
    else:
        assert warns == []
    assert len(portable.calls) == 2


def test_triton_env_uses_portable(monkeypatch, strict_aiter, portable):
    monkeypatch.setenv(config.ATTN_IMPL, "triton")
    s = build(monkeypatch, dtype=FP8, k_scale=2.0, v_scale=0.5)
    close(run_decode(s), s.reference())
    e = build(monkeypatch, dtype=FP8, k_scale=2.0, v_scale=0.5, mode="extend", prefix=(2, 0, 10))
    close(run_extend(e), e.reference(), tol=3e-2)
    assert strict_aiter._fake.CALLS == []
    assert [c[0] for c in portable.calls] == ["decode", "extend"]


def test_auto_without_aiter_uses_portable(monkeypatch, no_aiter, portable, caplog):
    s = build(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="sglang_kv5d.attention"):
        close(run_decode(s), s.reference())
    assert len(portable.calls) == 1 and not caplog.records


def test_invalid_impl_env(monkeypatch, no_aiter, portable, caplog):
    # An invalid value means auto, with a warning naming it; no error at the first attention call.
    monkeypatch.setenv(config.ATTN_IMPL, "cuda")
    s = build(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="sglang_kv5d.attention"):
        close(run_decode(s), s.reference())
    assert len(portable.calls) == 1
    assert any("SGLANG_KV5D_ATTN_IMPL='cuda'" in r.getMessage() and "assuming auto" in r.getMessage()
               for r in caplog.records), caplog.records


def test_nhd_pool_is_refused(monkeypatch, strict_aiter, portable):
    pool = hp.make_hybrid_pool(num_layers=8)  # NHD: no enable_5d
    layer = hp_layer(8, 1, 64, 7, -1, 0.0, 0.125)
    backend = SimpleNamespace(token_to_kv_pool=pool, forward_metadata=SimpleNamespace())
    fb = SimpleNamespace(batch_size=1)
    o = torch.empty(1, 8 * 64, dtype=BF16)
    with pytest.raises(PoolLayoutError, match="not SHUFFLE 5D"):
        attn.forward_decode_vectorized_5d(backend, torch.zeros(1, 512, dtype=BF16), layer, fb, None, None, o, None)


# ------------------------------------------------------------------ extend


@pytest.mark.parametrize("dtype,scales", [(BF16, (None, None)), (FP8, (0.5, 0.25))])
@pytest.mark.parametrize("prefix", [(0, 0, 0), (3, 0, 20)])
def test_extend_aiter_keywords_and_numbers(monkeypatch, strict_aiter, portable, dtype, scales, prefix):
    s = build(monkeypatch, dtype=dtype, mode="extend", prefix=prefix, lens=(9, 7, 33),
              k_scale=scales[0], v_scale=scales[1])
    out = run_extend(s)
    assert out.shape == (sum(s.fb.seq_lens.tolist()) - sum(prefix), s.hq * s.d) and out.dtype == BF16
    (c,) = strict_aiter._fake.calls("mha_batch_prefill_func")
    assert c.args == () and not portable.calls
    kw = c.kwargs
    assert kw["softmax_scale"] == 0.125 and kw["causal"] is True and kw["window_size"] == (-1, -1)
    assert kw["k"].dim() == 3  # LINEAR mode, page size 1
    fresh = not any(prefix)
    if dtype == FP8 and not fresh:
        assert kw["q"].dtype == FP8 and kw["k"].dtype == FP8
        for n in ("q_descale", "k_descale", "v_descale"):
            t = kw[n]
            assert t.dtype == torch.float32 and tuple(t.shape) == (1,) and t.device == s.q.device
        assert float(kw["k_descale"]) == 0.5 and float(kw["v_descale"]) == 0.25
        # exact against the dequantized fp8 query, loose against the bf16 one
        q_deq = (kw["q"].double() * float(kw["q_descale"])).reshape(s.q.shape)
        close(out, s.reference(q_override=q_deq))
        tol = 0.1
    else:
        assert all(kw.get(n) is None for n in ("q_descale", "k_descale", "v_descale"))
        tol = 2e-2
    close(out, s.reference(use_fresh=fresh), tol=tol)


@pytest.mark.parametrize("prefix", [(0, 0, 0), (3, 0, 20)])  # the fresh-prompt and the cached-prefix call
def test_extend_pads_page_indices_for_cks_read_ahead(monkeypatch, strict_aiter, portable, prefix):
    """CK's batch prefill reads page_idx[N] past the last used entry (ROCm/rocm-libraries#6932):
    both aiter calls pass the table padded with valid row ids, and the fake (which reads there as
    CK does) faults on the same call with an exactly sized table."""
    from sglang_kv5d.attention import extend, page_indices

    s = build(monkeypatch, mode="extend", prefix=prefix, lens=(9, 7, 33))
    close(run_extend(s), s.reference(use_fresh=not any(prefix)))
    kw = strict_aiter._fake.calls("mha_batch_prefill_func")[0].kwargs
    used = int(kw["kv_indptr"][-1])
    rows = kw["k"].shape[0]
    assert used == rows == (sum(s.fb.seq_lens.tolist()) - sum(prefix) if not any(prefix) else s.fb.seq_lens_sum)
    idx = kw["kv_page_indices"]
    assert idx.dtype == torch.int32 and idx.numel() == used + page_indices.CK_PAGE_TABLE_PAD == used + 256
    assert idx[:used].tolist() == list(range(used)) and set(idx[used:].tolist()) == {rows - 1}
    exact = lambda n, device, torch_mod=None: torch.arange(n, dtype=torch.int32, device=device)  # noqa: E731
    monkeypatch.setattr(extend, "linear_page_indices", exact)
    with pytest.raises(strict_aiter._fake.PageTableOverRead, match=rf"kv_page_indices\[{used}\]"):
        run_extend(s)


def test_extend_swa_layer_with_window_and_sinks(monkeypatch, strict_aiter, portable, caplog):
    """Per-head sinks: aiter's batch prefill has no kernel for them (attn.EXTEND_SINKS_UNSUPPORTED);
    the portable path serves them from the first call, with one warning; the same layer without
    sinks keeps aiter."""
    s = build(monkeypatch, kind="swa", window=5, mode="extend", prefix=(4, 10), lens=(20, 18))
    sinks = torch.linspace(-0.5, 0.5, s.hq)
    with caplog.at_level(logging.WARNING, logger="sglang_kv5d.attention"):
        out = run_extend(s, sinks=sinks)
        out2 = run_extend(s, sinks=sinks)
    assert not strict_aiter._fake.calls("mha_batch_prefill_func")
    assert [c[0] for c in portable.calls] == ["extend", "extend"] and portable.calls[0][1]["sinks"] is sinks
    warns = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warns) == 1 and "sink_ptr" in warns[0] and "sinks on" in warns[0]
    close(out, s.reference(sinks=sinks))
    close(out2, s.reference(sinks=sinks))
    close(run_extend(s), s.reference())
    kw = strict_aiter._fake.calls("mha_batch_prefill_func")[0].kwargs
    assert kw["window_size"] == (5, -1) and kw["sink_ptr"] is None


def test_extend_reads_legacy_backend_qo_indptr(monkeypatch, strict_aiter, portable):
    """SGLang <= 0.5.22 keeps qo_indptr on the backend, not in forward_metadata."""
    s = build(monkeypatch, mode="extend", prefix=(1, 2, 3))
    s.backend.qo_indptr = s.meta.qo_indptr
    del s.meta.qo_indptr
    close(run_extend(s), s.reference())


def test_extend_no_matching_kernel_falls_back_once(monkeypatch, strict_aiter, portable, caplog):
    monkeypatch.setattr(strict_aiter._fake, "PREFILL_PAGE_SIZES", {16, 1024})  # no linear instance
    s = build(monkeypatch, dtype=FP8, mode="extend", prefix=(3, 0, 20), lens=(9, 7, 33), k_scale=0.5, v_scale=2.0)
    with caplog.at_level(logging.WARNING, logger="sglang_kv5d.attention"):
        out1 = run_extend(s)
        out2 = run_extend(s)
    assert len(strict_aiter._fake.calls("mha_batch_prefill_func")) == 1
    warns = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warns) == 1 and "mha_batch_prefill_func" in warns[0] and "no matching kernel" in warns[0]
    assert [c[0] for c in portable.calls] == ["extend", "extend"]
    kw = portable.calls[0][1]
    assert kw["block_tables"].dtype == torch.int32 and kw["fp8_dtype"] == FP8
    assert kw["qo_indptr"].tolist() == [0, 6, 13, 26] and kw["kv_lens"].tolist() == [9, 7, 33]
    close(out1, s.reference())
    close(out2, s.reference())


# ------------------------------------------------------- wait before read


@pytest.mark.parametrize("fn", ["decode", "extend"])
def test_wait_before_any_read(monkeypatch, strict_aiter, portable, fn):
    s = build(monkeypatch, mode=fn, prefix=(2, 5, 1) if fn == "extend" else None)
    log = hp.record_waits_and_reads(s.pool, hp.layer_done_counter(8, monkeypatch))
    if fn == "decode":
        out = run_decode(s, k_cache=None)
    else:
        out = run_extend(s)
    assert log[0] == ("wait", 7), log
    assert [e for e in log if e[0] == "wait"] == [("wait", 7)]
    assert any(e[0] == "read" for e in log[1:])
    close(out, s.reference())


def test_decode_with_callers_caches_checks_identity(monkeypatch, strict_aiter, portable):
    s = build(monkeypatch)
    o = torch.empty(s.bs, s.hq * s.d, dtype=BF16)
    wrong = torch.zeros(3, 2, 8, 16, 8, dtype=BF16)
    with pytest.raises(PoolLayoutError, match="not the layer's buffers"):
        attn.forward_decode_vectorized_5d(s.backend, s.q, s.layer, s.fb, wrong, wrong, o, None)


# --------------------------------------------------------------- helpers


def test_decode_sliding_window_arg():
    assert attn.decode_sliding_window_arg(-1) == 0
    assert attn.decode_sliding_window_arg(None) == 0
    assert attn.decode_sliding_window_arg(0) == 2
    assert attn.decode_sliding_window_arg(127) == 129


def test_block_table_from_token_slots():
    page = 4
    slots = torch.tensor([8, 9, 10, 11, 20, 21, 4, 5], dtype=torch.int32)  # seq0: pages 2,5; seq1: page 1
    indptr = torch.tensor([0, 6, 8], dtype=torch.int32)
    bt = attn.block_table_from_token_slots(indptr, slots, page, 2, 6)
    assert bt.dtype == torch.int32 and bt.tolist() == [[2, 5], [1, 0]]


def test_gather_5d_to_linear_roundtrip(monkeypatch):
    hp.enable_5d(monkeypatch)
    pool = hp.make_mha_pool(dtype=FP8, page_size=16, head_num=2, head_dim=32, size=128, layer_num=1)
    slots = torch.tensor([17, 3, 40, 41, 95])
    k = torch.randn(5, 2, 32)
    v = torch.randn(5, 2, 32)
    hp.write_tokens(pool, 0, slots, k, v)
    kl, vl = attn.gather_5d_to_linear(pool.k_buffer[0], pool.v_buffer[0], slots, 16)
    assert kl.dtype == torch.uint8
    torch.testing.assert_close(kl.view(FP8).float(), k.to(FP8).float())
    torch.testing.assert_close(vl.view(FP8).float(), v.to(FP8).float())


def test_quantize_per_tensor_saturates_and_scales():
    x = torch.tensor([[1.0, -900.0, 3.0]])
    q, scale = attn.quantize_per_tensor(x, FP8)
    assert scale.dtype == torch.float32 and tuple(scale.shape) == (1,)
    assert torch.isfinite(q.float()).all()
    torch.testing.assert_close(q.float() * scale, x, rtol=0.07, atol=0.07)


# ------------------------------------------- the real portable kernels (CPU)


@pytest.fixture
def real_kernels(monkeypatch):
    """sglang_kv5d.kernels' Triton kernels; under the CPU interpreter without a GPU.

    ``triton.jit`` reads TRITON_INTERPRET when the kernel module is imported, so
    the module must be (or have been) imported with it set.
    """
    import importlib
    import sys

    name = "sglang_kv5d.kernels.attention_5d"
    if not torch.cuda.is_available():
        monkeypatch.setenv("TRITON_INTERPRET", "1")  # also read at call time by the wrappers
        mod = sys.modules.get(name)
        if mod is not None and type(mod.DECODE_KERNEL).__name__ != "InterpretedFunction":
            pytest.skip("attention_5d was imported without TRITON_INTERPRET on a CPU-only host")
    mod = importlib.import_module(name)
    for n in ("decode_attention_5d", "extend_attention_5d"):
        monkeypatch.setattr(kernels, n, getattr(mod, n), raising=False)
    return mod


@pytest.mark.parametrize("dtype,scales", [(BF16, (None, None)), (FP8, (0.5, 2.0))])
def test_portable_path_with_real_kernels(monkeypatch, real_kernels, dtype, scales):
    monkeypatch.setenv(config.ATTN_IMPL, "triton")
    s = build(monkeypatch, dtype=dtype, hq=4, hkv=2, lens=(5, 20), k_scale=scales[0], v_scale=scales[1])
    close(run_decode(s), s.reference())
    e = build(monkeypatch, dtype=dtype, hq=4, hkv=2, lens=(9, 21), mode="extend", prefix=(4, 0),
              k_scale=scales[0], v_scale=scales[1])
    close(run_extend(e), e.reference())


def test_portable_window_with_real_kernels(monkeypatch, real_kernels):
    monkeypatch.setenv(config.ATTN_IMPL, "triton")
    s = build(monkeypatch, kind="swa", window=6, hq=4, hkv=2, lens=(17, 4))
    close(run_decode(s), s.reference())
    e = build(monkeypatch, kind="swa", window=6, hq=4, hkv=2, lens=(17, 12), mode="extend", prefix=(9, 0))
    close(run_extend(e), e.reference())
