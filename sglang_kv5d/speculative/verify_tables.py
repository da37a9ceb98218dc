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

Two builders, the same tables bit for bit:

    build_verify_page_tables        the entry point (patches/target_verify.py):
                                    on a GPU one Triton launch
                                    (sglang_kv5d/kernels/verify_table.py),
                                    else, or after a recorded kernel failure,
                                    the torch builder
    build_verify_page_tables_torch  the torch builder (about 16 small device
                                    ops; the CPU path, the fallback, the
                                    kernel's reference)

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

from ..kernels.verify_table_args import check_verify_table_args


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


def build_verify_page_tables_torch(req_to_token, req_pool_indices, seq_lens, draft_num: int, page_size: int, out,
                                   swa_mapping=None, swa_out=None):
    """The torch builder: the CPU path, the GPU fallback, and the reference of
    ``kernels.verify_table`` (same arguments, result and errors as
    :func:`build_verify_page_tables`). About 16 small device ops."""
    bs, width = check_verify_table_args(req_to_token, req_pool_indices, seq_lens, draft_num, page_size, out,
                                        swa_mapping, swa_out)
    return _fill_torch(req_to_token, req_pool_indices, seq_lens, int(draft_num), int(page_size), out[:bs],
                       None if swa_out is None else swa_out[:bs], swa_mapping)


def _fill_torch(req_to_token, req_pool_indices, seq_lens, draft_num, page_size, table, swa_table, swa_mapping):
    torch = _torch()
    bs, width = int(table.shape[0]), int(table.shape[1])
    if bs == 0 or width == 0:
        return table, swa_table
    device = table.device
    rows_avail, cols_avail = int(req_to_token.shape[0]), int(req_to_token.shape[1])
    cols = torch.arange(width, dtype=torch.int64, device=device)
    max_pages = min(width, -(-cols_avail // page_size))
    pages = torch.clamp((seq_lens.to(torch.int64) + (draft_num + page_size - 1)) // page_size, 0, max_pages)
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


def build_verify_page_tables(req_to_token, req_pool_indices, seq_lens, draft_num: int, page_size: int, out,
                             swa_mapping=None, swa_out=None):
    """Fill ``out[:bs]`` (and ``swa_out[:bs]``) with each request's block ids for prefix + drafts.

    Row ``i`` gets ``min(cdiv(seq_lens[i] + draft_num, page_size), width,
    cdiv(req_to_token.shape[1], page_size))`` block ids ``req_to_token[r, j *
    page_size] // page_size`` (``r`` the request's row, floor division), then
    zeros to the end of the row; rows ``>= bs`` are not touched. Returns
    ``(out[:bs], swa_out[:bs] or None)``. ValueError on malformed shapes
    (:func:`check_verify_table_args`).

    On a GPU (CUDA or ROCm) one Triton launch (``kernels.verify_table``) for
    the tensors it takes (``verify_table_refusal``: integer dtypes, outs that
    do not overlap themselves); else, and once the kernel has failed to
    compile or launch for a configuration (recorded and logged once through
    ``sglang_kv5d.kernel_check``), the torch builder
    (:func:`build_verify_page_tables_torch`), with the same result.
    """
    bs, width = check_verify_table_args(req_to_token, req_pool_indices, seq_lens, draft_num, page_size, out,
                                        swa_mapping, swa_out)
    # a view only where the buffer has more rows (CUDA graphs): this runs every verify step
    table = out if out.shape[0] == bs else out[:bs]
    swa_table = None if swa_out is None else swa_out if swa_out.shape[0] == bs else swa_out[:bs]
    if bs == 0 or width == 0:
        return table, swa_table
    if _on_gpu(out) and _kernel_built(
            req_to_token, req_pool_indices, seq_lens, draft_num, page_size, table, swa_mapping, swa_table):
        return table, swa_table
    return _fill_torch(req_to_token, req_pool_indices, seq_lens, int(draft_num), int(page_size), table, swa_table,
                       swa_mapping)


def _on_gpu(out) -> bool:
    """Does ``out``'s device take the Triton kernel? CUDA and ROCm (torch calls both "cuda")."""
    return out.is_cuda


KERNEL_NAME = "verify_page_tables"  # kernel_check's name of the Triton builder
#: What record_failure says serves the tables after a failure of the kernel.
KERNEL_FALLBACK = "The torch verify-table builder (the same tables, about 16 device ops) serves them"
_IMPORT_KEY = ("import",)
_kernel_module = None  # kernels.verify_table once imported; False where it does not import
_kernel_check = None  # sglang_kv5d.kernel_check, imported at first use


def _kernel():
    """``sglang_kv5d.kernels.verify_table``, or None (recorded once) where it does not import."""
    global _kernel_module, _kernel_check
    if _kernel_module is None:
        from .. import kernel_check

        _kernel_check = kernel_check
        try:
            from ..kernels import verify_table as module
        except Exception as exc:  # noqa: BLE001 - no Triton, or a broken one: the torch path serves
            kernel_check.record_failure(KERNEL_NAME, _IMPORT_KEY, exc, shapes="verify page tables",
                                        device="cuda", fallback=KERNEL_FALLBACK, when="at import")
            module = False
        _kernel_module = module
    return _kernel_module or None


def _kernel_built(req_to_token, req_pool_indices, seq_lens, draft_num, page_size, table, swa_mapping, swa_table):
    """Did the Triton kernel build ``table`` (and ``swa_table``)? False, for the
    torch path to build them, where the kernel does not take these tensors,
    does not import, or is known to fail for their configuration; a first
    failure to compile or launch is recorded and logged once
    (``sglang_kv5d.kernel_check``). Host validation errors propagate."""
    vt = _kernel_module or _kernel()
    if vt is None or vt.verify_table_refusal(req_to_token, req_pool_indices, seq_lens, table, swa_mapping,
                                             swa_table) is not None:
        return False
    kernel_check = _kernel_check
    if kernel_check is None:  # the module was put in place without _kernel() (tests)
        from .. import kernel_check
    failed = kernel_check.FAILED
    if failed:  # empty in a healthy process: no key is built
        key = vt.failure_key(req_to_token, req_pool_indices, seq_lens, page_size, table, swa_mapping, swa_table)
        if (KERNEL_NAME, key) in failed:
            return False
    try:
        vt.launch_checked(req_to_token, req_pool_indices, seq_lens, int(draft_num), int(page_size), table,
                          swa_mapping, swa_table)
        return True
    except Exception as exc:  # noqa: BLE001 - a compile or launch fails with any error: the torch path serves
        if kernel_check.is_host_validation(exc):
            raise
        key = vt.failure_key(req_to_token, req_pool_indices, seq_lens, page_size, table, swa_mapping, swa_table)
        kernel_check.record_failure(KERNEL_NAME, key, exc, shapes=vt.key_text(key), device=table.device,
                                    fallback=KERNEL_FALLBACK)
        return False


def graph_table_shape(max_bs: int, max_context_len: int, num_draft_tokens: Optional[int], page_size: int):
    """(rows, width) of the persistent verify table a backend allocates for CUDA-graph capture."""
    return int(max_bs), verify_table_width(max_context_len, int(num_draft_tokens or 0), page_size)
