"""``sglang-kv5d selftest``: a Qwen3.5-like model's attention through patched SGLang.

What runs, with the overlay active in this process:

* real SGLang pools, on the chosen device: a HybridLinearKVPool (every 4th
  layer full attention) around a SHUFFLE 5D **fp8** MHA pool, and an SWAKVPool
  (sliding-window and full layers) with **bf16** 5D buffers;
* a real ``AiterAttnBackend`` built from a minimal model runner, whose layout
  flags come from the pool-layout-detection patch;
* several requests of different lengths through chunked prefill, two of them
  reusing a shared page-aligned prefix, then decode steps for all of them;
* every KV write through the patched ``set_kv_buffer`` (fused FP8 write for the
  fp8 pool, k_scale != 1) and every attention through the patched
  ``forward_extend_vectorized_5d`` / ``forward_decode_vectorized_5d`` as
  ``aiter_backend`` binds them (aiter where it is usable, else the portable
  Triton kernels).

Each attention output is compared with the float64 reference
(kernels.attention_reference) over the logical K/V the "model" produced
(quantised to fp8 with the stated semantics where the pool is fp8),
independent of the cache layout, so a wrong write, a wrong read, a wrong mask
or a wrong sub-pool fails.

On ROCm with aiter usable the requests run twice, once on each attention path
(``aiter``, then ``triton``: the portable kernels), fresh pools and the same
seeded requests, each against float64, and the report says what served each
path (aiter, or portable for the configurations aiter could not run). For
the aiter path over the fp8 pool, the extend reference follows that path's
numerics: a batch without prefixes attends over the new bf16 K/V (no cache
read), otherwise over the cache with the query quantized per tensor to fp8
(aiter's batch prefill takes q, k and v of one dtype). On CUDA and CPU one
run, as SGLANG_KV5D_ATTN_IMPL selects. SGLang's aiter pool layout
is only chosen on ROCm (``memory_pool._use_aiter``), so on other devices the
selftest switches it on for its own pools.

Modules: geometry (configurations), sglang_objects (pools, backend), workload
(requests, model, pool cases, the shared run state), phases/ (one module per
phase, in order), run (activation, paths, one pass), report (results, table).
"""

from __future__ import annotations

from .geometry import CPU_DEFAULT, GPU_DEFAULT, Geometry
from .report import PhaseResult, render
from .run import attention_paths, run_selftest
from .sglang_objects import build_backend, build_pools

__all__ = [
    "CPU_DEFAULT", "GPU_DEFAULT", "Geometry", "PhaseResult", "attention_paths", "build_backend", "build_pools",
    "render", "run_selftest",
]
