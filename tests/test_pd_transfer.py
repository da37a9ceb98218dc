"""PD transfer over SHUFFLE 5D, moved by SGLang's own address arithmetic (SGLang 0.5.23, CPU).

Two cases, each with two real pools (prefill, decode):

* Qwen3.5-like HybridLinearKVPool (layers 3 and 7 of 8 are full attention, 1 KV
  head of 256, fp8 e4m3fn 5D, page 16) with its Mamba2 state pool (6 linear layers);
* SWAKVPool with 5D bf16 buffers (layers 0, 2 sliding window, 1, 3 full; 2 KV heads of 64).

The prefill pool is filled through the overlay's write path (``set_kv_buffer``
with fp8-kv-write active) with random K/V for requests spanning page
boundaries. Regions and item lengths come from SGLang's own kv_args builders
(``get_kv_transfer_buf_infos`` for the full-attention KV: K layers then V
layers, one page of bytes per item; ``setup_state_kv_args`` for the SWA KV and
the Mamba state); page ids from SGLang's ``kv_to_page_indices`` over each
request's token slots (SWA slots through the pool's own
``translate_loc_from_full_to_swa``), grouped into runs by SGLang's
``group_concurrent_contiguous``; each run is one plain byte copy at
``base + page_id * item_len`` (the mooncake sender's math). The decode pool is
then read back through the overlay (``resolve_kv_subpool``) and the portable 5D
decode runs on it: pages byte-equal (and nothing else written), attention equal
to the same kernel on the prefill pool and close to the float64 reference.
"""

from __future__ import annotations

import ctypes
import importlib
import types

import numpy as np
import pytest
import torch

import sglang_kv5d
from sglang_kv5d import kernel_check
from sglang_kv5d.kernels import attention_5d as A
from sglang_kv5d.kernels.attention_reference import decode_attention_5d_ref
from sglang_kv5d.pools import is_vectorized_5d, resolve_kv_subpool
from tests.helpers.pools import enable_5d, make_hybrid_pool, make_swa_pool, memory_pool_module, read_tokens

dutils = importlib.import_module("sglang.srt.disaggregation.utils")
cutils = importlib.import_module("sglang.srt.disaggregation.common.utils")
mem_common = importlib.import_module("sglang.srt.mem_cache.common")
base_conn = importlib.import_module("sglang.srt.disaggregation.base.conn")
mamba_utils = importlib.import_module("sglang.srt.configs.mamba_utils")

PAGE = 16
FP8 = torch.float8_e4m3fn
POISON = 0x7F
# (prefill pages, decode pages, tokens): contiguous and scattered runs, partial last pages
REQUESTS = [([1, 2, 3], [7, 4, 5], 40), ([5, 6], [2, 3], 17), ([0], [6], 9)]
# SWA pages of the same requests (the sliding-window sub-pool has its own page ids)
SWA_PAGES = [([2, 3, 1], [1, 2, 3]), ([0, 4], [5, 6]), ([5], [0])]
MAMBA_SLOTS = [(1, 3), (2, 0), (4, 5)]  # (prefill, decode) state slot of each request


@pytest.fixture
def overlay(monkeypatch):
    sglang_kv5d.deactivate()
    kernel_check.reset()
    enable_5d(monkeypatch)
    st = sglang_kv5d.activate(patches=["fp8-kv-write"], strict=False)
    assert st.patch("fp8-kv-write").state in ("applied", "pending"), st
    yield
    sglang_kv5d.deactivate()
    kernel_check.reset()


def _slots(pages, tokens):
    return torch.tensor([pages[t // PAGE] * PAGE + t % PAGE for t in range(tokens)], dtype=torch.int64)


def _copy(src_ptrs, dst_ptrs, item_lens, src_ids, dst_ids):
    """Plain byte copies of SGLang's runs at base + id * item_len; returns bytes moved."""
    src_runs, dst_runs = cutils.group_concurrent_contiguous(np.asarray(src_ids, dtype=np.int32),
                                                            np.asarray(dst_ids, dtype=np.int32))
    moved = 0
    for src_ptr, dst_ptr, item_len in zip(src_ptrs, dst_ptrs, item_lens):
        for s, d in zip(src_runs, dst_runs):
            n = item_len * len(s)
            ctypes.memmove(dst_ptr + int(d[0]) * item_len, src_ptr + int(s[0]) * item_len, n)
            moved += n
    return moved


needs_transfer_infos = pytest.mark.skipif(
    not hasattr(dutils, "get_kv_transfer_buf_infos"),
    reason="SGLang's get_kv_transfer_buf_infos (the PD registration these tests drive) exists from 0.5.23 only")


def _kv_args(pool):
    """SGLang's own registration of a pool: (kv ptrs, kv item lens, KVArgs with the state components)."""
    ptrs, _, item_lens = dutils.get_kv_transfer_buf_infos(pool)
    args = base_conn.KVArgs()
    dutils.setup_state_kv_args(args, pool)
    return ptrs, item_lens, args


def _poison(pool):
    for leaf in (pool.full_kv_pool, getattr(pool, "swa_kv_pool", None)):
        if leaf is not None:
            for b in list(leaf.k_buffer) + list(leaf.v_buffer):
                b.view(torch.uint8).fill_(POISON)


def _check_pages_and_attention(prefill, decode, layer_pages, q, kw):
    """Per layer: moved pages byte-equal, other decode pages untouched, attention equal."""
    for lid, (src_pages, dst_pages, lens) in layer_pages.items():
        src_leaf, sl = resolve_kv_subpool(prefill, lid)
        dst_leaf, dl = resolve_kv_subpool(decode, lid)
        ks, vs = src_leaf.k_buffer[sl], src_leaf.v_buffer[sl]
        kd, vd = dst_leaf.k_buffer[dl], dst_leaf.v_buffer[dl]
        flat_s = [p for r in src_pages for p in r]
        flat_d = [p for r in dst_pages for p in r]
        for s, d in zip(flat_s, flat_d):
            assert torch.equal(ks[s].view(torch.uint8), kd[d].view(torch.uint8)), (lid, s, d)
            assert torch.equal(vs[s].view(torch.uint8), vd[d].view(torch.uint8)), (lid, s, d)
        for p in sorted(set(range(kd.shape[0])) - set(flat_d)):
            assert bool((kd[p].view(torch.uint8) == POISON).all()) and bool((vd[p].view(torch.uint8) == POISON).all())
        width = max(len(r) for r in src_pages)
        table = lambda rows: torch.tensor([r + [0] * (width - len(r)) for r in rows], dtype=torch.int32)  # noqa: E731
        ctx = torch.tensor(lens, dtype=torch.int32)
        out_d = A.decode_attention_5d(q, kd, vd, table(dst_pages), ctx, **kw)
        out_s = A.decode_attention_5d(q, ks, vs, table(src_pages), ctx, **kw)
        ref = decode_attention_5d_ref(q.double(), ks, vs, table(src_pages), ctx, **kw)
        assert torch.equal(out_d, out_s), lid
        torch.testing.assert_close(out_d.double(), ref, atol=2e-2, rtol=2e-2)


def _page_ids(rows, tokens_of):
    """Page ids of every request, as SGLang's kv_to_page_indices computes them from token slots."""
    out = []
    for pages, tokens in zip(rows, tokens_of):
        out += mem_common.kv_to_page_indices(_slots(pages, tokens), PAGE).tolist()
    return out


def _mamba_pool(size=8):
    shape = mamba_utils.Mamba2StateShape.create(tp_world_size=1, intermediate_size=64, n_groups=2, num_heads=4,
                                                head_dim=16, state_size=16, conv_kernel=4)
    linear = [0, 1, 2, 4, 5, 6]
    params = mamba_utils.Mamba2CacheParams(
        shape=shape, layers=linear,
        dtype=mamba_utils.Mamba2StateDType(conv=torch.bfloat16, temporal=torch.float32))
    return memory_pool_module().MambaPool(size=size, spec_state_size=0, cache_params=params,
                                          mamba_layer_ids=linear, device="cpu")


@needs_transfer_infos
def test_hybrid_5d_fp8_with_mamba_state_moves_by_sglang_arithmetic(overlay, monkeypatch):
    g = torch.Generator().manual_seed(7)
    H, D, layers = 1, 256, (3, 7)
    pools = [make_hybrid_pool(dtype=FP8, page_size=PAGE, head_num=H, head_dim=D, size=128, mamba_pool=_mamba_pool())
             for _ in range(2)]
    prefill, decode = pools
    assert is_vectorized_5d(prefill) and is_vectorized_5d(decode)
    for p in pools:
        _poison(p)
    for t in prefill.mamba_pool.mamba_cache.conv + [prefill.mamba_pool.mamba_cache.temporal]:
        t.copy_(torch.randn(t.shape, generator=g).to(t.dtype))
    k_scale, v_scale = 0.5, 0.25
    written = {}
    for lid in layers:
        for i, (src_pages, _, tokens) in enumerate(REQUESTS):
            k = torch.randn(tokens, H, D, generator=g).to(torch.bfloat16)
            v = torch.randn(tokens, H, D, generator=g).to(torch.bfloat16)
            k0, v0 = k.clone(), v.clone()
            prefill.set_kv_buffer(types.SimpleNamespace(layer_id=lid), _slots(src_pages, tokens), k, v,
                                  k_scale, v_scale)
            assert torch.equal(k, k0) and torch.equal(v, v0)  # the overlay's write never mutates its inputs
            # what an fp8 cache holds for them: k / scale rounded once, read back times the scale
            written[lid, i] = ((k.float() / k_scale).to(FP8).double() * k_scale,
                               (v.float() / v_scale).to(FP8).double() * v_scale)

    tokens = [r[2] for r in REQUESTS]
    src_pages, dst_pages = _page_ids([r[0] for r in REQUESTS], tokens), _page_ids([r[1] for r in REQUESTS], tokens)
    assert src_pages == [p for r in REQUESTS for p in r[0]] and dst_pages == [p for r in REQUESTS for p in r[1]]
    (sp, s_items, s_args), (dp, d_items, d_args) = _kv_args(prefill), _kv_args(decode)
    assert s_items == d_items and len(sp) == len(dp) == 2 * len(layers)
    moved = _copy(sp, dp, s_items, src_pages, dst_pages)
    assert moved == sum(s_items) * len(src_pages)
    # the Mamba state: SGLang's state component, one item per request slot
    assert s_args.state_types == [base_conn.StateType.MAMBA]
    _copy(s_args.state_data_ptrs[0], d_args.state_data_ptrs[0], s_args.state_item_lens[0],
          [a for a, _ in MAMBA_SLOTS], [b for _, b in MAMBA_SLOTS])
    src_m, dst_m = prefill.mamba_pool.mamba_cache, decode.mamba_pool.mamba_cache
    for a, b in MAMBA_SLOTS:
        for ts, td in zip(src_m.conv + [src_m.temporal], dst_m.conv + [dst_m.temporal]):
            assert torch.equal(ts[:, a], td[:, b])
    untouched = sorted(set(range(dst_m.temporal.shape[1])) - {b for _, b in MAMBA_SLOTS})
    assert all(bool((dst_m.temporal[:, i] == 0).all()) for i in untouched)

    for (lid, i), (k, v) in written.items():  # the decode pool holds the prefill's tokens at its own slots
        leaf, local = resolve_kv_subpool(decode, lid)
        got_k, got_v = read_tokens(leaf, local, _slots(REQUESTS[i][1], REQUESTS[i][2]), k_scale, v_scale)
        assert torch.equal(got_k, k) and torch.equal(got_v, v), (lid, i)

    q = torch.randn(len(REQUESTS), 4 * H, D, generator=g).to(torch.bfloat16)  # 4 query heads per KV head
    rows = ([r[0] for r in REQUESTS], [r[1] for r in REQUESTS], tokens)
    _check_pages_and_attention(prefill, decode, {lid: rows for lid in layers}, q,
                               dict(sm_scale=D ** -0.5, k_scale=k_scale, v_scale=v_scale, fp8_dtype=FP8))

    # why the handshake matters: an NHD decode pool registers the same item lengths, takes the same
    # bytes without complaint, and reads other values at its slots
    monkeypatch.setenv("SGLANG_AITER_KV_CACHE_LAYOUT", "nhd")
    flat = make_hybrid_pool(dtype=FP8, page_size=PAGE, head_num=H, head_dim=D, size=128, mamba_pool=_mamba_pool())
    assert not is_vectorized_5d(flat)
    fp, f_items, _ = _kv_args(flat)
    assert f_items == s_items
    _copy(sp, fp, s_items, src_pages, dst_pages)
    leaf, local = resolve_kv_subpool(flat, layers[0])
    got_k, _ = read_tokens(leaf, local, _slots(REQUESTS[0][1], REQUESTS[0][2]), k_scale, v_scale)
    assert not torch.equal(got_k, written[layers[0], 0][0])


# unwritten slots of a partial last page hold the poison (huge bf16 values): the kernel loads and masks them
@needs_transfer_infos
@pytest.mark.filterwarnings("ignore:overflow encountered in matmul:RuntimeWarning")
def test_swa_5d_bf16_full_and_window_pages_move_by_sglang_arithmetic(overlay):
    g = torch.Generator().manual_seed(11)
    H, D = 2, 64
    mp = memory_pool_module()
    pools = [make_swa_pool(dtype=torch.bfloat16, page_size=PAGE, head_num=H, head_dim=D, size=128, size_swa=112)
             for _ in range(2)]
    prefill, decode = pools
    assert is_vectorized_5d(prefill) and is_vectorized_5d(decode)
    tokens = [r[2] for r in REQUESTS]
    for side, pool in enumerate(pools):  # full slot -> SWA slot, as the SWA allocator registers it
        _poison(pool)
        mapping = torch.zeros(pool.size + PAGE + 1, dtype=torch.int64)
        for (full_rows, swa_rows, n) in zip([r[side] for r in REQUESTS], [w[side] for w in SWA_PAGES], tokens):
            mapping[_slots(full_rows, n)] = _slots(swa_rows, n)
        pool.register_mapping(mapping)
    written = {}
    for lid in (0, 1, 2, 3):
        for i, (src_pages, _, n) in enumerate(REQUESTS):
            loc = _slots(src_pages, n)
            k = torch.randn(n, H, D, generator=g).to(torch.bfloat16)
            v = torch.randn(n, H, D, generator=g).to(torch.bfloat16)
            prefill.set_kv_buffer(types.SimpleNamespace(layer_id=lid),
                                  mp.KVWriteLoc(loc=loc, swa_loc=prefill.translate_loc_from_full_to_swa(loc)), k, v)
            written[lid, i] = (k.double(), v.double())

    src_full, dst_full = _page_ids([r[0] for r in REQUESTS], tokens), _page_ids([r[1] for r in REQUESTS], tokens)
    src_swa, dst_swa = [], []
    for (sf, df, n) in REQUESTS:  # SWA page ids from the translated slots, as the PD roles compute them
        src_swa += mem_common.kv_to_page_indices(prefill.translate_loc_from_full_to_swa(_slots(sf, n)), PAGE).tolist()
        dst_swa += mem_common.kv_to_page_indices(decode.translate_loc_from_full_to_swa(_slots(df, n)), PAGE).tolist()
    assert src_swa == [p for w in SWA_PAGES for p in w[0]] and dst_swa == [p for w in SWA_PAGES for p in w[1]]
    (sp, s_items, s_args), (dp, d_items, d_args) = _kv_args(prefill), _kv_args(decode)
    assert s_items == d_items and len(sp) == 4  # 2 full layers: K, K, V, V
    _copy(sp, dp, s_items, src_full, dst_full)
    assert s_args.state_types == [base_conn.StateType.SWA]
    _copy(s_args.state_data_ptrs[0], d_args.state_data_ptrs[0], s_args.state_item_lens[0], src_swa, dst_swa)

    for (lid, i), (k, v) in written.items():  # read back through the overlay's resolution (SWA layers 0, 2)
        leaf, local = resolve_kv_subpool(decode, lid)
        slots = _slots(REQUESTS[i][1], REQUESTS[i][2])
        if lid in (0, 2):
            slots = decode.translate_loc_from_full_to_swa(slots)
        got_k, got_v = read_tokens(leaf, local, slots)
        assert torch.equal(got_k, k) and torch.equal(got_v, v), (lid, i)

    q = torch.randn(len(REQUESTS), 2 * H, D, generator=g).to(torch.bfloat16)
    full_rows = ([r[0] for r in REQUESTS], [r[1] for r in REQUESTS], tokens)
    swa_rows = ([w[0] for w in SWA_PAGES], [w[1] for w in SWA_PAGES], tokens)
    _check_pages_and_attention(prefill, decode, {0: swa_rows, 1: full_rows, 2: swa_rows, 3: full_rows}, q,
                               dict(sm_scale=D ** -0.5))
