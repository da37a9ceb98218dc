"""Real SGLang objects for the selftest: the two pools and an AiterAttnBackend.

SGLang's constructors differ between versions; only the keyword arguments a
constructor accepts are passed (probed with ``inspect.signature``).
"""

from __future__ import annotations

import importlib
import inspect
import types

from ..surface import AITER_BACKEND, attr_name, import_object
from .geometry import Geometry

NS = types.SimpleNamespace


def _accepted(fn, kwargs):
    params = inspect.signature(fn).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return dict(kwargs)
    return {k: v for k, v in kwargs.items() if k in params}


def build_pools(geo: Geometry, device: str, fp8_dtype, total_tokens: int):
    """(hybrid pool with a 5D fp8 full pool, SWA pool with 5D bf16 buffers, full layer ids)."""
    import torch

    hybrid_cls = import_object("memory_pool.HybridLinearKVPool")
    swa_cls = import_object("swa_memory_pool.SWAKVPool")
    size = total_tokens + geo.page
    full_ids = [i for i in range(geo.num_layers) if (i + 1) % geo.full_every == 0]
    hybrid_kwargs = dict(size=size, dtype=fp8_dtype, page_size=geo.page, head_num=geo.hkv, head_dim=geo.head_dim,
                         full_attention_layer_ids=full_ids, device=device, mamba_pool=None,
                         enable_memory_saver=False, enable_kv_cache_copy=False, use_mla=False)
    hybrid = hybrid_cls(**_accepted(hybrid_cls.__init__, hybrid_kwargs))
    swa_kwargs = dict(size=size, size_swa=size, page_size=geo.page, dtype=torch.bfloat16, head_num=geo.hkv,
                      head_dim=geo.head_dim, swa_attention_layer_ids=[0, 2], full_attention_layer_ids=[1, 3],
                      device=device, token_to_kv_pool_class=import_object("memory_pool.MHATokenToKVPool"),
                      enable_memory_saver=False)
    swa_pool = swa_cls(**_accepted(swa_cls.__init__, swa_kwargs))
    return hybrid, swa_pool, full_ids


def _fake_runtime_context(module, page_size: int, spec=None) -> dict:
    """Replace SGLang's runtime-context accessors on ``module``; returns the originals.

    Which accessors exist depends on the SGLang version (surface rows
    runtime_context.* and dp_attention.is_dp_attention_enabled, with their
    ``since``). ``spec``: what ``get_spec()`` returns (no speculative decoding
    when None).
    """
    spec = spec or _spec_args()
    fakes = {"runtime_context.get_parallel": lambda: NS(attn_tp_size=1, attn_tp_rank=0, attn_dcp_size=1),
             "runtime_context.get_schedule": lambda: NS(page_size=page_size),
             "runtime_context.get_spec": lambda: spec,
             "dp_attention.is_dp_attention_enabled": lambda: False}
    saved = {}
    for row, fake in fakes.items():
        name = attr_name(row)  # the copy aiter_backend holds (the row's ``copies``)
        if hasattr(module, name):
            saved[name] = getattr(module, name)
            setattr(module, name, fake)
    return saved


def _spec_args(algorithm=None, num_draft_tokens=None):
    """The speculative server arguments a backend reads (``get_spec()`` and ``server_args``)."""
    return NS(speculative_num_draft_tokens=num_draft_tokens, speculative_num_steps=None,
              speculative_algorithm=None if algorithm is None else str(getattr(algorithm, "name", algorithm)),
              speculative_eagle_topk=None if algorithm is None else 1, speculative_attention_mode="prefill")


def build_backend(pool, *, num_q_heads: int, num_kv_heads: int, head_dim: int, page_size: int, device: str = "cpu",
                  context_len: int = 4096, max_bs: int = 16, dtype=None, spec_algorithm=None,
                  num_draft_tokens=None, server_args=None):
    """A real AiterAttnBackend over ``pool`` from a minimal model runner.

    Only what ``AiterAttnBackend.__init__`` reads is provided; SGLang's runtime
    context accessors are replaced for the duration of the constructor.
    ``spec_algorithm`` (SGLang's ``SpeculativeAlgorithm`` member, or None) and
    ``num_draft_tokens`` make it a speculative target's backend; ``server_args``
    (a ServerArgs from SGLang's own parser) is what the runner carries as
    ``server_args`` instead of the minimal stand-in.
    """
    import torch

    dtype = dtype or torch.bfloat16
    backend_cls = import_object("aiter_backend.AiterAttnBackend")
    ab = importlib.import_module(AITER_BACKEND)  # its runtime-context accessors are replaced below
    model_config = NS(dtype=dtype, is_multimodal=False, num_attention_heads=num_q_heads, head_dim=head_dim,
                      get_num_kv_heads=lambda tp: num_kv_heads, attention_arch=None, context_len=context_len,
                      v_head_dim=head_dim, is_hybrid_swa=False)
    req_to_token_pool = NS(req_to_token=torch.zeros(max_bs, context_len, dtype=torch.int32, device=device),
                           size=max_bs)
    spec = _spec_args(spec_algorithm, num_draft_tokens)
    stand_in = NS(page_size=page_size, enable_dp_attention=False, kv_cache_dtype="auto", **vars(spec))
    runner = NS(model_config=model_config, device=device, kv_cache_dtype=dtype, dtype=dtype,
                req_to_token_pool=req_to_token_pool, kv_index_translator=None, token_to_kv_pool=pool,
                token_to_kv_pool_allocator=NS(get_kvcache=lambda: pool), server_args=stand_in,
                is_draft_worker=False, sliding_window_size=None, page_size=page_size)
    if spec_algorithm is not None:
        runner.spec_algorithm = spec_algorithm
    if server_args is not None:
        runner.server_args = server_args
    saved = _fake_runtime_context(ab, page_size, spec)
    try:
        return backend_cls(runner)
    finally:
        for name, value in saved.items():
            setattr(ab, name, value)
