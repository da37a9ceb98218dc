"""The host prologue both attention launchers share: cache format, 5D layout,
metadata and scale checks, written once.

    check_q(q, shape)                  ValueError unless q is a 3-D tensor
    check_metadata(q, batch, block_tables, lens, lens_name, sinks, H_q, out, out_shape, table_rows=None)
    kv_view(q, k_cache, v_cache, block_tables, fp8_dtype, target) -> KvView
                                       the caches' format and layout checked against q
    score_args(q, k_scale, v_scale, sliding_window, logit_cap, sinks) -> ScoreArgs
    check_metadata_values(...)         the debug-only value check (a device sync)
    debug_bounds(device), stride_or_1(t, dim)

Tensors: q ``(B or total_q, H_q, D)`` bf16 / fp16 / fp32; K cache ``(blocks,
H_kv, D/X, page, X)``, V cache ``(blocks, H_kv, page/X, D, X)`` bf16 / fp16
(X = 8) or float8_e4m3fn / float8_e4m3fnuz / uint8 with ``fp8_dtype`` (X =
16), ``(page, X)`` and ``(D, X)`` tails contiguous; block tables ``(rows,
max_blocks)`` and lengths ``(B,)`` int32 / int64, any strides; sinks ``(H_q,)``
floating point. Errors are TypeError / ValueError naming the argument.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Tuple

import torch
import triton.language as tl

from ...platform import KernelTarget, fp8_format, fp8_kv_dtypes
from .kernel_common import (FP8_EMU_E4M3FN, FP8_EMU_E4M3FNUZ, FP8_NATIVE_E4M3FN, FP8_NATIVE_E4M3FNUZ, FP8_NONE,
                            INT32_MAX)

__all__ = ["check_q", "check_metadata", "check_metadata_values", "kv_view", "KvView", "score_args", "ScoreArgs",
           "debug_bounds", "stride_or_1", "INDEX_DTYPES"]

_FP8_DTYPES = fp8_kv_dtypes()


def _native_fp8_mode(fp8_dtype: torch.dtype, target: KernelTarget) -> Optional[int]:
    """The hardware conversion mode of ``target`` for ``fp8_dtype`` (e4m3fn on
    NVIDIA sm_89+ and gfx950, e4m3fnuz on gfx942), or None to decode with integers."""
    if not target.converts(fp8_dtype):
        return None
    return FP8_NATIVE_E4M3FNUZ if fp8_format(fp8_dtype).fnuz else FP8_NATIVE_E4M3FN


def kv_format(k_cache: torch.Tensor, v_cache: torch.Tensor, fp8_dtype, target: KernelTarget):
    """(k_view, v_view, X, fp8_mode, fp8_mul, compute tl dtype)."""
    if k_cache.dtype != v_cache.dtype:
        raise ValueError(f"K/V cache dtypes differ: {k_cache.dtype} vs {v_cache.dtype}")
    dt = k_cache.dtype
    if dt in _FP8_DTYPES or dt == torch.uint8:
        if dt == torch.uint8:
            if fp8_dtype is None:
                raise ValueError("uint8 KV caches need fp8_dtype= (float8_e4m3fn or float8_e4m3fnuz)")
            fdt = fp8_dtype
        else:
            if fp8_dtype is not None and fp8_dtype != dt:
                raise ValueError(f"fp8_dtype={fp8_dtype} contradicts the cache dtype {dt}")
            fdt = dt
        if fdt not in _FP8_DTYPES:
            raise ValueError(f"unsupported fp8 dtype {fdt}")
        mode = _native_fp8_mode(fdt, target)
        if mode is None:
            if not fp8_format(fdt).fnuz:
                mode, mul = FP8_EMU_E4M3FN, 256.0
            else:
                mode, mul = FP8_EMU_E4M3FNUZ, 128.0
        else:
            mul = 1.0
        return k_cache.view(torch.uint8), v_cache.view(torch.uint8), 16, mode, mul, tl.float16
    if dt in (torch.bfloat16, torch.float16):
        cdt = tl.bfloat16 if dt == torch.bfloat16 else tl.float16
        if dt == torch.bfloat16 and target.backend == "interpreter":
            # the Triton CPU interpreter computes bf16 tl.dot wrongly (triton 3.8);
            # upcast to fp32 there (exact for bf16 inputs)
            cdt = tl.float32
        return k_cache, v_cache, 8, FP8_NONE, 1.0, cdt
    raise ValueError(f"unsupported KV cache dtype {dt}")


def check_layout(k, v, X: int) -> Tuple[int, int, int, int]:
    """Validate 5D shapes/strides; return (num_blocks, H_kv, D, page)."""
    if k.dim() != 5 or v.dim() != 5:
        raise ValueError(f"expected 5D K/V caches, got {tuple(k.shape)} / {tuple(v.shape)}")
    nb, hkv, dx, page, xk = k.shape
    if xk != X:
        raise ValueError(f"K cache last dim {xk} != X={X} for this dtype")
    D = dx * X
    if tuple(v.shape) != (nb, hkv, page // X, D, X) or page % X:
        raise ValueError(
            f"V cache shape {tuple(v.shape)} does not match K {tuple(k.shape)}: expected "
            f"{(nb, hkv, page // X, D, X)} with page % X == 0"
        )
    if k.stride(4) != 1 or k.stride(3) != X or v.stride(4) != 1 or v.stride(3) != X:
        raise ValueError("5D caches need contiguous (page, X) / (D, X) tails")
    return nb, hkv, D, page


_FLOAT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
INDEX_DTYPES = (torch.int32, torch.int64)


def stride_or_1(t, dim: int) -> int:
    """``t.stride(dim)``, or 1 where that dimension has at most one element (its
    stride is never used: one specialisation of the kernel for such views)."""
    return t.stride(dim) if t.shape[dim] > 1 else 1


def _span(t) -> int:
    """Elements between the first and the last element of the view ``t``."""
    return sum((n - 1) * st for n, st in zip(t.shape, t.stride()) if n > 1)


def check_metadata(q, batch: int, block_tables, lens, lens_name: str, sinks, H_q: int, out, out_shape,
                    table_rows: Optional[int] = None) -> None:
    """The shape and dtype mistakes the host sees without a sync (TypeError /
    ValueError naming the argument). Values (block ids, lengths, indptr
    entries) are the kernels' to clamp: reading them would sync.

    Strides: the kernels take every view of ``block_tables``, the lengths and
    ``sinks`` as it is (its strides, stride 0 and storage offset honoured; no
    copy, so nothing is allocated inside a CUDA-graph capture), within 32-bit
    element offsets (a view spanning 2**31 elements or more is refused). ``out``
    must not have rows that share memory (a stride 0 over several rows)."""
    if q.dtype not in _FLOAT_DTYPES:
        raise TypeError(f"q: expected bfloat16, float16 or float32, got {q.dtype}")
    for name, t in (("block_tables", block_tables), (lens_name, lens)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
        if t.dtype not in INDEX_DTYPES:
            raise TypeError(f"{name}: expected int32 or int64, got {t.dtype}")
        if t.device != q.device:
            raise ValueError(f"{name}: expected device {q.device} (q's), got {t.device}")
    rows = batch if table_rows is None else table_rows
    if block_tables.dim() != 2 or block_tables.shape[0] < rows:
        raise ValueError(f"block_tables: expected ({rows}, max_blocks), got shape {tuple(block_tables.shape)}")
    if lens.dim() != 1 or lens.shape[0] < batch:
        raise ValueError(f"{lens_name}: expected (batch={batch},), got shape {tuple(lens.shape)}")
    if sinks is not None:
        if not isinstance(sinks, torch.Tensor) or not sinks.is_floating_point():
            raise TypeError(f"sinks: expected a floating-point tensor of H_q={H_q} logits, got {sinks!r:.80}")
        if sinks.dim() != 1 or sinks.shape[0] < H_q or sinks.device != q.device:
            raise ValueError(f"sinks: expected ({H_q},) on {q.device}, got shape {tuple(sinks.shape)} on {sinks.device}")
    for name, t in (("block_tables", block_tables), (lens_name, lens), ("sinks", sinks)):
        if t is not None and _span(t) > INT32_MAX:
            raise ValueError(f"{name}: a view of shape {tuple(t.shape)} with strides {t.stride()} spans "
                             f"{_span(t)} elements, past the kernels' 32-bit metadata offsets: pass "
                             f"{name}.contiguous()")
    if out is not None and (tuple(out.shape) != tuple(out_shape) or out.stride(-1) != 1):
        raise ValueError(f"out: expected shape {tuple(out_shape)} with a contiguous last dim, got "
                         f"{tuple(out.shape)} strides {out.stride()}")
    if out is not None and any(n > 1 and st == 0 for n, st in zip(out.shape, out.stride())):
        raise ValueError(f"out: rows share memory (shape {tuple(out.shape)}, strides {out.stride()}): "
                         f"pass an output whose rows and heads do not overlap, or out=None")


def check_metadata_values(block_tables, lens, *, num_blocks: int, page: int, batch: int,
                          qo_indptr=None, total_q: Optional[int] = None, lens_name: str = "context_lens",
                          rows_per_table_row: int = 1) -> None:
    """Raise ValueError naming every value the kernels would clamp or mask:
    block ids outside ``[0, num_blocks)`` within a sequence's length, lengths
    outside ``[0, block_tables.shape[1] * page]``, and
    ``qo_indptr`` entries outside ``[0, total_q]`` or decreasing. Reads the
    tensors on the host (a device sync): for debugging
    (``SGLANG_KV5D_DEBUG_BOUNDS=1``) and tests, never on the serving path."""
    width = block_tables.shape[1]
    ls = lens[:batch].tolist()
    problems = []
    for b, n in enumerate(ls):
        if not 0 <= n <= width * page:
            problems.append(f"{lens_name}[{b}]={n} outside [0, {width * page}] "
                            f"(block table width {width} x page {page})")
        used = -(-max(0, min(n, width * page)) // page)
        if used:
            tb = b // rows_per_table_row
            row = block_tables[tb, :used]
            bad = ((row < 0) | (row >= num_blocks)).nonzero().flatten().tolist()
            if bad:
                problems.append(f"block_tables[{tb}, {bad[0]}]={int(row[bad[0]])} outside [0, {num_blocks})"
                                + (f" (and {len(bad) - 1} more in that row)" if len(bad) > 1 else ""))
    if qo_indptr is not None:
        ind = qo_indptr.tolist()
        for i, x in enumerate(ind):
            if not 0 <= x <= total_q or (i and x < ind[i - 1]):
                problems.append(f"qo_indptr[{i}]={x}: entries must be non-decreasing in [0, {total_q}]")
                break
    if problems:
        raise ValueError("5D attention metadata out of range (SGLANG_KV5D_DEBUG_BOUNDS): " + "; ".join(problems[:8])
                         + (f"; {len(problems) - 8} more" if len(problems) > 8 else ""))


def debug_bounds(device) -> bool:
    """SGLANG_KV5D_DEBUG_BOUNDS on, and not inside a CUDA-graph capture (where a sync is not allowed)."""
    from ... import config as switches  # the package's switch registry

    if not switches.value(switches.DEBUG_BOUNDS):
        return False
    return not (device.type == "cuda" and torch.cuda.is_current_stream_capturing())


def _scale_args(scale, device):
    """(pointer tensor, float value, is_ptr)."""
    if scale is None:
        return None, 1.0, False
    if isinstance(scale, torch.Tensor):
        if scale.numel() != 1:
            raise ValueError("fp8 scales must be per-tensor (one element)")
        if scale.device != device:
            # a CPU scalar given for a GPU cache: one small copy (not inside a graph)
            scale = scale.to(device)
        return scale.reshape(1), 1.0, True
    return None, float(scale), False


# --------------------------------------------------------------------------- the shared prologue


def check_q(q, shape: str) -> None:
    """ValueError unless ``q`` is a 3-D tensor (``shape`` names its dims in the message)."""
    if not isinstance(q, torch.Tensor) or q.dim() != 3:
        raise ValueError(f"q must be {shape}, got {getattr(q, 'shape', type(q).__name__)}")


class KvView(NamedTuple):
    """The caches as the kernels read them, with what the launch needs to know of them."""

    k: torch.Tensor  # the K cache, or its uint8 view (fp8)
    v: torch.Tensor
    X: int  # elements per 16-byte vector: 8 (bf16 / fp16) or 16 (fp8)
    fp8_mode: int  # the FP8_MODE constexpr (kernel_common)
    fp8_mul: float  # the integer decode's exponent correction (1.0 otherwise)
    compute: object  # the tl dtype of the products
    num_blocks: int
    H_kv: int
    D: int
    page: int
    G: int  # query heads per KV head
    max_ctx: int  # the block tables' token capacity, at most 2**31 - 1


def kv_view(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor, fp8_dtype,
            target: KernelTarget) -> KvView:
    """The caches' format (``kv_format``) and 5D layout (``check_layout``)
    checked, then against ``q`` ``(rows, H_q, D)``: the same head dim, H_q a
    multiple of H_kv. ValueError naming the mismatch, in that order."""
    H_q, Dq = q.shape[1], q.shape[2]
    k, v, X, fp8_mode, fp8_mul, cdt = kv_format(k_cache, v_cache, fp8_dtype, target)
    nb, H_kv, D, page = check_layout(k, v, X)
    if Dq != D:
        raise ValueError(f"q head dim {Dq} != cache head dim {D}")
    if H_q % H_kv:
        raise ValueError(f"H_q={H_q} is not a multiple of H_kv={H_kv}")
    max_ctx = min(block_tables.shape[1] * page, INT32_MAX)
    return KvView(k, v, X, fp8_mode, fp8_mul, cdt, nb, H_kv, D, page, H_q // H_kv, max_ctx)


class ScoreArgs(NamedTuple):
    """The scale, window, cap and sink arguments of both kernels."""

    k_ptr: Optional[torch.Tensor]  # one-element fp32 scale on q's device, or None
    k_value: float  # the float scale (1.0 with a pointer or no scale)
    k_is_ptr: bool
    v_ptr: Optional[torch.Tensor]
    v_value: float
    v_is_ptr: bool
    window: int  # sliding window (<= 0: none)
    has_cap: bool
    has_sink: bool
    sinks: Optional[torch.Tensor]  # fp32 when given


def score_args(q: torch.Tensor, k_scale, v_scale, sliding_window, logit_cap, sinks) -> ScoreArgs:
    """The per-tensor dequantisation scales (``_scale_args``: ValueError for a
    scale of more than one element), the window, whether a logit cap and
    sinks are given (sinks as fp32)."""
    kp, kval, kis = _scale_args(k_scale, q.device)
    vp, vval, vis = _scale_args(v_scale, q.device)
    window = int(sliding_window) if sliding_window is not None else -1
    has_cap = logit_cap is not None and float(logit_cap) > 0
    has_sink = sinks is not None
    if has_sink and sinks.dtype != torch.float32:
        sinks = sinks.float()
    return ScoreArgs(kp, kval, kis, vp, vval, vis, window, has_cap, has_sink, sinks)
