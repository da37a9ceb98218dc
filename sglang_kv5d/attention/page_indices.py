"""Page-index tables for aiter's ``mha_batch_prefill_func``, padded for CK's read-ahead.

CK's batch prefill (``FmhaBatchPrefillWithPagedKVCacheKernel``) looks page ids
up ahead of the keys it is computing on. Before ROCm/rocm-libraries#6932
(merged 2026-04-29; aiter took it in ROCm/aiter#3032, 2026-05-05, so many ROCm
images in use predate it) those lookups were not clamped to the sequence: "when
the page table for a batch has exactly N entries, the V-tile prefetch indexes
page_idx[N]". Sequence b's slice starts at ``kv_indptr[b]``, so the read past
its end lands on sequence b + 1's entries, except for the last sequence, whose
over-read leaves a table sized exactly: a memory access fault (sglang#39517) or,
where the memory happens to be readable, a wrong page.

How far past: #6932 names one entry. The overlay calls the kernel in its linear
layout with page size 1 (one entry per key), and there the pre-fix pipeline
looks entries up per key over whole tiles of kN0 = 128 keys (``F_bn0`` of every
batch-prefill tile in CK's codegen ``fmha_batch_prefill.py``), so a partly used
last tile reads up to kN0 - 1 entries past the last used one, and the V
prefetch one kK1 (<= kN0) step further. :data:`CK_PAGE_TABLE_PAD` is therefore
2 x kN0 = 256 entries, the same pad a stored SGLang variant uses for this fault.
Every pad entry is a valid page id (the last used one, which is also what the
fixed kernel reads: it clamps to the last valid entry), so a read there is
harmless and, masked out by the sequence length, does not change the result.
"""

from __future__ import annotations

#: Entries appended after the last used one (2 x kN0; see the module docstring).
CK_PAGE_TABLE_PAD = 256


def linear_page_indices(n: int, device, torch=None):
    """``[0, 1, ..., n - 1]`` (int32) followed by :data:`CK_PAGE_TABLE_PAD`
    copies of ``n - 1``: the page table of ``n`` linear rows (page size 1) with
    room for CK's read-ahead. ``kv_indptr`` keeps addressing only the first
    ``n`` entries. With ``n == 0`` the pad is zeros (there is no valid row)."""
    if torch is None:
        import torch
    idx = torch.arange(n + CK_PAGE_TABLE_PAD, dtype=torch.int32, device=device)
    return idx.clamp_(max=max(n - 1, 0))
