"""Helpers shared by the benchmarks: the timings (from :mod:`sglang_kv5d.bench.timing`),
the byte floors, the device's description and ``--device`` parsing. Needs
torch and a GPU (CUDA or ROCm) to time.

Every timing is a median over CUDA-graph replays (:mod:`sglang_kv5d.bench.timing`).
Byte floors come from :func:`memory_rates` (kernels on the compute units:
read, write, copy; see :mod:`sglang_kv5d.bench.bandwidth`, which times with
:mod:`~sglang_kv5d.bench.timing`, not with this module: no import cycle).
"""

from __future__ import annotations

from typing import Optional

from ..platform import device_arch
from .timing import adaptive_median_us, eager_median_us, graph_replay_median_us

__all__ = ["graph_replay_median_us", "eager_median_us", "adaptive_median_us", "memory_rates", "device_description",
           "DeviceError", "parse_gpu_device", "check_gpu_index"]


def _torch():
    import torch

    return torch


def memory_rates(device=None, nbytes: int = 1 << 30):
    """Read, write and read+write (copy) rates of kernels on the compute units
    (:class:`sglang_kv5d.bench.bandwidth.Rates`). These are the byte floors:
    decode against the read rate, KV writes against the copy rate."""
    from sglang_kv5d.bench import bandwidth

    return bandwidth.measure(device, nbytes)


def device_description(device=None) -> dict:
    """GPU name, driver / runtime, torch and triton versions, for benchmark records."""
    import platform

    torch = _torch()
    info = {"python": platform.python_version(), "torch": torch.__version__}
    try:
        import triton

        info["triton"] = triton.__version__
    except Exception as exc:  # noqa: BLE001 - a broken install fails its import with any error: reported, not fatal
        info["triton"] = f"unavailable ({exc})"
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(device or 0)
        info["gpu"] = props.name
        info["sm_count"] = props.multi_processor_count
        info["cuda_runtime"] = getattr(torch.version, "cuda", None)
        info["hip_runtime"] = getattr(torch.version, "hip", None)
        info["arch"] = device_arch(device or 0)
        try:
            import subprocess

            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=10,
            )
            if out.returncode == 0:
                info["driver"] = out.stdout.strip().splitlines()[0]
        except (OSError, subprocess.SubprocessError, IndexError):  # no nvidia-smi, a timeout, no output
            pass
    return info


class DeviceError(ValueError):
    """``bench --device`` names no GPU torch can measure here (a usage error: exit 2)."""


_DEVICE_FORMS = "cuda or cuda:N (ROCm builds of torch call their GPUs cuda too)"


def parse_gpu_device(text: str) -> Optional[int]:
    """``--device`` text -> the GPU index (None for plain ``cuda``), before torch is imported.

    Accepted: ``cuda`` and ``cuda:N`` (N a decimal index, at most 4 digits),
    any case, surrounding spaces ignored. Anything else (``cpu``, empty,
    ``cuda;x``, ``cuda:-1``, ``hip:0``) raises :class:`DeviceError` naming the
    value (escaped, as ``repr``) and the accepted forms.
    """
    if not isinstance(text, str):
        raise DeviceError(f"--device must be text, not {type(text).__name__}")
    v = text.strip().lower()
    if v == "cpu":
        raise DeviceError("--device cpu: bench measures GPU kernels (CUDA-graph replays, memory rates); "
                          f"use {_DEVICE_FORMS}, or `sglang-kv5d selftest --device cpu` for a CPU check")
    kind, sep, index = v.partition(":")
    if kind != "cuda" or (sep and not (index.isascii() and index.isdigit() and len(index) <= 4)):
        raise DeviceError(f"--device {text!r} is not a GPU device torch accepts here; use {_DEVICE_FORMS}")
    return int(index) if sep else None


def check_gpu_index(index: Optional[int], count: int) -> None:
    """:class:`DeviceError` when GPU ``index`` is not below ``count`` (the GPUs torch sees)."""
    if index is not None and index >= count:
        raise DeviceError(f"--device cuda:{index}: torch sees {count} GPU(s) here (cuda:0 .. cuda:{count - 1}); "
                          "pick one of them (CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES renumber them)"
                          if count else f"--device cuda:{index}: torch sees no GPU here")
