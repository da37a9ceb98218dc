"""The 5D attention kernels never read or write outside the tensors they are
given, whatever the metadata says (Triton CPU interpreter).

Caches, block tables and outputs are views into larger buffers whose other
elements are poison (NaN, or the fp8 NaN code): a read outside a view brings
NaN into the output, a write outside it changes the poison. Defined results:
tokens whose block id is outside ``[0, num_blocks)`` are masked out, lengths
are clamped to ``[0, what the block table covers]`` (a length <= 0 gives
zeros), ``qo_indptr`` entries are clamped to ``[0, T]`` and made
non-decreasing. The cases that crashed the process before run in a
subprocess whose exit status is asserted.
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported anywhere below

import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from sglang_kv5d.kernels import attention_5d as A  # noqa: E402
from sglang_kv5d.kernels.attention_reference import _attend, gather_kv_5d, nhd_to_5d  # noqa: E402

FN = torch.float8_e4m3fn
PAGE, HQ, HKV, D = 16, 2, 1, 32
NB = 6  # blocks in the cache view
PAD = 2  # poisoned blocks on each side of the view


def _caches(kv_dtype, gen, d=D):
    """(k_view, v_view): 5D caches of NB random blocks inside a buffer of
    NB + 2 * PAD blocks whose other blocks are poison."""
    X = 16 if kv_dtype == FN else 8
    k = torch.randn(NB, PAGE, HKV, d, generator=gen, dtype=torch.float64)
    v = torch.randn(NB, PAGE, HKV, d, generator=gen, dtype=torch.float64)
    if kv_dtype == FN:
        k5, v5 = nhd_to_5d(k.clamp(-200, 200).to(FN).view(torch.uint8), v.clamp(-200, 200).to(FN).view(torch.uint8), X)
        kb = torch.full((NB + 2 * PAD,) + tuple(k5.shape[1:]), 0x7F, dtype=torch.uint8)
        vb = torch.full((NB + 2 * PAD,) + tuple(v5.shape[1:]), 0x7F, dtype=torch.uint8)
        kb[PAD:PAD + NB], vb[PAD:PAD + NB] = k5, v5
        return kb[PAD:PAD + NB].view(FN), vb[PAD:PAD + NB].view(FN)
    k5, v5 = nhd_to_5d(k.to(kv_dtype), v.to(kv_dtype), X)
    kb = torch.full((NB + 2 * PAD,) + tuple(k5.shape[1:]), float("nan"), dtype=kv_dtype)
    vb = torch.full((NB + 2 * PAD,) + tuple(v5.shape[1:]), float("nan"), dtype=kv_dtype)
    kb[PAD:PAD + NB], vb[PAD:PAD + NB] = k5, v5
    return kb[PAD:PAD + NB], vb[PAD:PAD + NB]


def _table(rows, width, extra=3, extra_block=0):
    """A (len(rows), width) view of a wider table whose extra columns name
    ``extra_block`` (valid, so only a read past the view's width uses it)."""
    wide = torch.full((len(rows), width + extra), extra_block, dtype=torch.int32)
    for b, r in enumerate(rows):
        wide[b, :len(r)] = torch.tensor(r, dtype=torch.int32)
    return wide[:, :width]


def _expected_decode(q, k5, v5, row, ctx, kv_dtype, cap=0.0):
    """float64 decode output ``(H_q, D)`` of one sequence's query ``q``
    ``(H_q, D)`` over the tokens < ctx whose block id is valid."""
    ok_blocks = [b if 0 <= b < NB else 0 for b in row]
    k, v = gather_kv_5d(k5, v5, torch.tensor(ok_blocks, dtype=torch.int32), ctx,
                        fp8_dtype=FN if kv_dtype == FN else None)
    valid = torch.tensor([0 <= row[t // PAGE] < NB for t in range(ctx)])
    return _attend(q.to(torch.float64)[None], k, v, valid[None], q.shape[-1] ** -0.5, cap, None)[0]


def _poisoned_out(shape, dtype=torch.bfloat16, pad=4):
    buf = torch.full((shape[0] + 2 * pad,) + tuple(shape[1:]), float("nan"), dtype=dtype)
    return buf, buf[pad:pad + shape[0]]


@pytest.mark.parametrize("kv_dtype,d,cap", [(torch.bfloat16, D, 0.0), (FN, D, 0.0), (FN, 256, 0.0), (torch.bfloat16, D, 2.0)],
                         ids=["bf16", "fp8", "fp8-d256", "bf16-softcap"])
@pytest.mark.parametrize("splits", [1, 2])
def test_decode_masks_blocks_outside_the_cache_and_clamps_lengths(kv_dtype, d, cap, splits):
    """Both ways a tile of a bad block id is dropped: zeros and -inf scores
    (D <= 128, bf16) and the select on the softmax state (fp8 at D = 256)."""
    gen = torch.Generator().manual_seed(1)
    k5, v5 = _caches(kv_dtype, gen, d)
    # seq 0: block ids NB and -1 before two valid ones (more bad keys than
    # good: a bad tile's weight, even e**-cap under the soft cap, shows); seq 1: a context
    # past the table's width (the wider table's extra columns name block 5,
    # which holds real data: only a read past the view would use it);
    # seq 2: negative length; seq 3: zero length
    rows = [[NB, -1, 2, 0], [1, 3], [4], [2]]
    ctx = torch.tensor([4 * PAGE - 3, 2 * PAGE + 40, -5, 0], dtype=torch.int32)
    bt = _table(rows, 4, extra_block=5)
    q = torch.randn(4, HQ, d, generator=gen).to(torch.bfloat16)
    buf, out = _poisoned_out((4, HQ, d))
    A.decode_attention_5d(q, k5, v5, bt, ctx, sm_scale=d ** -0.5, num_splits=splits, logit_cap=cap,
                          k_scale=1.0 if kv_dtype == FN else None, v_scale=1.0 if kv_dtype == FN else None,
                          out=out)
    assert torch.isnan(buf[:4]).all() and torch.isnan(buf[-4:]).all(), "wrote outside out"
    assert torch.isfinite(out.float()).all(), "read outside the caches or the table row"
    torch.testing.assert_close(out[0].double(), _expected_decode(q[0], k5, v5, rows[0], int(ctx[0]), kv_dtype, cap),
                               atol=3e-2, rtol=3e-2)
    # seq 1: clamped to the 4 columns the view covers: blocks 1, 3, then the
    # view's own entries past the row's two real ones (block 5 filler)
    torch.testing.assert_close(out[1].double(), _expected_decode(q[1], k5, v5, [1, 3, 5, 5], 4 * PAGE, kv_dtype, cap),
                               atol=3e-2, rtol=3e-2)
    assert (out[2] == 0).all() and (out[3] == 0).all(), "lengths <= 0 must give zeros"


@pytest.mark.parametrize("kv_dtype", [torch.bfloat16, FN], ids=["bf16", "fp8"])
def test_extend_stays_inside_q_out_and_the_caches(kv_dtype):
    gen = torch.Generator().manual_seed(2)
    k5, v5 = _caches(kv_dtype, gen)
    T = 8
    q = torch.randn(T, HQ, D, generator=gen).to(torch.bfloat16)
    # the case: qo_indptr = [0, 4, 40] with T = 8, plus a bad block
    # id and a kv length past the table
    qo = torch.tensor([0, 4, 40], dtype=torch.int32)
    kv = torch.tensor([PAGE + 4, 10 * PAGE], dtype=torch.int32)
    bt = _table([[0, NB + 7], [1, 2]], 2, extra_block=3)
    buf, out = _poisoned_out((T, HQ, D))
    A.extend_attention_5d(q, k5, v5, bt, qo, kv, sm_scale=D ** -0.5, out=out,
                          k_scale=1.0 if kv_dtype == FN else None, v_scale=1.0 if kv_dtype == FN else None)
    assert torch.isnan(buf[:4]).all() and torch.isnan(buf[-4:]).all(), "wrote outside out"
    assert torch.isfinite(out.float()).all(), "read outside the caches / table, or left rows unwritten"
    # seq 0: 4 new tokens at positions PAGE .. PAGE+3, which all sit in the
    # invalid block: each sees the valid page 0 and no key of its own page
    k, v = gather_kv_5d(k5, v5, torch.tensor([0, 0], dtype=torch.int32), PAGE + 4,
                        fp8_dtype=FN if kv_dtype == FN else None)
    kpos = torch.arange(PAGE + 4)[None, :]
    qpos = torch.arange(PAGE, PAGE + 4)[:, None]
    mask = (kpos <= qpos) & (kpos < PAGE)
    exp = _attend(q[:4].to(torch.float64), k, v, mask, D ** -0.5, 0.0, None)
    torch.testing.assert_close(out[:4].double(), exp, atol=3e-2, rtol=3e-2)


def test_extend_decreasing_and_negative_indptr_define_the_rows():
    gen = torch.Generator().manual_seed(3)
    k5, v5 = _caches(torch.bfloat16, gen)
    T = 8
    q = torch.randn(T, HQ, D, generator=gen).to(torch.bfloat16)
    qo = torch.tensor([-3, 5, 2, 8], dtype=torch.int64)  # -> [0, 5, 5, 8]
    kv = torch.tensor([5, 7, 3], dtype=torch.int64)
    bt = _table([[0], [1], [2]], 1)
    buf, out = _poisoned_out((T, HQ, D))
    A.extend_attention_5d(q, k5, v5, bt, qo, kv, sm_scale=D ** -0.5, out=out)
    assert torch.isnan(buf[:4]).all() and torch.isnan(buf[-4:]).all()
    assert torch.isfinite(out.float()).all()
    ref = A.extend_attention_5d(q, k5, v5, bt, torch.tensor([0, 5, 5, 8]), kv, sm_scale=D ** -0.5)
    torch.testing.assert_close(out, ref, atol=0, rtol=0)


@pytest.mark.parametrize("which", ["decode-block", "decode-ctx", "extend-start", "extend-kvlen"])
def test_cases_that_crashed_the_process_now_finish(which, tmp_path):
    """Block id 10**6, context 10**5, a negative start, kv_lens far beyond the
    table: the process used to segfault or corrupt its heap."""
    code = textwrap.dedent(f"""
        import os
        os.environ["TRITON_INTERPRET"] = "1"
        import torch
        from sglang_kv5d.kernels import attention_5d as A
        k = torch.randn(4, 1, 4, 16, 8).to(torch.bfloat16)
        v = torch.randn(4, 1, 2, 32, 8).to(torch.bfloat16)
        which = {which!r}
        if which.startswith("decode"):
            bt = torch.tensor([[10**6 if which == "decode-block" else 1, 2]], dtype=torch.int32)
            ctx = torch.tensor([20 if which == "decode-block" else 10**5], dtype=torch.int32)
            out = A.decode_attention_5d(torch.randn(1, 2, 32).to(torch.bfloat16), k, v, bt, ctx, sm_scale=0.2)
        else:
            qo = torch.tensor([-10**6 if which == "extend-start" else 0, 4], dtype=torch.int32)
            kv = torch.tensor([10**7 if which == "extend-kvlen" else 8], dtype=torch.int32)
            bt = torch.tensor([[0, 1]], dtype=torch.int32)
            out = A.extend_attention_5d(torch.randn(4, 2, 32).to(torch.bfloat16), k, v, bt, qo, kv, sm_scale=0.2)
        assert torch.isfinite(out.float()).all(), out
        print("finished")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stderr[-2000:]}"
    assert "finished" in r.stdout


def test_host_visible_mistakes_name_the_argument():
    gen = torch.Generator().manual_seed(4)
    k5, v5 = _caches(torch.bfloat16, gen)
    q = torch.randn(2, HQ, D, generator=gen).to(torch.bfloat16)
    bt = torch.zeros(2, 2, dtype=torch.int32)
    ctx = torch.tensor([3, 3], dtype=torch.int32)
    with pytest.raises(ValueError, match="block_tables"):
        A.decode_attention_5d(q, k5, v5, bt[0], ctx, sm_scale=0.1)  # rank 1
    with pytest.raises(ValueError, match="context_lens"):
        A.decode_attention_5d(q, k5, v5, bt, ctx[:1], sm_scale=0.1)  # shorter than the batch
    with pytest.raises(ValueError, match="sinks"):
        A.decode_attention_5d(q, k5, v5, bt, ctx, sm_scale=0.1, sinks=torch.zeros(HQ - 1))
    with pytest.raises(TypeError, match="q:"):
        A.decode_attention_5d(q.to(torch.int32), k5, v5, bt, ctx, sm_scale=0.1)
    with pytest.raises(TypeError, match="context_lens"):
        A.decode_attention_5d(q, k5, v5, bt, ctx.float(), sm_scale=0.1)
    qo = torch.tensor([0, 1, 2], dtype=torch.int32)
    with pytest.raises(ValueError, match="kv_lens"):
        A.extend_attention_5d(q, k5, v5, bt, qo, ctx[:1], sm_scale=0.1)
    with pytest.raises(TypeError, match="qo_indptr"):
        A.extend_attention_5d(q, k5, v5, bt, qo.float(), ctx, sm_scale=0.1)
    with pytest.raises(ValueError, match="out"):
        A.extend_attention_5d(q, k5, v5, bt, qo, ctx, sm_scale=0.1, out=torch.empty(3, HQ, D))


def test_debug_bounds_switch_raises_naming_the_value(monkeypatch):
    """SGLANG_KV5D_DEBUG_BOUNDS=1: what the kernels would clamp or mask is an
    error naming the entry (off: the defined results above, no sync)."""
    gen = torch.Generator().manual_seed(5)
    k5, v5 = _caches(torch.bfloat16, gen)
    q = torch.randn(2, HQ, D, generator=gen).to(torch.bfloat16)
    bt = _table([[0, NB], [1]], 2)
    ctx = torch.tensor([2 * PAGE, 5], dtype=torch.int32)
    A.decode_attention_5d(q, k5, v5, bt, ctx, sm_scale=0.1)  # off: no error
    monkeypatch.setenv("SGLANG_KV5D_DEBUG_BOUNDS", "1")
    with pytest.raises(ValueError, match=rf"block_tables\[0, 1\]={NB} outside \[0, {NB}\)"):
        A.decode_attention_5d(q, k5, v5, bt, ctx, sm_scale=0.1)
    with pytest.raises(ValueError, match=r"context_lens\[1\]=99 outside \[0, 32\]"):
        A.decode_attention_5d(q, k5, v5, _table([[0, 1], [2, 3]], 2), torch.tensor([3, 99], dtype=torch.int32),
                              sm_scale=0.1)
    with pytest.raises(ValueError, match=r"qo_indptr\[2\]=1: entries must be non-decreasing"):
        A.extend_attention_5d(q, k5, v5, _table([[0], [1]], 1), torch.tensor([0, 2, 1]),
                              torch.tensor([3, 3]), sm_scale=0.1)
    A.decode_attention_5d(q, k5, v5, _table([[0, 1], [2, 3]], 2), torch.tensor([3, 0], dtype=torch.int32),
                          sm_scale=0.1)  # valid metadata passes
