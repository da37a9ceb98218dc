"""The decode attention benchmark's cases: geometries, sizes, targets, and one
random 5D KV cache per row (:func:`build_case`)."""

from __future__ import annotations

GEOMETRIES = [  # (H_q, H_kv, D): Qwen3.5 TP8 rank, Qwen3.5 TP1, Llama-like
    (4, 1, 256),
    (16, 2, 256),
    (32, 8, 128),
]
BATCHES = (1, 32, 128)
CONTEXTS = (1024, 8192, 32768)
KV_DTYPES = ("bf16", "fp8_e4m3fn")
PAGE = 64
PEER_SPLITS = (1, 2, 4, 8, 16, 32, 64)

#: targets: at least this fraction of the read rate from this many KV tokens per call;
#: at batch 1 from 8192 tokens, at least this many times as fast as SGLang's decode
TARGET_BW_FRACTION = 0.70
TARGET_BW_TOKENS = 256 * 1024
TARGET_BS1_SPEEDUP = 3.0


def build_case(bs, ctx, H_q, H_kv, D, kv, device, *, seed=0, page=PAGE):
    """Random 5D cache + the same data in NHD token layout, tables, q."""
    import torch

    from ..platform import FP8_E4M3FN, fp8_torch_dtype

    g = torch.Generator(device=device)
    g.manual_seed(seed)
    fp8 = kv.startswith("fp8")
    X = 16 if fp8 else 8
    pages_per_seq = -(-ctx // page)
    nb = bs * pages_per_seq + 1
    store = fp8_torch_dtype(FP8_E4M3FN) if fp8 else torch.bfloat16

    def rnd(shape):
        t = torch.randn(shape, generator=g, device=device, dtype=torch.bfloat16)
        return t.to(store)

    k5 = rnd((nb, H_kv, D // X, page, X))
    v5 = rnd((nb, H_kv, page // X, D, X))
    perm = torch.randperm(nb, generator=g, device=device)[: bs * pages_per_seq]
    bt = perm.reshape(bs, pages_per_seq).to(torch.int32)
    ctx_lens = torch.full((bs,), ctx, dtype=torch.int32, device=device)
    q = torch.randn((bs, H_q, D), generator=g, device=device, dtype=torch.bfloat16)
    return dict(q=q, k5=k5, v5=v5, bt=bt, ctx=ctx_lens, X=X, page=page, fp8=fp8)


def kv_bytes(bs, ctx, H_q, H_kv, D, elem):
    """Bytes a decode call reads and writes: K and V of every context token, q and out, the block table."""
    kv = 2 * bs * ctx * H_kv * D * elem
    qo = 2 * bs * H_q * D * 2
    table = bs * (-(-ctx // PAGE)) * 4
    return kv + qo + table
