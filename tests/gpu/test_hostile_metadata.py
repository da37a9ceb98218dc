"""Issue 26, items 1 and 2, on a real GPU: every metadata tensor as a strided,
expanded (stride 0) or offset view, and every refused FP8-write scale as a
tensor (the cases that diverged on the H200: 0, inf, 1e-40 gave NaN bytes,
-1 and -0.5 changed every byte).

The view cases are tests/test_kernel_strides.py's own (``check_*`` with
``device="cuda"``): each view lies in a buffer of poison values, so a kernel
that reads it as contiguous gives a wrong answer. Run under
``compute-sanitizer --tool memcheck`` too: an expanded view read as contiguous
reads past the tensor (the sanitizer's "Invalid __global__ read").

Kernel modules are imported inside the tests, never at collection.
"""

from __future__ import annotations

import importlib
import math

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.sglang_independent,
    pytest.mark.skipif(not torch.cuda.is_available(),
                       reason="needs a CUDA/ROCm GPU: torch.cuda.is_available() is False"),
]

FN, FNUZ = torch.float8_e4m3fn, torch.float8_e4m3fnuz
DECODE_CASES = [
    ("context_lens", "strided"), ("context_lens", "offset"), ("context_lens", "expanded"),
    ("sinks", "strided"), ("sinks", "expanded"),
    ("block_tables", "strided"), ("block_tables", "offset"), ("block_tables", "expanded_rows"),
    ("block_tables", "expanded_cols"), ("q", "strided"),
]
EXTEND_CASES = [
    ("kv_lens", "strided"), ("kv_lens", "offset"), ("kv_lens", "expanded"),
    ("sinks", "strided"), ("sinks", "expanded"),
    ("block_tables", "strided"), ("block_tables", "expanded_cols"),
    ("qo_indptr", "strided"), ("qo_indptr", "offset"), ("q", "strided"),
]
REFUSED = [0.0, -0.0, -1.0, -0.5, math.inf, -math.inf, math.nan, 1e-40, 2.0 ** -127, 3e38, 2.0 ** 127]


@pytest.fixture(scope="module")
def S():
    return importlib.import_module("tests.test_kernel_strides")


@pytest.fixture(scope="module")
def fw():
    return importlib.import_module("sglang_kv5d.kernels.fp8_write")


@pytest.fixture(scope="module")
def ref():
    return importlib.import_module("sglang_kv5d.kernels.fp8_reference")


# --------------------------------------------------------------------------- metadata views


@pytest.mark.parametrize("splits", [1, 2], ids=["direct", "split"])
@pytest.mark.parametrize("kv_dtype", [torch.bfloat16, FN], ids=["bf16", "fp8"])
@pytest.mark.parametrize("tensor,kind", DECODE_CASES)
def test_decode_metadata_views(S, tensor, kind, kv_dtype, splits):
    S.check_decode(tensor, kind, kv_dtype, splits, device="cuda")
    torch.cuda.synchronize()


@pytest.mark.parametrize("kind", ["strided", "offset", "expanded"])
def test_packed_verify_length_views(S, kind):
    S.check_packed_verify(kind, device="cuda")
    torch.cuda.synchronize()


@pytest.mark.parametrize("kv_dtype", [torch.bfloat16, FN], ids=["bf16", "fp8"])
@pytest.mark.parametrize("tensor,kind", EXTEND_CASES)
def test_extend_metadata_views(S, tensor, kind, kv_dtype):
    S.check_extend(tensor, kind, kv_dtype, device="cuda")
    torch.cuda.synchronize()


@pytest.mark.parametrize("kind", ["strided", "offset", "inputs"])
@pytest.mark.parametrize("layout", ["nhd", "5d"])
def test_fp8_write_views(S, kind, layout):
    S.check_fp8_write(kind, layout, device="cuda")


@pytest.mark.parametrize("kind", ["strided", "offset", "expanded"])
def test_verify_table_views(S, kind):
    S.check_verify_tables(kind, device="cuda")


def test_decode_with_strided_metadata_is_captured_without_a_copy(S):
    """A CUDA graph of the decode over strided metadata replays with new
    lengths written into the same views (the kernel reads them in place)."""
    A = importlib.import_module("sglang_kv5d.kernels.attention_5d")
    gen = torch.Generator().manual_seed(7)
    dev = torch.device("cuda")
    k5, v5 = S._caches(FN, gen, dev)
    q = torch.randn(S.B, S.HQ, S.D, generator=gen).to(torch.bfloat16).to(dev)
    ctx = S.view_1d(S.CTX.to(dev), "strided", poison=1)
    table = S.view_2d(S.TABLE.to(dev), "strided", poison=S.POISON_BLOCK)
    out = torch.empty(S.B, S.HQ, S.D, dtype=torch.bfloat16, device=dev)
    kw = dict(sm_scale=S.D ** -0.5, k_scale=0.5, v_scale=2.0, fp8_dtype=FN, num_splits=2, out=out)
    A.decode_attention_5d(q, k5, v5, table, ctx, **kw)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        A.decode_attention_5d(q, k5, v5, table, ctx, **kw)
    ctx.copy_(torch.tensor([9, 33, 60], dtype=torch.int32, device=dev))
    graph.replay()
    torch.cuda.synchronize()
    expect = S.decode_attention_5d_ref(q.cpu(), k5.cpu(), v5.cpu(), S.TABLE, torch.tensor([9, 33, 60]),
                                       sm_scale=S.D ** -0.5, k_scale=0.5, v_scale=2.0, fp8_dtype=FN)
    S._close(out, expect)


# --------------------------------------------------------------------------- tensor scales


def _write_case(ref, layout, fp8_dtype, T=512, H=2, D=128, page=64, nb=16, seed=5):
    dev = torch.device("cuda")
    gd = torch.Generator(device=dev).manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    k = ref.make_input(T, H, D, torch.bfloat16, gen=gd, device=dev)
    v = ref.make_input(T, H, D, torch.bfloat16, gen=gd, device=dev)
    kc, vc = ref.make_caches(layout, nb, page, H, D, D, gen=gd, device=dev)
    loc = ref.loc_pattern("mixed", T, nb * page, page, gen=gen).to(dev, torch.int64)
    return k, v, kc, vc, loc


@pytest.fixture(autouse=True)
def _fresh_scale_checks(fw):
    fw.host._CHECKED_SCALES.clear()
    yield
    fw.host._CHECKED_SCALES.clear()


@pytest.mark.parametrize("encoder", ["auto", "bits"])
@pytest.mark.parametrize("which", ["k_scale", "v_scale"])
@pytest.mark.parametrize("value", REFUSED, ids=repr)
def test_a_refused_tensor_scale_raises_and_writes_nothing_on_the_gpu(fw, ref, value, which, encoder):
    k, v, kc, vc, loc = _write_case(ref, "5d", FN)
    kc0, vc0 = kc.view(torch.uint8).clone(), vc.view(torch.uint8).clone()
    scales = {"k_scale": torch.tensor([0.5], device="cuda"), "v_scale": torch.tensor([2.0], device="cuda")}
    scales[which] = torch.tensor([value], dtype=torch.float32, device="cuda")
    with pytest.raises(fw.ScaleError, match=rf"^{which}: the scale tensor holds"):
        fw.write_kv_fp8(k, v, kc, vc, loc, scales["k_scale"], scales["v_scale"], fp8_dtype=FN, _encoder=encoder)
    torch.cuda.synchronize()
    assert torch.equal(kc.view(torch.uint8), kc0) and torch.equal(vc.view(torch.uint8), vc0)


@pytest.mark.parametrize("fp8_dtype,encoder", [(FN, "auto"), (FN, "bits"), (FNUZ, "bits")],
                         ids=["e4m3fn-native", "e4m3fn-bits", "e4m3fnuz-bits"])
@pytest.mark.parametrize("layout", ["5d", "nhd"])
@pytest.mark.parametrize("value", [2.0 ** -126, 1e-30, 0.37, 3.0, 1e30, 2.0 ** 126], ids=repr)
def test_taken_tensor_scales_are_bit_identical_to_torch_on_the_gpu(fw, ref, value, layout, fp8_dtype, encoder):
    """The edges of the rule, as tensors, against torch's fp32 quotient,
    clamp and cast (the interpreter's result, too)."""
    k, v, kc, vc, loc = _write_case(ref, layout, fp8_dtype)
    kc0, vc0 = kc.view(torch.uint8).clone(), vc.view(torch.uint8).clone()
    ks = torch.tensor([value], dtype=torch.float32, device="cuda")
    vs = torch.tensor([value], dtype=torch.float32, device="cuda")
    fw.write_kv_fp8(k, v, kc, vc, loc, ks, vs, fp8_dtype=fp8_dtype, _encoder=encoder)
    torch.cuda.synchronize()
    ek, ev = ref.reference_write_kv_fp8(k, v, kc0, vc0, loc, ks, vs, fp8_dtype=fp8_dtype, mode="fp32")
    assert int((kc.view(torch.uint8) != ek).sum()) == 0 and int((vc.view(torch.uint8) != ev).sum()) == 0


def test_capture_refuses_an_unchecked_scale_and_takes_a_checked_one(fw, ref):
    k, v, kc, vc, loc = _write_case(ref, "5d", FN)
    ks = torch.tensor([0.5], device="cuda")
    vs = torch.tensor([2.0], device="cuda")
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(fw.ScaleError, match="not checked before the CUDA-graph capture"):
        with torch.cuda.graph(graph):
            fw.write_kv_fp8(k, v, kc, vc, loc, ks, vs, fp8_dtype=FN)
    torch.cuda.synchronize()
    fw.check_scale_tensor("k_scale", ks)
    fw.write_kv_fp8(k, v, kc, vc, loc, ks, vs, fp8_dtype=FN)  # checks vs (outside a capture)
    torch.cuda.synchronize()
    kc0, vc0 = kc.view(torch.uint8).clone(), vc.view(torch.uint8).clone()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fw.write_kv_fp8(k, v, kc, vc, loc, ks, vs, fp8_dtype=FN)
    kc.view(torch.uint8).copy_(kc0)
    graph.replay()
    torch.cuda.synchronize()
    ek, ev = ref.reference_write_kv_fp8(k, v, kc0, vc0, loc, 0.5, 2.0, fp8_dtype=FN, mode="fp32")
    assert torch.equal(kc.view(torch.uint8), ek) and torch.equal(vc.view(torch.uint8), ev)
    # changed in place after the check: refused inside the next capture, checked at the next eager call
    ks.fill_(0.0)
    with pytest.raises(fw.ScaleError):
        with torch.cuda.graph(torch.cuda.CUDAGraph()):
            fw.write_kv_fp8(k, v, kc, vc, loc, ks, vs, fp8_dtype=FN)
    torch.cuda.synchronize()
    with pytest.raises(fw.ScaleError, match="holds 0.0"):
        fw.write_kv_fp8(k, v, kc, vc, loc, ks, vs, fp8_dtype=FN)
