"""Build REAL SGLang KV pools on device="cpu" for tests, on any supported SGLang.

Constructor signatures differ between SGLang releases (0.5.23 adds
``allocation_label`` and DSA/QSA arguments; 0.5.16 has neither; SWAKVPool
grew ``full_kv_pool_class``/``*_kwargs`` in 0.5.19). The builders here pass only
the keyword arguments the installed constructor accepts, found with
``inspect.signature``.

5D buffers need SGLANG_AITER_KV_CACHE_LAYOUT=vectorized_5d in the environment
and ``memory_pool._use_aiter`` true. ``_use_aiter`` is evaluated once at import
(False off ROCm), so tests patch the module flag: use :func:`vectorized_5d_env`
(a context manager) or the ``monkeypatch`` based :func:`enable_5d`.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import inspect
import os
from typing import Any, Dict, Iterable, List, Optional, Sequence

import torch

from sglang_kv5d.kernels import attention_reference

DEVICE = "cpu"


def sglang_version() -> str:
    return importlib.metadata.version("sglang")


def memory_pool_module():
    return importlib.import_module("sglang.srt.mem_cache.memory_pool")


def swa_pool_module():
    return importlib.import_module("sglang.srt.mem_cache.swa_memory_pool")


def _accepted(fn, kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """The subset of ``kwargs`` that ``fn`` accepts (all of them with **kwargs)."""
    params = inspect.signature(fn).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return dict(kwargs)
    return {k: v for k, v in kwargs.items() if k in params}


def accepts(cls, name: str) -> bool:
    return name in inspect.signature(cls.__init__).parameters


def enable_5d(monkeypatch, layout: str = "vectorized_5d") -> None:
    """Make new MHATokenToKVPool objects allocate ``layout`` buffers (pytest)."""
    mp = memory_pool_module()
    monkeypatch.setenv("SGLANG_AITER_KV_CACHE_LAYOUT", layout)
    monkeypatch.setattr(mp, "_use_aiter", True)


@contextlib.contextmanager
def vectorized_5d_env(layout: str = "vectorized_5d"):
    """Context-manager twin of :func:`enable_5d` for non-pytest code."""
    mp = memory_pool_module()
    old_flag = mp._use_aiter
    old_env = os.environ.get("SGLANG_AITER_KV_CACHE_LAYOUT")
    os.environ["SGLANG_AITER_KV_CACHE_LAYOUT"] = layout
    mp._use_aiter = True
    try:
        yield
    finally:
        mp._use_aiter = old_flag
        if old_env is None:
            os.environ.pop("SGLANG_AITER_KV_CACHE_LAYOUT", None)
        else:
            os.environ["SGLANG_AITER_KV_CACHE_LAYOUT"] = old_env


def make_mha_pool(
    *,
    size: int = 256,
    page_size: int = 16,
    dtype: torch.dtype = torch.bfloat16,
    head_num: int = 2,
    head_dim: int = 64,
    layer_num: int = 2,
    v_head_dim: Optional[int] = None,
    start_layer: Optional[int] = None,
    cls=None,
    **extra,
):
    mp = memory_pool_module()
    cls = cls or mp.MHATokenToKVPool
    kwargs = dict(
        size=size,
        page_size=page_size,
        dtype=dtype,
        head_num=head_num,
        head_dim=head_dim,
        layer_num=layer_num,
        device=DEVICE,
        enable_memory_saver=False,
        v_head_dim=v_head_dim,
        start_layer=start_layer,
        enable_alt_stream=False,
        enable_kv_cache_copy=False,
        **extra,
    )
    return cls(**_accepted(cls.__init__, kwargs))


def qwen35_layer_ids(num_layers: int = 8, every: int = 4) -> List[int]:
    """Full-attention layer ids of a Qwen3.5-like stack (every 4th layer)."""
    return [i for i in range(num_layers) if (i + 1) % every == 0]


def make_hybrid_pool(
    *,
    full_attention_layer_ids: Sequence[int] = None,
    num_layers: int = 8,
    size: int = 256,
    page_size: int = 16,
    dtype: torch.dtype = torch.bfloat16,
    head_num: int = 1,
    head_dim: int = 64,
    full_kv_pool=None,
    mamba_pool=None,
    start_layer: Optional[int] = None,
    cls=None,
):
    """HybridLinearKVPool (Qwen3.5-like: layers 3 and 7 of 8 are full attention).

    ``mamba_pool`` is only stored by the constructor; the linear-attention state
    is irrelevant to KV layout and resolution, so None is passed by default.
    """
    mp = memory_pool_module()
    cls = cls or mp.HybridLinearKVPool
    if full_attention_layer_ids is None:
        full_attention_layer_ids = qwen35_layer_ids(num_layers)
    kwargs = dict(
        size=size,
        dtype=dtype,
        page_size=page_size,
        head_num=head_num,
        head_dim=head_dim,
        full_attention_layer_ids=list(full_attention_layer_ids),
        device=DEVICE,
        mamba_pool=mamba_pool,
        enable_memory_saver=False,
        enable_kv_cache_copy=False,
        use_mla=False,
        start_layer=start_layer,
    )
    if full_kv_pool is not None:
        if not accepts(cls, "full_kv_pool"):
            raise RuntimeError(f"{cls.__name__} in SGLang {sglang_version()} has no full_kv_pool=")
        kwargs["full_kv_pool"] = full_kv_pool
    return cls(**_accepted(cls.__init__, kwargs))


def make_swa_pool(
    *,
    swa_attention_layer_ids: Sequence[int] = (0, 2),
    full_attention_layer_ids: Sequence[int] = (1, 3),
    size: int = 256,
    size_swa: int = 128,
    page_size: int = 16,
    dtype: torch.dtype = torch.bfloat16,
    head_num: int = 2,
    head_dim: int = 64,
    cls=None,
):
    mp = memory_pool_module()
    cls = cls or swa_pool_module().SWAKVPool
    kwargs = dict(
        size=size,
        size_swa=size_swa,
        page_size=page_size,
        dtype=dtype,
        head_num=head_num,
        head_dim=head_dim,
        swa_attention_layer_ids=list(swa_attention_layer_ids),
        full_attention_layer_ids=list(full_attention_layer_ids),
        device=DEVICE,
        token_to_kv_pool_class=mp.MHATokenToKVPool,
    )
    if accepts(cls, "enable_memory_saver"):
        kwargs["enable_memory_saver"] = False
    return cls(**_accepted(cls.__init__, kwargs))


def make_nested_pool(*, dtype: torch.dtype = torch.bfloat16, page_size: int = 16, head_dim: int = 64):
    """HybridLinearKVPool whose full-attention side is an SWAKVPool.

    16 model layers, attention at 3, 7, 11, 15 (dense ids 0..3 inside the SWA
    pool: 0 and 2 sliding-window, 1 and 3 full).
    """
    inner = make_swa_pool(
        swa_attention_layer_ids=(0, 2),
        full_attention_layer_ids=(1, 3),
        dtype=dtype,
        page_size=page_size,
        head_dim=head_dim,
    )
    return make_hybrid_pool(
        full_attention_layer_ids=[3, 7, 11, 15],
        num_layers=16,
        dtype=dtype,
        page_size=page_size,
        head_num=inner.head_num,
        head_dim=head_dim,
        full_kv_pool=inner,
    )


def layer_done_counter(num_layers: int, monkeypatch=None):
    """A real SGLang LayerDoneCounter (CPU events) with an active consumer.

    0.5.16's cache_controller binds ``device_module = torch.get_device_module()``
    (torch.cuda on a CUDA build even without a GPU; 0.5.23 picks torch.cpu), so
    without a GPU the module global is pointed at torch.cpu for the test.
    """
    cc = importlib.import_module("sglang.srt.managers.cache_controller")
    if not torch.cuda.is_available() and getattr(cc, "device_module", None) is torch.cuda:
        if monkeypatch is None:
            raise RuntimeError("pass monkeypatch: SGLang's cache_controller uses torch.cuda here")
        monkeypatch.setattr(cc, "device_module", torch.cpu)
    counter = cc.LayerDoneCounter(num_layers)
    counter.set_consumer(0)
    return counter


class RecordingList(list):
    """A list that appends ("read", tag, index) to ``log`` on every item read."""

    def __init__(self, items: Iterable, log: list, tag: str):
        super().__init__(items)
        self._log = log
        self._tag = tag

    def __getitem__(self, i):
        self._log.append(("read", self._tag, i))
        return super().__getitem__(i)

    def __iter__(self):
        self._log.append(("read", self._tag, "iter"))
        return super().__iter__()


def record_waits_and_reads(pool, counter) -> list:
    """Register ``counter`` on ``pool`` and log its waits and every leaf buffer read.

    Returns the shared log: ("wait", threshold) entries from the real
    LayerDoneCounter and ("read", "<leaf>.k_buffer", index) entries.
    """
    from sglang_kv5d.pools import iter_leaf_pools

    log: list = []
    pool.register_layer_transfer_counter(counter)
    orig = counter.wait_until

    def wait_until(threshold):
        log.append(("wait", threshold))
        return orig(threshold)

    counter.wait_until = wait_until
    for i, leaf in enumerate(iter_leaf_pools(pool)):
        leaf.k_buffer = RecordingList(leaf.k_buffer, log, f"leaf{i}.k_buffer")
        leaf.v_buffer = RecordingList(leaf.v_buffer, log, f"leaf{i}.v_buffer")
    return log


# ---------------------------------------------------------------------------
# Writing logical K/V into a pool (test-only; independent of the package code)
# ---------------------------------------------------------------------------


def write_tokens(pool_leaf, local_layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
    """Store logical ``k``/``v`` (T, H, D) at ``slots`` of one leaf layer.

    Handles SHUFFLE 5D and NHD buffers, bf16 and fp8 (stored as uint8; values
    are cast to the pool dtype unscaled, the caller pre-divides by a scale).
    """
    kb = pool_leaf.k_buffer[local_layer]
    vb = pool_leaf.v_buffer[local_layer]
    k = k.to(pool_leaf.dtype)
    v = v.to(pool_leaf.dtype)
    if pool_leaf.store_dtype != pool_leaf.dtype:
        k = k.view(pool_leaf.store_dtype)
        v = v.view(pool_leaf.store_dtype)
    slots = slots.long()
    if kb.dim() == 5:
        page = pool_leaf.page_size
        x = kb.shape[-1]
        blk, off = slots // page, slots % page
        T, H, D = k.shape
        for t in range(T):
            b, o = int(blk[t]), int(off[t])
            kb[b, :, :, o, :] = k[t].reshape(H, D // x, x)
            vb[b, :, o // x, :, o % x] = v[t]
    else:
        kb[slots] = k
        vb[slots] = v


def read_tokens(pool_leaf, local_layer: int, slots: torch.Tensor, k_scale=1.0, v_scale=1.0):
    """Logical float64 (T, H, D) K and V at ``slots`` (dequantized with the scales)."""
    kb = pool_leaf.k_buffer[local_layer]
    vb = pool_leaf.v_buffer[local_layer]
    slots = slots.long()
    if kb.dim() == 5:
        page, x = pool_leaf.page_size, kb.shape[-1]
        blk, off = slots // page, slots % page
        k = kb[blk, :, :, off, :].reshape(len(slots), kb.shape[1], -1)
        v = vb[blk, :, off // x, :, off % x]
    else:
        k, v = kb[slots], vb[slots]
    if pool_leaf.store_dtype != pool_leaf.dtype:
        k, v = k.view(pool_leaf.dtype), v.view(pool_leaf.dtype)
    return k.to(torch.float64) * float(k_scale), v.to(torch.float64) * float(v_scale)


# ---------------------------------------------------------------------------
# float64 attention: the package's one reference (sglang_kv5d.kernels.attention_reference)
# ---------------------------------------------------------------------------

ref_attention = attention_reference.attention_ref  # (q, k, v, q_positions, *, sm_scale, sliding_window, ...)


class PortableRecorder:
    """float64 stand-ins for sglang_kv5d.kernels.{decode,extend}_attention_5d.

    Same signatures as the kernels' contract; records every call in ``calls``.
    """

    def __init__(self):
        self.calls = []

    def decode_attention_5d(self, q, k_cache, v_cache, block_tables, context_lens, *, sm_scale,
                            k_scale=None, v_scale=None, fp8_dtype=None, sliding_window=-1,
                            sinks=None, logit_cap=0.0, num_splits=None, out=None):
        self.calls.append(("decode", dict(q=q, k_cache=k_cache, block_tables=block_tables,
                                          context_lens=context_lens, sm_scale=sm_scale, k_scale=k_scale,
                                          v_scale=v_scale, fp8_dtype=fp8_dtype, sliding_window=sliding_window,
                                          sinks=sinks, logit_cap=logit_cap)))
        assert block_tables.dtype in (torch.int32, torch.int64) and block_tables.dim() == 2
        assert context_lens.dtype in (torch.int32, torch.int64)  # the kernel reads both
        res = attention_reference.decode_attention_5d_ref(
            q, k_cache, v_cache, block_tables, context_lens, sm_scale=sm_scale, k_scale=k_scale, v_scale=v_scale,
            fp8_dtype=fp8_dtype, sliding_window=sliding_window, sinks=sinks, logit_cap=logit_cap)
        if out is None:
            out = torch.empty(res.shape, dtype=q.dtype)
        out.copy_(res.to(out.dtype))
        return out

    def extend_attention_5d(self, q, k_cache, v_cache, block_tables, qo_indptr, kv_lens, *, sm_scale,
                            causal=True, k_scale=None, v_scale=None, fp8_dtype=None, sliding_window=-1,
                            sinks=None, logit_cap=0.0, out=None):
        self.calls.append(("extend", dict(q=q, block_tables=block_tables, qo_indptr=qo_indptr, kv_lens=kv_lens,
                                          sm_scale=sm_scale, k_scale=k_scale, v_scale=v_scale, fp8_dtype=fp8_dtype,
                                          sliding_window=sliding_window, sinks=sinks, logit_cap=logit_cap)))
        assert causal is True
        assert block_tables.dtype == torch.int32 and qo_indptr.dtype == torch.int32 and kv_lens.dtype == torch.int32
        res = attention_reference.extend_attention_5d_ref(
            q, k_cache, v_cache, block_tables, qo_indptr, kv_lens, sm_scale=sm_scale, k_scale=k_scale,
            v_scale=v_scale, fp8_dtype=fp8_dtype, sliding_window=sliding_window, sinks=sinks, logit_cap=logit_cap)
        if out is None:
            out = torch.empty(res.shape, dtype=q.dtype)
        out.copy_(res.to(out.dtype))
        return out
