"""Copy a set of token slots out of SHUFFLE 5D KV buffers and back (pure, no SGLang import).

SGLang's retraction (``Req.offload_kv_cache`` / ``load_kv_cache`` through
``MHATokenToKVPool.get_cpu_copy`` / ``load_cpu_copy``) saves a request's
tokens to host memory and writes them back later, possibly to other slots.
These functions do the same for buffers in the SHUFFLE 5D layout, one
layer at a time, all tokens of a chunk in one gather or scatter per buffer:

    K buffer  (num_blocks, H, D // X, page, X)      element (b, h, i, p, x) is
              dim i * X + x of head h of slot b * page + p
    V buffer  (num_blocks, H, page // X, D_v, X)    element (b, h, j, d, x) is
              dim d of head h of slot b * page + j * X + x
    X         16 // itemsize: 16 for fp8 (stored as uint8 or as an fp8
              dtype), 8 for bf16 / fp16; page is any multiple of X

A slot ``s`` lives in block ``s // page`` at in-page position ``s % page``;
a set of slots may cross page boundaries and need not be contiguous.

The compact per-token form is SGLang's own NHD offload format, so the
composite pools that filter or re-chunk it (``SWAKVPool``) work unchanged:

    kv_cache_cpu[layer][chunk] == [k, v]
        k  (n, H, D)    the buffer's dtype (uint8 for an fp8 pool stored as
        v  (n, H, D_v)  uint8), on the host; n = the chunk's slot count
    chunk c holds slots indices[c * chunk_size : (c + 1) * chunk_size]

Bytes are copied exactly (no conversion): the gather and scatter run on an
integer view of the buffer, so fp8 dtypes the indexing kernels do not cover
are copied too.

    gather_slots_5d(k_buf, v_buf, slots)          -> (k, v) on the buffer's device
    scatter_slots_5d(k_buf, v_buf, slots, k, v)   in place
    get_cpu_copy_5d(k_buffers, v_buffers, indices, chunk_size)   -> kv_cache_cpu
    load_cpu_copy_5d(k_buffers, v_buffers, kv_cache_cpu, indices, chunk_size)
"""

from __future__ import annotations

from typing import Any, List, Sequence, Tuple

__all__ = ["gather_slots_5d", "scatter_slots_5d", "get_cpu_copy_5d", "load_cpu_copy_5d"]

_INT_OF_ITEMSIZE = {1: "uint8", 2: "int16", 4: "int32", 8: "int64"}


def _as_int(t):
    """``t`` viewed as the integer dtype of its element size (same shape, same bytes)."""
    import torch

    return t.view(getattr(torch, _INT_OF_ITEMSIZE[t.element_size()]))


def _geometry(k_buf, v_buf) -> Tuple[int, int, int, int, int, int]:
    """(num_blocks, H, D, D_v, page, X) of one layer's 5D pair; ValueError if inconsistent."""
    if k_buf.dim() != 5 or v_buf.dim() != 5:
        raise ValueError(f"SHUFFLE 5D buffers expected, got K {tuple(k_buf.shape)} V {tuple(v_buf.shape)}")
    blocks, heads, dx, page, x = k_buf.shape
    vb, vh, px, dv, vx = v_buf.shape
    if (vb, vh, vx) != (blocks, heads, x) or px * x != page or k_buf.dtype != v_buf.dtype:
        raise ValueError(f"K {tuple(k_buf.shape)} {k_buf.dtype} and V {tuple(v_buf.shape)} {v_buf.dtype} "
                         "are not one SHUFFLE 5D pair (blocks, H, X, page and dtype must agree)")
    if x * k_buf.element_size() != 16:
        raise ValueError(f"X={x} does not fill 16 bytes with {k_buf.dtype} elements")
    return blocks, heads, dx * x, dv, page, x


def _coords(slots, page: int, x: int):
    """(block, in-page position, position // X, position % X) of each slot, int64."""
    blk = slots // page
    off = slots - blk * page
    return blk, off, off // x, off % x


def _slots(indices, device):
    import torch

    s = torch.as_tensor(indices, device=device)
    if s.dim() != 1 or s.dtype.is_floating_point or s.dtype == torch.bool:
        raise ValueError(f"slot indices must be a 1-D integer tensor, got {s.dtype} {tuple(s.shape)}")
    return s.to(torch.int64)


def _check_range(slots, capacity: int) -> None:
    """IndexError unless 0 <= every slot < capacity (one host sync; nothing is read before it)."""
    import torch

    if slots.numel() == 0:
        return
    lo, hi = (int(v) for v in torch.aminmax(slots))
    if lo < 0 or hi >= capacity:
        raise IndexError(f"slot indices must lie in [0, {capacity}) for this 5D pool, got [{lo}, {hi}]")


def gather_slots_5d(k_buf, v_buf, slots):
    """K (n, H, D) and V (n, H, D_v) of ``slots`` ((n,) int64, on the buffers' device,
    in range) from one layer's 5D pair, in the buffers' dtype, on their device."""
    _, heads, d, _, page, x = _geometry(k_buf, v_buf)
    blk, off, hi, lo = _coords(slots, page, x)
    k = _as_int(k_buf)[blk, :, :, off, :]  # (n, H, D // X, X)
    v = _as_int(v_buf)[blk, :, hi, :, lo]  # (n, H, D_v)
    return k.reshape(slots.shape[0], heads, d).view(k_buf.dtype), v.view(v_buf.dtype)


def scatter_slots_5d(k_buf, v_buf, slots, k, v) -> None:
    """Write K (n, H, D) and V (n, H, D_v), already in the buffers' dtype and on their
    device, to ``slots`` ((n,) int64, in range) of one layer's 5D pair, in place.
    Only those slots' bytes change. Repeated slots: one of the rows wins, as in SGLang."""
    _, heads, d, dv, page, x = _geometry(k_buf, v_buf)
    n = slots.shape[0]
    if tuple(k.shape) != (n, heads, d) or tuple(v.shape) != (n, heads, dv):
        raise ValueError(f"expected K ({n}, {heads}, {d}) and V ({n}, {heads}, {dv}) for {n} slots, "
                         f"got K {tuple(k.shape)} V {tuple(v.shape)}")
    if k.dtype != k_buf.dtype or v.dtype != v_buf.dtype:
        raise ValueError(f"K/V dtypes {k.dtype}/{v.dtype} differ from the buffer's {k_buf.dtype}")
    blk, off, hi, lo = _coords(slots, page, x)
    _as_int(k_buf)[blk, :, :, off, :] = _as_int(k.contiguous()).reshape(n, heads, d // x, x)
    _as_int(v_buf)[blk, :, hi, :, lo] = _as_int(v.contiguous())


def _synchronize(device) -> None:
    """Wait for the device's queued work (what SGLang's copies do around themselves)."""
    import torch

    if getattr(device, "type", None) == "cuda":
        torch.cuda.synchronize(device)


def _chunks(slots, chunk_size: int) -> List[Any]:
    if chunk_size <= 0:
        raise ValueError(f"chunk_size must be positive, got {chunk_size}")
    return [slots[i:i + chunk_size] for i in range(0, slots.shape[0], chunk_size)]


def _check_layers(k_buffers: Sequence[Any], v_buffers: Sequence[Any]) -> int:
    """Slot capacity (num_blocks * page) shared by every layer; ValueError otherwise."""
    if len(k_buffers) != len(v_buffers) or not k_buffers:
        raise ValueError(f"{len(k_buffers)} K and {len(v_buffers)} V layer buffers")
    caps = set()
    for kb, vb in zip(k_buffers, v_buffers):
        blocks, _, _, _, page, _ = _geometry(kb, vb)
        caps.add(blocks * page)
    if len(caps) != 1:
        raise ValueError(f"layers disagree on the slot capacity: {sorted(caps)}")
    return caps.pop()


def get_cpu_copy_5d(k_buffers: Sequence[Any], v_buffers: Sequence[Any], indices, chunk_size: int):
    """Host copy of ``indices``' K and V from every layer, in SGLang's offload format.

    ``k_buffers`` / ``v_buffers``: one 5D tensor per layer (see the module doc), all on
    one device. ``indices``: 1-D integer slot ids (any device), each in
    [0, num_blocks * page). Returns ``out[layer][chunk] = [k, v]``, k (n, H, D) and
    v (n, H, D_v) host tensors in the buffers' dtype, chunks of ``chunk_size`` slots in
    ``indices`` order. Raises IndexError for an out-of-range slot before reading.
    """
    device = k_buffers[0].device
    capacity = _check_layers(k_buffers, v_buffers)
    slots = _slots(indices, device)
    _check_range(slots, capacity)
    chunks = _chunks(slots, chunk_size)
    _synchronize(device)
    out = []
    for kb, vb in zip(k_buffers, v_buffers):
        layer = []
        for c in chunks:
            k, v = gather_slots_5d(kb, vb, c)
            layer.append([k.to("cpu", non_blocking=True), v.to("cpu", non_blocking=True)])
        out.append(layer)
    _synchronize(device)
    return out


def load_cpu_copy_5d(k_buffers: Sequence[Any], v_buffers: Sequence[Any], kv_cache_cpu, indices,
                     chunk_size: int) -> None:
    """Write a :func:`get_cpu_copy_5d` result (or SGLang's NHD offload of the same
    geometry) back to the slots ``indices`` (may differ from those it was taken from),
    in place, layer by layer, chunk c to ``indices[c * chunk_size:(c + 1) * chunk_size]``.

    Every chunk's shapes and dtypes are checked against the buffers and every slot is
    range-checked before anything is written; only the addressed slots change.
    """
    device = k_buffers[0].device
    capacity = _check_layers(k_buffers, v_buffers)
    slots = _slots(indices, device)
    _check_range(slots, capacity)
    chunks = _chunks(slots, chunk_size)
    if len(kv_cache_cpu) != len(k_buffers):
        raise ValueError(f"the copy holds {len(kv_cache_cpu)} layers, the pool {len(k_buffers)}")
    for li, (kb, vb) in enumerate(zip(k_buffers, v_buffers)):
        _, heads, d, dv, _, _ = _geometry(kb, vb)
        layer = kv_cache_cpu[li]
        if len(layer) != len(chunks):
            raise ValueError(f"layer {li}: the copy holds {len(layer)} chunks, {len(chunks)} expected for "
                             f"{slots.shape[0]} slots in chunks of {chunk_size}")
        for ci, c in enumerate(chunks):
            k, v = layer[ci][0], layer[ci][1]
            n = c.shape[0]
            if tuple(k.shape) != (n, heads, d) or tuple(v.shape) != (n, heads, dv) or \
                    k.dtype != kb.dtype or v.dtype != vb.dtype:
                raise ValueError(f"layer {li} chunk {ci}: K {tuple(k.shape)} {k.dtype} / V {tuple(v.shape)} "
                                 f"{v.dtype} do not fit {n} slots of ({heads}, {d}) / ({heads}, {dv}) {kb.dtype}")
    _synchronize(device)
    for kb, vb, layer in zip(k_buffers, v_buffers, kv_cache_cpu):
        for c, (k, v, *_rest) in zip(chunks, layer):
            scatter_slots_5d(kb, vb, c, k.to(device, non_blocking=True), v.to(device, non_blocking=True))
    _synchronize(device)
