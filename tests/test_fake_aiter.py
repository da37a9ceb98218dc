"""The fake aiter (tests/fake_aiter) is a faithful enough double of the real one.

* SGLang's aiter_backend / aiter_utils import with it and bind its functions;
* each fake function rejects what the real one rejects (aiter HEAD e4048607);
* its results equal an independent float64 reference.
"""

from __future__ import annotations

import inspect
import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from tests.helpers.fake_aiter import FAKE_ROOT, fake_aiter  # noqa: F401  (fixture)
from tests.helpers.pools import ref_attention

REPO = Path(__file__).resolve().parents[1]
FP8 = torch.float8_e4m3fn

PA_PARAMS = [
    "output", "query", "key_cache", "value_cache", "context_lengths", "block_tables",
    "softmax_scale", "query_length", "max_context_partition_num", "context_partition_size",
    "compute_type", "query_scale", "key_scale", "value_scale", "exp_sums", "max_logits",
    "temporary_output", "alibi_slopes", "sinks", "sliding_window", "ps",
]
MHA_PARAMS = [
    "q", "k", "v", "cu_seqlens_q", "kv_indptr", "kv_page_indices", "max_seqlen_q", "max_seqlen_k",
    "dropout_p", "softmax_scale", "logits_soft_cap", "causal", "window_size", "alibi_slopes",
    "deterministic", "return_lse", "return_attn_probs", "out", "kv_last_page_lens", "block_table",
    "seqlen_k", "q_descale", "k_descale", "v_descale", "kv_block_descale", "sink_ptr", "sink_size",
]


# ------------------------------------------------------------- SGLang imports

_IMPORT_PROBE = textwrap.dedent(
    """
    import contextlib, io, json, sys
    sys.path.insert(0, {repo!r})
    from tests.helpers.fake_aiter import fake_aiter_on_path
    out = {{}}
    with fake_aiter_on_path() as aiter:
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            import sglang.srt.layers.attention.aiter_backend as ab
            import sglang.srt.layers.attention.aiter_utils as au
        out["with_fake_stdout"] = buf.getvalue()
        out["utils_bound"] = all(getattr(getattr(au, n), "__fake_aiter__", False)
                                 for n in ("pa_decode_gluon", "get_recommended_splits", "mha_batch_prefill_func"))
        out["backend_bound"] = getattr(ab.mha_batch_prefill_func, "__fake_aiter__", False)
        out["backend_has_5d_fns"] = callable(ab.forward_decode_vectorized_5d) and callable(ab.forward_extend_vectorized_5d)
        import aiter.ops.triton.utils.types as t
        out["e4m3"] = str(t.e4m3_dtype)
    # absence: the same modules imported fresh with aiter blocked
    for name in [m for m in sys.modules if m.startswith("sglang.srt.layers.attention.aiter")
                 or m == "sglang.kernels.ops.attention.unified_attention_3d_mtp"]:
        del sys.modules[name]
    sys.modules["aiter"] = None
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        import sglang.srt.layers.attention.aiter_backend as ab2
        import sglang.srt.layers.attention.aiter_utils as au2
    out["without_stdout"] = buf.getvalue()
    out["without_none"] = au2.pa_decode_gluon is None and au2.mha_batch_prefill_func is None
    print("RESULT" + json.dumps(out))
    """
)


def test_sglang_aiter_modules_import_with_the_fake():
    code = _IMPORT_PROBE.format(repo=str(REPO))
    env = dict(os.environ)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")]
    assert proc.returncode == 0 and line, proc.stdout[-3000:] + proc.stderr[-3000:]
    res = json.loads(line[-1][len("RESULT"):])
    assert "aiter is AMD specific" not in res["with_fake_stdout"]  # no ImportError fallback taken
    assert res["utils_bound"] and res["backend_bound"] and res["backend_has_5d_fns"]
    assert res["e4m3"] == "torch.float8_e4m3fn"
    # and without aiter the upstream absence path is what the fake avoided
    assert "aiter is AMD specific" in res["without_stdout"]
    assert res["without_none"]


def test_signatures_match_aiter_head(fake_aiter):
    from aiter.ops.triton.gluon import pa_decode_gluon as pdg

    assert list(inspect.signature(pdg.pa_decode_gluon).parameters) == PA_PARAMS
    assert list(inspect.signature(fake_aiter.mha_batch_prefill_func).parameters) == MHA_PARAMS
    assert list(inspect.signature(pdg.get_recommended_splits).parameters) == [
        "num_sequences", "num_kv_heads", "split_kv_blocks"]
    sig = inspect.signature(pdg.pa_decode_gluon).parameters
    assert sig["ps"].default is True and sig["context_partition_size"].default == 256
    assert sig["query_scale"].default is None and sig["sliding_window"].default == 0
    assert inspect.signature(fake_aiter.mha_batch_prefill_func).parameters["sink_size"].default == 0
    assert Path(fake_aiter.__file__).is_relative_to(FAKE_ROOT)


def test_recommended_splits(fake_aiter):
    from aiter.ops.triton.gluon.pa_decode_gluon import get_recommended_splits

    assert get_recommended_splits(128, 1) == 5  # 608 CUs*occupancy / 128
    assert get_recommended_splits(1, 8) == 8    # capped
    assert get_recommended_splits(num_sequences=4, num_kv_heads=2, split_kv_blocks=4) == 8


# ------------------------------------------------------- decode: 5D caches

def _paged_to_5d(kp, vp):
    """[nb, page, H, D] -> SHUFFLE 5D K and V (aiter's test construction)."""
    nb, page, h, d = kp.shape
    x = 16 // kp.element_size()
    k5 = kp.view(nb, page, h, d // x, x).permute(0, 2, 3, 1, 4).contiguous()
    v5 = vp.view(nb, page // x, x, h, d).permute(0, 3, 1, 4, 2).contiguous()
    return k5, v5


def _decode_case(*, dtype=torch.bfloat16, hq=8, hkv=2, d=64, page=16, lens=(5, 40, 17), scale=(1.0, 1.0), seed=0):
    g = torch.Generator().manual_seed(seed)
    bs = len(lens)
    max_blocks = max(-(-n // page) for n in lens)
    nb = bs * max_blocks + 1
    kp = torch.randn(nb, page, hkv, d, generator=g)
    vp = torch.randn(nb, page, hkv, d, generator=g)
    if dtype == FP8:
        kp8, vp8 = (kp / scale[0]).to(FP8), (vp / scale[1]).to(FP8)
        k_log, v_log = kp8.double() * scale[0], vp8.double() * scale[1]
        k5, v5 = _paged_to_5d(kp8, vp8)
    else:
        kp, vp = kp.to(dtype), vp.to(dtype)
        k_log, v_log = kp.double(), vp.double()
        k5, v5 = _paged_to_5d(kp, vp)
    perm = torch.randperm(nb - 1, generator=g)[: bs * max_blocks] + 1
    table = perm.view(bs, max_blocks).to(torch.int32)
    q = torch.randn(bs, hq, d, generator=g).to(torch.bfloat16)
    ctx = torch.tensor(lens, dtype=torch.int32)
    return dict(q=q, k5=k5, v5=v5, k_log=k_log, v_log=v_log, table=table, ctx=ctx, page=page, hq=hq, hkv=hkv, d=d)


def _decode_ref(c, *, sm_scale, sliding_window=-1, sinks=None):
    out = []
    for b, n in enumerate(c["ctx"].tolist()):
        j = torch.arange(n)
        blk = c["table"][b].long()[j // c["page"]]
        off = j % c["page"]
        k = c["k_log"][blk, off]
        v = c["v_log"][blk, off]
        out.append(ref_attention(c["q"][b : b + 1], k, v, [n - 1], sm_scale=sm_scale,
                                 sliding_window=sliding_window, sinks=sinks)[0])
    return torch.stack(out)


def _pa_kwargs(c, **over):
    bs, hkv, group = c["q"].shape[0], c["hkv"], c["hq"] // c["hkv"]
    kw = dict(
        output=torch.empty_like(c["q"]), query=c["q"], key_cache=c["k5"], value_cache=c["v5"],
        context_lengths=c["ctx"], block_tables=c["table"], softmax_scale=0.125, query_length=1,
        max_context_partition_num=2, context_partition_size=256, compute_type=torch.bfloat16,
        query_scale=None, key_scale=None, value_scale=None,
        exp_sums=torch.empty(bs, hkv, 2, group), max_logits=torch.empty(bs, hkv, 2, group),
        temporary_output=torch.empty(bs, hkv, 2, group, c["d"], dtype=torch.bfloat16),
        alibi_slopes=None, sinks=None, sliding_window=0, ps=True,
    )
    kw.update(over)
    return kw


def test_pa_decode_bf16_matches_reference(fake_aiter):
    from aiter.ops.triton.gluon.pa_decode_gluon import pa_decode_gluon

    c = _decode_case()
    kw = _pa_kwargs(c)
    assert pa_decode_gluon(**kw) is None
    torch.testing.assert_close(kw["output"].double(), _decode_ref(c, sm_scale=0.125), atol=2e-2, rtol=2e-2)
    assert fake_aiter._fake.CALLS[-1].name == "pa_decode_gluon"
    assert fake_aiter._fake.CALLS[-1].kwargs["query"] is c["q"]


def test_pa_decode_fp8_with_scales_matches_reference(fake_aiter):
    from aiter.ops.triton.gluon.pa_decode_gluon import pa_decode_gluon

    c = _decode_case(dtype=FP8, scale=(0.5, 0.25))
    kw = _pa_kwargs(c, key_scale=torch.tensor([0.5]), value_scale=torch.tensor([0.25]))
    pa_decode_gluon(**kw)
    torch.testing.assert_close(kw["output"].double(), _decode_ref(c, sm_scale=0.125), atol=2e-2, rtol=2e-2)
    # wrong scales fail numerically
    kw2 = _pa_kwargs(c, key_scale=torch.tensor([1.0]), value_scale=torch.tensor([1.0]))
    pa_decode_gluon(**kw2)
    assert not torch.allclose(kw2["output"].double(), _decode_ref(c, sm_scale=0.125), atol=2e-2, rtol=2e-2)


def test_pa_decode_window_and_sinks_semantics(fake_aiter):
    """aiter keeps keys c >= ctx - W + 1: W = sliding_window_size + 2 in SGLang terms."""
    from aiter.ops.triton.gluon.pa_decode_gluon import pa_decode_gluon

    c = _decode_case(lens=(30, 40, 17))
    sinks = torch.linspace(-1, 1, c["hq"])
    kw = _pa_kwargs(c, sliding_window=8 + 2, sinks=sinks, max_context_partition_num=1,
                    exp_sums=None, max_logits=None, temporary_output=None)
    pa_decode_gluon(**kw)
    ref = _decode_ref(c, sm_scale=0.125, sliding_window=8, sinks=sinks)
    torch.testing.assert_close(kw["output"].double(), ref, atol=2e-2, rtol=2e-2)
    kw = _pa_kwargs(c, sliding_window=8, sinks=sinks)  # upstream's argument: 2 keys short
    pa_decode_gluon(**kw)
    assert not torch.allclose(kw["output"].double(), ref, atol=2e-2, rtol=2e-2)


def _expect(exc, match, fn, **kw):
    with pytest.raises(exc, match=match):
        fn(**kw)


def test_pa_decode_rejections(fake_aiter):
    """The real wrapper's checks with its exception types (tests/test_aiter_contract.py runs the
    real one on the same mistakes); SilentGarbage where the real kernel would read garbage."""
    from aiter._fake import SilentGarbage
    from aiter.ops.triton.gluon.pa_decode_gluon import pa_decode_gluon as f

    c = _decode_case()
    bad_v3 = c["v5"].reshape(c["v5"].shape[0], c["hkv"], -1)
    _expect(AssertionError, "Expected 5D key_cache", f, **_pa_kwargs(c, key_cache=c["k5"].flatten(3)))
    _expect(RuntimeError, "Unsupported value cache shape", f, **_pa_kwargs(c, value_cache=bad_v3))
    _expect(AssertionError, "Expected 3D query", f, **_pa_kwargs(c, query=c["q"].unsqueeze(-1)))
    _expect(AssertionError, "exceeds maximum of 4", f, **_pa_kwargs(c, query_length=5))
    big = _decode_case(hq=66, hkv=1, lens=(3,))
    _expect(AssertionError, "exceeds maximum of 64", f,
            **_pa_kwargs(big, exp_sums=None, max_logits=None, temporary_output=None))
    _expect(AssertionError, "key_cache tensor only support dtype", f,
            **_pa_kwargs(c, key_cache=c["k5"].view(torch.uint8)))
    _expect(AssertionError, "output tensor only support dtype", f, **_pa_kwargs(c, output=torch.empty(c["q"].shape)))
    _expect(AssertionError, "query_scale tensor only support dtype", f,
            **_pa_kwargs(c, query_scale=torch.ones(1, dtype=torch.float16)))
    c8 = _decode_case(dtype=FP8)
    _expect(SilentGarbage, "without key_scale AND value_scale", f, **_pa_kwargs(c8))
    _expect(SilentGarbage, "without key_scale AND value_scale", f, **_pa_kwargs(c8, key_scale=torch.ones(1)))
    _expect(AssertionError, "value_scale tensor only support dtype", f,
            **_pa_kwargs(c8, key_scale=torch.ones(1), value_scale=torch.ones(1, dtype=torch.float64)))
    _expect(AssertionError, "Key and value scales must have same shape", f,
            **_pa_kwargs(c8, key_scale=torch.ones(1), value_scale=torch.ones(1, 1, 1, 1)))
    _expect(SilentGarbage, "temporary_output shape", f,
            **_pa_kwargs(c, temporary_output=torch.empty(1, dtype=torch.bfloat16)))
    _expect(SilentGarbage, "block id out of range", f, **_pa_kwargs(c, block_tables=c["table"] + 1000))
    _expect(TypeError, "missing", f, output=c["q"])  # required parameters stay required
    # the architecture and Gluon checks come first
    fake_aiter._fake.ARCH = "gfx90a"
    _expect(AssertionError, "only supports gfx942 .CDNA3. and gfx950", f, **_pa_kwargs(c))
    fake_aiter._fake.ARCH, fake_aiter._fake.GLUON = "gfx942", False
    _expect(RuntimeError, "not support gluon jit mode", f, **_pa_kwargs(c))
    fake_aiter._fake.GLUON = True
    assert len(fake_aiter._fake.calls("pa_decode_gluon")) >= 16  # rejected calls are recorded too


def test_pa_decode_is_no_stricter_than_the_real_wrapper(fake_aiter):
    """What the real wrapper accepts, the fake accepts: int64 tables, partition size 512,
    an fp16 V cache beside a bf16 K cache, an fp16 output with bf16 compute, non-fp32
    scales beside a bf16 cache (the real wrapper ignores them there)."""
    from aiter.ops.triton.gluon.pa_decode_gluon import pa_decode_gluon as f

    c = _decode_case()
    ref = _decode_ref(c, sm_scale=0.125)
    for over in (dict(block_tables=c["table"].long()), dict(context_partition_size=512),
                 dict(value_cache=c["v5"].to(torch.float16)), dict(output=torch.empty_like(c["q"]).half()),
                 dict(key_scale=torch.ones(1, dtype=torch.bfloat16), value_scale=torch.ones(3, 2))):
        kw = _pa_kwargs(c, **over)
        assert f(**kw) is None
        torch.testing.assert_close(kw["output"].double(), ref, atol=2e-2, rtol=2e-2)


def test_strict_mode_rejects_positional(fake_aiter):
    from aiter.ops.triton.gluon.pa_decode_gluon import get_recommended_splits

    assert get_recommended_splits(2, 1) == 8
    with fake_aiter._fake.strict():
        with pytest.raises(TypeError, match="positional"):
            get_recommended_splits(2, 1)
        assert get_recommended_splits(num_sequences=2, num_kv_heads=1) == 8
    assert fake_aiter._fake.CALLS[-2].args == (2, 1)


# -------------------------------------------------- mha_batch_prefill_func

def _prefill_case(*, dtype=torch.bfloat16, hq=8, hkv=2, d=64, qlens=(4, 7), kvlens=(9, 7), seed=1):
    g = torch.Generator().manual_seed(seed)
    total_kv = sum(kvlens)
    k = torch.randn(total_kv, hkv, d, generator=g)
    v = torch.randn(total_kv, hkv, d, generator=g)
    q = torch.randn(sum(qlens), hq, d, generator=g)
    cu_q = torch.tensor([0] + list(torch.tensor(qlens).cumsum(0)), dtype=torch.int32)
    kv_indptr = torch.tensor([0] + list(torch.tensor(kvlens).cumsum(0)), dtype=torch.int32)
    perm = torch.randperm(total_kv, generator=g)
    k_store, v_store = torch.empty_like(k), torch.empty_like(v)
    k_store[perm], v_store[perm] = k, v  # token i of the stream lives at row perm[i]
    return dict(q=q.to(dtype), k=k_store.to(dtype), v=v_store.to(dtype), k_log=k, v_log=v, cu_q=cu_q,
                kv_indptr=kv_indptr, idx=perm.to(torch.int32), qlens=qlens, kvlens=kvlens,
                table=torch.cat([perm, perm[-1:]]).to(torch.int32))  # one valid entry past the end (CK reads it)


def _prefill_ref(c, *, sm_scale, sliding_window=-1, sinks=None, cap=0.0, kd=1.0, vd=1.0, k_log=None, v_log=None):
    k_log = c["k_log"] if k_log is None else k_log
    v_log = c["v_log"] if v_log is None else v_log
    outs = []
    for b, (lq, lk) in enumerate(zip(c["qlens"], c["kvlens"])):
        q0, s0 = int(c["cu_q"][b]), int(c["kv_indptr"][b])
        outs.append(ref_attention(c["q"][q0:q0 + lq].double(), k_log[s0:s0 + lk] * kd, v_log[s0:s0 + lk] * vd,
                                  list(range(lk - lq, lk)), sm_scale=sm_scale, sliding_window=sliding_window,
                                  sinks=sinks, logit_cap=cap))
    return torch.cat(outs)


def _mha_kwargs(c, **over):
    kw = dict(q=c["q"], k=c["k"], v=c["v"], cu_seqlens_q=c["cu_q"], kv_indptr=c["kv_indptr"],
              kv_page_indices=c["table"], max_seqlen_q=max(c["qlens"]), max_seqlen_k=max(c["kvlens"]),
              softmax_scale=0.1, causal=True)
    kw.update(over)
    return kw


@pytest.mark.parametrize("window,sinks,cap", [(-1, False, 0.0), (3, True, 0.0), (-1, False, 5.0)])
def test_prefill_linear_matches_reference(fake_aiter, window, sinks, cap, monkeypatch):
    # per-head sink logits alone: a build with ROCm/aiter#4976 (aiter e4048607 has no such kernel)
    monkeypatch.setattr(fake_aiter._fake, "PREFILL_SINK_PTR_KERNELS", sinks)
    c = _prefill_case()
    sink = torch.linspace(-0.5, 0.5, 8) if sinks else None
    out = fake_aiter.mha_batch_prefill_func(**_mha_kwargs(c, window_size=(window, -1), sink_ptr=sink,
                                                          logits_soft_cap=cap))
    assert out.dtype == torch.bfloat16 and out.shape == (11, 8, 64)
    ref = _prefill_ref(c, sm_scale=0.1, sliding_window=window, sinks=sink, cap=cap)
    torch.testing.assert_close(out.double(), ref, atol=2e-2, rtol=2e-2)


def test_prefill_fp8_with_descales(fake_aiter):
    c = _prefill_case()
    q8, k8, v8 = (c["q"].float() / 2).to(FP8), (c["k"].float() / 0.5).to(FP8), (c["v"].float() / 0.25).to(FP8)
    one = lambda x: torch.tensor([x], dtype=torch.float32)  # noqa: E731
    out = fake_aiter.mha_batch_prefill_func(**_mha_kwargs(c, q=q8, k=k8, v=v8, q_descale=one(2.0),
                                                          k_descale=one(0.5), v_descale=one(0.25)))
    assert out.dtype == torch.bfloat16
    perm = c["idx"].long()
    k_log = (k8.double() * 0.5)[perm]
    v_log = (v8.double() * 0.25)[perm]
    c2 = dict(c, q=q8.double() * 2.0)
    ref = _prefill_ref(c2, sm_scale=0.1, k_log=k_log, v_log=v_log)
    torch.testing.assert_close(out.double(), ref, atol=3e-2, rtol=3e-2)


def test_prefill_paged_5d_page_sizes(fake_aiter):
    """page 16 has a CK instance, SGLang's default page 64 does not."""
    for page, ok in ((16, True), (64, False)):
        c = _prefill_case(kvlens=(40, 23), qlens=(3, 5))
        nb_per = [-(-n // page) for n in c["kvlens"]]
        pages = torch.arange(1, sum(nb_per) + 1, dtype=torch.int32)
        nb = sum(nb_per) + 1
        kp = torch.zeros(nb, page, 2, 64, dtype=torch.bfloat16)
        vp = torch.zeros_like(kp)
        flat_k = c["k_log"].to(torch.bfloat16)
        flat_v = c["v_log"].to(torch.bfloat16)
        s = 0
        p0 = 0
        for b, n in enumerate(c["kvlens"]):
            for t in range(n):
                kp[int(pages[p0 + t // page]), t % page] = flat_k[s + t]
                vp[int(pages[p0 + t // page]), t % page] = flat_v[s + t]
            s += n
            p0 += nb_per[b]
        k5, v5 = _paged_to_5d(kp, vp)
        indptr = torch.tensor([0, nb_per[0], sum(nb_per)], dtype=torch.int32)
        last = torch.tensor([n - (m - 1) * page for n, m in zip(c["kvlens"], nb_per)], dtype=torch.int32)
        kw = _mha_kwargs(c, k=k5, v=v5, kv_indptr=indptr, kv_page_indices=torch.cat([pages, pages[-1:]]),
                         kv_last_page_lens=last)
        if ok:
            out = fake_aiter.mha_batch_prefill_func(**kw)
            torch.testing.assert_close(out.double(), _prefill_ref(c, sm_scale=0.1), atol=2e-2, rtol=2e-2)
            kw.pop("kv_last_page_lens")
            with pytest.raises(RuntimeError, match="kv_last_page_lens is required"):
                fake_aiter.mha_batch_prefill_func(**kw)
        else:
            with pytest.raises(RuntimeError, match="no matching kernel.*page_size=64"):
                fake_aiter.mha_batch_prefill_func(**kw)


@pytest.mark.parametrize("qlens,kvlens", [((4, 7), (9, 7)), ((4,), (9,)), ((4, 0), (9, 0))])
def test_prefill_reads_one_entry_past_the_table(fake_aiter, monkeypatch, qlens, kvlens):
    """CK's V prefetch reads page_idx[N] for a sequence of N pages (ROCm/rocm-libraries#6932): an
    exactly sized table faults on the last sequence with pages (a trailing empty one looks nothing
    up), as does a pad that is no page id; one valid entry past the end passes; a middle
    sequence's over-read lands on the next one's entries."""
    f = fake_aiter.mha_batch_prefill_func
    c = _prefill_case(qlens=qlens, kvlens=kvlens)
    n = sum(kvlens)
    with pytest.raises(fake_aiter._fake.PageTableOverRead, match=rf"kv_page_indices\[{n}\].*has {n} entries"):
        f(**_mha_kwargs(c, kv_page_indices=c["idx"]))
    assert issubclass(fake_aiter._fake.PageTableOverRead, IndexError)
    for bad in (-1, n):  # not a row of the n-row cache
        table = torch.cat([c["idx"], torch.tensor([bad], dtype=torch.int32)])
        with pytest.raises(fake_aiter._fake.PageTableOverRead, match=rf"\[{n}\] = {bad} \(one past.*not a page id"):
            f(**_mha_kwargs(c, kv_page_indices=table))
    out = f(**_mha_kwargs(c))
    monkeypatch.setattr(fake_aiter._fake, "PREFILL_READS_PAST_TABLE", False)  # a CK with the clamp
    torch.testing.assert_close(f(**_mha_kwargs(c, kv_page_indices=c["idx"])), out)
    if 0 not in qlens:
        torch.testing.assert_close(out.double(), _prefill_ref(c, sm_scale=0.1), atol=2e-2, rtol=2e-2)


def test_prefill_rejections(fake_aiter):
    f = fake_aiter.mha_batch_prefill_func
    c = _prefill_case()
    one = torch.ones(1)
    _expect(RuntimeError, "no matching kernel", f, **_mha_kwargs(c, q_descale=one, k_descale=one, v_descale=one))
    q8, k8, v8 = c["q"].to(FP8), c["k"].to(FP8), c["v"].to(FP8)
    _expect(RuntimeError, "no matching kernel.*fp8 needs", f, **_mha_kwargs(c, q=q8, k=k8, v=v8))
    _expect(RuntimeError, "no matching kernel.*fp8 needs", f, **_mha_kwargs(c, q=q8, k=k8, v=v8, k_descale=one, v_descale=one))
    _expect(RuntimeError, "must share a dtype", f, **_mha_kwargs(c, k=k8))
    _expect(RuntimeError, "q_descale must be float32", f,
            **_mha_kwargs(c, q=q8, k=k8, v=v8, q_descale=one.half(), k_descale=one, v_descale=one))
    _expect(RuntimeError, "no matching kernel", f,
            **_mha_kwargs(c, q=q8, k=k8, v=v8, q_descale=one, k_descale=one, v_descale=one, return_lse=True))
    big = _prefill_case(d=512, hq=2, hkv=1)
    _expect(RuntimeError, "at most 256", f, **_mha_kwargs(big))
    _expect(ValueError, "K linear layout does not match Q head size", f, **_mha_kwargs(c, q=c["q"].flatten(1)))
    # the real Python wrapper's checks: ValueError for layouts, AssertionError for sink_ptr
    _expect(ValueError, "K/V linear layout must match page size and head count", f,
            **_mha_kwargs(c, v=c["v"][..., :32].contiguous()))
    _expect(ValueError, "head size divisible by vector size", f,
            **_mha_kwargs(c, q=c["q"][..., :60].contiguous(), k=c["k"][..., :60].contiguous(),
                          v=c["v"][..., :60].contiguous()))
    _expect(ValueError, "contiguous last dimension", f,
            **_mha_kwargs(c, k=torch.stack([c["k"], c["k"]], -1)[..., 0]))
    _expect(ValueError, "5D vectorized, 4D linear, or 3D linear", f, **_mha_kwargs(c, k=c["k"].unsqueeze(1)))
    _expect(AssertionError, "sink_ptr has incorrect shape", f, **_mha_kwargs(c, sink_ptr=torch.zeros(3)))
    # per-head sink logits without sink tokens: no kernel at aiter e4048607
    _expect(RuntimeError, "no matching kernel.*sink_ptr without sink_size", f,
            **_mha_kwargs(c, sink_ptr=torch.zeros(8)))
    _expect(RuntimeError, "cu_seqlens_q must be int32", f, **_mha_kwargs(c, cu_seqlens_q=c["cu_q"].long()))
    _expect(RuntimeError, "out dtype", f, **_mha_kwargs(c, out=torch.empty(11, 8, 64)))
    _expect(TypeError, "unexpected keyword", f, **_mha_kwargs(c, not_a_param=1))
    fake_aiter._fake.inject_error("mha_batch_prefill_func", RuntimeError("boom"), times=1)
    _expect(RuntimeError, "boom", f, **_mha_kwargs(c))
    assert f(**_mha_kwargs(c)).shape == (11, 8, 64)


def test_placeholders_raise_not_implemented(fake_aiter):
    from aiter.mla import mla_decode_fwd
    from aiter.ops.triton.utils._triton.kernel_repr import make_kernel_repr

    with pytest.raises(NotImplementedError):
        fake_aiter.paged_attention_ragged()
    with pytest.raises(NotImplementedError):
        mla_decode_fwd()
    assert callable(make_kernel_repr("k", ["A"]))
    assert math.isfinite(torch.finfo(__import__("aiter.ops.triton.utils.types", fromlist=["x"]).e4m3_dtype).max)
