"""The fused FP8 KV write, checked on scratch tensors before traffic.

:func:`check_fp8_write` compiles and runs ``kernels.fp8_write.write_kv_fp8``
for a pool's real shapes and dtypes on scratch tensors (never the real
caches), for the token counts of decode batches and prefill chunks (each its
own Triton variant); a failure is recorded (sglang_kv5d.kernel_failures), so the
run-time path sends that configuration to SGLang's own write without trying.
"""

from __future__ import annotations

import logging
import time
from typing import List, NamedTuple, Optional, Sequence

from ..kernel_failures import FP8_WRITE, dtype_name, interpreting, is_host_validation, record_failure, target_text
from ..kernel_failures import triton_version
from .results import CheckResult, checked, remember, sync

logger = logging.getLogger("sglang_kv5d")

#: Token counts the FP8 write is checked with on a GPU. CUDA-graph decode
#: batches: 1, 2 and 16 differ in Triton's integer specialisation (1, other,
#: multiple of 16), 136 and 256 are the same two past 128 tokens (another
#: launch configuration); so every capture size up to 2048 is covered. Prefill
#: chunks: 4096 and 8192, on each side of ``fp8_write.launch_config``'s
#: 4096-token threshold (their other specialisations compile at first use,
#: outside capture).
FP8_WRITE_TOKENS = (1, 2, 16, 136, 256, 4096, 8192)
#: Under the CPU interpreter nothing is compiled: one launch shows the path works.
FP8_WRITE_TOKENS_INTERPRETER = (1,)
#: Decode is also checked with a block table this many tokens wide (split
#: kernel and reduction; the split count follows from the table's width).
DECODE_WIDE_TOKENS = 4096
#: Scratch tensors of one check stay below this (the pool has taken most of
#: the device memory by then); larger token counts are left to first use.
SCRATCH_BYTES_MAX = 256 << 20


class Fp8WriteKey(NamedTuple):
    """What a compile of the FP8 write depends on, apart from the token count."""

    in_dtype: str
    fp8_dtype: str
    cache_dtype: str
    heads: int
    head_dim: int
    v_head_dim: int
    page: int
    layout: str  # "5d" or "nhd"
    device: str



def fp8_write_key(in_dtype, fp8_dtype, k_cache, v_cache) -> Fp8WriteKey:
    """The key of writes of ``in_dtype`` rows into caches shaped like these
    (one layer's buffers: NHD (slots, H, D) or SHUFFLE 5D)."""
    if k_cache.dim() == 5:
        heads, head_dim, page = k_cache.shape[1], k_cache.shape[2] * k_cache.shape[4], k_cache.shape[3]
        v_head_dim, layout = v_cache.shape[3], "5d"
    else:
        heads, head_dim, page, v_head_dim, layout = k_cache.shape[1], k_cache.shape[2], 1, v_cache.shape[2], "nhd"
    return Fp8WriteKey(dtype_name(in_dtype), dtype_name(fp8_dtype), dtype_name(k_cache.dtype), int(heads), int(head_dim),
                       int(v_head_dim), int(page), layout, str(k_cache.device))


def fp8_write_shapes(key: Fp8WriteKey) -> str:
    return (f"{key.in_dtype} -> {key.fp8_dtype} ({key.cache_dtype} storage), {key.layout.upper()} cache, "
            f"{key.heads} heads, head dims {key.head_dim}/{key.v_head_dim}"
            + (f", page {key.page}" if key.layout == "5d" else "") + f", on {key.device}")


FP8_WRITE_FALLBACK = "SGLang's own set_kv_buffer writes the FP8 KV cache"


def check_fp8_write(*, in_dtype, fp8_dtype, cache_dtype, heads: int, head_dim: int, v_head_dim: int,
                    page: int, layout_5d: bool, device, token_counts: Optional[Sequence[int]] = None,
                    when: str = "in the check before traffic") -> CheckResult:
    """Compile and run ``write_kv_fp8`` on scratch tensors of these shapes.

    ``cache_dtype`` is the cache storage (the pool's uint8 buffers, or an fp8
    dtype); the kernel's variants differ by it. A failure is recorded (the
    run-time path then goes to SGLang's write without trying); the result is
    remembered per key, so a second pool of the same shapes costs nothing.
    """
    import torch

    from ..kernels import fp8_write

    dev = torch.device(device)
    x = 16
    if layout_5d:
        kc_shape = (1, heads, head_dim // x, page, x)
        vc_shape = (1, heads, page // x, v_head_dim, x)
    else:
        kc_shape, vc_shape = (1, heads, head_dim), (1, heads, v_head_dim)
    probe_k = torch.empty(kc_shape, dtype=cache_dtype, device="meta")
    probe_v = torch.empty(vc_shape, dtype=cache_dtype, device="meta")
    key = fp8_write_key(in_dtype, fp8_dtype, probe_k, probe_v)._replace(device=str(dev))
    done = checked(FP8_WRITE, key)
    if done is not None:
        return done
    if token_counts is None:
        token_counts = FP8_WRITE_TOKENS_INTERPRETER if interpreting() or dev.type != "cuda" else FP8_WRITE_TOKENS
    in_size = torch.empty((), dtype=in_dtype).element_size()
    tokens: List[int] = []
    for t in token_counts:
        slots = -(-t // page) * page + page
        scratch = t * heads * (head_dim + v_head_dim) * in_size + slots * heads * (head_dim + v_head_dim)
        if scratch <= SCRATCH_BYTES_MAX:
            tokens.append(int(t))
    start = time.perf_counter()
    error: Optional[str] = None
    try:
        for t in tokens:
            n_blocks = -(-t // page) + 1
            if layout_5d:
                kc = torch.zeros((n_blocks,) + kc_shape[1:], dtype=cache_dtype, device=dev)
                vc = torch.zeros((n_blocks,) + vc_shape[1:], dtype=cache_dtype, device=dev)
            else:
                kc = torch.zeros((n_blocks * page, heads, head_dim), dtype=cache_dtype, device=dev)
                vc = torch.zeros((n_blocks * page, heads, v_head_dim), dtype=cache_dtype, device=dev)
            k = torch.ones((t, heads, head_dim), dtype=in_dtype, device=dev)
            v = torch.ones((t, heads, v_head_dim), dtype=in_dtype, device=dev)
            loc = torch.arange(page, page + t, dtype=torch.int64, device=dev)  # block 0 stays unused
            fp8_write.write_kv_fp8(k, v, kc, vc, loc, 1.0, 1.0, fp8_dtype=fp8_dtype)
            del k, v, kc, vc, loc
        sync(dev)
    except Exception as exc:  # a kernel failure has no one type (CompilationError, OutOfResources, driver RuntimeError, ...)
        what = "refused these shapes" if is_host_validation(exc) else "cannot run"
        error = record_failure(FP8_WRITE, key, exc, shapes=fp8_write_shapes(key), device=dev,
                               fallback=FP8_WRITE_FALLBACK, when=f"{when} ({what})")
    seconds = time.perf_counter() - start
    result = CheckResult(FP8_WRITE, key, error is None, error, seconds, tuple(tokens))
    remember(result)
    if error is None:
        logger.info("sglang-kv5d: kernel check: %s ran for %s with %s tokens in %.2f s (Triton %s, target %s)",
                    FP8_WRITE, fp8_write_shapes(key), "/".join(map(str, tokens)), seconds, triton_version(),
                    target_text(dev))
    return result
