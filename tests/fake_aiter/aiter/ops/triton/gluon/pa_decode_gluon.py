"""aiter.ops.triton.gluon.pa_decode_gluon (fake, float64 reference).

Signatures as at aiter HEAD e4048607 (``pa_decode_gluon`` unchanged since
8cd7c8b, tags >= v0.1.14). The result is computed with torch in float64 and
written into ``output``. The real wrapper's checks are repeated with its
exception types (AssertionError, RuntimeError) and in its order, including the
Gluon and architecture checks (``aiter._fake.GLUON``, ``aiter._fake.ARCH``)
and, where ``aiter._fake.PA_DECODE_BLOCK_SIZES`` models a release that has it
(v0.1.10 .. v0.1.13.post1), the block-size assert.
The fake checks more only where its float64 result needs it (shapes that
index, the vector width, in-range block ids): there the real kernel would
compute garbage, and the fake raises SilentGarbage instead.
"""

from __future__ import annotations

import math

import torch

from aiter._fake import NUM_CU as _DEFAULT_NUM_CU  # noqa: F401  (documented default)
from aiter._fake import SilentGarbage, check, fp8_dtype, recorded

__all__ = ["pa_decode_gluon", "get_recommended_splits", "get_occupancy"]

_FLOATS = (torch.bfloat16, torch.float16)


def get_occupancy():
    return 2


@recorded("get_recommended_splits")
def get_recommended_splits(num_sequences, num_kv_heads, split_kv_blocks=1):
    """KV splits for ps=True: cdiv(CUs * occupancy, seqs * kv_heads * blocks), capped at 8.

    The real one reads torch.cuda.get_device_properties(); the fake uses
    ``aiter._fake.NUM_CU`` (304, MI300X).
    """
    from aiter import _fake

    check(int(num_sequences) > 0 and int(num_kv_heads) > 0, "num_sequences and num_kv_heads must be > 0")
    num_sm = _fake.NUM_CU * get_occupancy()
    denom = int(num_sequences) * int(num_kv_heads) * int(split_kv_blocks)
    n = -(-num_sm // denom)
    n *= int(split_kv_blocks)
    return min(n, 8)


def _scale_ok(name, t):
    if t is None:
        return
    check(isinstance(t, torch.Tensor), f"{name} must be a tensor")
    check(t.dtype == torch.float32, f"{name} must be float32, got {t.dtype}")


@recorded("pa_decode_gluon")
def pa_decode_gluon(
    output: torch.Tensor,
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    context_lengths: torch.Tensor,
    block_tables: torch.Tensor,
    softmax_scale: float,
    query_length: int,
    max_context_partition_num: int,
    context_partition_size: int = 256,
    compute_type: torch.dtype = torch.bfloat16,
    query_scale: torch.Tensor = None,
    key_scale: torch.Tensor = None,
    value_scale: torch.Tensor = None,
    exp_sums: torch.Tensor = None,
    max_logits: torch.Tensor = None,
    temporary_output: torch.Tensor = None,
    alibi_slopes: torch.Tensor = None,
    sinks: torch.Tensor = None,
    sliding_window: int = 0,
    ps: bool = True,
) -> None:
    from aiter import _fake

    fp8 = fp8_dtype()
    kv_types = (fp8,) + _FLOATS

    # ---- what the real wrapper checks, in its order, with its exception types ----
    if not _fake.GLUON:
        raise RuntimeError(
            "This version triton is not support gluon jit mode, please upgrade to 3.5.0 or higher!"
        )
    check(_fake.ARCH in ("gfx942", "gfx950"),
          f"pa_decode_gluon only supports gfx942 (CDNA3) and gfx950 (CDNA4) now, but got {_fake.ARCH}")
    check(query_length <= 4, f"query_length == {query_length} exceeds maximum of 4")
    check(query.dtype in kv_types,
          f"query tensor only support dtype in {kv_types}, but got query.dtype == {query.dtype}")
    check(key_cache.dtype in kv_types,
          f"key_cache tensor only support dtype in {kv_types}, but got key_cache.dtype == {key_cache.dtype}")
    check(value_cache.dtype in kv_types,
          f"value_cache tensor only support dtype in {kv_types}, but got value_cache.dtype == {value_cache.dtype}")
    check(output.dtype in _FLOATS,
          f"output tensor only support dtype in {_FLOATS}, but got output.dtype == {output.dtype}")
    hq, head = query.shape[1], query.shape[-1]
    hkv = key_cache.shape[1]
    group = hq // hkv
    check(query_length * group <= 64, f"equivalent_query_group_size={query_length * group} exceeds maximum of 64")
    if _fake.PA_DECODE_BLOCK_SIZES is not None:  # v0.1.10 .. v0.1.13.post1 (aiter._fake)
        kv_block_size = key_cache.shape[-2]
        check(kv_block_size in _fake.PA_DECODE_BLOCK_SIZES,
              f"kv_block_size == {kv_block_size} not in {list(_fake.PA_DECODE_BLOCK_SIZES)}")
    check(output.dim() == 3, f"Expected 3D output tensor, but got shape {tuple(output.shape)}")
    check(query.dim() == 3, f"Expected 3D query tensor, but got shape {tuple(query.shape)}")
    check(key_cache.dim() == 5, f"Expected 5D key_cache tensor, but got shape {tuple(key_cache.shape)}")
    if query_scale is not None:
        check(isinstance(query_scale, torch.Tensor) and query_scale.dtype == torch.float32,
              f"query_scale tensor only support dtype == torch.float32, but got query_scale.dtype == "
              f"{getattr(query_scale, 'dtype', None)}")
        if query_scale.numel() != 1:
            check(query_scale.dim() == 3, f"Expected 3D query_scale tensor, but got shape {tuple(query_scale.shape)}")
            check(query_scale.shape[-1] == 1, "Expected query_scale.shape[-1] == 1")
    # The real wrapper reads the scales only for an fp8 cache with both given.
    kv_quant = key_cache.dtype == fp8 and key_scale is not None and value_scale is not None
    if kv_quant:
        for n, s in (("key_scale", key_scale), ("value_scale", value_scale)):
            check(isinstance(s, torch.Tensor) and s.dtype == torch.float32,
                  f"{n} tensor only support dtype == torch.float32, but got {n}.dtype == {getattr(s, 'dtype', None)}")
        if key_scale.numel() != 1:
            check(key_scale.dim() == 4, f"Expected 4D key_scale tensor, but got shape {tuple(key_scale.shape)}")
            check(key_scale.shape[-1] == 1, "Expected key_scale.shape[-1] == 1")
        check(key_scale.shape == value_scale.shape,
              f"Key and value scales must have same shape, but got key: {tuple(key_scale.shape)}, "
              f"value: {tuple(value_scale.shape)}")
    if value_cache.dim() not in (4, 5):
        raise RuntimeError(f"Unsupported value cache shape: {tuple(value_cache.shape)}")

    # ---- what the fake needs for its float64 result (the real one would
    # compute garbage or index out of bounds here; SilentGarbage says so) ----
    total = query.shape[0]
    nb, _, _, block, xk = key_cache.shape
    check(hq % hkv == 0, f"num_q_heads {hq} not a multiple of num_kv_heads {hkv}", SilentGarbage)
    check(total % query_length == 0, "query rows not a multiple of query_length", SilentGarbage)
    bsz = total // query_length
    if key_cache.dtype == fp8 and not kv_quant:
        raise SilentGarbage(
            "fp8 KV cache without key_scale AND value_scale: the kernel assumes x=8 "
            "and mis-indexes the cache"
        )
    # One vector width (from the key cache) indexes both caches in the kernel.
    x = 16 if kv_quant else 8
    check(value_cache.element_size() == key_cache.element_size(),
          f"key/value cache element sizes differ: {key_cache.dtype} vs {value_cache.dtype}", SilentGarbage)
    check(xk == x, f"key_cache last dim {xk} != the kernel's vector width {x}", SilentGarbage)
    check(key_cache.shape[2] * x == head, f"key_cache D//x={key_cache.shape[2]} inconsistent with head_size {head}",
          SilentGarbage)
    check(key_cache.stride(-1) == 1, "key_cache last dim must be contiguous", SilentGarbage)
    if value_cache.dim() == 5:
        check(tuple(value_cache.shape) == (nb, hkv, block // x, head, x),
              f"value_cache 5D shape {tuple(value_cache.shape)} != {(nb, hkv, block // x, head, x)}", SilentGarbage)
        check(value_cache.stride(-1) == 1 and value_cache.stride(-2) == x,
              "value_cache (D, x) tail must be contiguous", SilentGarbage)
    else:
        check(tuple(value_cache.shape) == (nb, hkv, head, block), f"value_cache 4D shape {tuple(value_cache.shape)}",
              SilentGarbage)
    check(tuple(output.shape) == (total, hq, head), f"output shape {tuple(output.shape)} != {(total, hq, head)}",
          SilentGarbage)
    if kv_quant:
        for n, s in (("key_scale", key_scale), ("value_scale", value_scale)):
            check(s.numel() == 1 or tuple(s.shape) == (nb, hkv, block, 1),
                  f"{n} must be [1] or [blocks, Hkv, block, 1], got {tuple(s.shape)}", SilentGarbage)
    if query_scale is not None:
        check(query_scale.numel() == 1 or tuple(query_scale.shape) == (total, hq, 1),
              f"query_scale must be [1] or [{total}, {hq}, 1], got {tuple(query_scale.shape)}", SilentGarbage)

    # ---- metadata (the real wrapper checks none of it; out-of-range reads are garbage) ----
    check(context_lengths.dim() == 1 and context_lengths.shape[0] == bsz, f"context_lengths must be [{bsz}]",
          SilentGarbage)
    check(not context_lengths.dtype.is_floating_point, "context_lengths must be integer", SilentGarbage)
    check(block_tables.dim() == 2 and block_tables.shape[0] == bsz, f"block_tables must be [{bsz}, max_blocks]",
          SilentGarbage)
    check(not block_tables.dtype.is_floating_point, f"block_tables must be integer, got {block_tables.dtype}",
          SilentGarbage)
    check(block_tables.stride(-1) == 1, "block_tables last dim must be contiguous", SilentGarbage)
    check(isinstance(max_context_partition_num, int) and max_context_partition_num >= 1,
          "max_context_partition_num must be an int >= 1", SilentGarbage)
    ctx = [int(c) for c in context_lengths.tolist()]
    for b, c in enumerate(ctx):
        nblk = -(-c // block)
        check(nblk <= block_tables.shape[1], f"seq {b}: ctx {c} needs {nblk} blocks > table width", SilentGarbage)
        ids = block_tables[b, :nblk]
        check(bool(((ids >= 0) & (ids < nb)).all()), f"seq {b}: block id out of range", SilentGarbage)
    if not ps and max_context_partition_num > 1:
        need = -(-max(ctx, default=0) // 256)
        check(max_context_partition_num >= need, "ps=False with too few partitions drops the tail", SilentGarbage)
    p = max_context_partition_num
    if exp_sums is not None:
        check(exp_sums.dtype == torch.float32 and tuple(exp_sums.shape) == (bsz, hkv, p, query_length * group),
              "exp_sums shape/dtype", SilentGarbage)
    if max_logits is not None:
        check(max_logits.dtype == torch.float32 and tuple(max_logits.shape) == (bsz, hkv, p, query_length * group),
              "max_logits shape/dtype", SilentGarbage)
    if temporary_output is not None:
        check(tuple(temporary_output.shape) == (bsz, hkv, p, query_length * group, head),
              f"temporary_output shape {tuple(temporary_output.shape)}", SilentGarbage)
    if sinks is not None:
        check(sinks.numel() == hq, f"sinks must have {hq} entries", SilentGarbage)

    # ---- float64 reference ----
    q = query.to(torch.float64)
    if compute_type == fp8 and query.dtype != fp8:
        q = query.to(fp8).to(torch.float64)  # the kernel's unscaled cast
    if query_scale is not None:  # any given query_scale enters qk_scale (QUERY_QUANT_MODE >= 0)
        qs = query_scale.to(torch.float64)
        q = q * (qs.reshape(()) if qs.numel() == 1 else qs)
    sink = sinks.to(torch.float64).reshape(hq) if sinks is not None else None
    win = int(sliding_window) if sliding_window is not None else 0
    res = torch.empty(total, hq, head, dtype=torch.float64)
    for b, c in enumerate(ctx):
        j = torch.arange(c)
        blk = block_tables[b].long()[j // block]
        off = j % block
        k = key_cache[blk, :, :, off, :].to(torch.float64).reshape(c, hkv, head)
        if value_cache.dim() == 5:
            v = value_cache[blk, :, off // x, :, off % x].to(torch.float64)
        else:
            v = value_cache[blk, :, :, off].to(torch.float64)
        if kv_quant:
            if key_scale.numel() == 1:
                k = k * key_scale.to(torch.float64).reshape(())
                v = v * value_scale.to(torch.float64).reshape(())
            else:
                k = k * key_scale[blk, :, off, 0].to(torch.float64)[..., None]
                v = v * value_scale[blk, :, off, 0].to(torch.float64)[..., None]
        for qi in range(query_length):
            row = b * query_length + qi
            keep = torch.ones(c, dtype=torch.bool)
            if query_length > 1:
                keep &= j <= c - query_length + qi
            if win > 0:
                keep &= j >= c - win + 1 + qi
            for h in range(hq):
                kh = h // group
                s = (k[:, kh, :] @ q[row, h]) * float(softmax_scale)
                s = torch.where(keep, s, torch.tensor(-math.inf, dtype=torch.float64))
                m = s.max() if c else torch.tensor(-math.inf, dtype=torch.float64)
                if sink is not None:
                    m = torch.maximum(m, sink[h])
                pw = torch.exp(s - m)
                den = pw.sum()
                if sink is not None:
                    den = den + torch.exp(sink[h] - m)
                res[row, h] = (pw[:, None] * v[:, kh, :]).sum(0) / den
    output.copy_(res.to(output.dtype))
    return None
