"""A FAKE ``aiter`` package for CPU tests of sglang-kv5d. Not AMD's aiter.

Mirrors the public signatures of ROCm/aiter HEAD e4048607 (2026-08-22) for the
three functions the 5D attention path calls (``pa_decode_gluon``,
``get_recommended_splits``, ``mha_batch_prefill_func``), computes their results
in float64 with torch, and rejects what the real ones reject. Every other name
SGLang imports from aiter at import time exists as a placeholder that raises
NotImplementedError when called. See ../README.md.
"""

from aiter import dtypes  # noqa: F401
from aiter._fake import CALLS, SilentGarbage, reset, set_strict, strict  # noqa: F401
from aiter._fake import unimplemented as _unimplemented
from aiter.ops.mha import *  # noqa: F401,F403  (real aiter re-exports ops.mha here)
from aiter.ops.mha import mha_batch_prefill_func  # noqa: F401

__version__ = "0.0.0+fake"
FAKE = True

# Names SGLang's aiter_backend (0.5.16 .. 0.5.23), fp8_kernel and layernorm
# import from the top level. Placeholders only.
for _n in (
    "flash_attn_varlen_fp8_pertensor_func",
    "get_mla_metadata_info_v1",
    "get_mla_metadata_v1",
    "get_ps_metadata_info_v1",
    "get_ps_metadata_v1",
    "mla_prefill_ps_asm_fwd",
    "mla_reduce_v1",
    "paged_attention_ragged",
    "dynamic_per_tensor_quant",
    "dynamic_per_token_scaled_quant",
    "static_per_tensor_quant",
    "layernorm2d_fwd",
    "rmsnorm2d_fwd",
    "rmsnorm2d_fwd_with_add",
    "moe_sum",
):
    globals()[_n] = _unimplemented(_n)
del _n
