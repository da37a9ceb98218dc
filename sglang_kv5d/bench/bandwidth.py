"""Memory rates of this GPU, measured with kernels that run on its compute units.

Three Triton kernels over one int32 buffer (16-byte vector loads and stores):

    read    every byte loaded and summed (one int32 per program is stored)
    write   every byte stored with a constant, nothing loaded
    copy    every byte loaded from one buffer and stored to another

Each is timed as a CUDA-graph replay median (``timing.graph_replay_median_us``).
A ``Tensor.copy_`` captured in a graph becomes a memcpy node that the copy
engine runs, at a fraction of what the compute units move (2.71 TB/s against
4.2-4.3 TB/s on an H200), so it is not used as the floor of a kernel.

The floor of a kernel is its bytes over the rate of its kind of traffic:
a decode (it reads the cache, writes little) against the read rate, a KV
write (it reads its inputs and writes the cache) against the copy rate,
counting bytes read plus bytes written (:func:`floor_us`).

Needs torch and Triton; the kernels run in the Triton interpreter for CPU tests.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional

import triton
import triton.language as tl

#: int32 elements per program and loop step (16-byte vectors per lane).
BLOCK = 4096
#: Loop steps per program (programs stay few and long, like a streaming kernel).
STEPS = 8


@triton.jit
def _read_kernel(src, partial, n, BLOCK: tl.constexpr, STEPS: tl.constexpr):
    pid = tl.program_id(0)
    base = pid.to(tl.int64) * BLOCK * STEPS
    acc = tl.zeros([BLOCK], dtype=tl.int32)
    for i in range(STEPS):
        offs = base + i * BLOCK + tl.arange(0, BLOCK)
        acc += tl.load(src + offs, mask=offs < n, other=0)
    tl.store(partial + pid, tl.sum(acc, axis=0))


@triton.jit
def _write_kernel(dst, n, value, BLOCK: tl.constexpr, STEPS: tl.constexpr):
    pid = tl.program_id(0)
    base = pid.to(tl.int64) * BLOCK * STEPS
    fill = tl.full([BLOCK], value, dtype=tl.int32)
    for i in range(STEPS):
        offs = base + i * BLOCK + tl.arange(0, BLOCK)
        tl.store(dst + offs, fill, mask=offs < n)


@triton.jit
def _copy_kernel(src, dst, n, BLOCK: tl.constexpr, STEPS: tl.constexpr):
    pid = tl.program_id(0)
    base = pid.to(tl.int64) * BLOCK * STEPS
    for i in range(STEPS):
        offs = base + i * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(dst + offs, tl.load(src + offs, mask=m), mask=m)


def _grid(n: int, block: int, steps: int):
    return (triton.cdiv(n, block * steps),)


def read(src, partial, *, block: int = BLOCK, steps: int = STEPS):
    """Sum of ``src`` (int32) per program into ``partial`` (int32, one per program)."""
    n = src.numel()
    _read_kernel[_grid(n, block, steps)](src, partial, n, BLOCK=block, STEPS=steps, num_warps=8)


def write(dst, value: int = 0x3C3C3C3C, *, block: int = BLOCK, steps: int = STEPS):
    n = dst.numel()
    _write_kernel[_grid(n, block, steps)](dst, n, value, BLOCK=block, STEPS=steps, num_warps=8)


def copy(src, dst, *, block: int = BLOCK, steps: int = STEPS):
    n = src.numel()
    _copy_kernel[_grid(n, block, steps)](src, dst, n, BLOCK=block, STEPS=steps, num_warps=8)


def programs(n: int, block: int = BLOCK, steps: int = STEPS) -> int:
    return _grid(n, block, steps)[0]


class Rates(NamedTuple):
    """Bytes per second moved by kernels on the compute units: ``read`` (bytes
    loaded), ``write`` (bytes stored), ``copy`` (bytes loaded + bytes stored)."""

    read: float
    write: float
    copy: float
    nbytes: int  # size of the buffer each was measured on

    def to_dict(self) -> dict:
        return {"read_bytes_per_s": self.read, "write_bytes_per_s": self.write,
                "read_write_bytes_per_s": self.copy, "buffer_bytes": self.nbytes,
                "how": "Triton kernels on the compute units (sum, fill, copy), CUDA-graph replay medians"}


#: Which rate is the floor of which kind of kernel.
FLOOR_RATE = {"decode": "read", "extend": "read", "write": "copy"}


def floor_us(kind: str, bytes_read: int, bytes_written: int, rates: Rates) -> float:
    """The byte floor in microseconds of a kernel of ``kind`` (see FLOOR_RATE).

    ``read`` floors count the bytes read only (a decode's writes are a few
    output rows); ``copy`` floors count bytes read + bytes written.
    """
    rate_name = FLOOR_RATE[kind]
    rate = getattr(rates, rate_name)
    if not rate > 0:
        raise ValueError(f"{rate_name} rate must be > 0, got {rate!r}")
    nbytes = bytes_read if rate_name == "read" else bytes_read + bytes_written
    return nbytes / rate * 1e6


def rates_from_times(nbytes: int, read_us: float, write_us: float, copy_us: float) -> Rates:
    """Rates from the three timings on an ``nbytes`` buffer (the copy moves 2 x nbytes)."""
    for name, us in (("read", read_us), ("write", write_us), ("copy", copy_us)):
        if not us > 0:
            raise ValueError(f"{name} time must be > 0 us, got {us!r}")
    return Rates(read=nbytes / (read_us * 1e-6), write=nbytes / (write_us * 1e-6),
                 copy=2 * nbytes / (copy_us * 1e-6), nbytes=int(nbytes))


def measure(device=None, nbytes: int = 1 << 30, *, time_fn: Optional[Callable] = None) -> Rates:
    """Read, write and copy rates on ``device`` with buffers of ``nbytes`` each."""
    import torch

    from .timing import graph_replay_median_us

    time_fn = time_fn or (lambda fn: graph_replay_median_us(fn, inner=5, reps=15))
    n = nbytes // 4
    src = torch.ones(n, dtype=torch.int32, device=device or "cuda")
    dst = torch.empty_like(src)
    partial = torch.empty(programs(n), dtype=torch.int32, device=src.device)
    read_us = time_fn(lambda: read(src, partial))
    write_us = time_fn(lambda: write(dst))
    copy_us = time_fn(lambda: copy(src, dst))
    return rates_from_times(4 * n, read_us, write_us, copy_us)
