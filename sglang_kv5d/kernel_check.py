"""Kernel failures: remembered per configuration, logged once, checked before traffic.

A Triton kernel of the overlay can fail where SGLang's own code would not: a
compile error (``triton.compiler.errors.CompilationError``), too little shared
memory or too many registers (``triton.runtime.errors.OutOfResources``), a
driver error at load or launch (``RuntimeError``), the interpreter's
``InterpreterError``. The patched paths catch such failures, send the call to
the path that runs without the overlay, and record the failure here:

    record_failure(kernel, key, exc, ...)   remember (kernel, key); ONE warning
                                            naming the kernel, the shapes, the
                                            Triton version, the target and the
                                            error's first line
    failure(kernel, key)                    the recorded reason, or None; the
                                            patched paths route a known-bad
                                            configuration to the fallback
                                            without trying the kernel again
    FAILED                                  the same records (a dict; empty in
                                            a healthy process, so the hot paths
                                            test it for truth before anything)

``key`` is the configuration a compile depends on, without the token count
(``Fp8WriteKey``; ``sglang_kv5d.attention.ConfigKey`` for attention): one
failing variant sends every call of that configuration to the fallback, so a
broken compiler is not asked again for each new batch size.

What is not a kernel failure: ``TypeError`` / ``ValueError`` raised by the
overlay's own host checks (:func:`is_host_validation`), which run before
anything is written; the callers handle those as before.

Writes and partial results. The fused FP8 write is one kernel launch: when
its compile or launch raises, no program ran and the caches are as they were;
the fallback (SGLang's own write) then writes every slot of the call anyway.
The portable attention kernels write only their output tensor, which the
fallback writes whole. A fault *inside* a running kernel (an illegal address)
is reported by the device asynchronously, later, and is not caught here.

CUDA graphs. Nothing here compiles or retries during a capture: a known-bad
configuration goes to the fallback; a first failure inside a capture is
recorded and that call falls back (the capture itself may then be unusable;
SGLang reports that). The check before traffic exists so that compiles happen
before capture:

    check_fp8_write(...)       compile and run the FP8 write for a pool's real
                               shapes and dtypes on scratch tensors (never the
                               real caches), for the token counts of decode
                               batches and prefill chunks (each is its own
                               Triton variant)
    check_attention(...)       the same for the portable decode / extend kernels
    attention_startup(...)     which 5D attention path the process will take,
                               and the Kv5dNotReadyError message when none works

These take explicit shapes, dtypes and a device (``doctor`` can call them).
The adapters at the end read those from SGLang's pool and backend objects;
``patches/fail_closed.py`` calls them when a 5D pool or the AITER backend is
built. Cost: the check's time is the compile time of the variants it covers,
which the process would otherwise pay at its first requests or inside
CUDA-graph capture, plus scratch launches of milliseconds; Triton caches the
compiled kernels on disk, so a restart pays only the load. Variants the check
does not cover (other integer specialisations of the token count, tensor
scales, int64 addressing of caches over 2**31 bytes) compile at first use and
are still covered by the run-time fallback.

Measured compile times (2-core shared CPU, cold Triton cache, compiled for
the arch without a GPU through ``kernels.aot.compiling_for``, 8 KV heads of
128 dims, page 16, Triton 3.8.0): the FP8 write's seven token counts took
4.4 s for sm_90 and 4.7 s for gfx942 (0.3-1.2 s each); decode (direct,
split and reduction kernels) plus extend 1.5-3.7 s (sm_90) and 1.5-2.8 s
(gfx942) per KV dtype. Not measured on a GPU in this form (no
device in that session): there the check adds module loads and launches of
scratch tensors of at most a few MiB.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any, Dict, Hashable, Iterable, List, NamedTuple, Optional, Sequence, Tuple

from .platform import interpreting

logger = logging.getLogger("sglang_kv5d")

FP8_WRITE = "write_kv_fp8"
DECODE = "decode_attention_5d"
EXTEND = "extend_attention_5d"

#: (kernel, key) -> reason (the error's type and first line). Read it, never write it.
FAILED: Dict[Tuple[str, Hashable], str] = {}
_checked: Dict[Tuple[str, Hashable], "CheckResult"] = {}
_lock = threading.Lock()

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))

#: Token counts the FP8 write is checked with on a GPU. CUDA-graph decode
#: batches: 1, 2 and 16 differ in Triton's integer specialisation (1, other,
#: multiple of 16), 136 and 256 are the same two past 128 tokens (another
#: launch configuration); so every capture size up to 2048 is covered. Prefill
#: chunks: 4096 and 8192, on each side of ``fp8_write.launch_config``'s
#: 4096-token threshold (their other specialisations compile at first use,
#: outside capture).
FP8_WRITE_TOKENS = (1, 2, 16, 136, 256, 4096, 8192)
#: Under the CPU interpreter nothing is compiled: one launch shows the path works.
FP8_WRITE_TOKENS_INTERPRETER = (1,)
#: Decode is also checked with a block table this many tokens wide (split
#: kernel and reduction; the split count follows from the table's width).
DECODE_WIDE_TOKENS = 4096
#: Scratch tensors of one check stay below this (the pool has taken most of
#: the device memory by then); larger token counts are left to first use.
SCRATCH_BYTES_MAX = 256 << 20


class Fp8WriteKey(NamedTuple):
    """What a compile of the FP8 write depends on, apart from the token count."""

    in_dtype: str
    fp8_dtype: str
    cache_dtype: str
    heads: int
    head_dim: int
    v_head_dim: int
    page: int
    layout: str  # "5d" or "nhd"
    device: str


class CheckResult(NamedTuple):
    kernel: str
    key: Hashable
    ok: bool
    error: Optional[str]  # the recorded reason when not ok
    seconds: float  # wall time of the check (compiles included)
    variants: Tuple[Any, ...]  # what was launched (token counts, or a description)


# --------------------------------------------------------------------------
# Facts for the messages


def _dname(dtype) -> str:
    s = str(dtype)
    return s[6:] if s.startswith("torch.") else s


def triton_version() -> str:
    try:
        import triton

        return str(triton.__version__)
    except Exception as exc:  # a broken Triton install is itself the finding
        return f"unknown ({type(exc).__name__})"


def target_text(device) -> str:
    """The device a kernel compiles for, in words: name and arch, or the interpreter."""
    try:
        import torch

        dev = torch.device(device)
        if interpreting() or dev.type != "cuda":
            return f"Triton CPU interpreter ({dev})" if interpreting() else str(dev)
        idx = dev.index if dev.index is not None else torch.cuda.current_device()
        props = torch.cuda.get_device_properties(idx)
        arch = str(getattr(props, "gcnArchName", "") or "").split(":", 1)[0]
        if not arch:
            major, minor = torch.cuda.get_device_capability(idx)
            arch = f"sm_{major}{minor}"
        return f"{props.name} ({arch}, cuda:{idx})"
    except Exception as exc:
        return f"{device} (target unknown: {type(exc).__name__})"


def error_line(exc: BaseException) -> str:
    """``Type: first line`` of an error; for Triton's CompilationError the
    message itself (its text starts with the source location and excerpt)."""
    text = getattr(exc, "error_message", None) if type(exc).__name__ == "CompilationError" else None
    if not text:
        text = str(exc)
    line = next((ln.strip() for ln in str(text).splitlines() if ln.strip()), "")
    if len(line) > 300:
        line = line[:297] + "..."
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__


def capturing() -> bool:
    """Is the current CUDA stream capturing a graph? (False without CUDA.)"""
    try:
        import torch

        return bool(torch.cuda.is_available() and torch.cuda.is_current_stream_capturing())
    except Exception:
        return False


def is_host_validation(exc: BaseException) -> bool:
    """A TypeError / ValueError raised by the overlay's own code (a host check
    that runs before anything is written), not by Triton or the driver."""
    if not isinstance(exc, (TypeError, ValueError)):
        return False
    tb = exc.__traceback__
    if tb is None:
        return True
    while tb.tb_next is not None:
        tb = tb.tb_next
    filename = os.path.abspath(tb.tb_frame.f_code.co_filename)
    return filename.startswith(_PKG_DIR + os.sep)


# --------------------------------------------------------------------------
# Records


def failure(kernel: str, key: Hashable) -> Optional[str]:
    """Why (kernel, key) is known not to work in this process, or None."""
    return FAILED.get((kernel, key))


def failures() -> Dict[Tuple[str, Hashable], str]:
    with _lock:
        return dict(FAILED)


def record_failure(kernel: str, key: Hashable, exc: BaseException, *, shapes: str, device,
                   fallback: str, when: str = "at run time") -> str:
    """Remember that ``kernel`` fails for ``key`` and warn once for it; returns the reason."""
    reason = error_line(exc)
    if capturing():
        when += ", inside a CUDA-graph capture"
    with _lock:
        if (kernel, key) in FAILED:
            return FAILED[(kernel, key)]
        FAILED[(kernel, key)] = reason
    logger.warning(
        "sglang-kv5d: kernel %s failed %s for %s (Triton %s, target %s): %s. %s for this "
        "configuration from now on; run `sglang-kv5d doctor` on this machine for the details",
        kernel, when, shapes, triton_version(), target_text(device), reason, fallback,
    )
    return reason


def reset() -> None:
    """Forget every record and check result (tests; a process never needs it)."""
    with _lock:
        FAILED.clear()
        _checked.clear()


def _sync(device) -> None:
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


# --------------------------------------------------------------------------
# The FP8 write


def fp8_write_key(in_dtype, fp8_dtype, k_cache, v_cache) -> Fp8WriteKey:
    """The key of writes of ``in_dtype`` rows into caches shaped like these
    (one layer's buffers: NHD (slots, H, D) or SHUFFLE 5D)."""
    if k_cache.dim() == 5:
        heads, head_dim, page = k_cache.shape[1], k_cache.shape[2] * k_cache.shape[4], k_cache.shape[3]
        v_head_dim, layout = v_cache.shape[3], "5d"
    else:
        heads, head_dim, page, v_head_dim, layout = k_cache.shape[1], k_cache.shape[2], 1, v_cache.shape[2], "nhd"
    return Fp8WriteKey(_dname(in_dtype), _dname(fp8_dtype), _dname(k_cache.dtype), int(heads), int(head_dim),
                       int(v_head_dim), int(page), layout, str(k_cache.device))


def fp8_write_shapes(key: Fp8WriteKey) -> str:
    return (f"{key.in_dtype} -> {key.fp8_dtype} ({key.cache_dtype} storage), {key.layout.upper()} cache, "
            f"{key.heads} heads, head dims {key.head_dim}/{key.v_head_dim}"
            + (f", page {key.page}" if key.layout == "5d" else "") + f", on {key.device}")


FP8_WRITE_FALLBACK = "SGLang's own set_kv_buffer writes the FP8 KV cache"


def check_fp8_write(*, in_dtype, fp8_dtype, cache_dtype, heads: int, head_dim: int, v_head_dim: int,
                    page: int, layout_5d: bool, device, token_counts: Optional[Sequence[int]] = None,
                    when: str = "in the check before traffic") -> CheckResult:
    """Compile and run ``write_kv_fp8`` on scratch tensors of these shapes.

    ``cache_dtype`` is the cache storage (the pool's uint8 buffers, or an fp8
    dtype); the kernel's variants differ by it. A failure is recorded (the
    run-time path then goes to SGLang's write without trying); the result is
    remembered per key, so a second pool of the same shapes costs nothing.
    """
    import torch

    from .kernels import fp8_write

    dev = torch.device(device)
    x = 16
    if layout_5d:
        kc_shape = (1, heads, head_dim // x, page, x)
        vc_shape = (1, heads, page // x, v_head_dim, x)
    else:
        kc_shape, vc_shape = (1, heads, head_dim), (1, heads, v_head_dim)
    probe_k = torch.empty(kc_shape, dtype=cache_dtype, device="meta")
    probe_v = torch.empty(vc_shape, dtype=cache_dtype, device="meta")
    key = fp8_write_key(in_dtype, fp8_dtype, probe_k, probe_v)._replace(device=str(dev))
    with _lock:
        done = _checked.get((FP8_WRITE, key))
    if done is not None:
        return done
    if token_counts is None:
        token_counts = FP8_WRITE_TOKENS_INTERPRETER if interpreting() or dev.type != "cuda" else FP8_WRITE_TOKENS
    in_size = torch.empty((), dtype=in_dtype).element_size()
    tokens: List[int] = []
    for t in token_counts:
        slots = -(-t // page) * page + page
        scratch = t * heads * (head_dim + v_head_dim) * in_size + slots * heads * (head_dim + v_head_dim)
        if scratch <= SCRATCH_BYTES_MAX:
            tokens.append(int(t))
    start = time.perf_counter()
    error: Optional[str] = None
    try:
        for t in tokens:
            n_blocks = -(-t // page) + 1
            if layout_5d:
                kc = torch.zeros((n_blocks,) + kc_shape[1:], dtype=cache_dtype, device=dev)
                vc = torch.zeros((n_blocks,) + vc_shape[1:], dtype=cache_dtype, device=dev)
            else:
                kc = torch.zeros((n_blocks * page, heads, head_dim), dtype=cache_dtype, device=dev)
                vc = torch.zeros((n_blocks * page, heads, v_head_dim), dtype=cache_dtype, device=dev)
            k = torch.ones((t, heads, head_dim), dtype=in_dtype, device=dev)
            v = torch.ones((t, heads, v_head_dim), dtype=in_dtype, device=dev)
            loc = torch.arange(page, page + t, dtype=torch.int64, device=dev)  # block 0 stays unused
            fp8_write.write_kv_fp8(k, v, kc, vc, loc, 1.0, 1.0, fp8_dtype=fp8_dtype)
            del k, v, kc, vc, loc
        _sync(dev)
    except Exception as exc:
        what = "refused these shapes" if is_host_validation(exc) else "cannot run"
        error = record_failure(FP8_WRITE, key, exc, shapes=fp8_write_shapes(key), device=dev,
                               fallback=FP8_WRITE_FALLBACK, when=f"{when} ({what})")
    seconds = time.perf_counter() - start
    result = CheckResult(FP8_WRITE, key, error is None, error, seconds, tuple(tokens))
    with _lock:
        _checked[(FP8_WRITE, key)] = result
    if error is None:
        logger.info("sglang-kv5d: kernel check: %s ran for %s with %s tokens in %.2f s (Triton %s, target %s)",
                    FP8_WRITE, fp8_write_shapes(key), "/".join(map(str, tokens)), seconds, triton_version(),
                    target_text(dev))
    return result


# --------------------------------------------------------------------------
# The portable attention kernels


def attention_key(kernel: str, *, q_dtype, kv_dtype, page: int, q_heads: int, kv_heads: int, head_dim: int,
                  v_head_dim: int, window: bool, sinks: bool = False, logit_cap: bool = False):
    from .attention import ConfigKey

    return ConfigKey(kernel, _dname(q_dtype), _dname(kv_dtype), int(page), int(head_dim), int(v_head_dim),
                     int(q_heads), int(kv_heads), bool(window), bool(sinks), bool(logit_cap))


def attention_shapes(key) -> str:
    from .attention import _key_text

    return _key_text(key)


def check_attention(*, q_dtype, kv_dtype, cache_dtype, page: int, x: int, q_heads: int, kv_heads: int,
                    head_dim: int, v_head_dim: int, device, window: bool = False,
                    fallback: str = "", when: str = "in the check before traffic") -> List[CheckResult]:
    """Compile and run the portable decode and extend kernels on scratch caches
    (two blocks of ``page`` tokens, the pool's element layout ``x``)."""
    import torch

    from . import kernels

    dev = torch.device(device)
    fp8 = kv_dtype != cache_dtype or _dname(kv_dtype).startswith("float8")
    results = []
    for kernel in (DECODE, EXTEND):
        key = attention_key(kernel, q_dtype=q_dtype, kv_dtype=kv_dtype, page=page, q_heads=q_heads,
                            kv_heads=kv_heads, head_dim=head_dim, v_head_dim=v_head_dim, window=window)
        with _lock:
            done = _checked.get((kernel, key))
        if done is not None:
            results.append(done)
            continue
        start = time.perf_counter()
        error = None
        try:
            kc = torch.zeros((2, kv_heads, head_dim // x, page, x), dtype=cache_dtype, device=dev)
            vc = torch.zeros((2, kv_heads, page // x, v_head_dim, x), dtype=cache_dtype, device=dev)
            if kc.dtype != kv_dtype:
                kc, vc = kc.view(kv_dtype), vc.view(kv_dtype)
            table = torch.tensor([[0, 1]], dtype=torch.int32, device=dev)
            scale = torch.ones((1,), dtype=torch.float32, device=dev) if fp8 else None
            common = dict(sm_scale=head_dim ** -0.5, k_scale=scale, v_scale=scale,
                          fp8_dtype=kv_dtype if fp8 else None, sliding_window=page // 2 if window else -1,
                          sinks=None, logit_cap=0.0)
            n = page + 3
            if kernel == DECODE:
                q = torch.zeros((1, q_heads, head_dim), dtype=q_dtype, device=dev)
                out = torch.empty((1, q_heads, v_head_dim), dtype=q_dtype, device=dev)
                lens = torch.tensor([n], dtype=torch.int64, device=dev)  # SGLang's seq_lens dtype
                # a short table (one split: the direct kernel) and a wide one
                # (several splits: the split kernel and its reduction); the
                # split count follows from the table's width, the extra
                # entries point at block 0
                wide = torch.zeros((1, DECODE_WIDE_TOKENS // page), dtype=torch.int32, device=dev)
                wide[0, 1] = 1
                for t in (table, wide):
                    kernels.decode_attention_5d(q, kc, vc, t, lens, num_splits=None, out=out, **common)
            else:
                q = torch.zeros((3, q_heads, head_dim), dtype=q_dtype, device=dev)
                out = torch.empty((3, q_heads, v_head_dim), dtype=q_dtype, device=dev)
                qo = torch.tensor([0, 3], dtype=torch.int32, device=dev)
                lens = torch.tensor([n], dtype=torch.int32, device=dev)
                kernels.extend_attention_5d(q, kc, vc, table, qo, lens, causal=True, out=out, **common)
            _sync(dev)
        except Exception as exc:
            error = record_failure(kernel, key, exc, shapes=attention_shapes(key), device=dev,
                                   fallback=fallback or "no other 5D attention path", when=when)
        wide_entries = DECODE_WIDE_TOKENS // page
        variants = (f"2 and {wide_entries} table entries",) if kernel == DECODE else ("2 table entries",)
        result = CheckResult(kernel, key, error is None, error, time.perf_counter() - start, variants)
        with _lock:
            _checked[(kernel, key)] = result
        if error is None:
            logger.info("sglang-kv5d: kernel check: %s ran for %s in %.2f s (Triton %s, target %s)", kernel,
                        attention_shapes(key), result.seconds, triton_version(), target_text(dev))
        results.append(result)
    return results


class AttentionDecision(NamedTuple):
    path: str  # "aiter", "portable" or "none"
    message: str  # what is logged; for "none" the Kv5dNotReadyError text
    results: Tuple[CheckResult, ...]


def attention_startup(*, impl: str, aiter_problem: Optional[str], check) -> AttentionDecision:
    """Which path serves 5D attention, given SGLANG_KV5D_ATTN_IMPL (``impl``),
    why aiter cannot serve it (``aiter_problem``, None when it can) and a
    ``check(fallback)`` callable that runs :func:`check_attention`.

    The portable kernels are checked only when they are the main path (impl
    "triton", or aiter unusable): with aiter they run only for configurations
    aiter cannot serve, and compile on first use.
    """
    if impl != "triton" and aiter_problem is None:
        return AttentionDecision("aiter", "aiter serves 5D attention (portable kernels compile on first use, "
                                          "for configurations aiter cannot run)", ())
    rescue = "aiter serves 5D attention" if aiter_problem is None else ""
    results = tuple(check(rescue))
    bad = [r for r in results if not r.ok]
    if not bad:
        return AttentionDecision("portable", "the portable Triton kernels serve 5D attention", results)
    if aiter_problem is None:
        return AttentionDecision("aiter", "the portable kernels failed; aiter serves 5D attention", results)
    causes = "; ".join(f"{r.kernel}: {r.error}" for r in bad)
    message = (
        "sglang-kv5d: no working 5D attention path: the portable Triton kernels failed (" + causes
        + f"; Triton {triton_version()}) and aiter cannot be used ({aiter_problem}). Fix: install an aiter "
        "build with pa_decode_gluon and mha_batch_prefill_func (and leave SGLANG_KV5D_ATTN_IMPL unset), or a "
        "Triton that compiles the portable kernels (`sglang-kv5d doctor` shows which compile), or unset "
        "SGLANG_AITER_KV_CACHE_LAYOUT to serve with the NHD layout."
    )
    return AttentionDecision("none", message, results)


# --------------------------------------------------------------------------
# Adapters: shapes from SGLang's objects (called by patches/fail_closed.py)


def _fp8_write_patched(pool) -> bool:
    from .activation import patch_marker

    raw = None
    for cls in type(pool).__mro__:
        if "set_kv_buffer" in cls.__dict__:
            raw = cls.__dict__["set_kv_buffer"]
            break
    return patch_marker(raw) == "fp8-kv-write"


def check_pool(pool, in_dtypes: Iterable = None) -> List[CheckResult]:
    """Check the FP8 write for one leaf MHA pool the fused write serves."""
    import torch

    from .patches.fp8_kv_write import _fp8_dtypes, eligible

    if not _fp8_write_patched(pool) or not eligible(pool, _fp8_dtypes()):
        return []
    k0, v0 = pool.k_buffer[0], pool.v_buffer[0]
    layout_5d = k0.dim() == 5
    if layout_5d:
        heads, head_dim, page, v_head_dim = k0.shape[1], k0.shape[2] * k0.shape[4], k0.shape[3], v0.shape[3]
    else:
        heads, head_dim, page, v_head_dim = k0.shape[1], k0.shape[2], 1, v0.shape[2]
    out = []
    for in_dtype in in_dtypes or (torch.bfloat16,):
        out.append(check_fp8_write(in_dtype=in_dtype, fp8_dtype=pool.dtype, cache_dtype=k0.dtype, heads=int(heads),
                                   head_dim=int(head_dim), v_head_dim=int(v_head_dim), page=int(page),
                                   layout_5d=layout_5d, device=k0.device))
    return out


def check_backend(backend, model_runner) -> Optional[AttentionDecision]:
    """At AiterAttnBackend build for a 5D pool: the FP8 write in the model's
    dtype for every leaf pool, then the attention decision (None when the pool
    is not 5D). Raises Kv5dNotReadyError (strict) when no attention path works."""
    from . import attention
    from .pools import is_vectorized_5d, iter_leaf_pools

    pool = getattr(model_runner, "token_to_kv_pool", None)
    if pool is None or getattr(backend, "use_mla", False) or not is_vectorized_5d(pool):
        return None
    q_dtype = getattr(backend, "input_dtype", None) or getattr(model_runner, "dtype", None)
    leaves = [leaf for leaf in iter_leaf_pools(pool) if getattr(leaf, "k_buffer", None)]
    for leaf in leaves:
        check_pool(leaf, in_dtypes=(q_dtype,) if q_dtype is not None else None)
    if not leaves or q_dtype is None:
        return None
    from .activation import status

    st = status()
    try:
        dispatch = st.patch("attention-dispatch-5d").state
    except Exception:
        dispatch = None
    if dispatch != "applied":
        return None  # the fail-closed guard has reported it
    leaf = leaves[0]
    k0, v0 = leaf.k_buffer[0], leaf.v_buffer[0]
    q_heads = getattr(backend, "num_head", None)
    if q_heads is None:
        return None
    window = getattr(model_runner, "sliding_window_size", None) is not None

    def check(fallback):
        results = []
        for w in ((False, True) if window else (False,)):
            results += check_attention(
                q_dtype=q_dtype, kv_dtype=leaf.dtype, cache_dtype=k0.dtype, page=int(k0.shape[3]),
                x=int(k0.shape[4]), q_heads=int(q_heads), kv_heads=int(k0.shape[1]),
                head_dim=int(k0.shape[2] * k0.shape[4]), v_head_dim=int(v0.shape[3]), device=k0.device,
                window=w, fallback=fallback)
        return results

    decision = attention_startup(impl=attention.selected_impl(), aiter_problem=attention.aiter_problem(),
                                 check=check)
    if decision.path == "none":
        from .activation import fail_closed

        fail_closed(decision.message)
    else:
        logger.info("sglang-kv5d: 5D attention: %s", decision.message)
    return decision
