"""Build a REAL ``AiterAttnBackend`` on the CPU from a minimal model-runner object.

Only what ``AiterAttnBackend.__init__`` reads is provided; the runtime-context
accessors it calls (``get_parallel``/``get_schedule``/``get_spec``,
``is_dp_attention_enabled``; which of them exist depends on the SGLang
version) are replaced on the module for the duration of the build.
"""

from __future__ import annotations

import contextlib
import importlib
import types

import torch

NS = types.SimpleNamespace


@contextlib.contextmanager
def _runtime_context(ab, page_size: int):
    spec = NS(speculative_num_draft_tokens=None, speculative_num_steps=None, speculative_algorithm=None,
              speculative_attention_mode="prefill")
    fakes = {
        "get_parallel": lambda: NS(attn_tp_size=1, attn_tp_rank=0, attn_dcp_size=1),
        "get_schedule": lambda: NS(page_size=page_size),
        "get_spec": lambda: spec,
        "is_dp_attention_enabled": lambda: False,
    }
    saved = {}
    for name, fake in fakes.items():
        if hasattr(ab, name):
            saved[name] = getattr(ab, name)
            setattr(ab, name, fake)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(ab, name, value)


def make_aiter_backend(pool, *, num_q_heads: int = 4, num_kv_heads: int = 1, head_dim: int = 64,
                       page_size: int = 16, dtype=torch.bfloat16, context_len: int = 4096, max_bs: int = 8):
    ab = importlib.import_module("sglang.srt.layers.attention.aiter_backend")
    model_config = NS(dtype=dtype, is_multimodal=False, num_attention_heads=num_q_heads, head_dim=head_dim,
                      get_num_kv_heads=lambda tp: num_kv_heads, attention_arch=None, context_len=context_len,
                      v_head_dim=head_dim, is_hybrid_swa=False)
    req_to_token_pool = NS(req_to_token=torch.zeros(max_bs, context_len, dtype=torch.int32), size=max_bs)
    server_args = NS(page_size=page_size, speculative_num_draft_tokens=None, speculative_num_steps=None,
                     speculative_algorithm=None, speculative_attention_mode="prefill", enable_dp_attention=False,
                     kv_cache_dtype="auto")
    model_runner = NS(model_config=model_config, device="cpu", kv_cache_dtype=pool_dtype(pool) or dtype,
                      dtype=dtype, req_to_token_pool=req_to_token_pool, kv_index_translator=None,
                      token_to_kv_pool=pool, token_to_kv_pool_allocator=NS(get_kvcache=lambda: pool),
                      server_args=server_args, is_draft_worker=False, sliding_window_size=None, page_size=page_size)
    with _runtime_context(ab, page_size):
        return ab.AiterAttnBackend(model_runner)


def pool_dtype(pool):
    for attr in ("dtype",):
        if hasattr(pool, attr):
            return getattr(pool, attr)
    inner = getattr(pool, "full_kv_pool", None)
    return pool_dtype(inner) if inner is not None else None
