"""Fused FP8 KV-cache write: scale, saturate, round once, store, in ONE launch.

    write_kv_fp8(k, v, k_cache, v_cache, loc, k_scale, v_scale, *, fp8_dtype=None)

Replaces SGLang's unfused FP8 write (``k.div_(k_scale)`` in place on the caller's
tensor, ``.to(fp8)``, a view, then a per-token scatter: three to five launches,
the caller's tensors mutated, NaN instead of saturation on ``e4m3fnuz``).

Semantics, per element of K (V alike with ``v_scale``)::

    q = x.float() / k_scale            (fp32, rounded to nearest as IEEE division)
    q = clamp(q, -FMAX, +FMAX)         (FMAX = 448 e4m3fn, 240 e4m3fnuz; +/-inf too)
    cache[...] = fp8(q)                (round-to-nearest-even, once)

which is bit-identical to ``clamp(x.float() / s, -FMAX, FMAX).to(fp8_dtype)`` in
torch. NaN inputs stay NaN. ``k`` and ``v`` are only read.

Cache layouts (read from ranks and shapes; X = 16 for fp8):

    NHD         k_cache (slots, H, D_k)            v_cache (slots, H, D_v)
    SHUFFLE 5D  k_cache (blocks, H, D_k/X, page, X) v_cache (blocks, H, page/X, D_v, X)

with ``K5d[b, h, d//X, t, d%X] = K[b*page+t, h, d]`` and
``V5d[b, h, t//X, d, t%X] = V[b*page+t, h, d]``.

How the kernel is organised. The grid is (token windows, head blocks x row
chunks, {K, V}), or the same programs on a 1-D grid in token-major order
(the programs of one window next to each other). Every program reads ``loc``
for its window; inputs are loaded under the row mask only, so their loads do
not wait for ``loc`` (only the stores do). K rows (and NHD V rows) are written
per token: one token's head row is contiguous (NHD) or made of 16-byte vectors
(5D K). A 5D V row is not: one
token owns one byte of every 16-byte vector. Two ways to write it:

* bytes one by one (``groups`` off): each token stores its bytes; when a
  prefill run fills a group of 16 slots, the L2 cache merges the 16 bytes of
  each vector before they reach memory. Used for decode sizes, for D = 256
  below 8 MiB of V per call, and for D <= 128 up to 4096 tokens. Up to 2048
  tokens, how a store's lanes walk the bytes is chosen per window
  (``byte_tokens``): a window that starts and ends inside runs (prefill)
  stores the tile as loaded, where 16 lanes fill one vector; any other
  window (decode) stores with the lanes on 4 tokens, so that one store
  touches 4 cache lines instead of 16.
* whole vectors (``groups`` on): the V program checks *in the kernel* (no host
  sync, CUDA-graph safe) which tokens belong to a complete aligned group (X
  consecutive tokens whose slots are consecutive and start at a multiple of X).
  The program that owns the first token of such a group writes the whole group
  as whole 16-byte vectors (a (D_v, X) tile per head, contiguous in the cache);
  tokens outside complete groups (decode, run edges) are written byte by byte.
  At most one group starts in any X consecutive tokens, so a window of G*X
  tokens has at most G. Used for D <= 128 past 4096 tokens and for D = 256
  from 8 MiB of V per call. With 16-bit inputs (``v_words``) a group is
  transposed in registers: each thread reads one 32-bit word (two dims) of
  each of the X rows and stores the two vectors of those dims; other inputs
  go through a tile whose layout change Triton makes in shared memory (5-6%
  slower on the H200).

The launch configuration (window, heads per program, row chunks, groups,
launch order, warps) is picked on the host from shapes and the KernelTarget
only (``launch_config``): on NVIDIA and under the interpreter by H200 timing
(docs/benchmarks.md, "Decisions"), on AMD (gfx942, gfx950) from the compile
figures of ``lab/write_config_sweep.py`` (``_launch_config_amd``: registers,
spills, waves per SIMD; no group path there).

Division. On the GPU the quotient is computed as ``x * RN(1/s)`` followed by
two FMA residual corrections, which is the correctly rounded ``x / s``
(Markstein) for scales within about 2**-90 .. 2**90, and has no slow path (the
division instruction sequence has one, taken for zero numerators). It runs on
``|x|`` clamped to ``RN(FMAX * s)`` (a clamped quotient rounds to FMAX's
code, so saturation is unchanged); the encoders take that magnitude and the
sign of ``x``. Under the CPU interpreter plain IEEE division is used.

FP8 encoding. Where the target converts the format in hardware (e4m3fn on
NVIDIA sm_89+ and AMD gfx950, e4m3fnuz on AMD gfx942; round-to-nearest-even)
that conversion is used. Elsewhere (``e4m3fnuz`` on NVIDIA, e4m3fn on gfx942,
the Triton CPU interpreter) the kernel encodes the
byte itself with integer arithmetic on the fp32 bits (same result, a few more
instructions), and always stores bytes, so caches may be fp8-typed or uint8.

Scales. Python floats and scale tensors obey one rule, checked on the host
before anything is written, on every device: the float32 scale and its
float32 reciprocal are positive normal numbers (zero, negative, infinite, NaN
and subnormal scales raise ``ScaleError``). A tensor's value is read once per
tensor and version (``check_scale_tensor``), so the per-call path has no
device sync and stays CUDA-graph safe; inside a capture, a tensor never
checked before is refused (it cannot be read there).

Slot ids ``< 0`` are skipped; so are ids ``>= slots`` (a guard against
corrupting memory; callers must not rely on it). Duplicate slot ids in one call
are a race, as in every scatter.

The package:

    kernel.py   the ``@triton.jit`` kernel (``WRITE_KERNEL``, function ``_write_kv_fp8_kernel``)
                and its K side
    quantize.py the Triton helpers K and V share: the fp8 encoders, ``quantize``, slots, scales
    v_store.py  the Triton V side: NHD rows, 5D bytes one by one, 5D whole-vector groups
    config.py   ``launch_config``: one function per target (NVIDIA / interpreter, AMD),
                each rule with the measurement that chose it; the checked, cached default
    host.py     validation (inputs, caches, slot ids, scales: ``ScaleError``,
                ``scale_problem``, ``check_scale_tensor``), the plan, and ``write_kv_fp8``
"""

from __future__ import annotations

from . import config, host, kernel, quantize, v_store  # noqa: F401  (the modules: tests patch host's names)
from .config import launch_config
from .host import (FP8_MAX, ScaleError, check_scale_tensor, native_fp8_ok, scale_problem, supported_fp8_dtypes,
                   write_kv_fp8)
from .kernel import WRITE_KERNEL

__all__ = ["write_kv_fp8", "launch_config", "FP8_MAX", "supported_fp8_dtypes", "ScaleError", "scale_problem",
           "check_scale_tensor", "native_fp8_ok", "WRITE_KERNEL"]
