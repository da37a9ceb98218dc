"""The attention benchmark's "peer at its best split count" helpers, driven by a
stand-in for SGLang's decode_attention_fwd (the real one needs a GPU): every
split count is called with SGLang's argument order and buffer shapes, failures
are reported per count, the fastest working count wins."""

import pytest
import torch

from sglang_kv5d.bench.attention import fastest, peer_split_times


def _stand_in(calls, fail_at=()):
    def decode_attention_fwd(q, k, v, out, kv_indptr, kv_indices, logits, lse, num_kv_splits,
                             max_kv_splits, sm_scale, k_scale, v_scale):
        bs, H_q, D = q.shape
        assert logits.shape == (bs, H_q, max_kv_splits, D) and lse.shape == (bs, H_q, max_kv_splits)
        assert num_kv_splits.tolist() == [max_kv_splits] * bs
        if max_kv_splits in fail_at:
            raise RuntimeError(f"no kernel for {max_kv_splits} splits")
        calls.append(max_kv_splits)
    return decode_attention_fwd


def test_split_times_report_each_count_and_the_fastest_wins():
    q = torch.randn(3, 8, 64)
    nhd = (torch.randn(40, 2, 64), torch.randn(40, 2, 64), torch.tensor([0, 10, 20, 30]), torch.arange(30))
    calls = []
    cost = {1: 9.0, 2: 4.0, 4: 5.5, 8: 4.5}

    def time_fn(fn):
        before = len(calls)
        fn()
        return cost[calls[before]]

    tried = peer_split_times(_stand_in(calls, fail_at=(4,)), q, nhd, torch.empty_like(q), 0.125,
                             [1, 2, 4, 8], time_fn)
    assert calls == [1, 2, 8]
    assert tried[1] == 9.0 and tried[2] == 4.0 and tried[8] == 4.5
    assert tried[4].startswith("error: RuntimeError: no kernel for 4 splits")
    assert fastest(tried) == (4.0, 2)


def test_fastest_of_nothing_that_ran_is_none():
    assert fastest({}) is None
    assert fastest({1: "error: RuntimeError: x", 2: "error: ValueError: y"}) is None


def test_peer_best_us_raises_or_collects_failures(monkeypatch):
    import sglang_kv5d.bench.attention_peer as A
    import sglang_kv5d.bench.common as common

    monkeypatch.setattr(common, "graph_replay_median_us", lambda fn, **kw: (fn(), 3.0)[1])
    nhd = (torch.randn(70, 1, 16), torch.randn(70, 1, 16), torch.tensor([0, 64]), torch.arange(64))
    monkeypatch.setattr(A, "nhd_for_peer", lambda case: nhd)
    case = {"q": torch.randn(1, 4, 16), "ctx": torch.tensor([64])}
    calls = []
    peer = _stand_in(calls, fail_at=(1,))
    with pytest.raises(RuntimeError, match=r"split counts \[1\]"):
        A.peer_best_us(peer, case, torch.empty(1, 4, 16), 0.25)
    errors = []
    calls.clear()
    # ctx 64: only one split count has >= 64 tokens per split; the failure is collected
    assert A.peer_best_us(peer, case, torch.empty(1, 4, 16), 0.25, errors=errors) is None
    assert [s for s, _ in errors] == [1] and calls == []
    case["ctx"] = torch.tensor([256])
    assert A.peer_best_us(peer, case, torch.empty(1, 4, 16), 0.25, errors=errors) == (3.0, 2)
    assert calls == [2, 4]
