"""The selftest's configurations (Qwen3.5-like full-attention layers)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple


@dataclass(frozen=True)
class Geometry:
    """One selftest configuration."""

    name: str
    num_layers: int = 4  # hybrid model: layers 3, 7, ... are full attention
    full_every: int = 4
    hq: int = 4
    hkv: int = 1
    head_dim: int = 256
    page: int = 64
    prefix: int = 64  # shared, page-aligned prefix
    own_lengths: Tuple[int, ...] = (40, 100, 30)  # per request, after the prefix (the last has no prefix)
    chunk: int = 64  # chunked-prefill budget per request per step
    decode_steps: int = 3
    verify_tokens: int = 16  # speculative drafts each request verifies at once (the verify phase)
    swa_window: int = 48  # sliding_window_size of the SWA pool's window layers
    k_scale: float = 0.5
    v_scale: float = 2.0


CPU_DEFAULT = Geometry(name="cpu-small")
GPU_DEFAULT = Geometry(
    name="gpu-large",
    num_layers=8,
    prefix=512,
    own_lengths=(1500, 3000, 700, 2100),
    chunk=1024,
    decode_steps=8,
    swa_window=256,
)
