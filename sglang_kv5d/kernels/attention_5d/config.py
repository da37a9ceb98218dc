"""Launch configuration of the 5D attention kernels: one function per target,
each with the measurement that chose it.

    decode_config(D, G, page, X, fp8, target, *, packed=False)
        -> (BLOCK_N, BLOCK_H, num_warps, num_stages, LOAD3D[, maxnreg])
        NVIDIA and the interpreter: _decode_config (H200 timing); AMD: _decode_config_amd
    extend_config(D, G, page, X, fp8, target) -> (BLOCK_M, BLOCK_N, num_warps)
        NVIDIA and the interpreter: _extend_config; AMD: _extend_config_amd
    default_num_splits(...)    the decode's split count (shapes and occupancy only)
    resident_ctas_per_sm(...), resident_ctas_of(compiled, device), decode_resident(...)
    mask_tile(target, block_d, fp8, rows)   how the decode drops a tile of a bad block id
    use_pdl(target)            programmatic dependent launch of the reduce kernel
    pow2(n)                    the next power of two

``D`` head dim, ``G`` query rows per KV head, ``page`` tokens per page, ``X``
elements per 16-byte vector (8 bf16/fp16, 16 fp8). Nothing here reads a tensor.
"""

from __future__ import annotations

from typing import Optional

import torch

from ...platform import KernelTarget, target_of

__all__ = ["decode_config", "extend_config", "default_num_splits", "resident_ctas_per_sm", "resident_ctas_of",
           "decode_resident", "mask_tile", "use_pdl", "pow2"]


def _sm_count(device: torch.device, target: Optional[KernelTarget] = None) -> int:
    """SMs / CUs of the device (8 under the interpreter and on the CPU)."""
    return (target or target_of(device)).compute_units


def pow2(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1)."""
    return 1 << max(0, (int(n) - 1).bit_length())


def decode_config(D: int, G: int, page: int, X: int, fp8: bool, target: KernelTarget, *, packed: bool = False):
    """(BLOCK_N, BLOCK_H, num_warps, num_stages, LOAD3D[, maxnreg]) of the decode
    kernel on ``target``: the H200's tiles on NVIDIA and under the
    interpreter (``_decode_config``), ``_decode_config_amd`` on AMD. ``G``
    is the query rows per KV head of a sequence (drafts x heads when
    ``packed``: speculative verify, ``queries_per_seq > 1``)."""
    if target.is_amd:
        return _decode_config_amd(D, G, page, X, fp8, target)
    return _decode_config(D, G, page, X, fp8, packed=packed)


def extend_config(D: int, G: int, page: int, X: int, fp8: bool, target: KernelTarget):
    """(BLOCK_M, BLOCK_N, num_warps) of the extend kernel on ``target``."""
    if target.is_amd:
        return _extend_config_amd(D, G, page, X, fp8, target)
    return _extend_config(D, G, page, X, fp8)


def _extend_config(D: int, G: int, page: int, X: int, fp8: bool):
    """NVIDIA and the interpreter: tiles of 32 query rows x 32 keys with 4
    warps at D <= 128, 16 x 32 with 8 warps at D = 256 (the tiles the kernel
    was written with; no H200 sweep of them is recorded in docs/benchmarks.md)."""
    BD = pow2(D)
    return (32 if BD <= 128 else 16), 32, (4 if BD <= 128 else 8)


def _decode_config_amd(D: int, G: int, page: int, X: int, fp8: bool, target: KernelTarget):
    """AMD (gfx942, gfx950): the tiles stay small enough for registers.

    The H200's 64-token tiles with a 3-stage pipeline need 72 KiB of LDS for
    bf16 at D=256 on gfx942 (over its 64 KiB) and all 512 registers for fp8,
    and the flat page-aligned addressing (LOAD3D) runs out of SGPRs (106)
    and spills 165-430 of them. Compiled for gfx942 / gfx950 with Triton
    3.5-3.9 (tests/test_amd_gate.py, docs/benchmarks.md): 16-token tiles at
    D=256 and 32-token tiles at D<=128, one stage (the other waves of the CU
    hide the latency), the per-token addressing, 4 waves of 64 lanes: no
    spills, 8-24 KiB of LDS, 2 waves per SIMD for fp8 and 4 for bf16 at
    D=256. Speed on AMD hardware is unmeasured.
    """
    block_h = max(16, min(64, pow2(G)))
    BD = pow2(D)
    block_n = 16 if BD >= 256 else 32
    while page % block_n and block_n > 16:
        block_n //= 2
    num_warps = 8 if block_h >= 64 else 4
    if block_h >= 32 and BD < 256:
        # 32 or more query rows at D<=128 (a GQA group of 32, or packed
        # speculative drafts: Llama-like 4 query heads per KV head x 8 drafts
        # = 32, x 16 = 64) take 16-token tiles. 64 rows: 8 waves and 16-token tiles
        # take 103-130 VGPRs, 3-4 waves per SIMD; 32-token tiles needed 193-209
        # VGPRs and spilled 1-10 SGPRs (gfx942 / gfx950, Triton 3.5-3.9). 32
        # rows, 4 waves (gfx942, Triton 3.8.0, buffer ops on, caches under and
        # over 2 GiB): 16-token tiles take 122-132 VGPRs and 64-80 SGPRs, no
        # spills, 3-4 waves per SIMD; 32-token tiles took 193-200 VGPRs and
        # 105-106 SGPRs, spilled 2 (bf16) and 28 (fp8) SGPRs, 2 waves. Every
        # Triton and both archs: tests/test_amd_gate.py.
        block_n = 16
    return block_n, block_h, num_warps, 1, False


def _extend_config_amd(D: int, G: int, page: int, X: int, fp8: bool, target: KernelTarget):
    """AMD: 8 waves per program; at D=256 tiles of 16 query rows x 16 keys
    instead of the H200's 16 x 32. Compiled for gfx942 (Triton 3.8 / 3.9,
    buffer ops on and off): 16 x 32 takes 169 VGPRs for fp8 (2 waves per
    SIMD); 32 x 16 takes 158-169, on the edge of 3 waves (3.9 without buffer
    ops: 2); 16 x 16 takes 106-125 (4 waves) and 12-16 KiB of LDS. At D<=128,
    32 x 32 with 8 waves instead of 4 takes 157-168 VGPRs over twice the
    lanes (3 waves instead of 2). Static figures per Triton:
    tests/test_amd_gate.py; speed on AMD is unmeasured."""
    if pow2(D) >= 256:
        return 16, 16, 8
    return 32, 32, 8


def _decode_config(D: int, G: int, page: int, X: int, fp8: bool, *, packed: bool = False):
    """(BLOCK_N, BLOCK_H, num_warps, num_stages, LOAD3D[, maxnreg]) for the decode kernel.

    ``maxnreg`` (NVIDIA only, ignored elsewhere; none of the defaults set it)
    caps the registers per thread.

    Measured on the H200 (docs/benchmarks.md, "Decisions and what was
    tried"): small tiles with a deep cp.async pipeline stream best; 64-token
    tiles with 3 stages wherever pages allow. With page-aligned tiles loaded as
    one flat axis (every sector fetched once), 64-token tiles beat 32-token
    tiles on every bf16 D=256 shape measured, by 2-20%.
    """
    block_h = max(16, min(64, pow2(G)))
    BD = pow2(D)
    if page % 64 == 0:
        # H200: 64-token tiles, 3 stages beat 32x3 by 26-37% (bf16)
        # and 64x2 (fp8) at D=128/256.
        block_n, num_stages = 64, 3
    elif fp8 and BD >= 256:
        block_n, num_stages = 64, 2
    else:
        block_n, num_stages = 32, 3
    if page % block_n:
        block_n = 16 if page % 16 == 0 and page < block_n else block_n
    num_warps = 8 if block_h >= 64 and BD >= 256 else 4
    if packed and BD >= 256 and pow2(G) >= 128:
        # 128 or more packed verify rows at D=256 (16 drafts x 8 heads): one
        # 128-row tile, each of the 8 warps' two warpgroups on its own 64 rows
        # (two 64-row tiles read every K/V tile twice and split the columns of
        # each product between the warpgroups), 32-token tiles, 2 stages.
        # H200, 16/2 (docs/benchmarks.md): 0.67-0.91x the time of two 64-row
        # tiles for bf16, 0.70-0.90x for fp8. sm_90 (Triton 3.6): bf16 no
        # stack; fp8 48-104 B (16-token tiles had none but took 1.07-1.19x the
        # two 64-row tiles' time, which had 288-320 B)
        block_h, num_warps, num_stages = 128, 8, 2
        block_n = min(block_n, 32)
    return block_n, block_h, num_warps, num_stages, True


def default_num_splits(
    batch: int, num_kv_heads: int, head_tiles: int, max_tokens: int, device, resident: Optional[int] = None,
    *, sms: Optional[int] = None,
) -> int:
    """Split count from shapes only (no host sync).

    With ``resident`` (CTAs of the compiled kernel that fit on one SM at once,
    see ``resident_ctas_per_sm``): the most splits whose CTAs still fit in one
    wave, ``resident * SMs // work``; where that is one split filling under 90%
    of the wave and two would overflow it, the fewest splits (up to 4) whose
    waves are at least 90% full. Without it (ROCm, the interpreter, or
    when the compiled kernel cannot be inspected): about two waves of one CTA
    per SM, ``ceil(2 * SMs / work)``. Either way at most 256, and splits of at
    least 64 tokens (``max_tokens`` is the block-table capacity), or of at
    least 32 tokens while that still fills no more than one wave of one CTA per SM.

    On the H200 (docs/benchmarks.md) a wave that is only partly filled costs a
    whole wave. bf16 D=256, bs 32, 4/1, ctx 8k, 3 resident CTAs:
    12 splits (384 CTAs in 396 slots) 102.8 us, 9 splits (the two-wave rule)
    121.0 us, 13 splits 133.6 us; fp8 with 2 resident: 8 splits 51.0 us, 9
    splits 63.7 us. The token floor (bs=1 ctx 1k, 4/1 bf16: 7.5 us at 32
    splits against 12.4 us at 8; ctx 8k: 11.5 us at 128 against 13.7 us at 64)
    sets the token floor.
    """
    work = max(1, batch * num_kv_heads * head_tiles)
    sms = sms or _sm_count(device)
    floor = max(max_tokens // 64, min(-(-sms // work), max_tokens // 32))
    if resident:
        slots = int(resident) * sms
        target = max(1, slots // work)
        if 2 * work > slots >= work and 10 * work < 9 * slots:
            # one split per tile fits one wave but fills under 90% of its slots
            # and two overflow it: the fewest splits (up to 4) whose waves are
            # at least 90% full. H200, fp8 32/8 D=128 bs 32 (256 CTAs, 396
            # slots): 3 splits 162.8 us against 199.8 at 1 (ctx 8k), 611.7
            # against 777.1 (ctx 32k); 2 splits 218.1 (a 29% full second wave)
            for s in range(2, 5):
                waves = -(-work * s // slots)
                if 10 * work * s >= 9 * waves * slots:
                    target = s
                    break
    else:
        target = -(-2 * sms // work)
    return max(1, min(target, floor, 256))


def resident_ctas_per_sm(
    n_regs: int,
    num_warps: int,
    shared_bytes: int,
    *,
    regs_per_sm: int = 65536,
    smem_per_sm: int = 233472,
    threads_per_sm: int = 2048,
    max_ctas: int = 32,
) -> int:
    """CTAs of one compiled kernel that an NVIDIA SM holds at once.

    Registers are allocated per warp in units of 256; each CTA also reserves
    1 KiB of shared memory. Defaults are the sm_90 limits.
    """
    per_warp = -(-max(1, n_regs) * 32 // 256) * 256
    by_regs = regs_per_sm // (per_warp * num_warps)
    by_smem = smem_per_sm // (shared_bytes + 1024)
    by_threads = threads_per_sm // (32 * num_warps)
    return max(1, min(by_regs, by_smem, by_threads, max_ctas))


_RESIDENT = {}


def decode_resident(device: torch.device, key: tuple, warmup, target: KernelTarget) -> Optional[int]:
    """Resident CTAs per SM of the split (non-direct) decode kernel for ``key``,
    compiled once through ``warmup()`` (compiles, does not launch); None where
    that cannot be known (ROCm, the interpreter, an inspection failure)."""
    if not target.is_nvidia or device.type != "cuda":
        return None
    if key in _RESIDENT:
        return _RESIDENT[key]
    resident = None
    try:
        ck = warmup()
        ck.run  # noqa: B018 - loads the binary, which fills n_regs
        resident = resident_ctas_of(ck, device)
    except Exception:  # noqa: BLE001 - a compile or inspection fails with any error: the two-wave rule serves
        resident = None
    _RESIDENT[key] = resident
    return resident


def resident_ctas_of(compiled, device: torch.device) -> int:
    """``resident_ctas_per_sm`` for a loaded Triton CompiledKernel (registers,
    warps, shared memory) on ``device``'s SM limits."""
    props = torch.cuda.get_device_properties(device)
    return resident_ctas_per_sm(
        int(compiled.n_regs),
        int(compiled.metadata.num_warps),
        int(compiled.metadata.shared),
        regs_per_sm=int(getattr(props, "regs_per_multiprocessor", 65536) or 65536),
        smem_per_sm=int(getattr(props, "shared_memory_per_multiprocessor", 233472) or 233472),
        threads_per_sm=int(getattr(props, "max_threads_per_multi_processor", 2048) or 2048),
    )


def mask_tile(target: KernelTarget, block_d: int, fp8: bool, rows: int = 16) -> bool:
    """How the decode kernel drops a page-aligned tile of a bad block id:
    masked loads and -inf scores (True) or a select on the softmax state
    (False). From compiles against the kernel without bounds checks: on
    sm_90 (Triton 3.6 / 3.8) fp8 at D = 256 takes the select (238-253
    registers, no stack; masked loads needed 255 and spilled) and the rest
    masks (registers as without bounds: D = 128 fp8 154/128 and bf16
    168/167 on 3.8, bf16 D = 256 with 0-40 B of stack on 3.6, as without them; the
    select cost D = 128 a resident CTA and bf16 D = 256 up to 80 B of
    stack). On gfx950 masking spilled 3-5 SGPRs in the fp8 D = 128 split
    decode: AMD takes the select everywhere (tests/test_amd_gate.py).
    Tiles of 128 packed verify rows (``rows``) mask on NVIDIA, fp8 included:
    the select keeps a second [128, 256] fp32 accumulator live, 128 more
    registers per thread (sm_90, Triton 3.6, fp8 32-token tiles: 656-704 B
    of stack with the select, 48-64 B masked)."""
    return not target.is_amd and (block_d <= 128 or not fp8 or rows >= 128)


def use_pdl(target: KernelTarget) -> bool:
    """Programmatic dependent launch of the reduce kernel: NVIDIA sm_90+ only,
    unless ``SGLANG_KV5D_ATTN_PDL`` turns it off (the switch registry parses it)."""
    if not target.is_nvidia or not target.arch.startswith("sm_") or int(target.arch[3:5]) < 90:
        return False
    from ... import config as switches  # the package's switch registry (not this module)

    return bool(switches.value(switches.ATTN_PDL))
