"""The argument check of a verify page-table build, shared by the Triton
kernel (``kernels/verify_table.py``) and the torch builder
(``speculative/verify_tables.py``, which imports it from here: the kernels
sit below speculative, and this module imports neither torch nor Triton).

    check_verify_table_args(req_to_token, req_pool_indices, seq_lens, draft_num, page_size, out,
                            swa_mapping=None, swa_out=None) -> (bs, width)

Tensors: req_to_token ``(rows, cols)``, req_pool_indices and seq_lens
``(bs,)``, out ``(>= bs, width)``, swa_mapping ``(slots,)`` and swa_out
``(>= bs, width)`` or both None. Shapes only, never a device value.
"""

from __future__ import annotations

__all__ = ["check_verify_table_args"]


def check_verify_table_args(req_to_token, req_pool_indices, seq_lens, draft_num, page_size, out,
                            swa_mapping=None, swa_out=None):
    """``(bs, width)`` of a verify table build, or ValueError naming the argument.

    Shapes only (never a device value): ``req_pool_indices`` and ``seq_lens``
    1-D of ``bs`` entries, ``req_to_token`` 2-D, ``out`` 2-D with at least
    ``bs`` rows, ``swa_mapping`` and ``swa_out`` both or neither (``swa_out``
    as wide as ``out``, ``swa_mapping`` 1-D), ``page_size`` in 1 .. 2**31 - 1,
    ``draft_num + page_size - 1`` an int64. When there is something to write
    (``bs`` and ``width`` > 0), ``req_to_token`` and ``swa_mapping`` must not
    be empty: no row or slot could be clamped into them.
    """
    page, drafts = int(page_size), int(draft_num)
    if not 0 < page < 2**31:
        raise ValueError(f"verify page table: page_size must be in 1 .. 2**31 - 1, got {page_size}")
    if not -(2**63) <= drafts + page - 1 < 2**63:
        raise ValueError(f"verify page table: draft_num {draft_num} + page_size {page} - 1 is not an int64")
    if req_pool_indices.dim() != 1:
        raise ValueError(f"verify page table: req_pool_indices must be 1-D, got {tuple(req_pool_indices.shape)}")
    bs = int(req_pool_indices.shape[0])
    if tuple(seq_lens.shape) != (bs,):
        raise ValueError(f"verify page table: seq_lens {tuple(seq_lens.shape)} does not match "
                         f"req_pool_indices ({bs},)")
    if req_to_token.dim() != 2:
        raise ValueError(f"verify page table: req_to_token must be 2-D, got {tuple(req_to_token.shape)}")
    if out.dim() != 2 or out.shape[0] < bs:
        raise ValueError(f"verify page table {tuple(out.shape)} has fewer than {bs} rows")
    if (swa_mapping is None) != (swa_out is None):
        raise ValueError("an SWA verify table needs both swa_mapping and swa_out")
    if swa_out is not None and (swa_out.dim() != 2 or swa_out.shape[0] < bs or swa_out.shape[1] != out.shape[1]):
        raise ValueError(f"SWA verify page table {tuple(swa_out.shape)} does not match {tuple(out.shape)}")
    if swa_mapping is not None and swa_mapping.dim() != 1:
        raise ValueError(f"verify page table: swa_mapping must be 1-D, got {tuple(swa_mapping.shape)}")
    width = int(out.shape[1])
    if bs and width:
        if req_to_token.numel() == 0:
            raise ValueError(f"verify page table: req_to_token {tuple(req_to_token.shape)} is empty")
        if swa_mapping is not None and swa_mapping.numel() == 0:
            raise ValueError("verify page table: swa_mapping is empty")
    return bs, width
