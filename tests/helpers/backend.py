"""Build a REAL ``AiterAttnBackend`` on the CPU for tests (see sglang_kv5d.selftest.build_backend)."""

from __future__ import annotations

import torch

from sglang_kv5d.selftest import build_backend


def make_aiter_backend(pool, *, num_q_heads: int = 4, num_kv_heads: int = 1, head_dim: int = 64,
                       page_size: int = 16, dtype=torch.bfloat16, context_len: int = 4096, max_bs: int = 8,
                       spec_algorithm=None, num_draft_tokens=None, server_args=None):
    """``spec_algorithm`` (SGLang's SpeculativeAlgorithm member) and ``num_draft_tokens`` make it a speculative
    target's; ``server_args`` (a ServerArgs from SGLang's parser) is the runner's ``server_args``."""
    return build_backend(pool, num_q_heads=num_q_heads, num_kv_heads=num_kv_heads, head_dim=head_dim,
                         page_size=page_size, device="cpu", context_len=context_len, max_bs=max_bs, dtype=dtype,
                         spec_algorithm=spec_algorithm, num_draft_tokens=num_draft_tokens, server_args=server_args)
