"""Compile the package's kernels for a GPU that is not here, and read what the
compiler says about them.

    with compiling_for(target, buffer_ops=True) as launches:
        write_kv_fp8(k, v, kc, vc, loc, ks, vs, _target=target)   # meta tensors
    for launch in launches: stats = kernel_stats(launch.kernel, target)

``compiling_for`` makes Triton's JIT believe the active device is ``target``
(a ``KernelTarget``): a stand-in driver answers Triton's questions about the
device, and every ``kernel[grid](...)`` the host code makes compiles
(``warmup``) instead of launching. So the arguments, constexprs and launch
options are the ones the package's own host code chooses, and the argument
specialisation is Triton's own for that backend: 16-byte alignment and
multiples of 16, integer 1 as a constant and, on ROCm with buffer ops on, the
32-bit pointer-range attribute (``tt.pointer_range = 32``, which lets the
compiler use buffer loads and stores with 32-bit offsets) for every tensor
whose storage is at most 2**31 - 1 bytes (``knobs.amd.use_buffer_ops``, on by
default from Triton 3.6). Triton decides that per tensor from
``tensor.untyped_storage().size()`` (``HIPBackend.is_within_2gb`` in 3.5.1 to
3.9.0), which a ``meta`` tensor answers with the bytes its storage would have:
a meta cache sized over 2 GiB loses the attribute exactly as the real cache
does at run time, while the small tensors of the same launch keep it.
``Launch.pointer_range`` lists the arguments that got it. Tensors may be on
the ``meta`` device: nothing is allocated and nothing runs.

One arch per process: Triton 3.5.1 and 3.6.0 compile gfx950 kernels without
the hardware FP8 conversion once a gfx942 kernel was compiled earlier in the
same process (the FP8 write at T=16 and the fp8 decode at D=256: 8 and 80
``v_cvt`` fp8 instructions for gfx950 in a process of its own, 0 and 0 after
gfx942; Triton 3.8.0 keeps them), so ``compiling_for`` refuses a second arch
in a process that already compiled for another (``kernel_report`` and
``doctor --kernels-for`` start one process per arch).

``kernel_stats`` reads the compiled kernel: on AMD the AMDGCN's register
counts (``NumVgprs``, ``NumAgprs``, ``TotalNumSgprs``), spills, scratch, the
compiler's occupancy, the LDS the launch takes (``metadata.shared``) and the
waves per SIMD that follow from both, and which FP8 conversion instructions
the code uses; on NVIDIA the registers, spills and shared memory from
``cuobjdump -res-usage`` where the wheel ships it.
"""

from __future__ import annotations

import contextlib
import inspect
import re
import threading
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Tuple

from ..platform import KernelTarget

__all__ = ["compiling_for", "Launch", "ArchMixError", "kernel_stats", "waves_per_simd", "triton_version"]

_LOCK = threading.Lock()


def triton_version() -> str:
    import triton

    return str(triton.__version__)


class Launch(NamedTuple):
    name: str  # the kernel's function name
    kernel: Any  # triton.compiler.CompiledKernel
    num_warps: int
    #: the launch's constexpr arguments, as the host code bound them (JSON-safe values)
    constexprs: Dict[str, Any] = {}
    #: the launch options (num_warps, num_stages, maxnreg, launch_pdl, ...)
    options: Dict[str, Any] = {}
    #: pointer arguments Triton gave the 32-bit pointer-range attribute (AMD buffer ops);
    #: None where the compiled kernel does not say
    pointer_range: Optional[Tuple[str, ...]] = None


def _plain(value: Any) -> Any:
    """A JSON-safe form of a constexpr or option value."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    inner = getattr(value, "value", None)  # tl.constexpr
    if inner is not None and isinstance(inner, (bool, int, float, str)):
        return inner
    return str(value)


def _bound(fn: Any, args: tuple, kwargs: dict) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """(constexprs, options) of a ``kernel[grid](*args, **kwargs)`` call: the
    kernel's constexpr parameters as bound (positional or keyword, defaults
    applied), and the keywords that are not parameters (launch options)."""
    sig = inspect.signature(fn.fn)
    params = sig.parameters
    bound = sig.bind_partial(*args, **{k: v for k, v in kwargs.items() if k in params})
    bound.apply_defaults()
    constexprs = {p.name: _plain(bound.arguments[p.name]) for p in fn.params
                  if p.is_constexpr and p.name in bound.arguments}
    options = {k: _plain(v) for k, v in kwargs.items() if k not in params}
    return constexprs, options


def _pointer_range(kernel: Any) -> Optional[Tuple[str, ...]]:
    """Names of the arguments the compiled kernel has ``tt.pointer_range``
    on (the specialisation Triton's JIT chose), or None where unreadable."""
    src = getattr(kernel, "src", None)
    attrs = getattr(src, "attrs", None)
    names = getattr(getattr(src, "fn", None), "arg_names", None)
    if not isinstance(attrs, dict) or names is None:
        return None
    out = []
    for path, values in attrs.items():
        idx = path[0] if isinstance(path, tuple) and path else path
        if any(isinstance(v, (list, tuple)) and v and v[0] == "tt.pointer_range" for v in values or ()):
            out.append(names[idx] if isinstance(idx, int) and idx < len(names) else str(idx))
    return tuple(out)


#: the arch this process compiled for through ``compiling_for`` (one per process)
_PROCESS_ARCH: Optional[str] = None


class ArchMixError(RuntimeError):
    """``compiling_for`` asked for a second arch in one process."""


def _claim_arch(target: KernelTarget) -> None:
    global _PROCESS_ARCH
    arch = f"{target.backend}:{target.arch}"
    if _PROCESS_ARCH is None:
        _PROCESS_ARCH = arch
    elif _PROCESS_ARCH != arch:
        raise ArchMixError(
            f"compiling_for: this process already compiled for {_PROCESS_ARCH.split(':', 1)[1]}; "
            f"compile {target.arch} in its own process (Triton 3.5.1 and 3.6.0 drop gfx950's hardware "
            f"FP8 conversion after a gfx942 compile in the same process): "
            f"python -m sglang_kv5d.kernel_report --arch {target.arch}")


class _StandInDriver:
    """Answers what Triton's JIT asks the active driver while compiling for
    ``target``; launching is not possible (``compiling_for`` never launches)."""

    def __init__(self, target: KernelTarget):
        from triton.backends.compiler import GPUTarget

        cap = target.arch
        if target.backend == "cuda":
            cap = int(target.arch.replace("sm_", "").rstrip("a"))
        self._gpu_target = GPUTarget(target.backend, cap, target.warp_size)
        self._device = ("sglang-kv5d-aot", target.backend, target.arch)
        self.utils = None

    @classmethod
    def is_active(cls):  # pragma: no cover - never picked by Triton's discovery
        return False

    def get_current_target(self):
        return self._gpu_target

    def get_current_device(self):
        return self._device

    def get_current_stream(self, device=None):
        return 0

    def get_active_torch_device(self):
        import torch

        return torch.device("meta")

    def get_device_interface(self):  # pragma: no cover
        raise RuntimeError("sglang-kv5d aot: no device here (compile only)")

    def get_benchmarker(self):  # pragma: no cover
        raise RuntimeError("sglang-kv5d aot: no device here (compile only)")

    def map_python_to_cpp_type(self, ty: str) -> str:  # pragma: no cover
        raise RuntimeError("sglang-kv5d aot: no launcher here (compile only)")


@contextlib.contextmanager
def compiling_for(target: KernelTarget, *, buffer_ops: Optional[bool] = None) -> Iterator[List[Launch]]:
    """Within the block, every Triton kernel launch compiles for ``target``
    and is recorded instead of run. ``buffer_ops``: set Triton's AMD buffer-ops
    knob (None leaves the installed Triton's default). Not reentrant; one
    thread at a time. ``ArchMixError`` when this process already compiled for
    another arch (see the module docstring)."""
    import triton
    from triton.runtime import driver as driver_config
    from triton.runtime.jit import JITFunction

    if target.backend not in ("cuda", "hip"):
        raise ValueError(f"compiling_for: expected a GPU target, got backend {target.backend!r}")
    _claim_arch(target)
    launches: List[Launch] = []
    knobs = getattr(triton, "knobs", None)
    amd_knobs = getattr(knobs, "amd", None) if knobs is not None else None
    real_run = JITFunction.run

    def run(self, *args, grid, warmup, **kwargs):
        kernel = real_run(self, *args, grid=grid, warmup=True, **kwargs)
        try:
            constexprs, options = _bound(self, args, kwargs)
        except (TypeError, ValueError, AttributeError):  # an unusual signature: figures without the config
            constexprs, options = {}, {}
        launches.append(Launch(self.__name__, kernel, int(kwargs.get("num_warps", 4)), constexprs, options,
                               _pointer_range(kernel)))
        return kernel

    with _LOCK:
        previous = driver_config._active if hasattr(driver_config, "_active") else None
        old_bufops = getattr(amd_knobs, "use_buffer_ops", None) if amd_knobs is not None else None
        driver_config.set_active(_StandInDriver(target))
        if buffer_ops is not None and amd_knobs is not None:
            amd_knobs.use_buffer_ops = bool(buffer_ops)
        JITFunction.run = run
        try:
            yield launches
        finally:
            JITFunction.run = real_run
            if buffer_ops is not None and amd_knobs is not None:
                amd_knobs.use_buffer_ops = old_bufops
            if previous is None:
                driver_config._active = None
            else:
                driver_config.set_active(previous)


# ----------------------------------------------------------------------------- stats

_AMD_FIELDS = {
    "vgpr": r";\s*NumVgprs:\s*(\d+)",
    "agpr": r";\s*NumAgprs:\s*(\d+)",
    "sgpr": r";\s*TotalNumSgprs:\s*(\d+)",
    "scratch": r";\s*ScratchSize:\s*(\d+)",
    "occupancy": r";\s*Occupancy:\s*(\d+)",
    "sgpr_spill": r"\.sgpr_spill_count:\s*(\d+)",
    "vgpr_spill": r"\.vgpr_spill_count:\s*(\d+)",
}
# fp32 -> fp8 and fp8 -> fp32/fp16 conversions (gfx942 and gfx950 forms)
_SUFFIX = r"(?:_e32|_e64|_sdwa|_dpp)?\b"
_CVT_TO_FP8 = re.compile(r"\bv_cvt_(?:scalef32_)?(?:pk_|sr_)?(?:fp8|bf8)_(?:f32|f16|bf16)" + _SUFFIX)
_CVT_FROM_FP8 = re.compile(r"\bv_cvt_(?:scalef32_)?(?:pk_)?(?:f32|f16|bf16)_(?:fp8|bf8)" + _SUFFIX)


def waves_per_simd(target: KernelTarget, *, vgpr: int, agpr: int, lds: int, num_warps: int,
                   compiler_occupancy: Optional[int] = None) -> Dict[str, int]:
    """Waves per SIMD of an AMD kernel, and what limits it.

    Registers: a SIMD lane has 512 registers for the architectural VGPRs
    (allocated in granules of 8, the accumulation VGPRs starting on a 4-aligned
    register) and the AGPRs together; at most 8 waves. LDS: workgroups per CU
    = LDS per CU // LDS per workgroup, each of ``num_warps`` waves over 4
    SIMDs. The compiler's own ``Occupancy`` (registers and SGPRs; it cannot
    know the LDS Triton allocates at launch) caps the register figure."""
    total = -(-(-(-vgpr // 4) * 4 + agpr) // 8) * 8 if agpr else -(-max(vgpr, 1) // 8) * 8
    by_regs = min(8, 512 // max(total, 8))
    if compiler_occupancy:
        by_regs = min(by_regs, int(compiler_occupancy))
    if lds > 0:
        groups = target.lds_per_cu // lds if lds <= target.lds_per_workgroup else 0
        by_lds = min(8, groups * num_warps // 4) if groups else 0
    else:
        by_lds = 8
    return {"waves": min(by_regs, by_lds), "by_registers": by_regs, "by_lds": by_lds}


def kernel_stats(kernel: Any, target: KernelTarget, num_warps: Optional[int] = None) -> Dict[str, Any]:
    """Static figures of a compiled kernel (see the module docstring)."""
    md = kernel.metadata
    warps = int(num_warps if num_warps is not None else getattr(md, "num_warps", 4))
    lds = int(getattr(md, "shared", 0) or 0)
    out: Dict[str, Any] = {"num_warps": warps, "lds": lds, "lds_limit": target.lds_per_workgroup,
                           "lds_fits": lds <= target.lds_per_workgroup}
    if target.is_amd:
        asm = kernel.asm.get("amdgcn", "")
        for key, pattern in _AMD_FIELDS.items():
            m = re.search(pattern, asm)
            out[key] = int(m.group(1)) if m else 0
        out.update(waves_per_simd(target, vgpr=out["vgpr"], agpr=out["agpr"], lds=lds, num_warps=warps,
                                  compiler_occupancy=out["occupancy"]))
        out["cvt_to_fp8"] = len(_CVT_TO_FP8.findall(asm))
        out["cvt_from_fp8"] = len(_CVT_FROM_FP8.findall(asm))
        out["spills"] = out["sgpr_spill"] + out["vgpr_spill"]
    else:
        out.update(_nvidia_resources(kernel))
    return out


def _nvidia_resources(kernel: Any) -> Dict[str, Any]:
    """Registers / spill bytes of a cubin from the wheel's cuobjdump (0 when absent)."""
    import os
    import subprocess
    import tempfile

    import triton

    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    res = {"registers": 0, "spills": 0, "scratch": 0}
    cubin = kernel.asm.get("cubin") if hasattr(kernel, "asm") else None
    if not cubin or not os.path.exists(tool):
        res["registers"] = int(getattr(kernel.metadata, "num_regs", 0) or 0)
        return res
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        text = subprocess.run([tool, "-res-usage", f.name], capture_output=True, text=True, timeout=60).stdout
    m = re.search(r"REG:(\d+)", text)
    res["registers"] = int(m.group(1)) if m else 0
    m = re.search(r"STACK:(\d+)", text)
    res["scratch"] = int(m.group(1)) if m else 0
    m = re.search(r"LOCAL:(\d+)", text)
    res["spills"] = int(m.group(1)) if m else 0
    return res
