"""5D decode / extend attention on a real GPU at full size, against float64 references.

Long contexts (up to 32k), batch 128, ragged lengths, every geometry of the
benchmark, bf16 and fp8 caches, window / sinks / soft cap. Outputs are poisoned
with NaN first. Runs under pytest (``-m gpu``) or as a script
(``python tests/gpu/test_attention_5d_gpu.py``) on machines without pytest.
"""

from __future__ import annotations

import math
import os
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

try:
    import pytest
except ImportError:  # script mode on a bare GPU machine
    pytest = None

import torch

HAVE_CUDA = torch.cuda.is_available()

if pytest is not None:
    pytestmark = [
        pytest.mark.gpu,
        pytest.mark.skipif(not HAVE_CUDA, reason="needs a CUDA/ROCm GPU (torch.cuda.is_available() is False)"),
    ]

FN = torch.float8_e4m3fn
FNUZ = torch.float8_e4m3fnuz


def _case(bs, lens, H_q, H_kv, D, kv, page=64, seed=0):
    dev = "cuda"
    g = torch.Generator(device=dev)
    g.manual_seed(seed)
    fp8 = kv in (FN, FNUZ)
    X = 16 if fp8 else 8
    need = [-(-L // page) for L in lens]
    nb = sum(need) + 2
    scale = 0.05 if fp8 else 1.0

    def rnd(shape):
        t = torch.randn(shape, generator=g, device=dev, dtype=torch.float32)
        return (t / scale).to(kv) if fp8 else t.to(kv)

    k5 = rnd((nb, H_kv, D // X, page, X))
    v5 = rnd((nb, H_kv, page // X, D, X))
    width = max(need) + 1
    bt = torch.full((bs, width), 10**7, dtype=torch.int32, device=dev)  # poison past the context
    perm = torch.randperm(nb, generator=g, device=dev)
    o = 0
    for b, n in enumerate(need):
        bt[b, :n] = perm[o : o + n].to(torch.int32)
        o += n
    # NaN in the slots past each context (in its last page)
    for b, L in enumerate(lens):
        if L % page:
            blk = int(bt[b, L // page])
            t0 = L % page
            if fp8:
                nan = 0x7F if kv == FN else 0x80
                k5.view(torch.uint8)[blk, :, :, t0:, :] = nan
                for t in range(t0, page):
                    v5.view(torch.uint8)[blk, :, t // X, :, t % X] = nan
            else:
                k5[blk, :, :, t0:, :] = float("nan")
                for t in range(t0, page):
                    v5[blk, :, t // X, :, t % X] = float("nan")
    return k5, v5, bt, scale


def _ragged(bs, max_len, seed):
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(1, max_len + 1, (bs,), generator=g).tolist()
    lens[0] = max_len
    if bs > 2:
        lens[1] = 1
        lens[2] = 64 * 7  # exactly on a page boundary
    return lens


def _check(out, ref, what):
    assert torch.isfinite(out.float()).all(), f"{what}: non-finite output"
    err = (out.double() - ref).abs().max().item()
    assert err < 3e-2, f"{what}: max abs err {err}"


DECODE_CASES = [
    # (bs, max_len, H_q, H_kv, D, kv)
    (128, 32768, 4, 1, 256, torch.bfloat16),
    (128, 32768, 32, 8, 128, FN),
    (32, 32768, 16, 2, 256, FN),
    (4, 32768, 16, 2, 256, torch.bfloat16),
    (1, 32768, 4, 1, 256, FN),
    (1, 32768, 64, 8, 128, torch.bfloat16),
    (3, 9000, 8, 8, 64, FNUZ),  # integer-decoded fnuz on NVIDIA
]


def test_decode_full_size():
    from sglang_kv5d.kernels.attention_5d import decode_attention_5d
    from sglang_kv5d.kernels.attention_reference import decode_attention_5d_ref

    for i, (bs, max_len, H_q, H_kv, D, kv) in enumerate(DECODE_CASES):
        lens = _ragged(bs, max_len, i)
        k5, v5, bt, scale = _case(bs, lens, H_q, H_kv, D, kv, seed=i)
        ctx = torch.tensor(lens, dtype=torch.int32, device="cuda")
        q = torch.randn(bs, H_q, D, device="cuda", dtype=torch.bfloat16)
        ks = torch.tensor([scale], device="cuda") if kv in (FN, FNUZ) else None
        sm = 1.0 / math.sqrt(D)
        for splits in (None, 1, 7):
            out = torch.full_like(q, float("nan"))
            decode_attention_5d(q, k5, v5, bt, ctx, sm_scale=sm, k_scale=ks, v_scale=ks, num_splits=splits, out=out)
            torch.cuda.synchronize()
            sel = list(range(min(bs, 24)))  # float64 reference on a subset (long rows first)
            ref = decode_attention_5d_ref(
                q[sel], k5, v5, bt[sel], ctx[sel], sm_scale=sm, k_scale=ks, v_scale=ks
            )
            _check(out[sel], ref, f"decode case {i} splits {splits}")
            assert torch.isfinite(out.float()).all()


def test_decode_features_full_size():
    from sglang_kv5d.kernels.attention_5d import decode_attention_5d
    from sglang_kv5d.kernels.attention_reference import decode_attention_5d_ref

    bs, H_q, H_kv, D = 16, 16, 2, 256
    lens = _ragged(bs, 20000, 99)
    for kv in (torch.bfloat16, FN):
        k5, v5, bt, scale = _case(bs, lens, H_q, H_kv, D, kv, seed=5)
        ctx = torch.tensor(lens, dtype=torch.int32, device="cuda")
        q = torch.randn(bs, H_q, D, device="cuda", dtype=torch.bfloat16)
        sinks = torch.randn(H_q, device="cuda") * 3
        ks = scale if kv == FN else None
        for window, cap, sk in ((4095, 0.0, None), (127, 30.0, sinks), (-1, 20.0, sinks)):
            out = torch.full_like(q, float("nan"))
            decode_attention_5d(
                q, k5, v5, bt, ctx, sm_scale=0.0625, k_scale=ks, v_scale=ks, sliding_window=window,
                sinks=sk, logit_cap=cap, out=out,
            )
            ref = decode_attention_5d_ref(
                q, k5, v5, bt, ctx, sm_scale=0.0625, k_scale=ks, v_scale=ks, sliding_window=window,
                sinks=sk, logit_cap=cap,
            )
            _check(out, ref, f"features {kv} W={window} cap={cap}")


def test_decode_cuda_graph_capture():
    from sglang_kv5d.kernels.attention_5d import decode_attention_5d
    from sglang_kv5d.kernels.attention_reference import decode_attention_5d_ref

    bs, H_q, H_kv, D = 8, 16, 2, 256
    lens = _ragged(bs, 5000, 3)
    k5, v5, bt, scale = _case(bs, lens, H_q, H_kv, D, FN, seed=8)
    ctx = torch.tensor(lens, dtype=torch.int32, device="cuda")
    q = torch.randn(bs, H_q, D, device="cuda", dtype=torch.bfloat16)
    ks = torch.tensor([scale], device="cuda")
    out = torch.empty_like(q)

    def fn():
        decode_attention_5d(q, k5, v5, bt, ctx, sm_scale=0.0625, k_scale=ks, v_scale=ks, out=out)

    fn()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    # new lengths and scales after capture: the graph reads them on the device
    lens2 = [max(1, L - 100) for L in lens]
    ctx.copy_(torch.tensor(lens2, dtype=torch.int32))
    ks.fill_(scale * 2)
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    ref = decode_attention_5d_ref(q, k5, v5, bt, ctx, sm_scale=0.0625, k_scale=ks, v_scale=ks)
    _check(out, ref, "graph replay")


def test_extend_full_size():
    from sglang_kv5d.kernels.attention_5d import extend_attention_5d
    from sglang_kv5d.kernels.attention_reference import extend_attention_5d_ref

    seqs = [(0, 1500), (30000, 700), (4096, 513), (777, 1), (12000, 2048)]
    kv_lens = [p + e for p, e in seqs]
    for kv, (H_q, H_kv, D), window, sk in (
        (torch.bfloat16, (16, 2, 256), -1, False),
        (FN, (32, 8, 128), 1023, True),
    ):
        k5, v5, bt, scale = _case(len(seqs), kv_lens, H_q, H_kv, D, kv, seed=2)
        qo = [0]
        for _, e in seqs:
            qo.append(qo[-1] + e)
        qo_indptr = torch.tensor(qo, dtype=torch.int32, device="cuda")
        kvl = torch.tensor(kv_lens, dtype=torch.int32, device="cuda")
        q = torch.randn(qo[-1], H_q, D, device="cuda", dtype=torch.bfloat16)
        sinks = torch.randn(H_q, device="cuda") if sk else None
        ks = scale if kv == FN else None
        out = torch.full_like(q, float("nan"))
        extend_attention_5d(
            q, k5, v5, bt, qo_indptr, kvl, sm_scale=1 / math.sqrt(D), k_scale=ks, v_scale=ks,
            sliding_window=window, sinks=sinks, out=out,
        )
        ref = extend_attention_5d_ref(
            q, k5, v5, bt, qo_indptr, kvl, sm_scale=1 / math.sqrt(D), k_scale=ks, v_scale=ks,
            sliding_window=window, sinks=sinks,
        )
        _check(out, ref, f"extend {kv}")


if __name__ == "__main__":
    from tests.gpu.script_mode import run_tests

    sys.exit(run_tests(globals(), HAVE_CUDA))
