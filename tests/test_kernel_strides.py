"""The kernels take every view of their metadata as it is: strides, stride 0
(expanded) and storage offsets (issue 26, item 1). Triton CPU interpreter.

Each metadata tensor (context / kv lengths, sinks, block tables, qo_indptr,
the query's head dim; the FP8 write's ``loc``; the verify table builder's
``req_pool_indices``, ``seq_lens``, ``req_to_token``) is handed over as a view
into a larger buffer whose other elements are *poison*: valid values that
give a different answer (a short length, a dominating sink, a block of other
data). A kernel that reads the view as contiguous reads the poison, and the
output differs from the float64 reference computed on a contiguous copy of
the same values; a kernel that honours the strides matches it. Every read
stays inside the poison buffer, so a wrong kernel fails here numerically
instead of reading outside memory (tests/gpu/test_hostile_metadata.py runs
the same views on a GPU, under compute-sanitizer where it exists).
"""

from __future__ import annotations

import os

if not any(os.path.exists(p) for p in ("/dev/nvidia0", "/dev/kfd")):
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from sglang_kv5d.kernels import attention_5d as A  # noqa: E402
from sglang_kv5d.kernels.attention_reference import (  # noqa: E402
    decode_attention_5d_ref,
    extend_attention_5d_ref,
    nhd_to_5d,
)

pytestmark = pytest.mark.sglang_independent

FN = torch.float8_e4m3fn
PAGE, HQ, HKV, D = 16, 2, 1, 32
NB = 8
POISON_BLOCK = NB - 1  # real tables never name it; its data differs from every other block


def view_1d(values, kind, poison):
    """A 1-D view holding ``values`` (a tensor): ``strided`` (stride 2, offset
    3), ``offset`` (contiguous from element 5), ``expanded`` (stride 0: every
    value must be equal). Every other element of the buffer is ``poison``."""
    n = values.shape[0]
    if kind == "strided":
        buf = torch.full((2 * n + 4,), poison, dtype=values.dtype, device=values.device)
        view = buf[3:3 + 2 * n:2]
    elif kind == "offset":
        buf = torch.full((n + 6,), poison, dtype=values.dtype, device=values.device)
        view = buf[5:5 + n]
    elif kind == "expanded":
        assert bool((values == values[0]).all()), "an expanded view needs equal values"
        buf = torch.full((n + 4,), poison, dtype=values.dtype, device=values.device)
        buf[2] = values[0]
        return buf[2:3].expand(n)
    else:
        raise AssertionError(kind)
    view.copy_(values)
    return view


def view_2d(values, kind, poison):
    """A 2-D view of ``values``: ``strided`` (every other row and column),
    ``offset`` (rows of a wider buffer, from column 2), ``expanded_rows``
    (stride 0 over rows: rows equal), ``expanded_cols`` (stride 0 over
    columns: each row constant)."""
    r, c = values.shape
    if kind == "strided":
        buf = torch.full((2 * r + 1, 2 * c + 3), poison, dtype=values.dtype, device=values.device)
        view = buf[1::2, 1::2][:r, :c]
    elif kind == "offset":
        buf = torch.full((r + 2, c + 5), poison, dtype=values.dtype, device=values.device)
        view = buf[1:1 + r, 2:2 + c]
    elif kind == "expanded_rows":
        assert bool((values == values[0]).all())
        buf = torch.full((3, c), poison, dtype=values.dtype, device=values.device)
        buf[1] = values[0]
        return buf[1:2].expand(r, c)
    elif kind == "expanded_cols":
        assert bool((values == values[:, :1]).all())
        buf = torch.full((r, 4), poison, dtype=values.dtype, device=values.device)
        buf[:, 1] = values[:, 0]
        return buf[:, 1:2].expand(r, c)
    else:
        raise AssertionError(kind)
    view.copy_(values)
    return view


def _caches(kv_dtype, gen, device):
    k = torch.randn(NB, PAGE, HKV, D, generator=gen, dtype=torch.float64)
    v = torch.randn(NB, PAGE, HKV, D, generator=gen, dtype=torch.float64)
    k[POISON_BLOCK] *= 4  # a read of the poison block shows
    v[POISON_BLOCK] += 3
    if kv_dtype == FN:
        k5, v5 = nhd_to_5d(k.to(FN).view(torch.uint8), v.to(FN).view(torch.uint8), 16)
        return k5.view(FN).to(device), v5.view(FN).to(device)
    k5, v5 = nhd_to_5d(k.to(kv_dtype), v.to(kv_dtype), 8)
    return k5.to(device), v5.to(device)


def _scales(kv_dtype):
    return dict(k_scale=0.5, v_scale=2.0, fp8_dtype=FN) if kv_dtype == FN else {}


def _close(out, ref):
    torch.testing.assert_close(out.double().cpu(), ref.cpu(), atol=3e-2, rtol=3e-2)


def _cpu(t):
    return None if t is None else t.contiguous().cpu()


# --------------------------------------------------------------------------- decode and verify

B = 3
TABLE = torch.tensor([[3, 1, 5, 0], [2, 6, 4, 0], [0, 5, 1, 3]], dtype=torch.int32)
CTX = torch.tensor([50, 17, 64], dtype=torch.int32)
SINKS = torch.tensor([0.7, -0.4])
DECODE_CASES = (
    [("context_lens", kind) for kind in ("strided", "offset", "expanded")]
    + [("sinks", kind) for kind in ("strided", "expanded")]
    + [("block_tables", kind) for kind in ("strided", "offset", "expanded_rows", "expanded_cols")]
    + [("q", "strided")]
)


def check_decode(tensor, kind, kv_dtype, splits, device="cpu", seed=11):
    """decode_attention_5d with ``tensor`` as a ``kind`` view against the float64 reference."""
    gen = torch.Generator().manual_seed(seed)
    k5, v5 = _caches(kv_dtype, gen, device)
    q = torch.randn(B, HQ, D, generator=gen).to(torch.bfloat16).to(device)
    ctx, table, sinks = CTX.to(device), TABLE.to(device), None
    if tensor == "sinks":
        sinks = (torch.tensor([0.9, 0.9]) if kind == "expanded" else SINKS).to(device)
    if tensor == "context_lens" and kind == "expanded":
        ctx = torch.full((B,), 40, dtype=torch.int32, device=device)
    if kind == "expanded_rows":
        table = table[:1].expand(B, -1).clone()
    elif kind == "expanded_cols":
        table = table[:, :1].expand(-1, table.shape[1]).clone()
    hostile = dict(q=q, table=table, ctx=ctx, sinks=sinks)
    if tensor == "context_lens":
        hostile["ctx"] = view_1d(ctx, kind, poison=1)  # a read of the poison: a one-token context
    elif tensor == "sinks":
        hostile["sinks"] = view_1d(sinks, kind, poison=30.0)  # a read of the poison: the sink takes every weight
    elif tensor == "block_tables":
        hostile["table"] = view_2d(table, kind, poison=POISON_BLOCK)
    else:
        wide = torch.full((B, HQ, 2 * D), 100.0, dtype=torch.bfloat16, device=device)
        wide[:, :, 1::2] = q
        hostile["q"] = wide[:, :, 1::2]
    out = torch.full((B, HQ, D), float("nan"), dtype=torch.bfloat16, device=device)
    A.decode_attention_5d(hostile["q"], k5, v5, hostile["table"], hostile["ctx"], sm_scale=D ** -0.5,
                          sinks=hostile["sinks"], num_splits=splits, out=out, **_scales(kv_dtype))
    ref = decode_attention_5d_ref(_cpu(q), _cpu(k5), _cpu(v5), _cpu(table), _cpu(ctx), sm_scale=D ** -0.5,
                                  sinks=_cpu(sinks), **_scales(kv_dtype))
    _close(out, ref)


def check_packed_verify(kind, device="cpu", seed=16):
    """Speculative verify (queries_per_seq = N): one length per query row."""
    gen = torch.Generator().manual_seed(seed)
    k5, v5 = _caches(FN, gen, device)
    n, seqs = 2, 2
    table = TABLE[:seqs].to(device)
    lens = torch.tensor([38, 38, 38, 38] if kind == "expanded" else [37, 38, 20, 21], dtype=torch.int32)
    q = torch.randn(seqs * n, HQ, D, generator=gen).to(torch.bfloat16).to(device)
    out = torch.full((seqs * n, HQ, D), float("nan"), dtype=torch.bfloat16, device=device)
    A.decode_attention_5d(q, k5, v5, table, view_1d(lens.to(device), kind, poison=1), sm_scale=D ** -0.5,
                          out=out, queries_per_seq=n, **_scales(FN))
    ref = decode_attention_5d_ref(_cpu(q), _cpu(k5), _cpu(v5), _cpu(table).repeat_interleave(n, 0), lens,
                                  sm_scale=D ** -0.5, **_scales(FN))
    _close(out, ref)


@pytest.mark.parametrize("kv_dtype", [torch.bfloat16, FN], ids=["bf16", "fp8"])
@pytest.mark.parametrize("tensor,kind", DECODE_CASES)
def test_decode_honours_the_strides_of_its_metadata(tensor, kind, kv_dtype):
    """One split (the decode kernel writes out) for most; the sinks also
    through two splits (the reduce kernel reads them too)."""
    check_decode(tensor, kind, kv_dtype, splits=2 if tensor == "block_tables" else 1)


@pytest.mark.parametrize("kind", ["strided", "expanded"])
def test_the_reduce_kernel_honours_the_stride_of_sinks(kind):
    check_decode("sinks", kind, torch.bfloat16, splits=2)


def test_decode_refuses_an_out_whose_rows_share_memory():
    gen = torch.Generator().manual_seed(15)
    k5, v5 = _caches(torch.bfloat16, gen, "cpu")
    q = torch.randn(B, HQ, D, generator=gen).to(torch.bfloat16)
    out = torch.zeros(1, HQ, D, dtype=torch.bfloat16).expand(B, HQ, D)
    with pytest.raises(ValueError, match="out: rows share memory"):
        A.decode_attention_5d(q, k5, v5, TABLE, CTX, sm_scale=D ** -0.5, out=out)


@pytest.mark.parametrize("kind", ["strided", "offset", "expanded"])
def test_packed_verify_honours_the_strides_of_its_lengths(kind):
    check_packed_verify(kind)


# --------------------------------------------------------------------------- extend

QO = torch.tensor([0, 5, 8, 14], dtype=torch.int32)
KV = torch.tensor([40, 19, 64], dtype=torch.int32)
EXTEND_CASES = [
    ("kv_lens", "strided"), ("kv_lens", "offset"), ("kv_lens", "expanded"),
    ("sinks", "strided"), ("sinks", "expanded"),
    ("block_tables", "strided"), ("block_tables", "expanded_cols"),
    ("qo_indptr", "strided"), ("qo_indptr", "offset"), ("q", "strided"),
]


def check_extend(tensor, kind, kv_dtype, device="cpu", seed=21):
    gen = torch.Generator().manual_seed(seed)
    k5, v5 = _caches(kv_dtype, gen, device)
    T = int(QO[-1])
    q = torch.randn(T, HQ, D, generator=gen).to(torch.bfloat16).to(device)
    table, qo, kv, sinks = TABLE.to(device), QO.to(device), KV.to(device), SINKS.to(device)
    if kind == "expanded" and tensor == "kv_lens":
        kv = torch.full((B,), 30, dtype=torch.int32, device=device)
    if kind == "expanded" and tensor == "sinks":
        sinks = torch.tensor([0.9, 0.9], device=device)
    if kind == "expanded_cols":
        table = table[:, :1].expand(-1, table.shape[1]).clone()
    h = dict(q=q, table=table, qo=qo, kv=kv, sinks=sinks)
    if tensor == "kv_lens":
        h["kv"] = view_1d(kv, kind, poison=1)
    elif tensor == "sinks":
        h["sinks"] = view_1d(sinks, kind, poison=30.0)
    elif tensor == "block_tables":
        h["table"] = view_2d(table, kind, poison=POISON_BLOCK)
    elif tensor == "qo_indptr":
        h["qo"] = view_1d(qo, kind, poison=0)
    else:
        wide = torch.full((T, HQ, 2 * D), 100.0, dtype=torch.bfloat16, device=device)
        wide[:, :, 1::2] = q
        h["q"] = wide[:, :, 1::2]
    out = torch.full((T, HQ, D), float("nan"), dtype=torch.bfloat16, device=device)
    A.extend_attention_5d(h["q"], k5, v5, h["table"], h["qo"], h["kv"], sm_scale=D ** -0.5, sinks=h["sinks"],
                          out=out, **_scales(kv_dtype))
    ref = extend_attention_5d_ref(_cpu(q), _cpu(k5), _cpu(v5), _cpu(table), _cpu(qo), _cpu(kv), sm_scale=D ** -0.5,
                                  sinks=_cpu(sinks), **_scales(kv_dtype))
    _close(out, ref)


@pytest.mark.parametrize("kv_dtype", [torch.bfloat16, FN], ids=["bf16", "fp8"])
@pytest.mark.parametrize("tensor,kind", EXTEND_CASES)
def test_extend_honours_the_strides_of_its_metadata(kv_dtype, tensor, kind):
    check_extend(tensor, kind, kv_dtype)


# --------------------------------------------------------------------------- the FP8 write and the verify tables


def check_fp8_write(kind, layout, device="cpu", seed=31):
    """loc as a view; with ``kind == "inputs"``: k with a token stride of 0
    (one row for every token) and v and an NHD cache as views of wider buffers."""
    from sglang_kv5d.kernels.fp8_reference import reference_write_kv_fp8
    from sglang_kv5d.kernels.fp8_write import write_kv_fp8

    gen = torch.Generator().manual_seed(seed)
    T, H, Dk = 6, 2, 32
    k = torch.randn(T, H, Dk, generator=gen).to(torch.bfloat16).to(device)
    v = torch.randn(T, H, Dk, generator=gen).to(torch.bfloat16).to(device)
    loc = torch.tensor([3, 17, 18, 40, 41, 9], dtype=torch.int64, device=device)
    shapes = {"nhd": ((64, H, Dk), (64, H, Dk)), "5d": ((4, H, Dk // 16, 16, 16), (4, H, 1, Dk, 16))}[layout]
    kc = torch.zeros(shapes[0], dtype=torch.uint8, device=device)
    vc = torch.zeros(shapes[1], dtype=torch.uint8, device=device)
    hk, hv, hloc, hkc = k, v, loc, kc
    if kind == "inputs":
        hk = k[:1].expand(T, H, Dk)
        k = hk.contiguous()
        wide = torch.full((2 * T, H, Dk), 1e4, dtype=torch.bfloat16, device=device)
        wide[::2] = v
        hv = wide[::2]
        if layout == "nhd":
            kwide = torch.full((64, H + 1, Dk), 0x5A, dtype=torch.uint8, device=device)
            hkc = kwide[:, 1:]
            kc = hkc.clone()
    else:
        hloc = view_1d(loc, kind, poison=0)
    kr, vr = reference_write_kv_fp8(k, v, kc, vc, loc, 0.5, 2.0, fp8_dtype=FN, mode="fp32")
    write_kv_fp8(hk, hv, hkc, vc, hloc, 0.5, 2.0, fp8_dtype=FN)
    assert torch.equal(hkc, kr) and torch.equal(vc, vr)
    if kind == "inputs" and layout == "nhd":
        assert bool((kwide[:, 0] == 0x5A).all()), "wrote outside the cache view"


def check_verify_tables(kind, device="cpu"):
    """req_pool_indices and seq_lens as views, req_to_token a strided view."""
    from sglang_kv5d.kernels.verify_table import verify_page_tables
    from sglang_kv5d.speculative.verify_tables import build_verify_page_tables_torch

    rows, cols, page, draft, bs, width = 5, 64, 16, 3, 3, 5
    r2t_vals = (torch.arange(rows * cols, dtype=torch.int32).reshape(rows, cols) * 7 % 1000).to(device)
    big = torch.full((rows * 2, cols * 2), 999, dtype=torch.int32, device=device)
    big[::2, ::2] = r2t_vals
    r2t = big[::2, ::2]
    rp = torch.tensor([2, 2, 2] if kind == "expanded" else [4, 0, 2], dtype=torch.int64, device=device)
    sl = torch.tensor([30, 30, 30] if kind == "expanded" else [30, 5, 60], dtype=torch.int64, device=device)
    out = torch.full((bs, width), -7, dtype=torch.int32, device=device)
    verify_page_tables(r2t, view_1d(rp, kind, poison=1), view_1d(sl, kind, poison=0), draft, page, out)
    ref = torch.full((bs, width), -7, dtype=torch.int32, device=device)
    build_verify_page_tables_torch(r2t_vals, rp, sl, draft, page, ref)
    assert torch.equal(out, ref)


@pytest.mark.parametrize("kind", ["strided", "offset", "inputs"])
@pytest.mark.parametrize("layout", ["nhd", "5d"])
def test_fp8_write_honours_the_strides_of_loc_and_its_inputs(kind, layout):
    """Strides passed to the kernel already (regression tests)."""
    check_fp8_write(kind, layout)


def test_fp8_write_refuses_an_expanded_nhd_cache():
    from sglang_kv5d.kernels.fp8_write import write_kv_fp8

    k = torch.ones(2, 2, 32, dtype=torch.bfloat16)
    kc = torch.zeros(1, 2, 32, dtype=torch.uint8).expand(64, 2, 32)
    with pytest.raises(ValueError, match="k_cache: slots or heads share memory"):
        write_kv_fp8(k, k, kc, torch.zeros(64, 2, 32, dtype=torch.uint8), torch.tensor([0, 1]), 1.0, 1.0,
                     fp8_dtype=FN)


@pytest.mark.parametrize("kind", ["strided", "offset", "expanded"])
def test_verify_tables_honour_the_strides_of_their_metadata(kind):
    """Strides passed to the kernel already (regression tests)."""
    check_verify_tables(kind)


def test_the_decode_wrapper_passes_a_strided_page_table_without_a_copy():
    """SGLang's 2-D page table reaches the portable kernel as it is (a copy
    would allocate inside a CUDA-graph capture): the kernel reads its strides."""
    from sglang_kv5d.attention.common import page_table_2d

    wide = torch.zeros(4, 12, dtype=torch.int32)
    table = wide[:, ::3]
    got = page_table_2d(table, 3)
    assert got.data_ptr() == table.data_ptr() and got.stride() == table.stride()
