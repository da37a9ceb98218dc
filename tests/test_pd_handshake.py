"""pd-layout-handshake: what PD roles report as kv_layout, and the decode side's refusal (SGLang 0.5.23, CPU).

Real pools (HybridLinearKVPool around a 5D fp8 MHA pool, SWAKVPool with 5D bf16
buffers, NHD MHA pools); SGLang's own get_pd_kv_layout (through the names
prefill.py and decode.py imported), kv_layout_signature and
CommonKVManager.try_ensure_parallel_info against SGLang's own bootstrap server
(CommonKVBootstrapServer on localhost, real HTTP), where the prefill ranks are
registered with the payload CommonKVManager.register_to_bootstrap builds. The
decode manager is a CommonKVManager instance holding only the attributes the
handshake reads (no ZMQ sockets or transfer engine).
"""

from __future__ import annotations

import importlib
import socket
import time

import pytest
import requests
import torch

import sglang_kv5d
from sglang_kv5d.disagg import layout as L
from sglang_kv5d.patches import pd_layout_handshake as P
from tests.helpers.pools import enable_5d, make_hybrid_pool, make_mha_pool, make_nested_pool, make_swa_pool

PATCH = "pd-layout-handshake"
FP8 = torch.float8_e4m3fn
FNUZ = torch.float8_e4m3fnuz


def _mod(name):
    try:
        return importlib.import_module(name)
    except ImportError as exc:  # pragma: no cover
        pytest.skip(f"{name}: {exc}")


utils = _mod("sglang.srt.disaggregation.utils")
if not hasattr(utils, "get_pd_kv_layout"):
    pytest.skip("this SGLang has no get_pd_kv_layout (the PD layout handshake exists from 0.5.23)",
                allow_module_level=True)
conn = _mod("sglang.srt.disaggregation.common.conn")
prefill = _mod("sglang.srt.disaggregation.prefill")
decode = _mod("sglang.srt.disaggregation.decode")
base_conn = _mod("sglang.srt.disaggregation.base.conn")


@pytest.fixture
def overlay(monkeypatch):
    sglang_kv5d.deactivate()
    # not strict: the fail-closed pool guard only warns about the 5D patches left out here
    st = sglang_kv5d.activate(patches=[PATCH], strict=False)
    assert st.patch(PATCH).state == "applied", st
    yield
    sglang_kv5d.deactivate()


@pytest.fixture
def no_overlay():
    sglang_kv5d.deactivate()
    yield


def hybrid_5d_fp8(monkeypatch, dtype=FP8, page=16):
    enable_5d(monkeypatch)
    return make_hybrid_pool(dtype=dtype, page_size=page, head_num=1, head_dim=256, size=128)


def swa_5d_bf16(monkeypatch):
    enable_5d(monkeypatch)
    return make_swa_pool(dtype=torch.bfloat16, page_size=16, head_num=2, head_dim=64, size=128, size_swa=64)


def nhd(monkeypatch, dtype=FP8, page=16, head_num=1, head_dim=256):
    enable_5d(monkeypatch, "nhd")
    return make_mha_pool(dtype=dtype, page_size=page, head_num=head_num, head_dim=head_dim, layer_num=2, size=128)


# --------------------------------------------------------------------------- #
# The descriptor                                                              #
# --------------------------------------------------------------------------- #


def test_descriptor_of_real_pools(monkeypatch):
    assert L.descriptor_for(hybrid_5d_fp8(monkeypatch)) == (
        "kv5d.v1|full=vectorized_5d:x16:float8_e4m3fn:p16:d256:dv256:h1")
    assert L.descriptor_for(swa_5d_bf16(monkeypatch)) == (
        "kv5d.v1|full=vectorized_5d:x8:bfloat16:p16:d64:dv64:h2|swa=vectorized_5d:x8:bfloat16:p16:d64:dv64:h2")
    assert L.descriptor_for(nhd(monkeypatch, FNUZ, 64)) == "kv5d.v1|full=nhd:x0:float8_e4m3fnuz:p64:d256:dv256:h1"
    enable_5d(monkeypatch)  # HybridLinearKVPool around an SWAKVPool: the hybrid level adds no role
    assert L.descriptor_for(make_nested_pool(dtype=FP8)) == (
        "kv5d.v1|full=vectorized_5d:x16:float8_e4m3fn:p16:d64:dv64:h2|swa=vectorized_5d:x16:float8_e4m3fn:p16:d64:dv64:h2")
    for d in (L.descriptor_for(hybrid_5d_fp8(monkeypatch)), L.descriptor_for(swa_5d_bf16(monkeypatch))):
        assert L.parse(d).text() == d and L.parse(d).is_5d


@pytest.mark.parametrize("bad, field", [
    (None, "string"),
    ("kv5d.v1|" + "full=nhd:x0:bfloat16:p16:d64:dv64:h2|" * 40, "characters"),
    ("dsv4|x", "tag"),
    ("kv5d.v1", "sub-pools"),
    ("kv5d.v1|full=nhd:x0:bfloat16:p16:d64:dv64:h0", "field heads"),
    ("kv5d.v1|full=nhd:x0:bfloat16:p0:d64:dv64:h2", "field page"),
    ("kv5d.v1|full=weird:x0:bfloat16:p16:d64:dv64:h2", "field layout"),
    ("kv5d.v1|full=nhd:x0:Bfloat16:p16:d64:dv64:h2", "field dtype"),
    ("kv5d.v1|full=nhd:x8:bfloat16:p16:d64:dv64:h2", "field x"),
    ("kv5d.v1|full=vectorized_5d:x0:bfloat16:p16:d64:dv64:h2", "field x"),
    ("kv5d.v1|full=nhd:x0:bfloat16:p16:d64:dv64", "fields"),
    ("kv5d.v1|FULL=nhd:x0:bfloat16:p16:d64:dv64:h2", "field role"),
    ("kv5d.v1|swa=nhd:x0:bfloat16:p16:d64:dv64:h2|full=nhd:x0:bfloat16:p16:d64:dv64:h2", "sorted"),
    ("kv5d.v1|full=nhd:x0:bfloat16:p16:d64:dv64:h2\x00", "non-printable"),
])
def test_parser_refuses_hostile_strings_naming_the_field(bad, field):
    with pytest.raises(L.DescriptorError, match=field):
        L.parse(bad)


# --------------------------------------------------------------------------- #
# What the roles report (SGLang's names, patched)                             #
# --------------------------------------------------------------------------- #


def test_every_binding_of_the_name_reports_the_descriptor(monkeypatch, overlay):
    pool = hybrid_5d_fp8(monkeypatch)
    want = L.descriptor_for(pool)
    for holder in (utils, prefill, decode):
        assert holder.get_pd_kv_layout(pool) == want, holder.__name__


def test_without_the_patch_mha_pools_report_nothing(monkeypatch, no_overlay):
    for holder in (utils, prefill, decode):
        assert holder.get_pd_kv_layout(hybrid_5d_fp8(monkeypatch)) is None
        assert holder.get_pd_kv_layout(nhd(monkeypatch)) is None


def _kv_args(pool, layout):
    args = base_conn.KVArgs()
    args.page_size = pool.page_size
    args.kv_cache_dtype_str = "fp8_e4m3"  # SGLang's string for both e4m3fn and e4m3fnuz
    args.kv_layout = layout
    args.swa_kv_cache_layout = None
    args.state_types = []
    args.state_item_lens = []
    _, _, args.kv_item_lens = pool.get_contiguous_buf_infos()
    return args


def test_checksum_signature_differs_for_5d_and_nhd_only_with_the_patch(monkeypatch, no_overlay):
    five, flat = hybrid_5d_fp8(monkeypatch), nhd(monkeypatch)
    fnuz = nhd(monkeypatch, FNUZ)
    # the upstream hole: equal item lengths, equal dtype string, kv_layout None: one signature
    assert flat.get_contiguous_buf_infos()[2] == five.get_contiguous_buf_infos()[2]
    up = [utils.kv_layout_signature(_kv_args(p, utils.get_pd_kv_layout(p))) for p in (five, flat, fnuz)]
    assert up[0] == up[1] == up[2]
    sglang_kv5d.activate(patches=[PATCH], strict=True)
    try:
        ours = [utils.kv_layout_signature(_kv_args(p, utils.get_pd_kv_layout(p))) for p in (five, flat, fnuz)]
    finally:
        sglang_kv5d.deactivate()
    assert len(set(ours)) == 3


# --------------------------------------------------------------------------- #
# The decode side's check (CommonKVManager.try_ensure_parallel_info)          #
# --------------------------------------------------------------------------- #


def _decode_manager(pool, *, tp=1):
    """A CommonKVManager with what the handshake reads (a real instance, no network)."""
    mgr = object.__new__(conn.CommonKVManager)
    mgr.kv_args = _kv_args(pool, utils.get_pd_kv_layout(pool))
    mgr.kv_args.engine_rank = 0
    mgr.kv_cache_dtype_str = mgr.kv_args.kv_cache_dtype_str
    mgr.kv_layout = mgr.kv_args.kv_layout
    mgr.dsv41_spec_layout = None
    mgr.prefill_info_table = {}
    mgr.attn_tp_size, mgr.attn_cp_size, mgr.attn_cp_rank = tp, 1, 0
    mgr.pp_size, mgr.pp_rank, mgr.dcp_size = 1, 0, 1
    mgr.is_mla_backend = mgr.is_hybrid_mla_backend = False
    mgr.enable_all_cp_ranks_for_transfer = False
    return mgr


_SERVERS = []


@pytest.fixture(autouse=True)
def _close_bootstrap_servers():
    yield
    while _SERVERS:
        _SERVERS.pop().close()


def _serve_prefill(monkeypatch, pool, *, tp=1):
    """SGLang's own bootstrap server (CommonKVBootstrapServer, on localhost) with a prefill of ``tp``
    attention-TP ranks holding ``pool`` registered, each rank's PUT /route payload built as
    CommonKVManager.register_to_bootstrap builds it. Returns the bootstrap address."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = conn.CommonKVBootstrapServer("127.0.0.1", port)
    _SERVERS.append(server)
    url = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            if requests.get(f"{url}/health", timeout=1).status_code == 200:
                break
        except requests.RequestException:
            time.sleep(0.05)
    for rank in range(tp):
        payload = {"attn_tp_size": tp, "attn_tp_rank": rank, "attn_cp_size": 1, "attn_cp_rank": 0,
                   "attn_dp_size": 1, "attn_dp_rank": 0, "pp_size": 1, "pp_rank": 0, "system_dp_size": 1,
                   "system_dp_rank": 0, "rank_ip": "127.0.0.1", "rank_port": 20000 + rank,
                   "page_size": pool.page_size, "kv_cache_dtype": "fp8_e4m3",
                   "kv_layout": utils.get_pd_kv_layout(pool), "dsv41_spec_layout": None,
                   "load_balance_method": "round_robin", "enable_dsa_cache_layer_split": False,
                   "enable_kv_cache_sharding": False, "prefill_http_port": 30000, "decode_allocation_policy": "early"}
        reply = requests.put(f"{url}/route", json=payload, timeout=5)
        assert reply.status_code == 200, reply.text
    return f"127.0.0.1:{port}"


def _handshake(monkeypatch, prefill_pool, decode_pool, *, p_tp=1, d_tp=1):
    addr = _serve_prefill(monkeypatch, prefill_pool, tp=p_tp)
    mgr = _decode_manager(decode_pool, tp=d_tp)
    return mgr, mgr.try_ensure_parallel_info(addr)


def _refused(monkeypatch, prefill_pool, decode_pool, **kw):
    with pytest.raises(RuntimeError) as info:
        _handshake(monkeypatch, prefill_pool, decode_pool, **kw)
    return str(info.value)


@pytest.mark.parametrize("direction", ["5d-prefill/nhd-decode", "nhd-prefill/5d-decode"])
def test_5d_nhd_pairing_refused_both_ways(monkeypatch, overlay, direction):
    five, flat = hybrid_5d_fp8(monkeypatch), nhd(monkeypatch)
    p, d = (five, flat) if direction.startswith("5d") else (flat, five)
    msg = _refused(monkeypatch, p, d)
    assert msg.count("sglang-kv5d: PD KV layout mismatch") == 1
    assert L.descriptor_for(p) in msg and L.descriptor_for(d) in msg and "Fix:" in msg
    assert "full layout" in msg


def test_sglang_own_equality_check_refuses_the_descriptors_too(monkeypatch, overlay):
    """The original method (SGLang's `info.kv_layout != self.kv_layout`) sees the descriptors and refuses."""
    five, flat = hybrid_5d_fp8(monkeypatch), nhd(monkeypatch)
    addr = _serve_prefill(monkeypatch, five)
    mgr = _decode_manager(flat)
    original = conn.CommonKVManager.try_ensure_parallel_info.__wrapped__
    with pytest.raises(RuntimeError, match="KV layout mismatch: prefill server has kv_layout=kv5d.v1"):
        original(mgr, addr)


def test_without_the_patch_the_pairing_is_accepted(monkeypatch, no_overlay):
    mgr, ready = _handshake(monkeypatch, hybrid_5d_fp8(monkeypatch), nhd(monkeypatch))
    assert ready is True and len(mgr.prefill_info_table) == 1  # the upstream hole


def test_equal_pools_accepted_and_refusal_leaves_no_cached_report(monkeypatch, overlay):
    mgr, ready = _handshake(monkeypatch, hybrid_5d_fp8(monkeypatch), hybrid_5d_fp8(monkeypatch))
    (info,) = mgr.prefill_info_table.values()
    assert ready is True and info.kv_layout == mgr.kv_layout
    addr = _serve_prefill(monkeypatch, nhd(monkeypatch))
    mgr = _decode_manager(hybrid_5d_fp8(monkeypatch))
    with pytest.raises(P.PdLayoutMismatchError):
        mgr.try_ensure_parallel_info(addr)
    assert mgr.prefill_info_table == {} and mgr.kv_layout == L.descriptor_for(hybrid_5d_fp8(monkeypatch))


def test_e4m3fn_vs_e4m3fnuz_refused(monkeypatch, overlay):
    """MI355 prefill (e4m3fn) and MI300 decode (e4m3fnuz): SGLang's dtype strings are both fp8_e4m3."""
    msg = _refused(monkeypatch, hybrid_5d_fp8(monkeypatch, FP8), hybrid_5d_fp8(monkeypatch, FNUZ))
    assert "full dtype float8_e4m3fnuz vs float8_e4m3fn" in msg and "gfx942" in msg


def test_page_64_vs_16_refused(monkeypatch, overlay):
    msg = _refused(monkeypatch, hybrid_5d_fp8(monkeypatch, page=64), hybrid_5d_fp8(monkeypatch, page=16))
    assert "Page size mismatch" in msg  # SGLang's own page-size check runs first
    # and the descriptors alone refuse it too
    assert "full page 16 vs 64" in L.compare(L.descriptor_for(hybrid_5d_fp8(monkeypatch, page=16)),
                                              L.descriptor_for(hybrid_5d_fp8(monkeypatch, page=64)))


def test_peer_without_descriptor_refused_under_strict(monkeypatch, no_overlay):
    five = hybrid_5d_fp8(monkeypatch)
    sglang_kv5d.activate(patches=[PATCH], strict=True)
    try:
        d = _decode_manager(five)
    finally:
        sglang_kv5d.deactivate()
    addr = _serve_prefill(monkeypatch, five)  # patch off while the prefill reports: no overlay there
    sglang_kv5d.activate(patches=[PATCH], strict=True)
    try:
        with pytest.raises(P.PdLayoutMismatchError, match="reports no kv_layout") as info:
            d.try_ensure_parallel_info(addr)
        assert L.descriptor_for(five) in str(info.value) and "SGLANG_KV5D_STRICT=0" in str(info.value)
    finally:
        sglang_kv5d.deactivate()


def test_peer_without_descriptor_warned_when_not_strict(monkeypatch, no_overlay, caplog):
    five = hybrid_5d_fp8(monkeypatch)
    addr = _serve_prefill(monkeypatch, five)
    sglang_kv5d.activate(patches=[PATCH], strict=False)
    try:
        d = _decode_manager(five)
        with caplog.at_level("WARNING", logger="sglang_kv5d"):
            assert d.try_ensure_parallel_info(addr) is True
    finally:
        sglang_kv5d.deactivate()
    assert any("reports no kv_layout" in r.getMessage() for r in caplog.records)


def test_attention_tp_mismatch_over_5d_refused_unless_head_slice(monkeypatch, overlay):
    """Qwen3.5-like, 2 KV heads: prefill TP1 (2 heads per rank) -> decode TP2 (1 head per rank)."""
    enable_5d(monkeypatch)
    p = make_hybrid_pool(dtype=FP8, page_size=16, head_num=2, head_dim=256, size=128)
    d = make_hybrid_pool(dtype=FP8, page_size=16, head_num=1, head_dim=256, size=128)
    msg = _refused(monkeypatch, p, d, p_tp=1, d_tp=2)
    assert "attention-TP mismatch" in msg and "attn_tp_size=2" in msg and "attn_tp_size=1" in msg
    assert "pd-head-slice-5d" in msg
    monkeypatch.setattr(P, "head_slice_5d_installed", lambda: True)
    mgr, ready = _handshake(monkeypatch, p, d, p_tp=1, d_tp=2)
    assert ready is True
    # equal TP but different heads per rank: another model, refused
    assert "heads per rank 1 vs 2" in _refused(monkeypatch, p, d, p_tp=2, d_tp=2)


def test_attention_tp_mismatch_over_nhd_left_to_sglang(monkeypatch, overlay):
    p, d = nhd(monkeypatch, head_num=2), nhd(monkeypatch, head_num=1)
    mgr, ready = _handshake(monkeypatch, p, d, p_tp=1, d_tp=2)
    assert ready is True  # SGLang's head-sliced NHD transfer serves it


def test_head_slice_probe_reads_the_engine(overlay):
    assert P.head_slice_5d_installed() is False  # not applied in this process
