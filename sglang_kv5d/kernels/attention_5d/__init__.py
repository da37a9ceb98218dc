"""Portable Triton attention that reads the SHUFFLE 5D ("vectorized_5d") KV layout.

Layout, with ``X = 16 // element_bytes`` (8 for bf16/fp16, 16 for fp8)::

    K cache: (num_blocks, H_kv, D // X, page, X)   K5d[b, h, d // X, t, d % X] = K[b, t, h, d]
    V cache: (num_blocks, H_kv, page // X, D, X)   V5d[b, h, t // X, d, t % X] = V[b, t, h, d]

Both ``(page, X)`` (K) and ``(D, X)`` (V) tails must be contiguous; block, head and
chunk strides may be anything (views of a larger pool are fine). The query and
every metadata tensor (block tables, context / kv lengths, ``qo_indptr``, sinks)
may be any view: the kernels read them through their strides (stride 0 and
storage offsets included) and the host copies none of them (the extend's
``qo_indptr`` is clamped by device ops into a fresh tensor, as it always was).
Strides equal to 1 are specialised by
Triton, so contiguous metadata compiles to the code it always did. ``out``
needs a contiguous last dim and rows that do not share memory.

Two entry points:

* :func:`decode_attention_5d`: one query token per sequence, split-K over the
  context with a second reduce kernel when more than one split is used. The
  split count is chosen on the host from shapes only (batch, KV heads, SM count,
  block-table width) and, on NVIDIA, the compiled kernel's resident CTAs per SM
  (registers and shared memory, read once per configuration), so the launch is a
  fixed grid with no host syncs and can be captured in a CUDA graph.
* :func:`extend_attention_5d`: several new tokens per sequence (chunked prefill
  with prefix reuse). The new tokens must already be written into the cache.

FP8 caches (``torch.float8_e4m3fn`` / ``torch.float8_e4m3fnuz`` typed, or ``uint8``
storage with ``fp8_dtype=``) are decoded in-kernel. Where the hardware converts the
format natively (e4m3fn on NVIDIA sm_89+ and gfx950, e4m3fnuz on gfx942) the
native conversion is used; everywhere else (the Triton CPU interpreter, e4m3fnuz
on NVIDIA) the bits are decoded with integer arithmetic into fp16, bit-exact
(NaN codes included). Scales are per-tensor *dequantisation* multipliers
(real = stored * scale), either Python floats or one-element fp32 device tensors
read inside the kernel (no host sync).

Window semantics (``sliding_window``), SGLang's ``sliding_window_size``
convention, which is "exclusive" (models store ``config.sliding_window - 1``):

    a query at absolute position p sees key k  iff  p - W <= k <= p   (W + 1 keys)

This is what SGLang 0.5.23's Triton *extend* kernel does
(``kernels/ops/attention/extend_attention.py``: keep ``q <= k + SLIDING_WINDOW_SIZE``),
as do its torch-native backend (``k_pos >= q_pos - sliding_window_size``), its
FlashAttention backend (``window_size=(sliding_window_size, 0)``) and aiter's
``mha_batch_prefill_func`` (``window_size=(W, 0)``). SGLang's Triton *decode* path is
one key narrower: ``triton_backend.update_sliding_window_buffer`` builds the window
KV list with ``min(seq_lens, sliding_window_size)`` entries, i.e. keys
``ctx - W .. ctx - 1`` (W keys, the current token included) for the decode token
at ``p = ctx - 1``. We follow the extend / torch-native convention for both
kernels so decode and prefill agree; pass ``sliding_window=W - 1`` to reproduce the
Triton decode kernel exactly. aiter's ``pa_decode_gluon`` keeps keys
``c >= ctx - sliding_window + 1`` (W' - 1 keys), so to match this module it needs
``sliding_window = W + 2``. ``sliding_window <= 0`` disables the window.

Logit soft cap: ``s = cap * tanh(s / cap)`` applied to the scaled score
``s = sm_scale * k_scale * (q . k)`` when ``logit_cap > 0`` (SGLang's convention:
the cap is applied after ``sm_scale``). Sinks: ``[H_q]`` fp32 logits in natural
units (not multiplied by ``sm_scale``), added only to the softmax denominator
(gpt-oss style).

The package:

    kernel_common.py   Triton code both kernels use (tile loaders, FP8 decode, softmax steps)
    decode_kernel.py   the decode kernel and its split reduce (``@triton.jit``)
    extend_kernel.py   the extend kernel (``@triton.jit``)
    config.py          tiles, warps, stages and splits: one function per target, the
                       measurement that chose each rule beside it
    host.py            the prologue both launchers share: cache format, 5D layout,
                       metadata, scales (written once)
    decode.py          ``decode_attention_5d``
    extend.py          ``extend_attention_5d``
"""

from __future__ import annotations

from . import config, decode, extend, host, kernel_common  # noqa: F401  (the modules, for tests and tools)
from .config import decode_config, default_num_splits, extend_config, resident_ctas_of, resident_ctas_per_sm
from .decode import decode_attention_5d
from .decode_kernel import DECODE_KERNEL, DECODE_REDUCE_KERNEL
from .extend import extend_attention_5d
from .extend_kernel import EXTEND_KERNEL
from .host import check_metadata_values

__all__ = ["decode_attention_5d", "extend_attention_5d", "decode_config", "extend_config", "check_metadata_values",
           "default_num_splits", "resident_ctas_per_sm", "resident_ctas_of", "DECODE_KERNEL", "DECODE_REDUCE_KERNEL",
           "EXTEND_KERNEL"]
