"""Pure helpers the 5D attention paths share: dtypes, scales, windows, per-tensor
quantization, 5D gathers and page tables from SGLang's metadata, and the
layer's buffers resolved through hybrid / SWA / nested pools (with the wait).
"""

from __future__ import annotations

import importlib
from typing import Any, Dict, Optional, Tuple

from sglang_kv5d.kernel_failures import dtype_name  # noqa: F401 - the attention paths name dtypes with it
from sglang_kv5d.platform import fp8_any_dtypes
from sglang_kv5d.pools import PoolLayoutError, resolve_kv_subpool


_scale_cache: Dict[Tuple[float, str], Any] = {}  # (value, device) -> fp32 [1] scale tensor; clear_scale_cache()


def clear_scale_cache() -> None:
    """Forget the cached per-tensor scale tensors (reset_state)."""
    _scale_cache.clear()


def _torch():
    import torch

    return torch


def is_fp8(dtype) -> bool:
    """Is ``dtype`` an fp8 KV cache dtype (any of torch's fp8 formats, e5m2 included)?"""
    return dtype in fp8_any_dtypes()


def decode_sliding_window_arg(sliding_window_size: Optional[int]) -> int:
    """``pa_decode_gluon``'s ``sliding_window`` for SGLang's ``sliding_window_size``.

    SGLang: ``sliding_window_size + 1`` visible keys (current token included);
    aiter: keys ``c >= ctx - W + 1``, i.e. W - 1 keys. So W = size + 2; 0 = off.
    """
    if sliding_window_size is None or sliding_window_size < 0:
        return 0
    return int(sliding_window_size) + 2


def layer_window(layer) -> int:
    w = getattr(layer, "sliding_window_size", None)
    return int(w) if w is not None and w > -1 else -1


def scale_tensor(value, device):
    """A per-tensor dequant scale as an fp32 ``[1]`` tensor on ``device``."""
    torch = _torch()
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"expected a per-tensor scale, got shape {tuple(value.shape)}")
        t = value.detach()
        if t.dtype != torch.float32 or t.device != device:
            t = t.to(device=device, dtype=torch.float32)
        return t.reshape(1)
    v = 1.0 if value is None else float(value)
    key = (v, str(device))
    t = _scale_cache.get(key)
    if t is None:
        t = torch.full((1,), v, dtype=torch.float32, device=device)
        _scale_cache[key] = t
    return t


def kv_scales(layer, backend, device):
    k = getattr(layer, "k_scale", None)
    v = getattr(layer, "v_scale", None)
    if k is None:
        k = getattr(backend, "k_scale", None)
    if v is None:
        v = getattr(backend, "v_scale", None)
    return scale_tensor(k, device), scale_tensor(v, device)


def quantize_per_tensor(x, fp8_dtype):
    """(x_fp8, scale): saturating per-tensor quantization, scale = amax / fp8 max.

    ``scale`` is an fp32 ``[1]`` tensor on x's device (no host sync); it is the
    dequantization multiplier (x ~= x_fp8 * scale).
    """
    torch = _torch()
    fmax = torch.finfo(fp8_dtype).max
    xf = x.float()
    scale = (xf.abs().amax() / fmax).clamp(min=1e-12).reshape(1)
    xq = (xf / scale).clamp(-fmax, fmax).to(fp8_dtype)
    return xq, scale


def gather_5d_to_linear(k_cache, v_cache, slots, page_size: int):
    """Token rows of a SHUFFLE 5D cache: (T, H, D) K and (T, H, D_v) V at ``slots``.

    Works on any element type (pass the storage view, e.g. uint8 for fp8).
    """
    torch = _torch()
    slots = slots.to(torch.long)
    blk = torch.div(slots, page_size, rounding_mode="floor")
    off = slots - blk * page_size
    x = k_cache.shape[-1]
    t = slots.shape[0]
    k_lin = k_cache[blk, :, :, off, :].reshape(t, k_cache.shape[1], -1)
    v_lin = v_cache[blk, :, torch.div(off, x, rounding_mode="floor"), :, off % x]
    return k_lin, v_lin


def block_table_from_token_slots(kv_indptr, token_slots, page_size: int, batch_size: int, max_len: int):
    """(B, cdiv(max_len, page)) int32 page ids from SGLang's flat per-token slots.

    Row ``b`` covers ``token_slots[kv_indptr[b]:kv_indptr[b+1]]``; page ``j`` of
    it is ``token_slots[kv_indptr[b] + j * page] // page`` (SGLang's paged
    allocator keeps a request's tokens page-aligned). Entries past a row's
    length are 0 and never read. Pure device ops, no host sync.
    """
    torch = _torch()
    device = token_slots.device
    width = max(1, -(-int(max_len) // page_size))
    starts = kv_indptr[:batch_size].to(torch.long)
    lens = kv_indptr[1 : batch_size + 1].to(torch.long) - starts
    offs = torch.arange(width, device=device, dtype=torch.long) * page_size
    valid = offs[None, :] < lens[:, None]
    pos = torch.where(valid, starts[:, None] + offs[None, :], torch.zeros_like(starts)[:, None])
    n = token_slots.shape[0]
    if n == 0:
        return torch.zeros(batch_size, width, dtype=torch.int32, device=device)
    pos = pos.clamp(max=n - 1)
    pages = torch.div(token_slots.to(torch.long)[pos], page_size, rounding_mode="floor")
    return torch.where(valid, pages, torch.zeros_like(pages)).to(torch.int32)


def page_table_2d(table, batch_size: int):
    """The first ``batch_size`` rows of a 2-D page table, in its own integer
    dtype and strides (the Triton kernels read int32 and int64 views of any
    strides, so no copy is made, inside a CUDA-graph capture neither; the
    aiter path casts, which makes a contiguous copy)."""
    return table[:batch_size]


def backend_qo_indptr(backend):
    meta = getattr(backend, "forward_metadata", None)
    qo = getattr(meta, "qo_indptr", None)
    if qo is None:
        qo = getattr(backend, "qo_indptr", None)  # SGLang <= 0.5.22 reads this one
    if qo is None:
        raise AttributeError("backend has neither forward_metadata.qo_indptr nor qo_indptr")
    return qo


def max_kv_len(backend, forward_batch, fallback_len: int) -> int:
    meta = backend.forward_metadata
    v = getattr(meta, "max_kv_len", None)
    if v is not None:
        return int(v)
    cpu = getattr(forward_batch, "seq_lens_cpu", None)
    if cpu is not None and len(cpu):
        return int(cpu.max())
    return int(fallback_len)


def layer_cache(backend, layer, k_cache=None, v_cache=None):
    """Resolve (and wait for) the layer's sub-pool; its K/V views in the logical dtype."""
    sub, local = resolve_kv_subpool(backend.token_to_kv_pool, layer.layer_id)
    k_store = sub.k_buffer[local]
    v_store = sub.v_buffer[local]
    if k_store.dim() != 5 or v_store.dim() != 5:
        raise PoolLayoutError(
            f"layer {layer.layer_id}: {type(sub).__name__} buffers are "
            f"{k_store.dim()}-D/{v_store.dim()}-D, not SHUFFLE 5D; the vectorized_5d "
            "attention path cannot read them"
        )
    dtype = getattr(sub, "dtype", k_store.dtype)
    if k_cache is None:
        k_cache = k_store if k_store.dtype == dtype else k_store.view(dtype)
    if v_cache is None:
        v_cache = v_store if v_store.dtype == dtype else v_store.view(dtype)
    if tuple(k_cache.shape) != tuple(k_store.shape) or tuple(v_cache.shape) != tuple(v_store.shape):
        raise PoolLayoutError(
            f"layer {layer.layer_id}: the caller's K/V caches {tuple(k_cache.shape)}/"
            f"{tuple(v_cache.shape)} are not the layer's buffers {tuple(k_store.shape)}/"
            f"{tuple(v_store.shape)} in {type(sub).__name__}"
        )
    page = int(getattr(sub, "page_size", k_store.shape[3]))
    return sub, k_cache, v_cache, k_store, v_store, dtype, page


def portable_args(layer, backend, kv_dtype, device, *, window: int, sinks, cap: float) -> dict:
    """The keyword arguments every portable 5D kernel call of ``layer`` takes:
    softmax scale, per-tensor fp8 scales (fp32 ``[1]`` on ``device``; None for a
    bf16/fp16 cache), the fp8 dtype, window, sinks and soft cap."""
    fp8 = is_fp8(kv_dtype)
    k_scale = v_scale = None
    if fp8:
        k_scale, v_scale = kv_scales(layer, backend, device)
    return dict(sm_scale=float(layer.scaling), k_scale=k_scale, v_scale=v_scale,
                fp8_dtype=kv_dtype if fp8 else None, sliding_window=window, sinks=sinks, logit_cap=cap)


def kernels_module():
    return importlib.import_module("sglang_kv5d.kernels")
