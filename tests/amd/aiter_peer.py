"""Compile aiter's own Gluon decode (``pa_decode_gluon``) for AMD targets on a CPU.

Test support for the AMD compile gate: it prints our decode kernel's static
figures next to those of the production peer, compiled the same way.

The peer is aiter's source as it is, loaded from ``../shared/aiter-src`` (next
to the repository root) at test time; nothing of it is copied here. Its real
Python wrapper is called with the arguments ``sglang_kv5d.attention.decode._decode_aiter``
passes (bf16 query, query length 1, 5D caches, per-tensor fp32 KV scales for
fp8, ``ps=True``, the splits of aiter's ``get_recommended_splits``), and every
kernel launch it makes is recorded instead of run: grid, arguments and launch
options. Each recorded launch is then compiled for ``GPUTarget("hip", arch, 64)``
with the argument specialisation of Triton's own JIT binder built for the HIP
backend (16-divisibility of aligned pointers and multiples of 16, integers equal
to 1 as constants), with the 32-bit pointer-range attribute put on every tensor
argument or taken off (``pointer_range_32``; on is what the JIT does from
Triton 3.6 for tensors under 2 GiB). Whether the buffer-ops pass then runs is
that Triton's own ``AMDGCN_USE_BUFFER_OPS`` default (off on 3.5.1).

What cannot run on a CPU is stubbed, and only that:

* Triton's active driver, while ``arch_info`` is imported: it asks the driver
  for the current target; a stand-in answers ``GPUTarget("hip", arch, 64)``.
* The ``aiter`` package itself (its ``__init__`` loads C++ extensions): a bare
  package whose ``dtypes`` names bf16/fp16/fp32 and the target's fp8
  (e4m3fnuz on gfx942, e4m3fn on gfx950); its ``ops.triton.utils`` packages
  point at the real directories, so ``types.py`` and ``arch_info.py`` are the
  real files.
* ``torch.cuda.get_device_properties`` (read by ``get_recommended_splits``):
  answers the target's CU count (gfx942 304, gfx950 256).
* FlyDSL: absent here, so the wrapper's ``fx`` is None and its FlyDSL reduce
  branch fails with ``AttributeError`` on ``fx.Stream(None)``, which its
  ``except ImportError`` does not catch. A stand-in raises ``ImportError`` on
  any use instead, so the wrapper takes its own fallback, the Triton
  ``paged_attention_decode_ps_reduce_kernel``. Where aiter's
  ``csrc.cpp_itfs.pa.pa_ps`` imports (a HIP C++ reduce built from a template at
  first use), the wrapper runs that instead, and no Triton compiles it; the
  Triton reduce is what the wrapper launches where neither the C++ nor the
  FlyDSL reduce is there.

Compile in a process that imported Triton without ``TRITON_INTERPRET=1`` (the
interpreter turns Triton's own library functions into interpreter-only
objects at import; tests/conftest.py sets it on CPU machines). In such a
process the API raises :class:`PeerUnavailable`; the command below always
compiles.

Tensors are on the ``meta`` device: the wrapper only reads shapes, strides and
dtypes, and the JIT binder sees pointer 0 (aligned) and storage sizes.

Compile the matrix (gfx942,gfx950 x fp8,bf16 x 4/1,16/2 at D=256, page 64, or a
part of it) in a fresh interpreter, with another unpacked Triton on
``PYTHONPATH`` if wanted, and get one JSON line of figures per kernel::

    python -m tests.amd.aiter_peer [--arch gfx942] [--kv fp8] [--heads 4/1] [--no-pointer-range]
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import re
import sys
import threading
import time
import types
from pathlib import Path

#: Per target: compute units (the value the wrapper reads from the device) and aiter's fp8.
TARGETS = {
    "gfx942": {"cus": 304, "fp8": "float8_e4m3fnuz"},
    "gfx950": {"cus": 256, "fp8": "float8_e4m3fn"},
}
WARP_SIZE = 64
KV_KINDS = ("fp8", "bf16")
AITER_COMMIT_DIR = "main-e4048607"
DEFAULT_AITER_ROOT = Path(__file__).resolve().parents[2].parent / "shared" / "aiter-src" / AITER_COMMIT_DIR

_WRAPPER = ("aiter", "ops", "triton", "gluon", "pa_decode_gluon.py")
_HELPERS = (("aiter", "ops", "triton", "utils", "types.py"),
            ("aiter", "ops", "triton", "utils", "_triton", "arch_info.py"))
_PACKAGES = ("aiter", "aiter.ops", "aiter.ops.triton", "aiter.ops.triton.utils", "aiter.ops.triton.utils._triton")
_POINTER_RANGE = ["tt.pointer_range", 32]
_LOCK = threading.RLock()
_LOADED: dict[tuple[str, str], "_Peer"] = {}


class PeerUnavailable(Exception):
    """aiter's ``pa_decode_gluon`` cannot be compiled here; the message says why."""


# --------------------------------------------------------------------------
# stand-ins for what needs a GPU or aiter's C++ build
# --------------------------------------------------------------------------


class _TargetDriver:
    """Answers Triton's ``driver.active.get_current_target()`` for one target."""

    def __init__(self, target):
        self._target = target

    def get_current_target(self):
        return self._target

    def get_current_device(self):
        return 0


class _NoFlyDSL:
    """Any use raises ImportError, as a missing FlyDSL would."""

    def __getattr__(self, name):
        raise ImportError(f"FlyDSL is not available (flydsl.{name})")


def _device_props(cus: int):
    def get_device_properties(*_args, **_kwargs):
        return types.SimpleNamespace(multi_processor_count=cus, gcnArchName=None)
    return get_device_properties


class _CudaView(types.ModuleType):
    """``torch.cuda`` with the device queries answered for the target."""

    def __init__(self, real, cus):
        super().__init__("torch.cuda")
        self._real = real
        self.get_device_properties = _device_props(cus)

    def __getattr__(self, name):
        return getattr(self._real, name)


class _TorchView(types.ModuleType):
    """``torch`` whose ``cuda`` is a :class:`_CudaView`; everything else is torch."""

    def __init__(self, real, cus):
        super().__init__("torch")
        self._real = real
        self.cuda = _CudaView(real.cuda, cus)

    def __getattr__(self, name):
        return getattr(self._real, name)


# --------------------------------------------------------------------------
# loading the real wrapper
# --------------------------------------------------------------------------


class _Peer:
    def __init__(self, arch, module, tree):
        self.arch = arch
        self.module = module
        self.tree = tree  # the aiter.* modules its imports resolve to


def _triton():
    try:
        import triton
    except Exception as e:  # noqa: BLE001 - any import failure means no peer
        raise PeerUnavailable(f"Triton does not import here ({type(e).__name__}: {e})") from e
    try:
        from triton.experimental.gluon import _runtime  # noqa: F401
        from triton.experimental.gluon import language  # noqa: F401
    except Exception as e:  # noqa: BLE001
        raise PeerUnavailable(f"Triton {triton.__version__} has no Gluon ({type(e).__name__}: {e})") from e
    import triton.language.standard as standard
    from triton.runtime.jit import JITFunction
    if not isinstance(standard.cdiv, JITFunction):
        # triton.jit ran in interpreter mode when triton.language was imported: its
        # library functions cannot be compiled in this process
        raise PeerUnavailable(
            "Triton was imported with TRITON_INTERPRET=1 in this process, so its library functions are "
            "interpreter-only; compile in a fresh interpreter without it: python -m tests.amd.aiter_peer")
    from triton.backends import backends
    if "amd" not in backends:
        raise PeerUnavailable(f"Triton {triton.__version__} has no AMD backend (backends: {sorted(backends)})")
    return triton


def _check_root(root: Path) -> None:
    missing = [str(root.joinpath(*p)) for p in (_WRAPPER, *_HELPERS) if not root.joinpath(*p).is_file()]
    if missing:
        raise PeerUnavailable(
            f"aiter source not found: {', '.join(missing)} (expected aiter {AITER_COMMIT_DIR} under {root}; "
            "pass aiter_root= or place the checkout there)")


@contextlib.contextmanager
def _swapped_modules(tree: dict):
    """Put ``tree`` into sys.modules under its names for the block; restore what was there."""
    names = [n for n in sys.modules if n == "aiter" or n.startswith("aiter.")]
    saved = {n: sys.modules.pop(n) for n in names}
    sys.modules.update(tree)
    try:
        yield
    finally:
        for n in [n for n in sys.modules if n == "aiter" or n.startswith("aiter.")]:
            mod = sys.modules.pop(n)
            if n not in tree and mod is not None:
                tree[n] = mod  # imported by the peer during the block: keep it with the peer
        sys.modules.update(saved)


@contextlib.contextmanager
def _import_context(target):
    """Triton's active driver answers ``target``, and ``triton.jit`` compiles (no interpreter)."""
    import triton
    cfg = triton.runtime.driver
    saved_active = getattr(cfg, "_active", None)
    saved_env = os.environ.get("TRITON_INTERPRET")
    cfg.set_active(_TargetDriver(target))
    os.environ["TRITON_INTERPRET"] = "0"
    try:
        yield
    finally:
        cfg._active = saved_active
        if saved_env is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = saved_env


def _package(name: str, path: Path | None):
    mod = types.ModuleType(name)
    mod.__path__ = [str(path)] if path is not None else []
    mod.__package__ = name
    return mod


def _load(arch: str, root: Path) -> _Peer:
    key = (arch, str(root))
    with _LOCK:
        if key in _LOADED:
            return _LOADED[key]
        _check_root(root)
        triton = _triton()
        import torch
        from triton.backends.compiler import GPUTarget

        base = root / "aiter"
        tree = {
            "aiter": _package("aiter", None),
            "aiter.ops": _package("aiter.ops", base / "ops"),
            "aiter.ops.triton": _package("aiter.ops.triton", base / "ops" / "triton"),
            "aiter.ops.triton.utils": _package("aiter.ops.triton.utils", base / "ops" / "triton" / "utils"),
            "aiter.ops.triton.utils._triton": _package("aiter.ops.triton.utils._triton",
                                                       base / "ops" / "triton" / "utils" / "_triton"),
        }
        # aiter.dtypes: the names the wrapper reads, with the target's fp8.
        tree["aiter"].dtypes = types.SimpleNamespace(
            fp8=getattr(torch, TARGETS[arch]["fp8"]), bf16=torch.bfloat16, fp16=torch.float16,
            fp32=torch.float32)
        for parent, child in zip(_PACKAGES, _PACKAGES[1:]):
            setattr(tree[parent], child.rsplit(".", 1)[1], tree[child])

        private = f"_kv5d_aiter_peer_{arch}_{len(_LOADED)}"
        spec = importlib.util.spec_from_file_location(private, root.joinpath(*_WRAPPER))
        module = importlib.util.module_from_spec(spec)
        with _swapped_modules(tree), _import_context(GPUTarget("hip", arch, WARP_SIZE)):
            try:
                importlib.import_module("aiter.ops.triton.utils._triton.arch_info")
                importlib.import_module("aiter.ops.triton.utils.types")
                sys.modules[private] = module
                spec.loader.exec_module(module)
            except PeerUnavailable:
                raise
            except Exception as e:  # noqa: BLE001 - report what failed to import, with the fix
                sys.modules.pop(private, None)
                raise PeerUnavailable(
                    f"aiter's pa_decode_gluon does not import on Triton {triton.__version__} "
                    f"({type(e).__name__}: {e})") from e
        if not getattr(module, "GLUON_JIT_KERNEL_ENABLED", False):
            raise PeerUnavailable(f"aiter's wrapper found no Gluon JIT in Triton {triton.__version__}")
        got = module.arch_info.get_arch()
        if got != arch:
            raise PeerUnavailable(f"aiter's arch_info reports {got!r}, expected {arch!r}")
        module.torch = _TorchView(torch, TARGETS[arch]["cus"])
        module.fx = _NoFlyDSL()
        peer = _Peer(arch, module, tree)
        _LOADED[key] = peer
        return peer


# --------------------------------------------------------------------------
# recording launches and compiling them
# --------------------------------------------------------------------------


def _jit_functions(module):
    from triton.runtime.jit import JITFunction
    return {name: fn for name, fn in vars(module).items()
            if isinstance(fn, JITFunction) and fn.module == module.__name__}  # aiter's kernels, not Triton's


@contextlib.contextmanager
def _recording(module, launches: list):
    fns = _jit_functions(module)

    def recorder(fn):
        def run(*args, grid, warmup, **kwargs):
            launches.append({"fn": fn, "grid": tuple(grid) if not callable(grid) else grid,
                             "args": args, "kwargs": kwargs})
            return None
        return run

    for fn in fns.values():
        fn.run = recorder(fn)  # instance attribute: __getitem__'s lambda calls self.run
    try:
        yield
    finally:
        for fn in fns.values():
            fn.__dict__.pop("run", None)


def _set_pointer_range(signature: dict, attrs: dict, on: bool) -> dict:
    out = {}
    names = list(signature)
    for i, name in enumerate(names):
        path = (i,)
        cur = [a for a in attrs.get(path, []) if list(a) != _POINTER_RANGE]
        if on and str(signature[name]).startswith("*"):
            cur.append(list(_POINTER_RANGE))
        if cur:
            out[path] = cur
    for path, val in attrs.items():  # nested (tuple) arguments: keep as the JIT made them
        if len(path) != 1:
            out[path] = val
    return out


def _compile_launch(fn, args, kwargs, target, pointer_range_32: bool):
    """Compile one recorded launch the way ``JITFunction.run`` would on that target."""
    import triton
    from triton import knobs
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature

    backend = make_backend(target)
    kwargs = dict(kwargs)
    kwargs["debug"] = kwargs.get("debug", fn.debug) or knobs.runtime.debug
    if hasattr(knobs.compilation, "instrumentation_mode"):
        kwargs["instrumentation_mode"] = knobs.compilation.instrumentation_mode
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    bound_args, specialization, options = binder(*args, **kwargs)
    options, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound_args, specialization, options)
    attrs = _set_pointer_range(signature, attrs, pointer_range_32)
    if fn.is_gluon():
        from triton.experimental.gluon._runtime import GluonASTSource as source_cls
    else:
        source_cls = ASTSource
    src = source_cls(fn, signature, constexprs, attrs)
    return triton.compile(src, target=target, options=options.__dict__)


def _meta_inputs(torch, arch, num_q_heads, num_kv_heads, head_dim, page, kv, batch, context):
    kv_dtype = getattr(torch, TARGETS[arch]["fp8"]) if kv == "fp8" else torch.bfloat16
    x = 16 // kv_dtype.itemsize
    if head_dim % x or page % x:
        raise ValueError(f"head_dim {head_dim} and page {page} must be multiples of X={x} for {kv} 5D caches")
    blocks_per_seq = -(-context // page)
    blocks = batch * blocks_per_seq
    meta = dict(device="meta")
    return dict(
        kv_dtype=kv_dtype,
        query=torch.empty((batch, num_q_heads, head_dim), dtype=torch.bfloat16, **meta),
        output=torch.empty((batch, num_q_heads, head_dim), dtype=torch.bfloat16, **meta),
        key_cache=torch.empty((blocks, num_kv_heads, head_dim // x, page, x), dtype=kv_dtype, **meta),
        value_cache=torch.empty((blocks, num_kv_heads, page // x, head_dim, x), dtype=kv_dtype, **meta),
        context_lengths=torch.empty((batch,), dtype=torch.int32, **meta),
        block_tables=torch.empty((batch, blocks_per_seq), dtype=torch.int32, **meta),
    )


def _validate(arch, num_q_heads, num_kv_heads, head_dim, page, kv, batch, context):
    if arch not in TARGETS:
        raise ValueError(f"arch {arch!r} unsupported: use one of {sorted(TARGETS)}")
    if kv not in KV_KINDS:
        raise ValueError(f"kv {kv!r} unsupported: use one of {KV_KINDS}")
    for name, v in (("num_q_heads", num_q_heads), ("num_kv_heads", num_kv_heads), ("head_dim", head_dim),
                    ("page", page), ("batch", batch), ("context", context)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    if num_q_heads % num_kv_heads:
        raise ValueError(f"num_q_heads {num_q_heads} is not a multiple of num_kv_heads {num_kv_heads}")


def _last_line(e: Exception) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return lines[-1] if lines else type(e).__name__


def compile_pa_decode_gluon(arch: str, *, num_q_heads: int, num_kv_heads: int, head_dim: int, page: int,
                            kv: str, batch: int = 8, context: int = 4096, aiter_root: Path | None = None,
                            pointer_range_32: bool = True, launches: list | None = None):
    """Compile every kernel aiter's ``pa_decode_gluon`` launches for this decode call.

    Returns ``[(label, CompiledKernel), ...]`` in launch order; the label is the
    kernel function's name. ``launches``, when given, gets one dict per launch:
    ``label``, ``grid``, ``splits``, ``options`` (the launch keywords that are
    not kernel arguments, e.g. ``num_warps``; empty where the wrapper sets
    none) and ``seconds`` (compile time). Raises :class:`PeerUnavailable` when
    the peer cannot be compiled here, ``ValueError`` for bad arguments.
    """
    _validate(arch, num_q_heads, num_kv_heads, head_dim, page, kv, batch, context)
    root = Path(aiter_root) if aiter_root is not None else DEFAULT_AITER_ROOT
    peer = _load(arch, root.resolve())
    import torch
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler.errors import CompilationError

    from sglang_kv5d import attention as overlay

    mod = peer.module
    t = _meta_inputs(torch, arch, num_q_heads, num_kv_heads, head_dim, page, kv, batch, context)
    fp8 = kv == "fp8"
    group = num_q_heads // num_kv_heads
    recorded: list = []
    with _LOCK, _swapped_modules(peer.tree), _recording(mod, recorded):
        # as sglang_kv5d.attention.decode._decode_aiter, for a layer without a sliding window
        splits = int(mod.get_recommended_splits(num_sequences=batch, num_kv_heads=num_kv_heads))
        key_scale = torch.empty((1,), dtype=torch.float32, device="meta") if fp8 else None
        value_scale = torch.empty((1,), dtype=torch.float32, device="meta") if fp8 else None
        exp_sums = torch.empty((batch, num_kv_heads, splits, group), dtype=torch.float32, device="meta")
        mod.pa_decode_gluon(
            output=t["output"], query=t["query"], key_cache=t["key_cache"], value_cache=t["value_cache"],
            context_lengths=t["context_lengths"], block_tables=t["block_tables"],
            softmax_scale=float(head_dim) ** -0.5, query_length=1, max_context_partition_num=splits,
            context_partition_size=overlay.CONTEXT_PARTITION_SIZE, compute_type=torch.bfloat16,
            query_scale=None, key_scale=key_scale, value_scale=value_scale,
            exp_sums=exp_sums, max_logits=torch.empty_like(exp_sums),
            temporary_output=torch.empty((batch, num_kv_heads, splits, group, head_dim),
                                         dtype=t["output"].dtype, device="meta"),
            alibi_slopes=None, sinks=None, sliding_window=overlay.decode_sliding_window_arg(-1), ps=True,
        )
    if not recorded:
        raise PeerUnavailable("aiter's pa_decode_gluon launched no Triton/Gluon kernel for this call")
    target = GPUTarget("hip", arch, WARP_SIZE)
    out = []
    for rec in recorded:
        fn = rec["fn"]
        params = {p.name for p in fn.params}
        t0 = time.perf_counter()
        try:
            kernel = _compile_launch(fn, rec["args"], rec["kwargs"], target, pointer_range_32)
        except CompilationError as e:
            # the front end rejected aiter's source: it was written against another Gluon API
            raise PeerUnavailable(
                f"aiter {AITER_COMMIT_DIR}'s {fn.__name__} does not compile on Triton {triton.__version__} "
                f"for {arch}: {_last_line(e)}") from e
        seconds = time.perf_counter() - t0
        label = fn.__name__
        out.append((label, kernel))
        if launches is not None:
            launches.append({"label": label, "grid": rec["grid"], "splits": splits, "seconds": seconds,
                             "options": {k: v for k, v in rec["kwargs"].items() if k not in params}})
    return out


# --------------------------------------------------------------------------
# static figures
# --------------------------------------------------------------------------

_FIGURES = {
    "vgpr": r"^\s*;\s*NumVgprs:\s*(\d+)",
    "agpr": r"^\s*;\s*NumAgprs:\s*(\d+)",
    "sgpr": r"^\s*;\s*TotalNumSgprs:\s*(\d+)",
    "scratch": r"^\s*;\s*ScratchSize:\s*(\d+)",
    "occupancy": r"^\s*;\s*Occupancy:\s*(\d+)",
    "vgpr_count": r"^\s*\.vgpr_count:\s*(\d+)",
    "sgpr_spill": r"^\s*\.sgpr_spill_count:\s*(\d+)",
    "vgpr_spill": r"^\s*\.vgpr_spill_count:\s*(\d+)",
}


def figures(kernel) -> dict:
    """VGPR/AGPR/SGPR counts, scratch bytes, occupancy (waves/SIMD) and spills from
    the compiler's AMDGCN comments and metadata, plus LDS bytes (``metadata.shared``).
    A figure the assembly does not state is None."""
    asm = kernel.asm["amdgcn"]
    out = {}
    for key, pat in _FIGURES.items():
        m = re.search(pat, asm, re.M)
        out[key] = int(m.group(1)) if m else None
    out["lds"] = int(kernel.metadata.shared)
    out["num_warps"] = int(kernel.metadata.num_warps)
    out["waves_per_eu"] = getattr(kernel.metadata, "waves_per_eu", None)
    return out


def _ir_facts(kernel) -> dict:
    """What the compiled IR says about the target and the specialisation."""
    ttgir, asm = kernel.asm["ttgir"], kernel.asm["amdgcn"]
    target = re.search(r'\.amdgcn_target\s+"([^"]+)"', asm)
    kv = re.search(r"%key_cache_ptr: !tt\.ptr<([^>]+)>", ttgir)
    return {"amdgcn_target": target.group(1) if target else None, "key_cache_type": kv.group(1) if kv else None,
            "pointer_range_attr": "tt.pointer_range = 32" in ttgir, "divisibility_attr": "tt.divisibility = 16" in ttgir}


def _csv(value: str, allowed=None) -> list:
    items = [v.strip() for v in value.split(",") if v.strip()]
    bad = [v for v in items if allowed is not None and v not in allowed]
    if not items or bad:
        raise ValueError(f"{value!r}: expected a comma-separated list of {sorted(allowed) if allowed else 'values'}")
    return items


def _main(argv=None) -> int:
    import argparse
    import json

    p = argparse.ArgumentParser(
        prog="python -m tests.amd.aiter_peer",
        description="Compile aiter's pa_decode_gluon for AMD targets; print one JSON line per kernel.")
    p.add_argument("--arch", default="gfx942,gfx950", help="comma-separated: gfx942,gfx950")
    p.add_argument("--kv", default="fp8,bf16", help="comma-separated: fp8,bf16")
    p.add_argument("--heads", default="4/1,16/2", help="comma-separated H_q/H_kv, e.g. 4/1,16/2")
    p.add_argument("--head-dim", type=int, default=256)
    p.add_argument("--page", type=int, default=64)
    p.add_argument("--no-pointer-range", action="store_true", help="compile without tt.pointer_range 32")
    a = p.parse_args(argv)
    try:
        archs = _csv(a.arch, TARGETS)
        kvs = _csv(a.kv, KV_KINDS)
        heads = [tuple(int(v) for v in h.split("/")) for h in _csv(a.heads)]
        if any(len(h) != 2 for h in heads):
            raise ValueError(f"--heads {a.heads!r}: each entry must look like 16/2")
    except ValueError as e:
        p.error(str(e))
    if "triton" not in sys.modules:
        os.environ["TRITON_INTERPRET"] = "0"  # this command compiles; the interpreter cannot
    import triton
    rc = 0
    for arch in archs:
        for kv in kvs:
            for hq, hkv in heads:
                row = {"triton": triton.__version__, "arch": arch, "kv": kv, "heads": f"{hq}/{hkv}",
                       "pointer_range_32": not a.no_pointer_range}
                launches: list = []
                try:
                    kernels = compile_pa_decode_gluon(
                        arch, num_q_heads=hq, num_kv_heads=hkv, head_dim=a.head_dim, page=a.page, kv=kv,
                        pointer_range_32=not a.no_pointer_range, launches=launches)
                except PeerUnavailable as e:
                    print(json.dumps({**row, "unavailable": str(e)}), flush=True)
                    rc = 3
                    continue
                except ValueError as e:
                    p.error(str(e))
                for (label, k), info in zip(kernels, launches):
                    print(json.dumps({**row, "label": label, "grid": list(info["grid"]), "splits": info["splits"],
                                      "options": info["options"], "seconds": round(info["seconds"], 2),
                                      **figures(k), **_ir_facts(k)}), flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(_main())
