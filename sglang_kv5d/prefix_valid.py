"""Which rows of a prefix-valid KV commit are written, and where (pure, no SGLang import).

SGLang's DFLASH / DSPARK workers commit the accepted draft tokens with
``set_kv_buffer_prefix_valid(layer, loc_2d, commit_lens, cache_k, cache_v, ...)``:

    loc_2d       (B, W) integer slot ids: row b holds W candidate slots
    commit_lens  (B,)   integer: row b commits its first commit_lens[b] slots
    cache_k/v    (B * W, H, D) (or (B * W, H * D)): the rows in loc_2d's
                 row-major order, row b * W + j belongs to loc_2d[b, j]

Row (b, j) is written exactly when ``j < commit_lens[b]`` (a length <= 0
commits nothing, a length >= W commits all W slots); the other entries of
``loc_2d`` are never read as slots. These helpers turn that into inputs a
per-token writer takes, for any cache layout (NHD or SHUFFLE 5D): the slot
ids say where, the writer knows the layout.

    check_prefix_args(loc_2d, commit_lens, n_k, n_v)   the shape checks SGLang makes
    masked_slots(loc_2d, commit_lens)    (B * W,) int64: the slot of a committed row,
                                         -1 for the others (device ops only, no host
                                         sync: for writers that skip negative slots)
    committed_rows(loc_2d, commit_lens)  (N,) int64 row indices of the committed rows,
                                         ascending (one host sync: its length is data)
"""

from __future__ import annotations

__all__ = ["check_prefix_args", "masked_slots", "committed_rows"]


def check_prefix_args(loc_2d, commit_lens, n_k: int, n_v: int) -> None:
    """Raise ValueError unless ``loc_2d`` is rank 2, ``commit_lens`` is (B,) for
    its B rows, and the K / V inputs have ``n_k`` / ``n_v`` rows == loc_2d.numel()
    (the conditions and the order in which every tested SGLang from 0.5.16 on checks them)."""
    if loc_2d.dim() != 2:
        raise ValueError(f"loc_2d must be rank-2, got shape={tuple(loc_2d.shape)}.")
    if commit_lens.dim() != 1 or commit_lens.shape[0] != loc_2d.shape[0]:
        raise ValueError(
            f"commit_lens must be (B,) for loc_2d's B={loc_2d.shape[0]} rows: "
            f"commit_lens shape={tuple(commit_lens.shape)}, loc_2d shape={tuple(loc_2d.shape)}."
        )
    rows = loc_2d.numel()
    if n_k != rows or n_v != rows:
        raise ValueError(
            f"KV rows must match loc_2d size: cache_k has {n_k} rows, cache_v {n_v}, "
            f"loc_2d {tuple(loc_2d.shape)} = {rows} slots."
        )


def _valid(loc_2d, commit_lens):
    import torch

    width = loc_2d.shape[1]
    offsets = torch.arange(width, device=loc_2d.device, dtype=torch.int64)
    return offsets[None, :] < commit_lens.to(device=loc_2d.device, dtype=torch.int64)[:, None]


def masked_slots(loc_2d, commit_lens):
    """(B * W,) int64 on loc_2d's device: ``loc_2d[b, j]`` where ``j <
    commit_lens[b]``, else -1. Elementwise device ops only (CUDA-graph safe)."""
    import torch

    return torch.where(_valid(loc_2d, commit_lens), loc_2d.to(torch.int64), -1).reshape(-1)


def committed_rows(loc_2d, commit_lens):
    """(N,) int64 indices, ascending, of the committed rows of the flattened
    (B * W) inputs. ``torch.nonzero``: one host sync (N is data)."""
    import torch

    return torch.nonzero(_valid(loc_2d, commit_lens).reshape(-1), as_tuple=False).flatten()
