"""pd-head-slice-5d: PD transfer between different attention-TP sizes over SHUFFLE 5D pages (CPU).

The scenario: one request of 3 pages (prefill pages 3, 1, 4 -> decode pages 5, 2, 0)
moves from a prefill deployment at attention-TP ``src_tp`` (one REAL SGLang
``MHATokenToKVPool`` per rank, each holding its own KV heads in 5D buffers) to a
decode deployment at ``dst_tp`` (one pool per rank, every byte poisoned first).
Which prefill ranks feed which decode rank is SGLang's own
``CommonKVManager._resolve_rank_mapping``; each pair runs SGLang's own
``MooncakeKVManager.send_kvcache_slice`` (wrapped by the overlay) on a manager
object that has the real methods and a real ``KVArgs`` filled from
``get_contiguous_buf_infos()``, with a minimal engine whose
``batch_transfer_sync`` does plain byte copies (``ctypes.memmove``, every range
checked to lie inside a registered buffer) and counts descriptors.

Checked: every decode pool equals the head-regrouped prefill data on the request's
pages, byte for byte, with every other page still poison; the portable 5D decode
attention (Triton, interpreter) over a decode rank's cache equals float64 attention
over the prefill's tokens; one descriptor per page and side against the NHD path's
one per token (the same pools built NHD, where the wrapper reaches SGLang's
original, which also moves the right bytes there); SGLang's own slice path on the
5D pools (overlay off) leaves wrong bytes; hostile inputs are refused by
sglang_kv5d.disagg.head_slice; NIXL's and the staging path are refused over 5D.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import importlib
from types import SimpleNamespace

import pytest
import torch

import sglang_kv5d
from sglang_kv5d.activation import Kv5dNotReadyError
from sglang_kv5d.disagg import head_slice as hs
from sglang_kv5d.kernels import attention_reference as ref
from sglang_kv5d.patches import pd_head_slice_5d as patch
from tests.helpers.pools import enable_5d, make_hybrid_pool, make_mha_pool

PAGE = 16
D = 32
LAYERS = 2
POOL_SIZE = 7 * PAGE
SRC_PAGES = [3, 1, 4]
DST_PAGES = [5, 2, 0]
POISON = 0xA5
FP8 = torch.float8_e4m3fn
INT = {1: torch.uint8, 2: torch.int16}
PATCHES = ["pd-buffer-layouts", "pd-head-slice-5d", "fail-closed-pd-head-slice-nixl"]


def mooncake():
    importlib.import_module("sglang.srt.mem_cache.memory_pool")  # before activation: pd-buffer-layouts' module
    return importlib.import_module("sglang.srt.disaggregation.mooncake.conn")


def common_conn():
    return importlib.import_module("sglang.srt.disaggregation.common.conn")


def kv_args_class():
    return importlib.import_module("sglang.srt.disaggregation.base.conn").KVArgs


# --------------------------------------------------------------------------- #
# NHD <-> 5D, the request's truth, the model's head sharding                   #
# --------------------------------------------------------------------------- #


def raw(t):
    return t.view(INT[t.element_size()])


def from5d_k(kb):  # (b, h, D/X, p, X) -> (b * p, h, D)
    b, h, dx, p, x = kb.shape
    return raw(kb).permute(0, 3, 1, 2, 4).reshape(b * p, h, dx * x)


def from5d_v(vb):  # (b, h, p/X, D, X) -> (b * p, h, D)
    b, h, px, d, x = vb.shape
    return raw(vb).permute(0, 2, 4, 1, 3).reshape(b * px * x, h, d)


def to5d_k(nk, like):
    b, h, dx, p, x = like.shape
    return nk.reshape(b, p, h, dx, x).permute(0, 2, 3, 1, 4)


def to5d_v(nv, like):
    b, h, px, d, x = like.shape
    return nv.reshape(b, px, x, h, d).permute(0, 3, 1, 4, 2)


def rank_heads(total, tp, rank):
    """Global KV head ids a rank holds (SGLang's KV head sharding, replicated when tp > total)."""
    if tp >= total:
        return [rank // (tp // total)]
    per = total // tp
    return list(range(rank * per, (rank + 1) * per))


def truth(dtype, total, slots, seed=0):
    """Per layer (K, V) ``(slots, total, D)`` in the pool's storage dtype, as raw integer views."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(LAYERS):
        k = torch.randn(slots, total, D, generator=g).to(dtype)
        v = torch.randn(slots, total, D, generator=g).to(dtype)
        out.append((raw(k.view(torch.uint8) if dtype == FP8 else k), raw(v.view(torch.uint8) if dtype == FP8 else v)))
    return out


def fill_prefill(pool, layers_truth, heads, five_d):
    for li, (tk, tv) in enumerate(layers_truth):
        kb, vb = pool.k_buffer[li], pool.v_buffer[li]
        n = (from5d_k(kb) if five_d else raw(kb)).shape[0]
        k, v = tk[:n, heads].contiguous(), tv[:n, heads].contiguous()
        if five_d:
            raw(kb).copy_(to5d_k(k, kb))
            raw(vb).copy_(to5d_v(v, vb))
        else:
            raw(kb).copy_(k)
            raw(vb).copy_(v)


def poison(pool):
    for b in list(pool.k_buffer) + list(pool.v_buffer):
        b.view(torch.uint8).fill_(POISON)


def page_slots(pages):
    return torch.cat([torch.arange(p * PAGE, (p + 1) * PAGE) for p in pages])


# --------------------------------------------------------------------------- #
# The transfer: SGLang's rank mapping, its slice function, a byte-copy engine  #
# --------------------------------------------------------------------------- #


class CopyEngine:
    """batch_transfer_sync as plain byte copies between registered CPU buffers; counts descriptors."""

    def __init__(self, tensors):
        self.regions = [(t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()) for t in tensors]
        self.descriptors = 0
        self.calls = 0

    def _inside(self, addr, n):
        return any(lo <= addr and addr + n <= hi for lo, hi in self.regions)

    def batch_transfer_sync(self, session_id, buffers, peer_buffer_addresses, lengths):
        self.calls += 1
        self.descriptors += len(buffers)
        for s, d, n in zip(buffers, peer_buffer_addresses, lengths):
            if not (self._inside(s, n) and self._inside(d, n)):
                return -1
            ctypes.memmove(d, s, n)
        return 0


def prefill_ranks_for(decode_rank, src_tp, dst_tp):
    """SGLang's own rank mapping (CommonKVManager._resolve_rank_mapping) on a minimal receiver."""
    me = SimpleNamespace(is_mla_backend=False, is_hybrid_mla_backend=False, attn_tp_size=dst_tp,
                         kv_args=SimpleNamespace(engine_rank=decode_rank), attn_cp_size=1, attn_cp_rank=0,
                         pp_size=1, pp_rank=0, enable_all_cp_ranks_for_transfer=False)
    info = SimpleNamespace(attn_tp_size=src_tp, enable_kv_cache_sharding=False, attn_cp_size=1, pp_size=1,
                           enable_dsa_cache_layer_split=False)
    common_conn().CommonKVManager._resolve_rank_mapping(me, info)
    return list(info.target_tp_ranks)


def make_manager(pool, rank, tp, total, engine, layer_ids=False):
    kv = kv_args_class()()
    kv.kv_data_ptrs, kv.kv_data_lens, kv.kv_item_lens = pool.get_contiguous_buf_infos()
    kv.kv_layer_ids = list(range(LAYERS)) * 2 if layer_ids else []
    kv.engine_rank, kv.page_size = rank, pool.page_size
    kv.kv_head_num, kv.total_kv_head_num = getattr(pool, "full_kv_pool", pool).head_num, total
    kv.prefill_start_layer = 0
    mgr = object.__new__(mooncake().MooncakeKVManager)
    mgr.kv_args, mgr.attn_tp_size, mgr.pp_size, mgr.engine = kv, tp, 1, engine
    mgr.enable_deferred_decode_kv_release = False
    return mgr


class Deployment:
    """Prefill and decode pools of one case, filled / poisoned."""

    def __init__(self, monkeypatch, dtype, total, src_tp, dst_tp, five_d=True, hybrid=False):
        enable_5d(monkeypatch, "vectorized_5d" if five_d else "nhd")
        self.dtype, self.total, self.src_tp, self.dst_tp, self.five_d = dtype, total, src_tp, dst_tp, five_d

        def mk(tp):
            if hybrid:  # Qwen3.5-like: full attention at layers 3 and 7 of 8 (LAYERS full layers)
                return make_hybrid_pool(size=POOL_SIZE, page_size=PAGE, dtype=dtype, head_num=max(1, total // tp),
                                        head_dim=D, num_layers=4 * LAYERS)
            return make_mha_pool(size=POOL_SIZE, page_size=PAGE, dtype=dtype, head_num=max(1, total // tp),
                                 head_dim=D, layer_num=LAYERS)

        self.prefill_pools = [mk(src_tp) for _ in range(src_tp)]  # what the kv_args are built from
        self.decode_pools = [mk(dst_tp) for _ in range(dst_tp)]
        leaf = lambda p: getattr(p, "full_kv_pool", p)
        self.prefill = [leaf(p) for p in self.prefill_pools]  # the buffers
        self.decode = [leaf(p) for p in self.decode_pools]
        kb = self.prefill[0].k_buffer[0]
        slots = from5d_k(kb).shape[0] if five_d else kb.shape[0]
        self.truth = truth(dtype, total, slots)
        for r, p in enumerate(self.prefill):
            fill_prefill(p, self.truth, rank_heads(total, src_tp, r), five_d)
        for p in self.decode:
            poison(p)
        monkeypatch.setenv("SGLANG_AITER_KV_CACHE_LAYOUT", "vectorized_5d")  # 5D requested at transfer time
        tensors = [b for p in self.prefill + self.decode for b in list(p.k_buffer) + list(p.v_buffer)]
        self.engine = CopyEngine(tensors)

    def transfer(self, send, layer_ids=False):
        """Every (prefill rank, decode rank) pair SGLang forms; returns the statuses."""
        statuses = []
        with concurrent.futures.ThreadPoolExecutor(2) as ex:
            for d, dpool in enumerate(self.decode_pools):
                dst_ptrs, _, dst_items = dpool.get_contiguous_buf_infos()
                for s in prefill_ranks_for(d, self.src_tp, self.dst_tp):
                    mgr = make_manager(self.prefill_pools[s], s, self.src_tp, self.total, self.engine, layer_ids)
                    args = ["room-session", torch.tensor(SRC_PAGES, dtype=torch.int32).numpy(), dst_ptrs,
                            torch.tensor(DST_PAGES, dtype=torch.int32).numpy(), d, self.dst_tp, dst_items[0], ex]
                    if layer_ids:
                        args.append(list(range(LAYERS)) * 2)
                    statuses.append(send(mgr, *args))
        return statuses

    def decode_nhd(self, d, li):
        kb, vb = self.decode[d].k_buffer[li], self.decode[d].v_buffer[li]
        return (from5d_k(kb), from5d_v(vb)) if self.five_d else (raw(kb), raw(vb))

    def mismatches(self):
        """[(decode rank, layer, what)] where the decode pools differ from the regrouped prefill data."""
        bad = []
        src, dst = page_slots(SRC_PAGES), page_slots(DST_PAGES)
        for d in range(self.dst_tp):
            heads = rank_heads(self.total, self.dst_tp, d)
            for li, (tk, tv) in enumerate(self.truth):
                gk, gv = self.decode_nhd(d, li)
                for name, got, want in (("K", gk, tk), ("V", gv, tv)):
                    if not torch.equal(got[dst], want[src][:, heads]):
                        bad.append((d, li, f"{name} request pages"))
                    rest = torch.ones(got.shape[0], dtype=torch.bool)
                    rest[dst] = False
                    if not bool((got[rest].view(torch.uint8) == POISON).all()):
                        bad.append((d, li, f"{name} neighbouring pages"))
        return bad


@pytest.fixture
def overlay():
    sglang_kv5d.deactivate()
    patch.forget_regions()
    importlib.import_module("sglang.srt.disaggregation.nixl.conn")
    mooncake()
    st = sglang_kv5d.activate(patches=PATCHES, strict=False)
    states = {p.name: p.state for p in st.patches if p.name in PATCHES}
    assert set(states.values()) == {"applied"}, states
    yield
    sglang_kv5d.deactivate()
    patch.forget_regions()


@pytest.fixture
def no_overlay():
    sglang_kv5d.deactivate()
    patch.forget_regions()
    mooncake()
    yield
    sglang_kv5d.deactivate()


def send(mgr, *args):
    return mooncake().MooncakeKVManager.send_kvcache_slice(mgr, *args)


# (dtype, total KV heads, prefill TP, decode TP)
CASES = [
    pytest.param(FP8, 8, 8, 4, id="fp8-H8-tp8-to-tp4"),
    pytest.param(torch.bfloat16, 2, 2, 1, id="bf16-H2-tp2-to-tp1"),
    pytest.param(FP8, 2, 8, 4, id="fp8-H2-tp8-to-tp4-replicated"),
    pytest.param(torch.bfloat16, 8, 8, 1, id="bf16-H8-tp8-to-tp1"),
    pytest.param(torch.bfloat16, 8, 2, 4, id="bf16-H8-tp2-to-tp4"),
    pytest.param(FP8, 2, 1, 4, id="fp8-H2-tp1-to-tp4-replicated"),
]


# --------------------------------------------------------------------------- #
# The 5D transfer (overlay on)                                                 #
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("dtype,total,src_tp,dst_tp", CASES)
def test_5d_head_sliced_transfer_regroups_heads(monkeypatch, overlay, dtype, total, src_tp, dst_tp):
    dep = Deployment(monkeypatch, dtype, total, src_tp, dst_tp)
    assert all(patch.manager_is_5d(make_manager(p, 0, src_tp, total, dep.engine)) for p in dep.prefill[:1])
    statuses = dep.transfer(send)
    assert statuses and set(statuses) == {0}
    assert dep.mismatches() == []
    pairs = len(statuses)
    # one descriptor per page and layer side, per (prefill rank, decode rank) pair
    assert dep.engine.descriptors == pairs * 2 * LAYERS * len(SRC_PAGES)
    assert dep.engine.calls == pairs * 2 * LAYERS


@pytest.mark.parametrize("dtype", [FP8, torch.bfloat16])
def test_5d_transfer_of_a_hybrid_pool(monkeypatch, overlay, dtype):
    """Qwen3.5-like HybridLinearKVPool: its get_contiguous_buf_infos delegates to the full-attention
    MHA pool, whose regions pd-buffer-layouts records; 2 KV heads, prefill TP 2 -> decode TP 1."""
    dep = Deployment(monkeypatch, dtype, 2, 2, 1, hybrid=True)
    assert set(dep.transfer(send)) == {0}
    assert dep.mismatches() == []
    assert dep.engine.descriptors == 2 * 2 * LAYERS * len(SRC_PAGES)


def test_5d_transfer_pairs_by_layer_ids(monkeypatch, overlay):
    """SGLang 0.5.20+ pairs entries by layer id when both peers send them (build_transfer_entry_pairs)."""
    import inspect

    if "dst_layer_ids" not in inspect.signature(mooncake().MooncakeKVManager.send_kvcache_slice).parameters:
        pytest.skip("this SGLang's send_kvcache_slice has no layer ids (before 0.5.20)")
    dep = Deployment(monkeypatch, FP8, 8, 8, 4)
    assert set(dep.transfer(send, layer_ids=True)) == {0}
    assert dep.mismatches() == []


@pytest.mark.parametrize("dtype,total,src_tp,dst_tp", [CASES[0], CASES[1]])
def test_decode_attention_over_transferred_5d_equals_float64(monkeypatch, overlay, dtype, total, src_tp, dst_tp):
    from sglang_kv5d.kernels.attention_5d import decode_attention_5d

    dep = Deployment(monkeypatch, dtype, total, src_tp, dst_tp)
    assert set(dep.transfer(send)) == {0}
    ctx = len(SRC_PAGES) * PAGE - 5
    src = page_slots(SRC_PAGES)[:ctx]
    fp8 = FP8 if dtype == FP8 else None
    g = torch.Generator().manual_seed(1)
    for d in range(dst_tp):
        heads = rank_heads(total, dst_tp, d)
        pool = dep.decode[d]
        q = torch.randn(1, 2 * len(heads), D, generator=g).to(torch.bfloat16)
        for li, (tk, tv) in enumerate(dep.truth):
            k = tk[src][:, heads]
            v = tv[src][:, heads]
            if fp8 is not None:
                k, v = k.view(torch.uint8).view(fp8), v.view(torch.uint8).view(fp8)
            else:
                k, v = k.view(torch.bfloat16), v.view(torch.bfloat16)
            want = ref.attention_ref(q, k.to(torch.float64), v.to(torch.float64), [ctx - 1], sm_scale=D ** -0.5)
            table = torch.tensor([DST_PAGES], dtype=torch.int32)
            got = decode_attention_5d(q, pool.k_buffer[li], pool.v_buffer[li], table,
                                      torch.tensor([ctx], dtype=torch.int32), sm_scale=D ** -0.5, fp8_dtype=fp8)
            torch.testing.assert_close(got.to(torch.float64), want, atol=2e-2, rtol=2e-2)


# --------------------------------------------------------------------------- #
# Against NHD and upstream                                                     #
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("dtype,total,src_tp,dst_tp", [CASES[0], CASES[2]])
def test_descriptor_count_against_the_nhd_path(monkeypatch, overlay, dtype, total, src_tp, dst_tp):
    """The same deployment built NHD: the wrapper reaches SGLang's original (right bytes, one
    descriptor per token); the 5D path issues PAGE times fewer."""
    nhd = Deployment(monkeypatch, dtype, total, src_tp, dst_tp, five_d=False)
    assert not patch.manager_is_5d(make_manager(nhd.prefill[0], 0, src_tp, total, nhd.engine))
    assert set(nhd.transfer(send)) == {0}
    assert nhd.mismatches() == []
    five = Deployment(monkeypatch, dtype, total, src_tp, dst_tp)
    assert set(five.transfer(send)) == {0}
    pairs = len(prefill_ranks_for(0, src_tp, dst_tp)) * dst_tp
    assert nhd.engine.descriptors == pairs * 2 * LAYERS * len(SRC_PAGES) * PAGE
    assert five.engine.descriptors * PAGE == nhd.engine.descriptors
    print(f"descriptors {dtype} H={total} TP{src_tp}->TP{dst_tp}: 5D {five.engine.descriptors}, "
          f"NHD {nhd.engine.descriptors}")


@pytest.mark.parametrize("dtype,total,src_tp,dst_tp", [CASES[0], CASES[1]])
def test_upstream_slice_path_is_wrong_on_5d(monkeypatch, no_overlay, dtype, total, src_tp, dst_tp):
    dep = Deployment(monkeypatch, dtype, total, src_tp, dst_tp)
    assert set(dep.transfer(send)) == {0}  # SGLang reports success ...
    bad = dep.mismatches()
    assert any("request pages" in w for _, _, w in bad), bad  # ... and leaves wrong bytes
    assert dep.engine.descriptors == len(prefill_ranks_for(0, src_tp, dst_tp)) * dst_tp * 2 * LAYERS * 3 * PAGE


def test_peer_with_wrong_item_length_is_refused(monkeypatch, overlay, caplog):
    dep = Deployment(monkeypatch, FP8, 8, 8, 4)
    mgr = make_manager(dep.prefill[0], 0, 8, 8, dep.engine)
    dst_ptrs, _, items = dep.decode[0].get_contiguous_buf_infos()
    pages = torch.tensor(SRC_PAGES).numpy()
    with concurrent.futures.ThreadPoolExecutor(1) as ex:
        assert send(mgr, "s", pages, dst_ptrs, pages, 0, 4, items[0] // 2, ex) == -1
        assert send(mgr, "s", pages, dst_ptrs, pages, 3, 4, items[0], ex) == -1  # rank 0 never feeds rank 3
    assert dep.engine.descriptors == 0
    assert "5D head-sliced transfer refused" in caplog.text and "does not feed decode rank 3" in caplog.text


def test_unrecorded_5d_manager_is_refused(monkeypatch, overlay, caplog):
    dep = Deployment(monkeypatch, FP8, 8, 8, 4)
    mgr = make_manager(dep.prefill[0], 0, 8, 8, dep.engine)
    mgr.kv_args.kv_data_ptrs = list(mgr.kv_args.kv_data_ptrs)
    mgr.kv_args.kv_data_ptrs[1] += 1  # one region the record never saw
    dst_ptrs, _, items = dep.decode[0].get_contiguous_buf_infos()
    pages = torch.tensor(SRC_PAGES).numpy()
    with concurrent.futures.ThreadPoolExecutor(1) as ex:
        assert send(mgr, "s", pages, dst_ptrs, pages, 0, 4, items[0], ex) == -1
    assert "did not record" in caplog.text and dep.engine.descriptors == 0


# --------------------------------------------------------------------------- #
# Refused engines                                                              #
# --------------------------------------------------------------------------- #


def test_staging_and_nixl_refused_over_5d(monkeypatch):
    sglang_kv5d.deactivate()
    patch.forget_regions()
    nixl = importlib.import_module("sglang.srt.disaggregation.nixl.conn")
    mooncake()
    from sglang_kv5d.activation.lifecycle import engine

    sglang_kv5d.activate(patches=PATCHES, strict=False)  # the pool guard wants every 5D patch under strict
    try:
        dep = Deployment(monkeypatch, FP8, 8, 8, 4)
        nhd = Deployment(monkeypatch, torch.bfloat16, 2, 2, 1, five_d=False)
        monkeypatch.setattr(engine, "strict", True)
        pool = dep.prefill[0]
        mgr = make_manager(pool, 0, 8, 8, dep.engine)
        with pytest.raises(Kv5dNotReadyError, match="SGLANG_DISAGG_STAGING_BUFFER=1.*Fix: unset"):
            mooncake().MooncakeKVManager.set_kv_buffer_tensors(mgr, pool.k_buffer, pool.v_buffer, PAGE)
        nmgr = object.__new__(nixl.NixlKVManager)
        nmgr.kv_args = mgr.kv_args
        with pytest.raises(Kv5dNotReadyError, match="nixl cannot move SHUFFLE 5D.*same attention-TP"):
            nixl.NixlKVManager._init_hetero_tp_prep_handle(nmgr, "peer", SimpleNamespace())
        with pytest.raises(Kv5dNotReadyError, match="staging"):
            nixl.NixlKVManager.set_kv_buffer_tensors(nmgr, pool.k_buffer, pool.v_buffer, PAGE)
        # an NHD pool's staging tensors reach the original
        nm = make_manager(nhd.prefill[0], 0, 2, 2, nhd.engine)
        mooncake().MooncakeKVManager.set_kv_buffer_tensors(nm, nhd.prefill[0].k_buffer, nhd.prefill[0].v_buffer, PAGE)
        assert nm.kv_buffer_tensors["page_size"] == PAGE
    finally:
        sglang_kv5d.deactivate()
        patch.forget_regions()


# --------------------------------------------------------------------------- #
# head_slice: SGLang's NHD head math mirrored, hostile inputs refused          #
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("total", [1, 2, 4, 8, 16])
@pytest.mark.parametrize("src_tp,dst_tp", [(8, 4), (2, 1), (8, 1), (1, 8), (2, 8), (4, 4), (16, 2)])
def test_plan_matches_sglang_head_slice_params(total, src_tp, dst_tp):
    from sglang.srt.disaggregation.common.staging_buffer import compute_head_slice_params

    for d in range(dst_tp):
        for s in prefill_ranks_for(d, src_tp, dst_tp):
            try:
                plan = hs.plan_head_slice(src_tp, dst_tp, s, d, total)
            except hs.HeadSliceError as exc:
                assert total % src_tp and src_tp % total or total % dst_tp and dst_tp % total, exc
                continue
            want = compute_head_slice_params(src_tp, dst_tp, s, d, total)
            assert (plan.src_head_start, plan.num_heads, plan.dst_head_start) == want[:3]
            # and the heads really are the ones each side holds
            src_h = rank_heads(total, src_tp, s)[plan.src_head_start:plan.src_head_start + plan.num_heads]
            dst_h = rank_heads(total, dst_tp, d)[plan.dst_head_start:plan.dst_head_start + plan.num_heads]
            assert src_h == dst_h


@pytest.mark.parametrize("args,match", [
    ((8, 3, 0, 0, 8), "neither is a multiple"),
    ((4, 2, 0, 0, 6), "does not divide 6 KV heads"),
    ((0, 2, 0, 0, 8), "outside the accepted range"),
    ((8, 4, 0, 0, True), "must be an integer"),
    ((8, 4, "0", 0, 8), "must be an integer"),
    ((8, 4, 2, 0, 8), "does not feed decode rank 0"),
    ((2, 4, 0, 2, 8), "is not fed by prefill rank 0"),
    ((1 << 20, 4, 0, 0, 8), "outside the accepted range"),
])
def test_plan_refuses_hostile_or_uncovered_shapes(args, match):
    with pytest.raises(hs.HeadSliceError, match=match):
        hs.plan_head_slice(*args)


def test_side_plan_and_descriptors_validate():
    plan = hs.plan_head_slice(8, 4, 1, 0, 8)  # one head, lands at decode head 1 of 2
    side = hs.plan_5d_side(plan, D, PAGE, 1, 16, 1 * D * PAGE, 2 * D * PAGE)
    assert (side.src_offset, side.dst_offset, side.length) == (0, D * PAGE, D * PAGE)
    src, dst, lens = hs.page_descriptors(side, 1000, 5000, [3, 1], [0, 2])
    assert src == [1000 + 3 * D * PAGE, 1000 + D * PAGE] and dst == [5000 + D * PAGE, 5000 + 5 * D * PAGE]
    assert lens == [D * PAGE] * 2
    with pytest.raises(hs.HeadSliceError, match="decode peer's KV item length"):
        hs.plan_5d_side(plan, D, PAGE, 1, 16, D * PAGE, 3 * D * PAGE)
    with pytest.raises(hs.HeadSliceError, match="not a SHUFFLE 5D geometry"):
        hs.plan_5d_side(plan, D, PAGE, 2, 16, 2 * D * PAGE, 4 * D * PAGE)
    with pytest.raises(hs.HeadSliceError, match="page count mismatch"):
        hs.page_descriptors(side, 0, 0, [1, 2], [1])
    with pytest.raises(hs.HeadSliceError, match=">= 0"):
        hs.page_descriptors(side, 0, 0, [-1], [1])
    with pytest.raises(hs.HeadSliceError, match="past the region"):
        hs.page_descriptors(side, 0, 0, [7], [1], src_num_pages=7)
    with pytest.raises(hs.HeadSliceError, match="overflows"):
        hs.page_descriptors(side, (1 << 63) - 10, 0, [1], [1])
    assert hs.unsupported_engine_reason("mooncake") is None
    assert "staging" in hs.unsupported_engine_reason("mooncake", staging=True)
    assert "NIXL" in hs.unsupported_engine_reason("nixl")
