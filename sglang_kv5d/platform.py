"""The platform this process runs on, and what follows from it.

    PLATFORMS                ("rocm", "cuda", "cpu"): what the launch rules judge
    detect_platform(choice)  (platform, how it was decided)
    describe_platform()      the platform plus the first GPU's name, arch and fp8 KV dtype
    device_arch(index)       a GPU's arch as the driver reports it ("gfx942:sramecc+:xnack-", "sm_90")
    fp8_flavour(arch)        the fp8 KV dtype name of an arch: float8_e4m3fnuz on gfx942
                             (gfx94x), float8_e4m3fn on gfx950, NVIDIA and the CPU
    fp8_dtype(arch)          the same as a torch dtype
    FP8_KV_DTYPE_NAMES       the fp8 dtypes a KV cache may hold; fp8_kv_dtypes() as torch dtypes
    interpreting()           is Triton's CPU interpreter on (TRITON_INTERPRET read as Triton reads it)

Importing this module imports neither torch nor SGLang (``sglang-kv5d check``
and the ``.pth`` bootstrap must stay cheap); a function imports torch when it
needs it. The FP8 formats per arch are :mod:`sglang_kv5d.kernels.target`'s.
"""

from __future__ import annotations

import functools
import os
from dataclasses import asdict, dataclass
from typing import Any, Dict, Mapping, Optional, Tuple

from .kernels.target import interpreting, known_target

__all__ = [
    "PLATFORMS", "FP8_E4M3FN", "FP8_E4M3FNUZ", "FP8_KV_DTYPE_NAMES", "PlatformInfo",
    "detect_platform", "describe_platform", "device_arch", "fp8_flavour", "fp8_dtype", "fp8_kv_dtypes", "interpreting",
]

PLATFORMS = ("rocm", "cuda", "cpu")
ROCM, CUDA, CPU = PLATFORMS
CHOSEN = "--kv5d-platform"  # how an explicit choice was decided

FP8_E4M3FN = "float8_e4m3fn"
FP8_E4M3FNUZ = "float8_e4m3fnuz"
FP8_KV_DTYPE_NAMES = (FP8_E4M3FN, FP8_E4M3FNUZ)


def _torch() -> Any:
    try:
        import torch  # type: ignore
    except Exception:
        return None
    return torch


def _torch_platform(torch: Any) -> Optional[Tuple[str, str]]:
    """What this torch build drives: ROCm when it is a HIP build, CUDA when a
    CUDA device answers; None otherwise."""
    if torch is None:
        return None
    if getattr(getattr(torch, "version", None), "hip", None):
        return ROCM, "torch.version.hip"
    if getattr(getattr(torch, "version", None), "cuda", None):
        try:
            if torch.cuda.is_available():
                return CUDA, "torch.cuda.is_available()"
        except Exception:
            pass
    return None


def detect_platform(choice: str = "auto", *, in_process: bool = False,
                    environ: Optional[Mapping[str, str]] = None) -> Tuple[str, str]:
    """``(platform, how it was decided)``; ``platform`` is one of :data:`PLATFORMS`.

    ``choice`` other than ``auto`` is taken as given (``--kv5d-platform``
    lints a ROCm launch from another machine). In auto mode torch is imported:
    a HIP build is ROCm, a CUDA build with a device is CUDA. For a launch that
    is still to happen (``in_process=False``) a ROCm install (``$ROCM_PATH``
    or ``/opt/rocm``) also counts as ROCm unless torch is a CUDA build, so a
    machine whose torch is missing or CPU-only is judged by its ROCm stack.
    Inside an SGLang process (``in_process=True``) only this process's torch
    decides, the way SGLang's ``is_hip()`` does: it is what runs the kernels.
    """
    if choice != "auto":
        if choice not in PLATFORMS:
            raise ValueError(f"platform must be auto or one of {', '.join(PLATFORMS)}, not {choice!r}")
        return choice, CHOSEN
    torch = _torch()
    found = _torch_platform(torch)
    if found is not None:
        return found
    if not in_process:
        env = os.environ if environ is None else environ
        cuda_build = torch is not None and getattr(getattr(torch, "version", None), "cuda", None)
        for path in (env.get("ROCM_PATH"), "/opt/rocm"):
            if path and os.path.isdir(path) and not cuda_build:
                return ROCM, f"{path} exists"
    return CPU, "no ROCm or CUDA device found"


def fp8_flavour(arch: Optional[str]) -> str:
    """The fp8 dtype name a KV cache uses on ``arch`` ("gfx942", "gfx942:sramecc+:xnack-",
    "sm_90", None for no GPU): the format the hardware converts (kernels.target),
    e4m3fnuz for every gfx94x (MI300 family), e4m3fn otherwise."""
    if not arch:
        return FP8_E4M3FN
    try:
        native = known_target(arch).native_fp8
    except ValueError:
        return FP8_E4M3FNUZ if str(arch).lower().startswith("gfx94") else FP8_E4M3FN
    return native[0] if native else FP8_E4M3FN


def fp8_dtype(arch: Optional[str]):
    """:func:`fp8_flavour` as a torch dtype (imports torch)."""
    import torch

    return getattr(torch, fp8_flavour(arch))


@functools.lru_cache(maxsize=1)
def fp8_kv_dtypes() -> tuple:
    """The torch fp8 dtypes a KV cache may hold (those this torch has; imports torch)."""
    import torch

    return tuple(getattr(torch, n) for n in FP8_KV_DTYPE_NAMES if hasattr(torch, n))


@dataclass(frozen=True)
class PlatformInfo:
    platform: str
    how: str
    device: Optional[str] = None  # the first GPU's name
    arch: Optional[str] = None  # as the driver reports it: "gfx942:sramecc+:xnack-", "sm_90"
    fp8: str = FP8_E4M3FN
    error: Optional[str] = None  # why the device could not be read (torch missing)

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def device_arch(index: int = 0) -> Optional[str]:
    """The arch of GPU ``index`` as the driver reports it ("gfx942:sramecc+:xnack-",
    "sm_90"), or None without a GPU (imports torch)."""
    torch = _torch()
    if torch is None or not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(index)
    # gcnArchName is meaningful only on ROCm (CUDA builds fill it with the GPU's name)
    hip_arch = getattr(props, "gcnArchName", None) if getattr(torch.version, "hip", None) else None
    return str(hip_arch) if hip_arch else f"sm_{props.major}{props.minor}"


def describe_platform(choice: str = "auto") -> PlatformInfo:
    """:func:`detect_platform` plus the first GPU's name, arch and fp8 KV dtype
    (imports torch; the device is read only when the platform is not the CPU)."""
    name, how = detect_platform(choice)
    torch = _torch()
    if torch is None:
        return PlatformInfo(name, how, error="torch is not importable")
    device = arch = None
    try:
        if name != CPU and torch.cuda.is_available():
            device = str(torch.cuda.get_device_properties(0).name)
            arch = device_arch(0)
    except Exception as exc:
        return PlatformInfo(name, how, error=f"cannot read the GPU: {type(exc).__name__}: {exc}")
    return PlatformInfo(name, how, device=device, arch=arch, fp8=fp8_flavour(arch))
