"""Speculative target verify over a 5D cache on a real GPU, at full size, against float64.

bs 128 x 16 draft tokens over ragged cached prefixes up to 32k, the benchmark
geometries, bf16 and fp8; then the same step captured in a CUDA graph and
replayed after the prefix lengths and the page table changed on the device.
Runs under pytest (``-m gpu``) or as a script on machines without pytest.
"""

from __future__ import annotations

import math
import os
import sys
from types import SimpleNamespace as NS

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

try:
    import pytest
except ImportError:  # script mode on a bare GPU machine
    pytest = None

import torch

from tests.gpu.test_attention_5d_gpu import FN, HAVE_CUDA, _case, _check, _ragged  # noqa: E402

if pytest is not None:
    pytestmark = [
        pytest.mark.gpu,
        pytest.mark.skipif(not HAVE_CUDA, reason="needs a CUDA/ROCm GPU (torch.cuda.is_available() is False)"),
    ]

N = 16  # draft tokens per request


def _backend(k5, v5, kv, bt, bs, page=64):
    qo = torch.arange(0, (bs + 1) * N, N, dtype=torch.int32, device="cuda")
    pool = NS(k_buffer=[k5], v_buffer=[v5], dtype=kv, page_size=page)
    meta = NS(kv_indices=bt, swa_page_table=None, qo_indptr=qo, max_q_len=N)
    return NS(token_to_kv_pool=pool, forward_metadata=meta, input_dtype=torch.bfloat16, kv_cache_dtype=kv,
              k_scale=None, v_scale=None)


def _layer(H_q, H_kv, D, scale, window=-1):
    s = None if scale is None else torch.tensor([scale], device="cuda")
    return NS(layer_id=0, tp_q_head_num=H_q, tp_k_head_num=H_kv, tp_v_head_num=H_kv, qk_head_dim=D, v_head_dim=D,
              scaling=1 / math.sqrt(D), sliding_window_size=window, logit_cap=0.0, k_scale=s, v_scale=s)


def _ref(q, k5, v5, bt, bs, prefix, layer, kv):
    from sglang_kv5d.kernels.attention_reference import extend_attention_5d_ref

    qo = torch.arange(0, (bs + 1) * N, N, dtype=torch.int32, device="cuda")
    kvl = (prefix + N).to(torch.int32)
    fp8 = kv == FN
    return extend_attention_5d_ref(
        q.reshape(bs * N, layer.tp_q_head_num, layer.qk_head_dim), k5, v5, bt, qo, kvl, sm_scale=layer.scaling,
        k_scale=layer.k_scale if fp8 else None, v_scale=layer.v_scale if fp8 else None,
        fp8_dtype=kv if fp8 else None, sliding_window=layer.sliding_window_size,
    )


CASES = [
    # (H_q, H_kv, D, kv, window)
    (4, 1, 256, torch.bfloat16, -1),
    (4, 1, 256, FN, -1),
    (32, 8, 128, FN, 1023),
    # 16 drafts x 8 query heads per KV head = 128 packed rows: the one 128-row tile at D=256
    (16, 2, 256, torch.bfloat16, -1),
    (16, 2, 256, FN, 1023),
]


def test_verify_full_size():
    from sglang_kv5d.speculative.verify import forward_target_verify_5d

    bs = 128
    for H_q, H_kv, D, kv, window in CASES:
        prefix_list = [max(0, L - N) for L in _ragged(bs, 32768, 5)]
        k5, v5, bt, scale = _case(bs, [p + N for p in prefix_list], H_q, H_kv, D, kv, seed=11)
        layer = _layer(H_q, H_kv, D, scale if kv == FN else None, window)
        backend = _backend(k5, v5, kv, bt, bs)
        prefix = torch.tensor(prefix_list, dtype=torch.int64, device="cuda")
        q = torch.randn(bs * N, H_q * D, device="cuda", dtype=torch.bfloat16)
        out = forward_target_verify_5d(backend, q, layer, NS(seq_lens=prefix))
        torch.cuda.synchronize()
        _check(out.reshape(bs * N, H_q, D), _ref(q, k5, v5, bt, bs, prefix, layer, kv), f"verify {kv} {H_q}/{H_kv}/{D}")


def test_verify_cuda_graph_replay_with_new_lengths_and_table():
    from sglang_kv5d.speculative.verify import forward_target_verify_5d

    bs, H_q, H_kv, D, kv = 32, 16, 2, 256, FN
    lens = [min(L, 20000) for L in _ragged(bs, 20000, 9)]
    k5, v5, bt, scale = _case(bs, [L + N + 64 for L in lens], H_q, H_kv, D, kv, seed=12)
    layer = _layer(H_q, H_kv, D, scale)
    backend = _backend(k5, v5, kv, bt, bs)
    prefix = torch.tensor(lens, dtype=torch.int64, device="cuda")
    fb = NS(seq_lens=prefix)
    q = torch.randn(bs * N, H_q * D, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(bs * N, H_q * D, device="cuda", dtype=torch.bfloat16)

    def step():
        out.copy_(forward_target_verify_5d(backend, q, layer, fb))

    step()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        step()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    # after capture: other prefix lengths (some crossing a page more), rows of the table swapped
    prefix.copy_(torch.tensor([L + (37 if i % 2 else -min(L, 50)) for i, L in enumerate(lens)], device="cuda"))
    bt.copy_(torch.roll(bt, shifts=1, dims=0))
    prefix.copy_(torch.roll(prefix, shifts=1, dims=0))
    q.normal_()
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    _check(out.reshape(bs * N, H_q, D), _ref(q, k5, v5, bt, bs, prefix, layer, kv), "verify graph replay")


if __name__ == "__main__":
    from tests.gpu.script_mode import run_tests

    sys.exit(run_tests(globals(), HAVE_CUDA))
