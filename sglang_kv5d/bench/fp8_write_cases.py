"""The FP8 write benchmark's cases: geometries, token counts, slot ids and cache sizes.

Slot ids: decode sizes (T <= DECODE_MAX_T) get distinct random slots; larger T
get prefill-like runs of consecutive slots (1024..4096 tokens each, each run
starting at a random offset inside a random page), so V groups are not aligned
with the token index. Large decode batches (``DEFAULT_DECODE_BATCHES``) get
distinct random slots too: there the 5D V layout scatters one byte per 16-byte
vector, the costliest case for that layout.
"""

from __future__ import annotations

import math
from typing import Iterable

from ..platform import FP8_KV_DTYPE_NAMES

DEFAULT_GEOMETRIES = (
    {"name": "qwen3.5-tp8", "H": 1, "D": 256},
    {"name": "qwen3.5-tp1", "H": 2, "D": 256},
    {"name": "llama-like", "H": 8, "D": 128},
)
DEFAULT_TOKEN_COUNTS = (1, 16, 128, 1024, 4096, 32768, 262144)
DEFAULT_DECODE_BATCHES = (512, 2048)  # decode slots past DECODE_MAX_T
DEFAULT_CACHE_DTYPES = FP8_KV_DTYPE_NAMES  # ("float8_e4m3fn", "float8_e4m3fnuz")
DEFAULT_LAYOUTS = ("5d", "nhd")
PAGE = 64
DECODE_MAX_T = 128


def norm_geometries(geometries) -> list:
    """Geometries as dicts {name, H, D, DV}, from dicts, (name, H, D) or (H, D)."""
    out = []
    for g in geometries:
        if isinstance(g, dict):
            H, D = int(g["H"]), int(g["D"])
            name = g.get("name") or f"H{H}-D{D}"
            DV = int(g.get("DV", D))
        else:
            g = tuple(g)
            if len(g) == 3 and isinstance(g[0], str):
                name, H, D = g[0], int(g[1]), int(g[2])
            else:
                H, D = int(g[0]), int(g[1])
                name = f"H{H}-D{D}"
            DV = D
        out.append({"name": name, "H": H, "D": D, "DV": DV})
    return out


def prefill_loc(T: int, n_slots: int, page: int, *, gen, device):
    """Runs of 1024..4096 consecutive slots, each starting at a random in-page offset."""
    import torch

    n_pages = n_slots // page
    order = torch.randperm(n_pages, generator=gen)
    pieces, used_pages, total = [], 0, 0
    while total < T:
        length = min(int(torch.randint(1024, 4097, (1,), generator=gen)), T - total)
        off = int(torch.randint(0, page, (1,), generator=gen))
        need = (off + length + page - 1) // page
        pages = order[used_pages : used_pages + need]
        used_pages += need
        slots = (pages[:, None] * page + torch.arange(page)[None, :]).flatten()[off : off + length]
        pieces.append(slots)
        total += length
    return torch.cat(pieces).to(device)


def decode_loc(T: int, n_slots: int, *, gen, device):
    """T distinct random slots out of ``n_slots``."""
    import torch

    return torch.randperm(n_slots, generator=gen)[:T].to(device)


def cache_pages(T: int, H: int, D: int, page: int, cache_gib: float = 0.0) -> int:
    """Pages per cache buffer: about 1.25 T slots, or enough pages for
    ``cache_gib`` GiB of one buffer of H heads x D bytes per slot (fp8)."""
    return max(math.ceil(T * 1.25 / page) + 4, int(cache_gib * (1 << 30)) // (page * H * D))


def row_cases(token_counts: Iterable[int], decode_batches: Iterable[int]) -> list:
    """(T, "decode" | "prefill") per benchmark row, by T: decode slots up to
    DECODE_MAX_T tokens and for every decode batch, prefill runs otherwise."""
    return sorted({(int(T), "decode" if int(T) <= DECODE_MAX_T else "prefill") for T in token_counts}
                  | {(int(T), "decode") for T in decode_batches})
