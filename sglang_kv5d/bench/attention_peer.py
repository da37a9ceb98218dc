"""SGLang's Triton decode kernel as the decode attention peer: the same cache in
SGLang's NHD token layout, its call, and its time at each split count."""

from __future__ import annotations

from sglang_kv5d.bench import sglang_peers
from sglang_kv5d.bench.attention_cases import PEER_SPLITS


def load_peer():
    """SGLang's ``decode_attention_fwd`` and where it came from (:func:`sglang_peers.decode_peer`)."""
    return sglang_peers.decode_peer()


def nhd_for_peer(case):
    """The same K/V as ``(num_blocks * page, H_kv, D)`` + per-token indices."""
    import torch

    k5, v5, page, bt = case["k5"], case["v5"], case["page"], case["bt"]
    nb, H, C, P, X = k5.shape
    D = C * X
    k_nhd = k5.permute(0, 3, 1, 2, 4).reshape(nb * P, H, D).contiguous()
    v_nhd = v5.permute(0, 2, 4, 1, 3).reshape(nb * P, H, D).contiguous()
    bs = bt.shape[0]
    ctx = int(case["ctx"][0].item()) if bs else 0
    tok = bt.long()[:, :, None] * P + torch.arange(P, device=bt.device)[None, None, :]
    kv_indices = tok.reshape(bs, -1)[:, :ctx].reshape(-1).contiguous()
    kv_indptr = torch.arange(bs + 1, device=bt.device, dtype=torch.int32) * ctx
    return k_nhd, v_nhd, kv_indptr, kv_indices


def peer_call(decode_attention_fwd, q, k_nhd, v_nhd, kv_indptr, kv_indices, out, splits, sm_scale):
    import torch

    bs, H_q, D = q.shape
    num_kv_splits = torch.full((bs,), splits, dtype=torch.int32, device=q.device)
    logits = torch.empty((bs, H_q, splits, D), dtype=torch.float32, device=q.device)
    lse = torch.empty((bs, H_q, splits), dtype=torch.float32, device=q.device)

    def fn():
        decode_attention_fwd(
            q, k_nhd, v_nhd, out, kv_indptr, kv_indices, logits, lse, num_kv_splits,
            splits, sm_scale, 1.0, 1.0,
        )

    return fn


def peer_split_times(peer, q, nhd, out, sm_scale, splits, time_fn) -> dict:
    """SGLang's Triton decode at each split count of ``splits`` on the NHD copy
    ``nhd`` = (k, v, kv_indptr, kv_indices) of a case (``nhd_for_peer``):
    {splits: us from ``time_fn(call)``, or "error: ..." when it failed}."""
    tried = {}
    for s in splits:
        fn = peer_call(peer, q, *nhd, out, s, sm_scale)
        try:
            tried[s] = time_fn(fn)
        except Exception as exc:  # noqa: BLE001 - a peer fails with any error: reported to the caller
            tried[s] = f"error: {type(exc).__name__}: {exc}"[:200]
    return tried


def fastest(tried: dict):
    """(us, splits) of the fastest entry of ``peer_split_times``; None if every one failed."""
    times = [(us, s) for s, us in tried.items() if not isinstance(us, str)]
    return min(times) if times else None


def peer_best_us(peer, case, out, sm_scale, *, splits=PEER_SPLITS, inner=5, reps=10, errors=None):
    """(us, splits): SGLang's Triton decode on an NHD copy of ``case``'s cache at
    its fastest split count among ``splits`` (those of fewer than 64 tokens per
    split are skipped), CUDA-graph replay medians. Failures go to ``errors``
    (a list of (splits, message)) when given, else raise RuntimeError after
    trying every count; None if none ran."""
    from sglang_kv5d.bench.common import graph_replay_median_us

    ctx = int(case["ctx"].max().item()) if case["ctx"].numel() else 0
    tried = peer_split_times(
        peer, case["q"], nhd_for_peer(case), out, sm_scale, [s for s in splits if s <= max(1, ctx // 64)],
        lambda fn: graph_replay_median_us(fn, inner=inner, reps=reps, warmup=2))
    failed = [(s, msg) for s, msg in tried.items() if isinstance(msg, str)]
    if failed and errors is None:
        raise RuntimeError(f"peer failed at split counts {[s for s, _ in failed]}: {failed[0][1]}")
    if errors is not None:
        errors.extend(failed)
    return fastest(tried)
