"""pool-layout-detection on a real AiterAttnBackend (built on the CPU).

Upstream reports NHD for a HybridLinearKVPool holding 5D buffers; with the
overlay the backend says 5D and the decode page-table flag follows
(decode_uses_page_table on 0.5.23; use_triton_unified_attention with
_use_unified_verify off before); after deactivate() upstream behaviour is back.
"""

from __future__ import annotations

import pytest
import torch

import sglang_kv5d
from sglang_kv5d.versions import parse_version
from tests.helpers.backend import make_aiter_backend
from tests.helpers.pools import enable_5d, make_hybrid_pool, make_mha_pool, make_nested_pool, make_swa_pool
from tests.helpers.subproc import sglang_version

HAS_PAGE_TABLE_FLAG = parse_version(sglang_version()) >= parse_version("0.5.23")


def flags(backend):
    return {
        "5d": backend.kv_cache_is_vectorized_5d,
        "page_table": backend.decode_uses_page_table if HAS_PAGE_TABLE_FLAG else backend.use_triton_unified_attention,
        "unified": backend.use_triton_unified_attention,
        "verify": backend._use_unified_verify,
    }


@pytest.fixture
def overlay():
    st = sglang_kv5d.activate()
    assert st.patch("pool-layout-detection").state == "applied", st
    yield st
    sglang_kv5d.deactivate()


@pytest.fixture
def hybrid_5d_pool(monkeypatch):
    enable_5d(monkeypatch)
    return make_hybrid_pool(dtype=torch.bfloat16, page_size=16, head_num=1, head_dim=64)


def test_upstream_reports_nhd_for_hybrid_5d_pool(hybrid_5d_pool):
    assert hybrid_5d_pool.full_kv_pool.k_buffer[0].dim() == 5  # really 5D underneath
    assert flags(make_aiter_backend(hybrid_5d_pool))["5d"] is False  # the upstream bug


def test_overlay_detects_5d_and_sets_the_page_table_flag(monkeypatch, hybrid_5d_pool, overlay):
    monkeypatch.setenv("SGLANG_USE_AITER_UNIFIED_ATTN", "0")
    f = flags(make_aiter_backend(hybrid_5d_pool))
    assert f["5d"] is True and f["page_table"] is True
    if HAS_PAGE_TABLE_FLAG:
        assert f["unified"] is False  # 0.5.23: left alone, decode_uses_page_table carries it
    else:
        assert f["unified"] is True and f["verify"] is False  # older: set, verify kept off


def test_deactivate_brings_upstream_back(hybrid_5d_pool):
    sglang_kv5d.activate()
    assert flags(make_aiter_backend(hybrid_5d_pool))["5d"] is True
    sglang_kv5d.deactivate()
    assert flags(make_aiter_backend(hybrid_5d_pool))["5d"] is False


@pytest.mark.parametrize("kind", ["swa", "nested", "plain"])
def test_other_5d_pools(monkeypatch, overlay, kind):
    enable_5d(monkeypatch)
    pool = {"swa": lambda: make_swa_pool(head_num=1), "nested": lambda: make_nested_pool(),
            "plain": lambda: make_mha_pool(head_num=1)}[kind]()
    assert flags(make_aiter_backend(pool))["5d"] is True


def test_nhd_pool_stays_nhd(monkeypatch, overlay):
    monkeypatch.setenv("SGLANG_AITER_KV_CACHE_LAYOUT", "nhd")
    f = flags(make_aiter_backend(make_hybrid_pool(head_num=1)))
    assert f["5d"] is False


def test_label_without_5d_buffers_is_not_5d(monkeypatch, overlay):
    """A pool labelled vectorized_5d whose buffers are 3-D (unified-memory style views)."""
    monkeypatch.setenv("SGLANG_AITER_KV_CACHE_LAYOUT", "nhd")
    pool = make_hybrid_pool(head_num=1)
    pool.full_kv_pool.kv_cache_layout = "vectorized_5d"  # label only; buffers stay 3-D
    assert flags(make_aiter_backend(pool))["5d"] is False
