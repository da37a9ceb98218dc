"""Layout detection and layer resolution over REAL SGLang pool classes (CPU).

Runs unchanged on SGLang 0.5.23 (the venv) and 0.5.16
(PYTHONPATH=.cache/sglang-0.5.16); pools are built by tests/helpers/pools.py.
"""

from __future__ import annotations

import pytest
import torch

from sglang_kv5d.pools import (
    LayerNotFoundError,
    PoolLayoutError,
    describe_layout,
    is_vectorized_5d,
    iter_leaf_pools,
    resolve_kv_subpool,
)
from tests.helpers import pools as hp

FP8 = torch.float8_e4m3fn


@pytest.fixture
def five_d(monkeypatch):
    hp.enable_5d(monkeypatch)


# ---------------------------------------------------------------- detection


@pytest.mark.parametrize("dtype,x", [(torch.bfloat16, 8), (FP8, 16)])
def test_mha_pool_with_real_5d_buffers(five_d, dtype, x):
    pool = hp.make_mha_pool(dtype=dtype, page_size=16, head_num=2, head_dim=64)
    assert pool.kv_cache_layout == "vectorized_5d"
    assert tuple(pool.k_buffer[0].shape[-1:]) == (x,)
    assert pool.k_buffer[0].dtype == (torch.uint8 if dtype == FP8 else dtype)
    assert is_vectorized_5d(pool) is True
    text = describe_layout(pool)
    assert "vectorized_5d" in text and f"X={x}" in text
    if dtype == FP8:
        assert "stored as uint8" in text


def test_nhd_pool_is_not_5d():
    pool = hp.make_mha_pool()
    assert pool.kv_cache_layout == "nhd"
    assert is_vectorized_5d(pool) is False
    assert "not 5D" in describe_layout(pool)


def test_label_without_5d_buffers_is_not_5d():
    """Unified-memory pools (0.5.15.post1..0.5.18) carry the label with 4-D views."""
    pool = hp.make_mha_pool(size=240, page_size=16)
    pages = (pool.size + pool.page_size) // pool.page_size
    pool.k_buffer = [b.view(pages, pool.page_size, pool.head_num, pool.head_dim) for b in pool.k_buffer]
    pool.v_buffer = [b.view(pages, pool.page_size, pool.head_num, pool.head_dim) for b in pool.v_buffer]
    pool.kv_cache_layout = "vectorized_5d"
    assert is_vectorized_5d(pool) is False
    assert "labelled vectorized_5d but the buffers are not 5D" in describe_layout(pool)


def test_k_5d_v_not_raises_naming_class(five_d):
    pool = hp.make_mha_pool()
    pool.v_buffer = [torch.zeros(pool.size + pool.page_size, pool.head_num, pool.head_dim, dtype=pool.store_dtype)
                     for _ in pool.v_buffer]
    with pytest.raises(PoolLayoutError, match="MHATokenToKVPool: K buffers are SHUFFLE 5D but V buffers are not 5D"):
        is_vectorized_5d(pool)
    assert "INCONSISTENT" in describe_layout(pool)


def test_rank5_buffer_with_wrong_x_raises(five_d):
    pool = hp.make_mha_pool(dtype=torch.bfloat16, head_dim=64)
    kb = pool.k_buffer[0]
    # same bytes, but X=16 for a 2-byte dtype: not a SHUFFLE layout of this pool
    pool.k_buffer[0] = kb.reshape(kb.shape[0], kb.shape[1], kb.shape[2] // 2, kb.shape[3], 16)
    with pytest.raises(PoolLayoutError, match=r"k_buffer\[0\] has rank 5"):
        is_vectorized_5d(pool)


def test_layers_that_disagree_raise(five_d):
    pool = hp.make_mha_pool(layer_num=2)
    pool.k_buffer[1] = torch.zeros(pool.size + pool.page_size, pool.head_num, pool.head_dim, dtype=pool.store_dtype)
    with pytest.raises(PoolLayoutError, match="mixes SHUFFLE 5D layers"):
        is_vectorized_5d(pool)


@pytest.mark.parametrize("dtype", [torch.bfloat16, FP8])
def test_hybrid_linear_pool_qwen35_like(five_d, dtype):
    pool = hp.make_hybrid_pool(num_layers=8, dtype=dtype, head_num=1, head_dim=256)
    assert sorted(pool.full_attention_layer_id_mapping) == [3, 7]
    # the hybrid pool itself carries no label: upstream's check sees "nhd"
    assert getattr(pool, "kv_cache_layout", "nhd") == "nhd"
    assert is_vectorized_5d(pool) is True
    assert "HybridLinearKVPool(full_kv_pool=MHATokenToKVPool[vectorized_5d" in describe_layout(pool)


def test_hybrid_linear_pool_nhd():
    pool = hp.make_hybrid_pool()
    assert is_vectorized_5d(pool) is False


def test_swa_pool(five_d):
    pool = hp.make_swa_pool()
    assert is_vectorized_5d(pool) is True


def test_swa_pool_with_disagreeing_subpools_raises(five_d, monkeypatch):
    pool = hp.make_swa_pool()
    monkeypatch.setattr(hp.memory_pool_module(), "_use_aiter", False)
    pool.swa_kv_pool = hp.make_mha_pool(layer_num=2)  # NHD
    with pytest.raises(PoolLayoutError, match="SWAKVPool: attention sub-pools disagree"):
        is_vectorized_5d(pool)


def test_nested_composite(five_d):
    pool = hp.make_nested_pool()
    assert is_vectorized_5d(pool) is True
    assert len(list(iter_leaf_pools(pool))) == 2
    text = describe_layout(pool)
    assert text.startswith("HybridLinearKVPool(full_kv_pool=SWAKVPool(")


def test_subclass_detected_by_attributes(five_d):
    mp = hp.memory_pool_module()

    class MyHybrid(mp.HybridLinearKVPool):  # e.g. QSATokenToKVPool, UnifiedHybridLinearKVPool
        pass

    pool = hp.make_hybrid_pool(cls=MyHybrid)
    assert is_vectorized_5d(pool) is True


def test_pool_without_attention_buffers_is_not_5d():
    class Empty:
        pass

    assert is_vectorized_5d(Empty()) is False


# --------------------------------------------------------------- resolution


def _same_storage(a, b):
    return a.data_ptr() == b.data_ptr() and a.shape == b.shape


@pytest.mark.parametrize("dtype", [torch.bfloat16, FP8])
def test_resolve_every_full_attention_layer_of_hybrid(five_d, dtype):
    pool = hp.make_hybrid_pool(num_layers=8, dtype=dtype)
    for dense, layer_id in enumerate([3, 7]):
        sub, local = resolve_kv_subpool(pool, layer_id)
        assert sub is pool.full_kv_pool and local == dense
        # same tensor SGLang's own getter returns
        assert _same_storage(sub.k_buffer[local], pool.get_key_buffer(layer_id).view(sub.store_dtype))
        assert _same_storage(sub.v_buffer[local], pool.get_value_buffer(layer_id).view(sub.store_dtype))


def test_resolve_swa_layers(five_d):
    pool = hp.make_swa_pool(swa_attention_layer_ids=(0, 2), full_attention_layer_ids=(1, 3))
    expect = {0: (pool.swa_kv_pool, 0), 1: (pool.full_kv_pool, 0), 2: (pool.swa_kv_pool, 1), 3: (pool.full_kv_pool, 1)}
    for layer_id, (sub_expected, local_expected) in expect.items():
        sub, local = resolve_kv_subpool(pool, layer_id)
        assert sub is sub_expected and local == local_expected
        assert _same_storage(sub.k_buffer[local], pool.get_key_buffer(layer_id))


def test_resolve_nested(five_d):
    pool = hp.make_nested_pool()
    inner = pool.full_kv_pool
    expect = {3: (inner.swa_kv_pool, 0), 7: (inner.full_kv_pool, 0), 11: (inner.swa_kv_pool, 1), 15: (inner.full_kv_pool, 1)}
    for layer_id, (sub_expected, local_expected) in expect.items():
        sub, local = resolve_kv_subpool(pool, layer_id)
        assert sub is sub_expected and local == local_expected
        assert _same_storage(sub.k_buffer[local], pool.get_key_buffer(layer_id))


def test_resolve_plain_pool_with_start_layer(five_d):
    pool = hp.make_mha_pool(layer_num=2, start_layer=4)
    assert resolve_kv_subpool(pool, 5) == (pool, 1)
    with pytest.raises(LayerNotFoundError, match=r"valid layer ids: \[4, 5\]"):
        resolve_kv_subpool(pool, 2)


@pytest.mark.parametrize("layer_id", [0, 1, 2, 4, 5, 6])
def test_linear_attention_layer_raises(five_d, layer_id):
    pool = hp.make_hybrid_pool(num_layers=8)
    with pytest.raises(LayerNotFoundError) as ei:
        resolve_kv_subpool(pool, layer_id)
    err = ei.value
    assert isinstance(err, KeyError) and isinstance(err, ValueError)
    assert f"layer {layer_id} of HybridLinearKVPool" in str(err)
    assert "Valid full-attention layer ids: [3, 7]" in str(err)
    assert err.valid_ids == (3, 7)


def test_unknown_layer_raises(five_d):
    hybrid = hp.make_hybrid_pool(num_layers=8)
    with pytest.raises(LayerNotFoundError, match=r"\[3, 7\]"):
        resolve_kv_subpool(hybrid, 99)
    swa = hp.make_swa_pool()
    with pytest.raises(LayerNotFoundError, match=r"valid layer ids: \[0, 1, 2, 3\]"):
        resolve_kv_subpool(swa, 42)
    nested = hp.make_nested_pool()
    with pytest.raises(LayerNotFoundError, match=r"\[3, 7, 11, 15\]"):
        resolve_kv_subpool(nested, 4)


# --------------------------------------------------- wait before any read


def _reads(log):
    return [e for e in log if e[0] == "read"]


def test_wait_before_read_hybrid_real_counter(five_d, monkeypatch):
    pool = hp.make_hybrid_pool(num_layers=8)
    log = hp.record_waits_and_reads(pool, hp.layer_done_counter(8, monkeypatch))
    sub, local = resolve_kv_subpool(pool, 7)
    assert log == [("wait", 7)]  # global id, hybrid start_layer 0; nothing read yet
    sub.k_buffer[local]
    assert log[-1] == ("read", "leaf0.k_buffer", 1)
    # identical to SGLang's own getter
    log.clear()
    pool.get_key_buffer(7)
    assert log[0] == ("wait", 7) and log[1][0] == "read"


def test_wait_before_read_swa_and_nested(five_d, monkeypatch):
    swa = hp.make_swa_pool()
    log = hp.record_waits_and_reads(swa, hp.layer_done_counter(4, monkeypatch))
    resolve_kv_subpool(swa, 2)
    assert log == [("wait", 2)]

    nested = hp.make_nested_pool()
    log = hp.record_waits_and_reads(nested, hp.layer_done_counter(16, monkeypatch))
    sub, local = resolve_kv_subpool(nested, 11)
    assert log == [("wait", 11)]  # the outer pool waits; inner counters are None
    assert sub.layer_transfer_counter is None


def test_wait_plain_pool_uses_local_index(five_d, monkeypatch):
    pool = hp.make_mha_pool(layer_num=2, start_layer=4)
    log = hp.record_waits_and_reads(pool, hp.layer_done_counter(6, monkeypatch))
    sub, local = resolve_kv_subpool(pool, 5)
    assert (sub, local) == (pool, 1)
    assert log == [("wait", 1)]  # layer_id - start_layer, as get_key_buffer does
    log.clear()
    pool.get_key_buffer(5)
    assert log[0] == ("wait", 1)


def test_no_wait_for_invalid_layer(five_d, monkeypatch):
    pool = hp.make_hybrid_pool(num_layers=8)
    log = hp.record_waits_and_reads(pool, hp.layer_done_counter(8, monkeypatch))
    with pytest.raises(LayerNotFoundError):
        resolve_kv_subpool(pool, 0)
    assert log == []
