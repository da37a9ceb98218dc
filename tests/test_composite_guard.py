"""Under 5D, a composite KV pool the overlay has not checked fails closed, naming its class.

Real SGLang classes on the CPU: ``QSATokenToKVPool`` (0.5.23), subclasses of
``HybridLinearKVPool`` / ``SWAKVPool`` defined here (as a model-specific pool
such as Qwen3.8-Flash-Next's would be), at the top or nested, and the checked
classes themselves. The refusal happens before ``AiterAttnBackend.__init__``
(sglang_kv5d.composites, called by the fail-closed backend guard).
"""

from __future__ import annotations

import importlib

import pytest
import torch

import sglang_kv5d
from sglang_kv5d.activation import Kv5dNotReadyError
from sglang_kv5d.pools import unchecked_composites
from tests.helpers import pools as hp
from tests.helpers.backend import make_aiter_backend

mp = hp.memory_pool_module()
swa = hp.swa_pool_module()


class FlashNextHybridPool(mp.HybridLinearKVPool):
    """A HybridLinearKVPool subclass nobody checked (it could read its buffers its own way)."""


class OwnSWAPool(swa.SWAKVPool):
    pass


def _qsa_cls():
    try:
        return importlib.import_module("sglang.srt.mem_cache.qsa_kv_pool").QSATokenToKVPool
    except ImportError:
        pytest.skip("this SGLang has no QSATokenToKVPool (0.5.23 has)")


def make_qsa_pool():
    return _qsa_cls()(size=256, dtype=torch.bfloat16, page_size=16, head_num=1, head_dim=64,
                      full_attention_layer_ids=[3, 7], device="cpu", mamba_pool=None, qsa_index_kv_heads=1,
                      qsa_index_head_dim=64, qsa_compress_ratio=4, qsa_token_topk=16, num_request_slots=4)


@pytest.fixture
def overlay():
    sglang_kv5d.activate()
    importlib.import_module("sglang.srt.layers.attention.aiter_backend")  # the guard installs on import
    st = sglang_kv5d.status()
    assert st.patch("fail-closed-backend").state == "applied", st
    yield st
    sglang_kv5d.deactivate()


UNCHECKED = {
    "qsa": (make_qsa_pool, "sglang.srt.mem_cache.qsa_kv_pool.QSATokenToKVPool", "token_to_kv_pool"),
    "hybrid-subclass": (lambda: hp.make_hybrid_pool(cls=FlashNextHybridPool),
                        f"{__name__}.FlashNextHybridPool", "token_to_kv_pool"),
    "swa-subclass-nested": (lambda: hp.make_hybrid_pool(full_attention_layer_ids=[3, 7, 11, 15], num_layers=16,
                                                        full_kv_pool=hp.make_swa_pool(cls=OwnSWAPool)),
                            f"{__name__}.OwnSWAPool", "HybridLinearKVPool.full_kv_pool"),
}


@pytest.mark.parametrize("kind", sorted(UNCHECKED))
def test_unchecked_composite_over_5d_buffers_is_refused_naming_the_class(monkeypatch, overlay, kind):
    make, qualname, where = UNCHECKED[kind]
    hp.enable_5d(monkeypatch)
    pool = make()
    assert any(leaf.k_buffer[0].dim() == 5 for leaf in sglang_kv5d.pools.iter_leaf_pools(pool))
    with pytest.raises(Kv5dNotReadyError) as info:
        make_aiter_backend(pool, head_dim=64, page_size=16)
    message = str(info.value)
    assert qualname in message and where in message, message
    assert "has not checked under 5D" in message and "Fix: unset SGLANG_AITER_KV_CACHE_LAYOUT" in message, message


@pytest.mark.parametrize("kind", ["hybrid", "swa", "nested"])
def test_checked_composites_build(monkeypatch, overlay, kind):
    hp.enable_5d(monkeypatch)
    pool = {"hybrid": lambda: hp.make_hybrid_pool(), "swa": lambda: hp.make_swa_pool(head_num=1),
            "nested": hp.make_nested_pool}[kind]()
    assert make_aiter_backend(pool, head_dim=64, page_size=16).kv_cache_is_vectorized_5d is True


def test_unchecked_composite_over_nhd_buffers_builds(monkeypatch, overlay):
    """5D requested, but the pool's buffers are NHD: no 5D code reads them, nothing to refuse."""
    monkeypatch.setenv("SGLANG_AITER_KV_CACHE_LAYOUT", "nhd")
    pool = make_qsa_pool()  # built NHD
    monkeypatch.setenv("SGLANG_AITER_KV_CACHE_LAYOUT", "vectorized_5d")
    assert make_aiter_backend(pool, head_dim=64, page_size=16).kv_cache_is_vectorized_5d is False


def test_non_strict_warns_and_builds(monkeypatch, caplog):
    sglang_kv5d.activate(strict=False)
    try:
        hp.enable_5d(monkeypatch)
        pool = hp.make_hybrid_pool(cls=FlashNextHybridPool)
        with caplog.at_level("WARNING", logger="sglang_kv5d"):
            make_aiter_backend(pool, head_dim=64, page_size=16)
    finally:
        sglang_kv5d.deactivate()
    assert any("FlashNextHybridPool" in r.getMessage() and "has not checked" in r.getMessage()
               for r in caplog.records), caplog.records


def test_nhd_layout_is_not_guarded(monkeypatch, overlay):
    monkeypatch.setenv("SGLANG_AITER_KV_CACHE_LAYOUT", "nhd")
    make_aiter_backend(hp.make_hybrid_pool(cls=FlashNextHybridPool), head_dim=64, page_size=16)


def test_unchecked_composites_walks_the_tree():
    checked = [mp.HybridLinearKVPool, swa.SWAKVPool]
    inner = hp.make_swa_pool(cls=OwnSWAPool)
    nested = hp.make_hybrid_pool(cls=FlashNextHybridPool, full_attention_layer_ids=[3, 7, 11, 15], num_layers=16,
                                 full_kv_pool=inner)
    assert [(p, type(n).__name__) for p, n in unchecked_composites(nested, checked)] == [
        ("", "FlashNextHybridPool"), ("full_kv_pool", "OwnSWAPool")]
    assert unchecked_composites(hp.make_nested_pool(), checked) == []
    assert unchecked_composites(hp.make_mha_pool(), []) == []  # a leaf is no composite
