"""The platform this process runs on: the one place that reads the GPU and names the fp8 formats.

Every other module asks here; none reads ``gcnArchName`` or spells a torch fp8
dtype name itself (``tests/test_platform.py`` scans for that).

Where this process runs (the launch rules, ``doctor``, the selftest):

    PLATFORMS                ("rocm", "cuda", "cpu"): what the launch rules judge
    detect_platform(choice)  (platform, how it was decided)
    describe_platform()      the platform plus the first GPU's name, arch and fp8 KV dtype
    device_arch(index)       a GPU's arch as the driver reports it ("gfx942:sramecc+:xnack-", "sm_90")
    interpreting()           is Triton's CPU interpreter on (TRITON_INTERPRET read as Triton reads it)

What a kernel's host code needs to know about the GPU it launches on:

    KernelTarget             backend ("cuda", "hip" or "interpreter"), arch, threads per
                             warp / wavefront, shared memory (LDS) per workgroup and per
                             CU / SM, compute units, the FP8 formats the hardware converts
    target_of(device)        the target of a torch device (read once per device)
    known_target(name)       the target of an arch by name, without a GPU (the AMD
                             compile gate and ``doctor --kernels-for`` use these)
    KNOWN_ARCHS, INTERPRETER

The fp8 formats:

    FP8_E4M3FN, FP8_E4M3FNUZ   the torch dtype names of the two e4m3 formats
    FP8_KV_DTYPE_NAMES       the fp8 dtypes the overlay's kernels read and write
    FP8_ANY_DTYPE_NAMES      every torch fp8 dtype (is this an fp8 cache at all?)
    Fp8Format, fp8_format(d) largest finite value and exponent bias of an e4m3 format
    fp8_kv_dtypes(), fp8_any_dtypes(), fp8_torch_dtype(name)   the same as torch dtypes
    fp8_flavour(arch)        the fp8 KV dtype name of an arch: float8_e4m3fnuz on gfx942
                             (gfx94x), float8_e4m3fn on gfx950, NVIDIA and the CPU
    fp8_dtype(arch)          the same as a torch dtype

Facts per arch (CDNA3/CDNA4 ISA guides, NVIDIA's Hopper tuning guide):

    arch     warp  LDS/workgroup  LDS/CU    CUs   FP8 converted in hardware
    gfx942    64      64 KiB      64 KiB    304   e4m3fnuz (MI300X / MI325X)
    gfx950    64     160 KiB     160 KiB    256   e4m3fn   (MI355X)
    sm_90     32     227 KiB     228 KiB    132   e4m3fn   (H100 / H200)

On AMD a SIMD holds 512 VGPRs per lane (architectural and accumulation
registers together) and at most 8 waves; a CU has 4 SIMDs. The kernels'
configuration functions take a :class:`KernelTarget`, so the same code picks
the tiles that run on a device and the tiles a CPU machine compiles for that
device's arch.

Importing this module imports neither torch nor SGLang nor anything else of
the package (``sglang-kv5d check`` and the ``.pth`` bootstrap must stay cheap):
a function imports torch when it needs it.
"""

from __future__ import annotations

import functools
import os
from dataclasses import asdict, dataclass
from typing import Any, Dict, Mapping, NamedTuple, Optional, Tuple

__all__ = [
    "PLATFORMS", "PlatformInfo", "detect_platform", "describe_platform", "device_arch", "interpreting",
    "KernelTarget", "KNOWN_ARCHS", "INTERPRETER", "known_target", "target_of",
    "FP8_E4M3FN", "FP8_E4M3FNUZ", "FP8_KV_DTYPE_NAMES", "FP8_ANY_DTYPE_NAMES", "Fp8Format", "fp8_format",
    "fp8_kv_dtypes", "fp8_any_dtypes", "fp8_torch_dtype", "fp8_flavour", "fp8_dtype",
]

PLATFORMS = ("rocm", "cuda", "cpu")
ROCM, CUDA, CPU = PLATFORMS
CHOSEN = "--kv5d-platform"  # how an explicit choice was decided

# --------------------------------------------------------------------------- fp8 formats

FP8_E4M3FN = "float8_e4m3fn"  # OCP e4m3: NVIDIA sm_89+, MI355X (gfx950)
FP8_E4M3FNUZ = "float8_e4m3fnuz"  # no negative zero, bias 8: MI300X / MI325X (gfx942)
FP8_KV_DTYPE_NAMES = (FP8_E4M3FN, FP8_E4M3FNUZ)
FP8_ANY_DTYPE_NAMES = FP8_KV_DTYPE_NAMES + ("float8_e5m2", "float8_e5m2fnuz")


class Fp8Format(NamedTuple):
    """An e4m3 format: 4 exponent bits, 3 mantissa bits."""

    name: str  # torch dtype name
    max: float  # largest finite value
    bias: int  # exponent bias
    fnuz: bool  # finite only, no negative zero (0x80 is NaN)


_FP8_FORMATS = {
    FP8_E4M3FN: Fp8Format(FP8_E4M3FN, 448.0, 7, False),
    FP8_E4M3FNUZ: Fp8Format(FP8_E4M3FNUZ, 240.0, 8, True),
}


def _dtype_name(dtype: Any) -> str:
    return dtype if isinstance(dtype, str) else str(dtype).replace("torch.", "")


@functools.lru_cache(maxsize=16)
def fp8_format(dtype: Any) -> Fp8Format:
    """The :class:`Fp8Format` of an e4m3 dtype (a torch dtype or its name);
    ValueError naming the two formats otherwise. Cached: the write and attention
    host code ask it on every call."""
    name = _dtype_name(dtype)
    if name not in _FP8_FORMATS:
        raise ValueError(f"not an e4m3 fp8 dtype: {dtype!r} (expected {FP8_E4M3FN} or {FP8_E4M3FNUZ})")
    return _FP8_FORMATS[name]


def fp8_torch_dtype(name: str):
    """The torch dtype called ``name`` (imports torch; AttributeError when this torch lacks it)."""
    import torch

    return getattr(torch, name)


@functools.lru_cache(maxsize=1)
def fp8_kv_dtypes() -> tuple:
    """The torch fp8 dtypes the overlay's kernels read and write (those this torch has; imports torch)."""
    import torch

    return tuple(getattr(torch, n) for n in FP8_KV_DTYPE_NAMES if hasattr(torch, n))


@functools.lru_cache(maxsize=1)
def fp8_any_dtypes() -> tuple:
    """Every torch fp8 dtype this torch has, e5m2 included (imports torch)."""
    import torch

    return tuple(getattr(torch, n) for n in FP8_ANY_DTYPE_NAMES if hasattr(torch, n))


# --------------------------------------------------------------------------- kernel targets


class KernelTarget(NamedTuple):
    backend: str  # "cuda" (NVIDIA), "hip" (AMD) or "interpreter" (Triton's CPU interpreter)
    arch: str  # "sm_90", "gfx942", "gfx950", ... ("" for the interpreter)
    warp_size: int
    lds_per_workgroup: int  # bytes of shared memory one program may use
    lds_per_cu: int  # bytes of shared memory per CU / SM
    compute_units: int
    native_fp8: Tuple[str, ...]  # torch dtype names the hardware converts fp32 to and from

    @property
    def is_amd(self) -> bool:
        return self.backend == "hip"

    @property
    def is_nvidia(self) -> bool:
        return self.backend == "cuda"

    def converts(self, fp8_dtype) -> bool:
        """Does the hardware convert to and from ``fp8_dtype`` (a torch dtype or its name)?"""
        return _dtype_name(fp8_dtype) in self.native_fp8


_KIB = 1024
_KNOWN = {
    "gfx942": KernelTarget("hip", "gfx942", 64, 64 * _KIB, 64 * _KIB, 304, (FP8_E4M3FNUZ,)),
    "gfx950": KernelTarget("hip", "gfx950", 64, 160 * _KIB, 160 * _KIB, 256, (FP8_E4M3FN,)),
    "sm_90": KernelTarget("cuda", "sm_90", 32, 227 * _KIB, 228 * _KIB, 132, (FP8_E4M3FN,)),
}
KNOWN_ARCHS = tuple(_KNOWN)

# The Triton CPU interpreter: no hardware conversion, NVIDIA-sized warps, the
# host code's integer paths (8 "SMs" keep split counts small and fast).
INTERPRETER = KernelTarget("interpreter", "", 32, 227 * _KIB, 228 * _KIB, 8, ())


def known_target(name: str) -> KernelTarget:
    """The target of ``name`` ("gfx942", "gfx950", "sm_90"; "gfx942:sramecc+:xnack-"
    and "sm90" are accepted). ValueError naming the known archs otherwise."""
    key = str(name).split(":", 1)[0].strip().lower()
    if key.startswith("sm") and not key.startswith("sm_"):
        key = "sm_" + key[2:]
    if key not in _KNOWN:
        raise ValueError(f"unknown GPU arch {name!r}: expected one of {', '.join(KNOWN_ARCHS)}")
    return _KNOWN[key]


# Triton reads TRITON_INTERPRET as a boolean (knobs.env_bool): these words, any case.
_TRUE_WORDS = ("1", "true", "on", "yes", "y")


def interpreting() -> bool:
    """Is Triton's CPU interpreter on? ``TRITON_INTERPRET`` read the way Triton
    reads it (1, true, on, yes or y, in any case), so the host code and Triton agree."""
    return os.environ.get("TRITON_INTERPRET", "").lower() in _TRUE_WORDS


def target_of(device) -> KernelTarget:
    """The target kernels launched on ``device`` (a torch.device) compile for."""
    if interpreting() or getattr(device, "type", device) != "cuda":
        return INTERPRETER
    return _device_target(getattr(device, "index", None))


def _hip_arch(torch: Any, props: Any) -> Optional[str]:
    """The driver's AMD arch string, only on a ROCm build (CUDA builds fill
    ``gcnArchName`` with the GPU's name)."""
    if not getattr(getattr(torch, "version", None), "hip", None):
        return None
    arch = getattr(props, "gcnArchName", None)
    return str(arch) if arch else None


@functools.lru_cache(maxsize=16)
def _device_target(index: Optional[int]) -> KernelTarget:
    import torch

    idx = torch.cuda.current_device() if index is None else index
    props = torch.cuda.get_device_properties(idx)
    cus = int(props.multi_processor_count)
    smem_cu = int(getattr(props, "shared_memory_per_multiprocessor", 0) or 0)
    smem_block = int(getattr(props, "shared_memory_per_block_optin", 0) or 0)
    if getattr(torch.version, "hip", None):
        arch = (_hip_arch(torch, props) or "").split(":", 1)[0]
        base = _KNOWN.get(arch)
        warp = int(getattr(props, "warp_size", 0) or 64)
        if base is not None:
            return base._replace(compute_units=cus, warp_size=warp)
        # an AMD GPU we have no table for: no hardware FP8 claimed, 64 KiB LDS
        return KernelTarget("hip", arch, warp, smem_block or 64 * _KIB, smem_cu or 64 * _KIB, cus, ())
    major, minor = torch.cuda.get_device_capability(idx)
    arch = f"sm_{major}{minor}"
    fp8 = (FP8_E4M3FN,) if (major, minor) >= (8, 9) else ()
    base = _KNOWN.get(arch, KernelTarget("cuda", arch, 32, 0, 0, cus, fp8))
    return base._replace(
        arch=arch, compute_units=cus, native_fp8=fp8, warp_size=int(getattr(props, "warp_size", 0) or 32),
        lds_per_workgroup=smem_block or base.lds_per_workgroup or 48 * _KIB,
        lds_per_cu=smem_cu or base.lds_per_cu or 48 * _KIB,
    )


# --------------------------------------------------------------------------- the process's platform


def _torch() -> Any:
    try:
        import torch  # type: ignore
    except (ImportError, OSError):  # not installed, or its shared libraries do not load
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
        except RuntimeError:  # a broken driver install answers with RuntimeError: no CUDA then
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
    "sm_90", None for no GPU): the format the hardware converts, e4m3fnuz for
    every gfx94x (MI300 family), e4m3fn otherwise."""
    if not arch:
        return FP8_E4M3FN
    try:
        native = known_target(arch).native_fp8
    except ValueError:
        return FP8_E4M3FNUZ if str(arch).lower().startswith("gfx94") else FP8_E4M3FN
    return native[0] if native else FP8_E4M3FN


def fp8_dtype(arch: Optional[str]):
    """:func:`fp8_flavour` as a torch dtype (imports torch)."""
    return fp8_torch_dtype(fp8_flavour(arch))


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


def device_arch(index: Any = 0) -> Optional[str]:
    """The arch of GPU ``index`` (an index or a torch device) as the driver reports it
    ("gfx942:sramecc+:xnack-", "sm_90"), or None without a GPU (imports torch)."""
    torch = _torch()
    if torch is None or not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(index)
    return _hip_arch(torch, props) or f"sm_{props.major}{props.minor}"


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
    except (RuntimeError, AssertionError) as exc:  # driver errors; torch asserts on a bad device index
        return PlatformInfo(name, how, error=f"cannot read the GPU: {type(exc).__name__}: {exc}")
    return PlatformInfo(name, how, device=device, arch=arch, fp8=fp8_flavour(arch))
