"""What a kernel's host code needs to know about the GPU it launches on.

    KernelTarget       backend ("cuda", "hip" or "interpreter"), arch ("sm_90",
                       "gfx942", "gfx950", ...), threads per warp / wavefront,
                       shared memory (LDS) per workgroup and per CU / SM,
                       compute units, and the FP8 formats the hardware converts
    target_of(device)  the target of a torch device (read once per device)
    known_target(name) the target of an arch by name, without a GPU (the AMD
                       compile gate and ``doctor --kernels-for`` use these)

The configuration functions of the kernels (``fp8_write.launch_config``,
``attention_5d.decode_config`` / ``extend_config``) take a target, so the same
code picks the tiles that run on a device and the tiles a CPU machine compiles
for that device's arch.

Facts per arch (CDNA3/CDNA4 ISA guides, NVIDIA's Hopper tuning guide):

    arch     warp  LDS/workgroup  LDS/CU    CUs   FP8 converted in hardware
    gfx942    64      64 KiB      64 KiB    304   e4m3fnuz (MI300X / MI325X)
    gfx950    64     160 KiB     160 KiB    256   e4m3fn   (MI355X)
    sm_90     32     227 KiB     228 KiB    132   e4m3fn   (H100 / H200)

On AMD a SIMD holds 512 VGPRs per lane (architectural and accumulation
registers together) and at most 8 waves; a CU has 4 SIMDs.
"""

from __future__ import annotations

import functools
import os
from typing import NamedTuple, Optional, Tuple

__all__ = ["KernelTarget", "known_target", "target_of", "KNOWN_ARCHS", "INTERPRETER"]


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
        name = fp8_dtype if isinstance(fp8_dtype, str) else str(fp8_dtype).replace("torch.", "")
        return name in self.native_fp8


_KIB = 1024
_KNOWN = {
    "gfx942": KernelTarget("hip", "gfx942", 64, 64 * _KIB, 64 * _KIB, 304, ("float8_e4m3fnuz",)),
    "gfx950": KernelTarget("hip", "gfx950", 64, 160 * _KIB, 160 * _KIB, 256, ("float8_e4m3fn",)),
    "sm_90": KernelTarget("cuda", "sm_90", 32, 227 * _KIB, 228 * _KIB, 132, ("float8_e4m3fn",)),
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


@functools.lru_cache(maxsize=16)
def _device_target(index: Optional[int]) -> KernelTarget:
    import torch

    idx = torch.cuda.current_device() if index is None else index
    props = torch.cuda.get_device_properties(idx)
    cus = int(props.multi_processor_count)
    smem_cu = int(getattr(props, "shared_memory_per_multiprocessor", 0) or 0)
    smem_block = int(getattr(props, "shared_memory_per_block_optin", 0) or 0)
    if getattr(torch.version, "hip", None):
        arch = str(getattr(props, "gcnArchName", "") or "").split(":", 1)[0]
        base = _KNOWN.get(arch)
        warp = int(getattr(props, "warp_size", 0) or 64)
        if base is not None:
            return base._replace(compute_units=cus, warp_size=warp)
        # an AMD GPU we have no table for: no hardware FP8 claimed, 64 KiB LDS
        return KernelTarget("hip", arch, warp, smem_block or 64 * _KIB, smem_cu or 64 * _KIB, cus, ())
    major, minor = torch.cuda.get_device_capability(idx)
    arch = f"sm_{major}{minor}"
    fp8 = ("float8_e4m3fn",) if (major, minor) >= (8, 9) else ()
    base = _KNOWN.get(arch, KernelTarget("cuda", arch, 32, 0, 0, cus, fp8))
    return base._replace(
        arch=arch, compute_units=cus, native_fp8=fp8, warp_size=int(getattr(props, "warp_size", 0) or 32),
        lds_per_workgroup=smem_block or base.lds_per_workgroup or 48 * _KIB,
        lds_per_cu=smem_cu or base.lds_per_cu or 48 * _KIB,
    )
