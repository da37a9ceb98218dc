"""Attention over SHUFFLE 5D ("vectorized_5d") KV caches: aiter or portable.

Drop-in replacements for SGLang's ``aiter_utils.forward_extend_vectorized_5d``
and ``forward_decode_vectorized_5d`` (same signatures; the patch adapters rebind
them in ``aiter_backend``). This module imports neither SGLang nor aiter at
import time; torch is imported lazily.

What they read (every tested SGLang):

    backend        token_to_kv_pool, forward_metadata (kv_indptr, kv_indices,
                   qo_indptr, max_q_len, max_kv_len, swa_page_table),
                   qo_indptr (<= 0.5.22 fallback), input_dtype, k_scale, v_scale
    forward_batch  batch_size, seq_lens, seq_lens_sum, seq_lens_cpu,
                   extend_prefix_lens_cpu
    layer          layer_id, tp_q_head_num, tp_k_head_num, tp_v_head_num,
                   qk_head_dim, v_head_dim, scaling, logit_cap,
                   sliding_window_size, k_scale, v_scale

Differences from upstream, on purpose:

* The layer's buffers are found with :func:`sglang_kv5d.pools.resolve_kv_subpool`
  (hybrid, SWA and nested pools), which waits for layer-wise loading first.
* ``pa_decode_gluon`` gets every argument by keyword, including
  ``query_scale`` (None for a bf16/fp16 query), ``compute_type`` (bf16, or fp16
  for an fp16 model) and ``ps=True``; fp8 caches always get fp32 ``[1]``
  ``key_scale``/``value_scale`` on the query's device (1.0 when the layer has
  none), because without them the kernel assumes X=8 and reads garbage.
* Sliding window for ``pa_decode_gluon``: aiter keeps key ``c`` iff
  ``c >= ctx - W + 1`` (W - 1 keys with ``ctx`` counting the current token),
  SGLang expects ``sliding_window_size + 1`` keys, so W = sliding_window_size + 2.
  (Inferred from aiter's kernel and reference code; see
  shared/research/aiter-api.md section 1.7. Not yet confirmed on gfx942/gfx950.)
  ``mha_batch_prefill_func``'s ``window_size=(L, -1)`` already means L + 1 keys,
  so extend passes ``(sliding_window_size, -1)`` unchanged.
* Extend passes ``softmax_scale=layer.scaling`` (upstream relies on aiter's
  1/sqrt(D) default) and, for fp8 caches, quantizes the query with its own
  per-tensor scale (amax / fp8 max, kept on the device) and passes that as
  ``q_descale`` (upstream casts q unscaled and passes ``k_scale`` as q_descale).
* Extend's ``kv_page_indices`` is padded with valid entries past its last used
  one (upstream sizes it exactly): CK's batch prefill reads past the table
  (:mod:`sglang_kv5d.attention.page_indices`).
* Logit soft-capping has no ``pa_decode_gluon`` parameter; such layers use the
  portable path (upstream drops the cap silently).

Implementation choice: ``SGLANG_KV5D_ATTN_IMPL`` (``config.ATTN_IMPL``) = ``auto`` (default: aiter when
it imports and has the needed functions, else portable), ``aiter`` or
``triton`` (portable only). A configuration aiter cannot run (an error whose
message contains "no matching kernel", a missing function, a shape the kernel
does not support) falls back to the portable kernels from
``sglang_kv5d.kernels`` with one warning per configuration, and the choice is
remembered for the process (:func:`fallback_configs`, :func:`reset_state`).

    common.py        what the paths share: dtypes, scales, windows, page
                     tables, the layer's buffers, the portable kernels' arguments
    routing.py       the implementation choice, aiter discovery, fallbacks,
                     running a portable kernel with its failure recorded
                     (sglang_kv5d.kernel_failures)
    decode.py        forward_decode_vectorized_5d
    extend.py        forward_extend_vectorized_5d
    page_indices.py  the padded page table CK's batch prefill reads

Helpers shared between these modules (and with speculative verify and the
selftest) have public names in the module that defines them.
"""

from __future__ import annotations

from .common import (
    block_table_from_token_slots,
    decode_sliding_window_arg,
    gather_5d_to_linear,
    is_fp8,
    layer_cache,
    layer_window,
    portable_args,
    quantize_per_tensor,
)
from .routing import (
    CONTEXT_PARTITION_SIZE,
    DECODE_FNS,
    EXTEND_FNS,
    EXTEND_SINKS_UNSUPPORTED,
    IMPLS,
    NO_KERNEL_MARK,
    ConfigKey,
    aiter_functions,
    aiter_import_error,
    aiter_problem,
    fallback_configs,
    key_text,
    reset_state,
    selected_impl,
)
from .decode import forward_decode_vectorized_5d
from .extend import forward_extend_vectorized_5d

__all__ = [
    "CONTEXT_PARTITION_SIZE",
    "DECODE_FNS",
    "EXTEND_FNS",
    "EXTEND_SINKS_UNSUPPORTED",
    "IMPLS",
    "NO_KERNEL_MARK",
    "ConfigKey",
    "aiter_functions",
    "aiter_import_error",
    "aiter_problem",
    "block_table_from_token_slots",
    "decode_sliding_window_arg",
    "fallback_configs",
    "forward_decode_vectorized_5d",
    "forward_extend_vectorized_5d",
    "gather_5d_to_linear",
    "is_fp8",
    "key_text",
    "layer_cache",
    "layer_window",
    "portable_args",
    "quantize_per_tensor",
    "reset_state",
    "selected_impl",
]
