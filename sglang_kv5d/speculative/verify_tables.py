"""Speculative-verify page tables that fit their rows (core of target-verify-5d's table builder).

SGLang's unified-verify metadata (``AiterAttnBackend._build_verify_unified_metadata``)
gives every request a row of ``cdiv(max_context_len, page)`` block ids but
writes ``cdiv(seq_len + N, page)`` of them, with no clamp to the row: a request
at the context limit (``seq_len = context_len - 1``) with N >= 2 drafts writes
its last block id into the next request's row, and on the last row past the
tensor. The CUDA-graph buffers (``init_cuda_graph_state``) have the same width.
That is wrong for NHD too; for a 5D target the overlay builds the tables itself:

    width  = verify_table_width(max_context_len, N, page)
           = cdiv(max_context_len + N, page)       room for prefix + drafts
    table  (bs, width) int32                        block id of page j of each
                                                    request, 0 past its pages

Every write stays inside its row, whatever the metadata says: the number of
pages a row gets is clamped to the row width and to the pages its
``req_to_token`` row can name, the request index and the slots read are
clamped to their tensors (a hostile value gives a wrong block id, which the
5D kernels clamp again, never an out-of-bounds access). Device ops only (no
host read of a device value), so it runs before CUDA-graph replay as SGLang's
builder does.

Tensors (all on one device):

    req_to_token       (rows, cols) int32   token slot of position p of request row r
    req_pool_indices   (bs,) int            row of each request in req_to_token
    seq_lens           (bs,) int            cached prefix length of each request
    out                (>= bs, width) int32 full-pool page table, written in [:bs]
    swa_mapping        (slots,) int         full slot -> SWA slot (SWA pools), or None
    swa_out            (>= bs, width) int32 SWA page table, or None
"""

from __future__ import annotations

from typing import Optional


def _torch():
    import torch

    return torch


def verify_table_width(max_context_len: int, num_draft_tokens: int, page_size: int) -> int:
    """Block ids a verify row needs: ``cdiv(max_context_len + num_draft_tokens, page_size)``."""
    if page_size <= 0 or max_context_len < 0 or num_draft_tokens < 0:
        raise ValueError(f"verify table width needs page_size > 0 and non-negative lengths, got "
                         f"max_context_len={max_context_len}, num_draft_tokens={num_draft_tokens}, "
                         f"page_size={page_size}")
    return -(-(int(max_context_len) + int(num_draft_tokens)) // int(page_size))


def build_verify_page_tables(req_to_token, req_pool_indices, seq_lens, draft_num: int, page_size: int, out,
                             swa_mapping=None, swa_out=None):
    """Fill ``out[:bs]`` (and ``swa_out[:bs]``) with each request's block ids for prefix + drafts.

    Row ``i`` gets ``min(cdiv(seq_lens[i] + draft_num, page_size), width,
    cdiv(req_to_token.shape[1], page_size))`` block ids ``req_to_token[r, j *
    page_size] // page_size`` (``r`` the request's row), then zeros to the end
    of the row. Returns ``(out[:bs], swa_out[:bs] or None)``.
    """
    torch = _torch()
    bs = int(req_pool_indices.shape[0])
    if out.dim() != 2 or out.shape[0] < bs:
        raise ValueError(f"verify page table {tuple(out.shape)} has fewer than {bs} rows")
    if (swa_mapping is None) != (swa_out is None):
        raise ValueError("an SWA verify table needs both swa_mapping and swa_out")
    if swa_out is not None and (swa_out.dim() != 2 or swa_out.shape[0] < bs or swa_out.shape[1] != out.shape[1]):
        raise ValueError(f"SWA verify page table {tuple(swa_out.shape)} does not match {tuple(out.shape)}")
    width = int(out.shape[1])
    table = out[:bs]
    swa_table = None if swa_out is None else swa_out[:bs]
    if bs == 0 or width == 0:
        return table, swa_table
    device = out.device
    rows_avail, cols_avail = int(req_to_token.shape[0]), int(req_to_token.shape[1])
    cols = torch.arange(width, dtype=torch.int64, device=device)
    max_pages = min(width, -(-cols_avail // page_size))
    pages = torch.clamp((seq_lens.to(torch.int64) + (int(draft_num) + page_size - 1)) // page_size, 0, max_pages)
    live = cols[None, :] < pages[:, None]
    rows = torch.clamp(req_pool_indices.to(torch.int64), 0, max(rows_avail - 1, 0))
    tok = torch.clamp(cols * page_size, max=max(cols_avail - 1, 0))
    slots = req_to_token[rows[:, None], tok[None, :]].to(torch.int64)
    zero = torch.zeros((), dtype=torch.int64, device=device)
    table.copy_(torch.where(live, slots // page_size, zero))
    if swa_table is not None:
        safe = torch.clamp(slots, 0, max(int(swa_mapping.shape[0]) - 1, 0))
        swa_slots = swa_mapping[safe].to(torch.int64)
        swa_table.copy_(torch.where(live, swa_slots // page_size, zero))
    return table, swa_table


def graph_table_shape(max_bs: int, max_context_len: int, num_draft_tokens: Optional[int], page_size: int):
    """(rows, width) of the persistent verify table a backend allocates for CUDA-graph capture."""
    return int(max_bs), verify_table_width(max_context_len, int(num_draft_tokens or 0), page_size)
