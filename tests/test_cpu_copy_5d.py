"""cpu-copy-5d: retraction's host copy and reload over SHUFFLE 5D pools (real SGLang pools, CPU).

The scenario of every pool test is a retraction: random bytes in every layer
buffer; the allocator's ``get_cpu_copy(old slots)`` (what ``Req.offload_kv_cache``
calls); the old slots poisoned (freed and reused by other requests); then
``load_cpu_copy(copy, new slots)`` (``Req.load_kv_cache`` after re-allocation:
other slots, some of them crossing page boundaries, one shared with the old
set). Expected, computed independently through an NHD view of each buffer
(``permute`` + ``reshape`` of the 5D layout): the new slots hold the old
slots' original bytes and every other slot keeps its bytes (poison included).
Buffers are compared whole, byte for byte.

(a) core only (sglang_kv5d.cpu_copy) against that NHD conversion: bf16, fp8
    stored as uint8 and as fp8, pages 8 .. 64, odd chunk sizes, range checks;
(b) MHATokenToKVPool through the paged allocator: bf16, float8_e4m3fn (stored
    as uint8), float8_e4m3fnuz (stored as itself), pages 16 and 64, chunked;
(c) the same inside HybridLinearKVPool (paged allocator) and SWAKVPool (SWA
    allocator, with out-of-window slots unmapped on both sides, so SGLang
    re-chunks the SWA copy it gets from the overlay);
(d) without the patch SGLang is wrong on the same pools: an IndexError once a
    slot passes the block count, else whole blocks copied and written back
    over neighbours;
(e) an NHD pool reaches the original (its result equals SGLang's own);
(f) fail-closed-decode-offload refuses DecodeKVCacheOffloadManager over a
    5D pool when 5D is requested, and only then.
"""

from __future__ import annotations

import importlib

import pytest
import torch

import sglang_kv5d
from sglang_kv5d import cpu_copy as core
from sglang_kv5d import kernel_check
from sglang_kv5d.activation import Kv5dNotReadyError
from sglang_kv5d.pools import iter_leaf_pools
from tests.helpers.pools import (
    enable_5d,
    make_hybrid_pool,
    make_mha_pool,
    make_swa_pool,
    memory_pool_module,
)

POISON = 0xA5
FP8 = [d for d in (getattr(torch, "float8_e4m3fn", None), getattr(torch, "float8_e4m3fnuz", None)) if d]
DTYPES = [torch.bfloat16] + FP8
INT = {1: torch.uint8, 2: torch.int16}


# --------------------------------------------------------------------------- #
# Independent reference: the 5D layout as an NHD (slots, H, D) tensor          #
# --------------------------------------------------------------------------- #


def raw(t):
    """Same bytes, integer dtype of the same element size (fp8 and bf16 compare exactly)."""
    return t.view(INT[t.element_size()])


def nhd_k(kb):
    b, h, dx, p, x = kb.shape  # element (b, h, i, p, x) is dim i * X + x of slot b * page + p
    return raw(kb).permute(0, 3, 1, 2, 4).reshape(b * p, h, dx * x)


def nhd_v(vb):
    b, h, px, d, x = vb.shape  # element (b, h, j, d, x) is dim d of slot b * page + j * X + x
    return raw(vb).permute(0, 2, 4, 1, 3).reshape(b * px * x, h, d)


def from_nhd_k(nk, like):
    b, h, dx, p, x = like.shape
    return nk.reshape(b, p, h, dx, x).permute(0, 2, 3, 1, 4).contiguous()


def from_nhd_v(nv, like):
    b, h, px, d, x = like.shape
    return nv.reshape(b, px, x, h, d).permute(0, 3, 1, 4, 2).contiguous()


def fill_random(t, seed):
    """Random bytes (NaN / inf patterns included: only bytes are compared)."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(0, 256, (t.numel() * t.element_size(),), dtype=torch.uint8, generator=g)
    raw(t).view(-1).copy_(src.view(INT[t.element_size()]))


def poison_slots(kb, vb, slots):
    """Poison the slots' bytes with a per-token loop in 5D coordinates (test-only writer)."""
    page, x = kb.shape[3], kb.shape[-1]
    val = torch.tensor([POISON] * kb.element_size(), dtype=torch.uint8).view(INT[kb.element_size()]).item()
    for s in slots.tolist():
        b, o = divmod(s, page)
        raw(kb)[b, :, :, o, :] = val
        raw(vb)[b, :, o // x, :, o % x] = val


def snapshot(leaf):
    """[(K, V) as NHD copies] per layer of one leaf pool."""
    return [(nhd_k(kb).clone(), nhd_v(vb).clone()) for kb, vb in zip(leaf.k_buffer, leaf.v_buffer)]


def assert_moved(leaf, before, after_poison, old, new, what):
    """Every layer of ``leaf`` equals after_poison with new slots := before's old slots."""
    for li, (kb, vb) in enumerate(zip(leaf.k_buffer, leaf.v_buffer)):
        ek, ev = after_poison[li][0].clone(), after_poison[li][1].clone()
        ek[new] = before[li][0][old]
        ev[new] = before[li][1][old]
        gk, gv = nhd_k(kb), nhd_v(vb)
        bad_k = (gk != ek).reshape(gk.shape[0], -1).any(1).nonzero().flatten().tolist()
        bad_v = (gv != ev).reshape(gv.shape[0], -1).any(1).nonzero().flatten().tolist()
        assert not bad_k and not bad_v, f"{what} layer {li}: K slots {bad_k[:12]} V slots {bad_v[:12]} differ"
        # the reference really is the inverse of the conversion (whole-buffer bytes)
        assert torch.equal(from_nhd_k(ek, kb), raw(kb)) and torch.equal(from_nhd_v(ev, vb), raw(vb))


def slot_sets(page):
    """Old and new slots of one request: runs crossing page boundaries, scattered slots,
    one slot in both sets; all below 4 * page + page (every pool here has >= 5 blocks)."""
    old = torch.cat([torch.arange(page - 3, page + 5), torch.tensor([2 * page - 1, 2 * page, 3 * page + 7])])
    new = torch.cat([torch.arange(3 * page - 4, 3 * page + 4), torch.tensor([page + 1, 2 * page + 2, 4 * page - 1])])
    return old, new


# --------------------------------------------------------------------------- #
# (a) core only                                                                #
# --------------------------------------------------------------------------- #


def _core_buffers(dtype, page, layers=2, blocks=6, heads=2, d=64, dv=32, seed=0):
    x = 16 // torch.empty((), dtype=dtype).element_size()
    ks = [torch.empty((blocks, heads, d // x, page, x), dtype=dtype) for _ in range(layers)]
    vs = [torch.empty((blocks, heads, page // x, dv, x), dtype=dtype) for _ in range(layers)]
    for i, t in enumerate(ks + vs):
        fill_random(t, seed + i)
    return ks, vs


CORE_CASES = [(torch.bfloat16, p) for p in (8, 16, 64)] + [(torch.uint8, 16)] + [(d, p) for d in FP8 for p in (16, 64)]


@pytest.mark.sglang_independent
@pytest.mark.parametrize("dtype,page", CORE_CASES, ids=[f"{str(d)[6:]}-p{p}" for d, p in CORE_CASES])
@pytest.mark.parametrize("chunk", [3, 8192])
def test_core_round_trip_equals_nhd_reference(dtype, page, chunk):
    ks, vs = _core_buffers(dtype, page)
    old, new = slot_sets(page)
    before = [(nhd_k(k).clone(), nhd_v(v).clone()) for k, v in zip(ks, vs)]

    cpu = core.get_cpu_copy_5d(ks, vs, old.to(torch.int32), chunk)
    assert len(cpu) == 2 and len(cpu[0]) == -(-len(old) // chunk)
    for li in range(2):
        k = torch.cat([c[0] for c in cpu[li]])
        v = torch.cat([c[1] for c in cpu[li]])
        assert k.dtype == dtype and v.dtype == dtype and k.shape == (len(old), 2, 64) and v.shape == (len(old), 2, 32)
        assert torch.equal(raw(k), before[li][0][old]) and torch.equal(raw(v), before[li][1][old])

    for k, v in zip(ks, vs):
        poison_slots(k, v, old)
    poisoned = [(nhd_k(k).clone(), nhd_v(v).clone()) for k, v in zip(ks, vs)]
    core.load_cpu_copy_5d(ks, vs, cpu, new, chunk)
    for li, (k, v) in enumerate(zip(ks, vs)):
        ek, ev = poisoned[li][0].clone(), poisoned[li][1].clone()
        ek[new], ev[new] = before[li][0][old], before[li][1][old]
        assert torch.equal(raw(k), from_nhd_k(ek, k)) and torch.equal(raw(v), from_nhd_v(ev, v))


@pytest.mark.sglang_independent
def test_core_checks_before_touching_anything():
    ks, vs = _core_buffers(torch.bfloat16, 16, blocks=3)  # 48 slots
    cpu = core.get_cpu_copy_5d(ks, vs, torch.tensor([1, 2, 47]), 2)
    keep = [raw(t).clone() for t in ks + vs]
    with pytest.raises(IndexError, match=r"\[0, 48\)"):
        core.get_cpu_copy_5d(ks, vs, torch.tensor([1, 48]), 2)
    with pytest.raises(IndexError):
        core.load_cpu_copy_5d(ks, vs, cpu, torch.tensor([5, 6, -1]), 2)
    with pytest.raises(ValueError, match="chunks"):
        core.load_cpu_copy_5d(ks, vs, cpu, torch.tensor([5, 6, 7]), 8192)
    bad = [[[c[0].to(torch.float16), c[1]] for c in layer] for layer in cpu]
    with pytest.raises(ValueError, match="do not fit"):
        core.load_cpu_copy_5d(ks, vs, bad, torch.tensor([5, 6, 7]), 2)
    with pytest.raises(ValueError, match="SHUFFLE 5D"):
        core.get_cpu_copy_5d([k.reshape(-1, 2, 64) for k in ks], vs, torch.tensor([1]), 2)
    assert all(torch.equal(raw(t), c) for t, c in zip(ks + vs, keep)), "a refused call wrote"


# --------------------------------------------------------------------------- #
# Real SGLang pools                                                            #
# --------------------------------------------------------------------------- #


@pytest.fixture
def overlay():
    sglang_kv5d.deactivate()
    kernel_check.reset()
    st = sglang_kv5d.activate(patches=["cpu-copy-5d"], strict=False)
    assert st.patch("cpu-copy-5d").state in ("applied", "pending"), st
    yield
    sglang_kv5d.deactivate()
    kernel_check.reset()


@pytest.fixture
def no_overlay():
    sglang_kv5d.deactivate()
    yield


def _allocators():
    return importlib.import_module("sglang.srt.mem_cache.allocator")


def paged_allocator(pool, size, page, dtype):
    return _allocators().PagedTokenToKVPoolAllocator(size, page, dtype, "cpu", pool, False)


def _fill(pool, seed):
    for i, leaf in enumerate(iter_leaf_pools(pool)):
        for j, t in enumerate(list(leaf.k_buffer) + list(leaf.v_buffer)):
            fill_random(t, seed + 100 * i + j)


def _mha(dtype, page, monkeypatch, chunk=5, size=256):
    enable_5d(monkeypatch)
    pool = make_mha_pool(size=size, page_size=page, dtype=dtype, head_num=2, head_dim=64, v_head_dim=32,
                         layer_num=2)
    assert pool.k_buffer[0].dim() == 5 and pool.v_buffer[0].dim() == 5
    pool.cpu_offloading_chunk_size = chunk
    _fill(pool, 7)
    return pool


def _retract(allocator, leaf, old, new, extra=None):
    """get_cpu_copy(old) -> poison old -> load_cpu_copy(new) through ``allocator``;
    returns the copy and the (before, after poison) snapshots of ``leaf``."""
    before = snapshot(leaf)
    cpu = allocator.get_cpu_copy(old)
    for kb, vb in zip(leaf.k_buffer, leaf.v_buffer):
        poison_slots(kb, vb, old)
    if extra is not None:
        extra()
    poisoned = snapshot(leaf)
    allocator.load_cpu_copy(cpu, new)
    return cpu, before, poisoned


MHA_CASES = [(d, p) for d in DTYPES for p in (16, 64)]


@pytest.mark.parametrize("dtype,page", MHA_CASES, ids=[f"{str(d)[6:]}-p{p}" for d, p in MHA_CASES])
def test_mha_pool_round_trip(monkeypatch, overlay, dtype, page):
    pool = _mha(dtype, page, monkeypatch)
    old, new = slot_sets(page)
    cpu, before, poisoned = _retract(paged_allocator(pool, 256, page, dtype), pool, old, new)
    # SGLang's own offload format: per layer, chunks of cpu_offloading_chunk_size tokens
    assert [len(layer) for layer in cpu] == [3, 3]
    assert [c[0].shape for c in cpu[0]] == [(5, 2, 64), (5, 2, 64), (1, 2, 64)]
    assert {c[1].shape[1:] for layer in cpu for c in layer} == {(2, 32)}
    assert {c[0].dtype for layer in cpu for c in layer} == {pool.store_dtype}
    assert_moved(pool, before, poisoned, old, new, f"MHA {dtype} page {page}")


def test_hybrid_pool_round_trip(monkeypatch, overlay):
    for dtype, page in ((FP8[0], 64), (torch.bfloat16, 16)):
        enable_5d(monkeypatch)
        pool = make_hybrid_pool(size=256, page_size=page, dtype=dtype, head_num=1, head_dim=64)
        full = pool.full_kv_pool
        assert full.k_buffer[0].dim() == 5
        full.cpu_offloading_chunk_size = 4
        _fill(pool, 11)
        old, new = slot_sets(page)
        _, before, poisoned = _retract(paged_allocator(pool, 256, page, dtype), full, old, new)
        assert_moved(full, before, poisoned, old, new, f"hybrid {dtype} page {page}")


def _swa_allocator(pool, page, dtype):
    cls = importlib.import_module("sglang.srt.mem_cache.allocator.swa").SWATokenToKVPoolAllocator
    return cls(256, 128, page, dtype, "cpu", pool, False)


@pytest.mark.parametrize("dtype", [torch.bfloat16, FP8[0]], ids=["bfloat16", "fp8"])
def test_swa_pool_round_trip(monkeypatch, overlay, dtype):
    page = 16
    enable_5d(monkeypatch)
    pool = make_swa_pool(size=256, size_swa=128, page_size=page, dtype=dtype)
    full, swa = pool.full_kv_pool, pool.swa_kv_pool
    assert full.k_buffer[0].dim() == 5 and swa.k_buffer[0].dim() == 5
    full.cpu_offloading_chunk_size = swa.cpu_offloading_chunk_size = 4
    _fill(pool, 13)
    alloc = _swa_allocator(pool, page, dtype)
    old, new = slot_sets(page)
    # Tail-only SWA windows: the first 3 old / first 5 new full slots have no SWA slot (0).
    old_swa = torch.tensor([0, 0, 0, 15, 16, 17, 31, 32, 33, 60, 97])
    new_swa = torch.tensor([0, 0, 0, 0, 0, 47, 48, 49, 70, 71, 110])
    alloc.set_full_to_swa_mapping(old, old_swa)

    def remap():
        alloc.set_full_to_swa_mapping(old, torch.zeros_like(old_swa))
        alloc.set_full_to_swa_mapping(new, new_swa)
        for kb, vb in zip(swa.k_buffer, swa.v_buffer):
            poison_slots(kb, vb, old_swa[old_swa > 0])

    swa_before = snapshot(swa)
    cpu, before, poisoned = _retract(alloc, full, old, new, extra=remap)
    assert_moved(full, before, poisoned, old, new, f"SWA full {dtype}")
    both = (old_swa > 0) & (new_swa > 0)  # saved on the way out and mapped on the way in
    assert int(both.sum()) == 6
    assert_moved(swa, swa_before, snapshot_after_poison(swa, swa_before, old_swa[old_swa > 0]),
                 old_swa[both], new_swa[both], f"SWA window {dtype}")


def snapshot_after_poison(leaf, before, slots):
    """``before`` with ``slots`` poisoned (what the SWA pool held just before the reload)."""
    out = []
    val = torch.tensor([POISON] * leaf.k_buffer[0].element_size(), dtype=torch.uint8)
    val = val.view(INT[leaf.k_buffer[0].element_size()]).item()
    for k, v in before:
        k, v = k.clone(), v.clone()
        k[slots] = val
        v[slots] = val
        out.append((k, v))
    return out


# --------------------------------------------------------------------------- #
# (d) SGLang without the patch, (e) NHD pools                                  #
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("dtype", [torch.bfloat16, FP8[0]], ids=["bfloat16", "fp8"])
def test_unpatched_sglang_is_wrong_on_5d(monkeypatch, no_overlay, dtype):
    page = 16
    pool = _mha(dtype, page, monkeypatch)  # 17 blocks
    alloc = paged_allocator(pool, 256, page, dtype)
    old, new = slot_sets(page)  # slots past the block count
    with pytest.raises(IndexError):
        alloc.get_cpu_copy(old)
    # slots below the block count "work": whole blocks are copied and written back
    old, new = torch.arange(2, 9), torch.arange(9, 16)
    before = snapshot(pool)
    cpu = alloc.get_cpu_copy(old)
    assert cpu[0][0][0].shape != (5, 2, 64), "SGLang copied per token: the test premise is gone"
    for kb, vb in zip(pool.k_buffer, pool.v_buffer):
        poison_slots(kb, vb, old)
    poisoned = snapshot(pool)
    alloc.load_cpu_copy(cpu, new)
    with pytest.raises(AssertionError, match="differ"):
        assert_moved(pool, before, poisoned, old, new, "unpatched")


def test_nhd_pool_reaches_the_original(monkeypatch, overlay):
    enable_5d(monkeypatch, "nhd")
    pool = make_mha_pool(size=256, page_size=16, dtype=torch.bfloat16, head_num=2, head_dim=64, layer_num=2)
    assert pool.k_buffer[0].dim() == 3
    pool.cpu_offloading_chunk_size = 5
    for j, t in enumerate(list(pool.k_buffer) + list(pool.v_buffer)):
        fill_random(t, j)
    old = torch.tensor([3, 17, 40, 41, 200])
    calls = []
    monkeypatch.setattr(core, "get_cpu_copy_5d", lambda *a: calls.append(a))
    cpu = pool.get_cpu_copy(old)
    assert not calls
    assert torch.equal(raw(torch.cat([c[0] for c in cpu[1]])), raw(pool.k_buffer[1][old]))


# --------------------------------------------------------------------------- #
# (f) the decode-side offload manager fails closed over 5D                     #
# --------------------------------------------------------------------------- #


def _raised_by_sglang(info) -> bool:
    """The error came from SGLang's own constructor (our guard let the call through):
    raised in a frame outside the package, or Python refusing the placeholder
    arguments of the original (0.5.16 also wants server_args)."""
    last = str(info.traceback[-1].path)
    if "sglang_kv5d" not in last:
        return True
    return info.type is TypeError and "DecodeKVCacheOffloadManager.__init__()" in str(info.value)


def _offload_manager_cls():
    module = importlib.import_module("sglang.srt.disaggregation.decode_kvcache_offload_manager")
    return module.DecodeKVCacheOffloadManager


@pytest.mark.parametrize("layout", ["vectorized_5d", "nhd"])
def test_decode_offload_manager_refused_over_5d(monkeypatch, no_overlay, layout):
    enable_5d(monkeypatch, layout)
    pool = make_mha_pool(size=256, page_size=16, dtype=torch.bfloat16, head_num=2, head_dim=64, layer_num=1)
    alloc = paged_allocator(pool, 256, 16, torch.bfloat16)
    cls = _offload_manager_cls()
    st = sglang_kv5d.activate(patches=["cpu-copy-5d"], strict=True)
    try:
        assert st.patch("fail-closed-decode-offload").state == "applied", st
        with pytest.raises(Exception) as info:
            cls(None, alloc, None, None)  # the original fails on these placeholders, the guard first
        if layout == "vectorized_5d":
            assert info.type is Kv5dNotReadyError
            msg = str(info.value)
            assert "--disaggregation-decode-enable-offload-kvcache" in msg and "vectorized_5d" in msg
        else:
            assert _raised_by_sglang(info), info.getrepr()  # not 5D: SGLang's own constructor ran
    finally:
        sglang_kv5d.deactivate()


def test_decode_offload_manager_not_refused_when_5d_not_requested(monkeypatch, no_overlay):
    enable_5d(monkeypatch)
    pool = make_mha_pool(size=256, page_size=16, dtype=torch.bfloat16, head_num=2, head_dim=64, layer_num=1)
    alloc = paged_allocator(pool, 256, 16, torch.bfloat16)
    monkeypatch.setenv("SGLANG_AITER_KV_CACHE_LAYOUT", "nhd")  # 5D buffers, 5D not requested
    cls = _offload_manager_cls()
    sglang_kv5d.activate(patches=["cpu-copy-5d"], strict=True)
    try:
        with pytest.raises(Exception) as info:
            cls(None, alloc, None, None)
        assert _raised_by_sglang(info), info.getrepr()
    finally:
        sglang_kv5d.deactivate()


def test_memory_pool_methods_are_the_patched_surface():
    mp = memory_pool_module()
    for name in ("get_cpu_copy", "load_cpu_copy"):
        assert name in vars(mp.MHATokenToKVPool), f"MHATokenToKVPool.{name} is inherited here: the patch misses"
