"""prefix-valid-write-5d on a GPU: DFLASH-sized commits, SGLang's own kernels as the reference.

On CUDA SGLang's ``set_kv_buffer_prefix_valid`` runs its tiled Triton kernels
natively (``memory_pool._is_cuda``), the fused fp8 one included (the CPU test
cannot run that one under the interpreter). Here, on real pools on the device:

* the patched 5D commit, gathered back to NHD by SGLang's own gather, equals
  SGLang's commit on an NHD pool byte for byte (bf16; fp8 with power-of-two
  scales), bs 128 x 16-token blocks with random commit lengths (0 .. 16);
* with a scale that is not a power of two the fp8 bytes are the fp32 quotient
  rounded once (torch's rounding), at most one code from SGLang's kernel;
* the fp8 route has no host sync: captured in a CUDA graph and replayed with
  other commit lengths and slots, it writes what an eager call writes.
"""

from __future__ import annotations

import importlib
import types

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(),
                       reason="needs a CUDA/ROCm GPU: torch.cuda.is_available() is False"),
]

try:  # SGLang's own pools and kernels are the reference: a GPU machine without SGLang skips
    importlib.import_module("sglang.srt.mem_cache.memory_pool")
    HAVE_SGLANG = True
except ImportError:
    HAVE_SGLANG = False
pytestmark.append(pytest.mark.skipif(not HAVE_SGLANG, reason="needs SGLang installed (the reference is its own commit)"))

PATCHES = ["fp8-kv-write", "prefix-valid-write-5d"]
PAGE, BS, W = 64, 128, 16
POISON = 0xA5


@pytest.fixture
def env(monkeypatch):
    import sglang_kv5d
    from sglang_kv5d import kernel_check

    mp = importlib.import_module("sglang.srt.mem_cache.memory_pool")
    if not hasattr(mp.MHATokenToKVPool, "set_kv_buffer_prefix_valid"):
        pytest.skip("this SGLang has no set_kv_buffer_prefix_valid (from 0.5.16)")
    kernel_check.reset()
    st = sglang_kv5d.activate(patches=PATCHES, strict=False)
    assert all(st.patch(n).state in ("applied", "pending") for n in PATCHES), st
    monkeypatch.setattr(mp, "_use_aiter", True)
    yield types.SimpleNamespace(mp=mp, monkeypatch=monkeypatch, kv5d=sglang_kv5d)
    sglang_kv5d.deactivate()
    kernel_check.reset()


def _pool(env, layout, dtype, H, D, size):
    from tests.helpers.pools import _accepted

    env.monkeypatch.setenv("SGLANG_AITER_KV_CACHE_LAYOUT", layout)
    cls = env.mp.MHATokenToKVPool
    kwargs = dict(size=size, page_size=PAGE, dtype=dtype, head_num=H, head_dim=D, layer_num=1, device="cuda",
                  enable_memory_saver=False, v_head_dim=None, start_layer=None, enable_alt_stream=False,
                  enable_kv_cache_copy=False)
    pool = cls(**_accepted(cls.__init__, kwargs))
    assert pool.k_buffer[0].dim() == (5 if layout == "vectorized_5d" else 3)
    for bufs in (pool.k_buffer, pool.v_buffer):
        bufs[0].view(torch.uint8).fill_(POISON)
    return pool


def _layer():
    return types.SimpleNamespace(layer_id=0, k_scale=None, v_scale=None, k_scale_float=None, v_scale_float=None)


def _gather(pool):
    from sglang_kv5d.surface import SURFACES

    for target in SURFACES["kernels.launch_gather_shuffle_5d_to_linear"].targets:
        module, _, name = target.partition(":")
        try:
            fn = getattr(importlib.import_module(module), name)
            break
        except (ImportError, AttributeError):
            continue
    else:
        pytest.fail("SGLang's launch_gather_shuffle_5d_to_linear is not importable")
    kb, vb = pool.k_buffer[0], pool.v_buffer[0]
    if kb.element_size() == 1:
        kb, vb = kb.view(torch.uint8), vb.view(torch.uint8)
    slots = torch.arange(kb.shape[0] * PAGE, device="cuda")
    k, v = fn(kb, vb, slots)
    return k.contiguous().view(torch.uint8).reshape(slots.numel(), -1), v.contiguous().view(torch.uint8).reshape(slots.numel(), -1)


def _nhd(pool):
    kb, vb = pool.k_buffer[0], pool.v_buffer[0]
    return kb.view(torch.uint8).reshape(kb.shape[0], -1), vb.view(torch.uint8).reshape(vb.shape[0], -1)


def _batch(H, D, seed, hint):
    """bs x W blocks at page-unaligned, page-crossing slots; commit lengths 0 .. W."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    starts = torch.arange(BS, device="cuda") * (W + 5) + 70  # every block starts off a page boundary
    loc = starts[:, None] + torch.arange(W, device="cuda")[None, :]
    lens = torch.randint(0, W + 1, (BS,), device="cuda", generator=g, dtype=torch.int32)
    lens[:3] = torch.tensor([0, W, 1], device="cuda", dtype=torch.int32)
    k = (torch.randn(BS * W, H, D, device="cuda", generator=g) * hint).to(torch.bfloat16)
    v = (torch.randn(BS * W, H, D, device="cuda", generator=g) * hint).to(torch.bfloat16)
    size = int(loc.max()) + PAGE
    return loc, lens, k, v, size


def _committed(loc, lens):
    mask = torch.arange(W, device="cuda")[None, :] < lens[:, None].long()
    return loc[mask], torch.nonzero(mask.reshape(-1)).flatten()


GEOMS = [(1, 256), (8, 128)]
CASES = [(torch.bfloat16, 1.0, 1.0), (torch.float8_e4m3fn, 1.0, 1.0), (torch.float8_e4m3fn, 0.5, 2.0)]


@pytest.mark.parametrize("H,D", GEOMS, ids=lambda x: str(x))
@pytest.mark.parametrize("dtype,ks,vs", CASES, ids=lambda x: str(x).replace("torch.", ""))
def test_5d_commit_equals_sglang_nhd_commit(env, H, D, dtype, ks, vs):
    loc, lens, k, v, size = _batch(H, D, seed=H * 7 + D, hint=3.0 if dtype == torch.bfloat16 else 200.0)
    k0, v0 = k.clone(), v.clone()
    ours = _pool(env, "vectorized_5d", dtype, H, D, size)
    ours.set_kv_buffer_prefix_valid(_layer(), loc, lens, k, v, ks, vs)
    torch.cuda.synchronize()
    assert torch.equal(k, k0) and torch.equal(v, v0)
    env.kv5d.deactivate()
    try:
        ref = _pool(env, "nhd", dtype, H, D, size)
        ref.set_kv_buffer_prefix_valid(_layer(), loc, lens, k.clone(), v.clone(), ks, vs)
    finally:
        env.kv5d.activate(patches=PATCHES, strict=False)
    kk, vv = _gather(ours)
    rk, rv = _nhd(ref)
    assert torch.equal(kk, rk) and torch.equal(vv, rv)
    slots, _ = _committed(loc, lens)
    untouched = torch.ones(kk.shape[0], dtype=torch.bool, device="cuda")
    untouched[slots] = False
    assert bool((kk[untouched] == POISON).all()) and bool((vv[untouched] == POISON).all())


@pytest.mark.parametrize("H,D", GEOMS, ids=lambda x: str(x))
def test_fp8_any_scale_is_rounded_once(env, H, D):
    from sglang_kv5d.kernels.fp8_reference import fp8_step_distance, quantize_fp8_fp32

    fp8 = torch.float8_e4m3fn
    loc, lens, k, v, size = _batch(H, D, seed=5, hint=50.0)
    ours = _pool(env, "vectorized_5d", fp8, H, D, size)
    ours.set_kv_buffer_prefix_valid(_layer(), loc, lens, k, v, 0.37, 1.9)
    env.kv5d.deactivate()
    try:
        ref = _pool(env, "nhd", fp8, H, D, size)
        ref.set_kv_buffer_prefix_valid(_layer(), loc, lens, k.clone(), v.clone(), 0.37, 1.9)
    finally:
        env.kv5d.activate(patches=PATCHES, strict=False)
    slots, rows = _committed(loc, lens)
    for x, s, got, theirs in ((k, 0.37, _gather(ours)[0], _nhd(ref)[0]), (v, 1.9, _gather(ours)[1], _nhd(ref)[1])):
        assert torch.equal(got[slots], quantize_fp8_fp32(x[rows], s, fp8).reshape(len(rows), -1))
        assert int(fp8_step_distance(got[slots], theirs[slots], fp8).max()) <= 1


def test_fp8_commit_replays_in_a_cuda_graph(env):
    H, D, fp8 = 1, 256, torch.float8_e4m3fn
    loc, lens, k, v, size = _batch(H, D, seed=9, hint=3.0)
    pool = _pool(env, "vectorized_5d", fp8, H, D, size)
    pool.set_kv_buffer_prefix_valid(_layer(), loc, lens, k, v, 0.5, 2.0)  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        pool.set_kv_buffer_prefix_valid(_layer(), loc, lens, k, v, 0.5, 2.0)
    loc2, lens2, k2, v2, _ = _batch(H, D, seed=10, hint=3.0)
    for buf in (pool.k_buffer[0], pool.v_buffer[0]):
        buf.view(torch.uint8).fill_(POISON)
    loc.copy_(loc2.flip(0))
    lens.copy_(lens2)
    k.copy_(k2)
    v.copy_(v2)
    graph.replay()
    torch.cuda.synchronize()
    replayed = _gather(pool)
    eager = _pool(env, "vectorized_5d", fp8, H, D, size)
    eager.set_kv_buffer_prefix_valid(_layer(), loc, lens, k, v, 0.5, 2.0)
    torch.cuda.synchronize()
    expected = _gather(eager)
    assert torch.equal(replayed[0], expected[0]) and torch.equal(replayed[1], expected[1])
