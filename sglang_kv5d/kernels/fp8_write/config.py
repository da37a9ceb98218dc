"""The fused FP8 write's launch configuration: one function per target, each
rule with the measurement that chose it.

    launch_config(T, H, DK, DV, layout_5d, native_fp8, target) -> dict
        NVIDIA and the interpreter: _launch_config_nvidia (H200 timing,
        docs/benchmarks.md "Fused FP8 write" / "Decisions")
        AMD (gfx942, gfx950):       _launch_config_amd (compile figures of
        lab/write_config_sweep.py; speed on AMD unmeasured)
    default_config(...)    launch_config checked and cached per shape and target
    check_config(cfg, H, DK, DV, layout_5d)   a configuration checked against the shapes
    v_group_launch(cfg, bdv, ...)             (V_WORDS, V_SPEC, CHUNK, num_warps)
    CONFIG_KEYS            the keys a configuration (and ``_config=``) has
    X_FP8                  16: fp8 elements per 16-byte vector (the 5D layout's X)

Inputs are shapes and the target only (T tokens, H heads, D_k / D_v head
dims, NHD or 5D), never tensor values, so a configuration is the same on
every call of a shape and can be computed for a GPU that is not here.
"""

from __future__ import annotations

import functools
from types import MappingProxyType
from typing import Mapping

import triton

from ...platform import KernelTarget

__all__ = ["X_FP8", "CONFIG_KEYS", "launch_config", "default_config", "check_config", "v_group_launch"]

X_FP8 = 16  # elements per 16-byte vector for 1-byte elements

CONFIG_KEYS = ("block_t", "heads_per_program", "d_split", "split_kv", "num_warps", "groups", "v_words",
               "parts", "maxnreg", "token_major", "v_spec", "byte_tokens")


# 5D V with D = 256: whole-vector groups once a call writes this many V bytes
# (T x H x D_v), bytes one by one below (H200, e4m3fn: groups 1-4% faster
# from 8 MiB of V, bytes faster below).
_GROUPS_MIN_V_BYTES_D256 = 1 << 23
# 5D V with D <= 128: whole-vector groups past this many tokens, bytes one by
# one up to it (H200: bytes one by one are 2-6% faster on prefill runs of 2048
# and 4096 tokens and 2-3x faster on decode batches of that size; groups win
# from 8192 tokens).
_GROUPS_MIN_T = 4096
# Bytes one by one: up to this many tokens, windows that are not inside runs
# (decode) store with the lanes on 4 tokens (byte_tokens 4: 22-33% faster on
# decode batches, 0-3.5% slower on prefill runs on the H200);
# past it prefill runs are the common case (5-10% slower with byte_tokens 4
# at 4096 and 8192 tokens) and decode batches that large are rare.
_DECODE_LANES_MAX_T = 2048


def _heads_per_program(H: int, D: int, elements: int) -> int:
    """The most heads (a power of two dividing H) whose rows fit in ``elements``."""
    hb = 1
    while hb < H and H % (hb * 2) == 0 and (hb * 2) * D <= elements:
        hb *= 2
    return hb


def _row_chunks(DK: int, DV: int) -> int:
    """Programs per 5D head row: a power of two, about 128 dims each, never
    less than one 16-byte vector of the narrower of K and V."""
    ds = 1
    while 2 * ds * 128 <= max(DK, DV) and triton.next_power_of_2(min(DK, DV)) // (2 * ds) >= X_FP8:
        ds *= 2
    return ds


def _v_words_launch(words: int, num_warps: int, warp_size: int, warps_fixed: bool):
    """(CHUNK, num_warps) for the register group path, which wants one 32-bit
    word per thread (``words`` = heads x dims / 2 per program). With fewer words
    than threads, threads would repeat each other's loads and arithmetic (1.5-2x
    slower on the H200): unless the caller fixed ``num_warps``, warps are halved
    until the words fill them (this matters where a warp has 64 threads)."""
    if not warps_fixed:
        while num_warps > 1 and words < num_warps * warp_size:
            num_warps //= 2
    return min(words, num_warps * warp_size), num_warps


def v_group_launch(cfg: Mapping, bdv: int, *, v_ok: bool, warp_size: int, warps_fixed: bool):
    """(V_WORDS, V_SPEC, CHUNK, num_warps) of a checked configuration: the
    register group path for inputs it can read (``v_ok``, ``_v_words_ok``),
    with CHUNK words at a time (``_v_words_launch``), and its rows fetched
    before the group check only with one X-block per window and one chunk."""
    num_warps = cfg["num_warps"]
    if not (cfg["groups"] and cfg["v_words"] and v_ok):
        return False, False, 1, num_warps
    words = cfg["heads_per_program"] * bdv // 2
    chunk, num_warps = _v_words_launch(words, num_warps, warp_size, warps_fixed)
    v_spec = bool(cfg["v_spec"]) and cfg["block_t"] == X_FP8 and chunk == words
    return True, v_spec, chunk, num_warps


def launch_config(T: int, H: int, DK: int, DV: int, layout_5d: bool, native_fp8: bool,
                  target: KernelTarget) -> dict:
    """Kernel configuration for ``target`` picked from shapes and the encoder
    only (never from loc contents). ``native_fp8``: the hardware FP8
    conversion is used (e4m3fn on NVIDIA sm_89+ and gfx950, e4m3fnuz on
    gfx942); False for the integer encoder (e4m3fnuz on NVIDIA, the CPU
    interpreter). NVIDIA and the interpreter (NVIDIA-shaped) take
    ``_launch_config_nvidia``, AMD (gfx942, gfx950) ``_launch_config_amd``.
    The keys are described at ``_launch_config_nvidia``.
    """
    if target.is_amd:
        return _launch_config_amd(T, H, DK, DV, layout_5d, native_fp8, target)
    return _launch_config_nvidia(T, H, DK, DV, layout_5d, native_fp8)


def _launch_config_nvidia(T: int, H: int, DK: int, DV: int, layout_5d: bool, native_fp8: bool) -> dict:
    """NVIDIA's (and the interpreter's) configuration, chosen by H200 timing.

    Keys: ``block_t`` tokens per program (a power of two; >= 16 with ``groups``),
    ``heads_per_program``, ``d_split`` programs per head row (each takes
    1/d_split of the dims), ``split_kv`` (K and V in separate programs),
    ``num_warps``, ``groups`` (5D V: detect complete aligned groups of 16 slots
    and store them as whole 16-byte vectors; without it every V byte is stored
    on its own and the L2 cache merges the bytes of a group), ``v_words``
    (with ``groups``: transpose a group in registers, one 32-bit word of two
    dims per thread and row, for 16-bit inputs whose rows are 4-byte aligned;
    other inputs take the tile path through shared memory), ``parts`` ("kv";
    "k" or "v" run one half alone, for benchmarks only), ``maxnreg`` (None, or
    a cap on registers per thread, passed to Triton on NVIDIA only),
    ``token_major`` (launch order: False runs every window of one head block
    and half before the next; True runs the programs of one token window, all
    head blocks, K and V, next to each other), ``v_spec`` (register group
    path with 16-token windows and one chunk of words: fetch the candidate
    leader's rows while the group is checked), ``byte_tokens`` (5D V bytes
    stored one by one, a power of two: below ``block_t``, a window that does
    not start and end inside runs (``_run_like``; in the group path: a window
    without complete groups) stores with the lanes of a store on
    ``byte_tokens`` tokens, then dims (``_v_bytes_by_lanes``); ``block_t`` or
    more stores every window as loaded).

    The rules, each with its H200 measurement (docs/benchmarks.md,
    "Decisions"): small windows for decode sizes (more programs, each one
    short: most SMs idle otherwise at T <= 128); for 5D, V bytes stored one by
    one (the L2 merges a vector's bytes) except for D <= 128 past 4096 tokens,
    where the group path wins, and rows of 256 dims split over two programs;
    for NHD, rows of up to 512 elements per program past 128 tokens. The
    token-major launch order for 5D with D <= 128 and with groups (2-3% faster
    at T >= 1024; slower for D = 256 with bytes one by one). Groups for D = 256
    (rows split over two programs) once a call writes at least 8 MiB of V
    (bytes one by one lose 1-4% from T x H = 32768 on). ``byte_tokens`` 4 on
    the bytes path up to 2048 tokens (windows that are not inside runs, i.e.
    decode, store with the lanes on 4 tokens). With the integer encoder
    (twice the registers per element) 5D V is stored as bytes one by one at
    every size, with whole rows of 256 dims from 8 MiB of V per call: on the
    H200 with e4m3fnuz that is 4% faster than the group path for D = 128 and
    26-34% faster for D = 256, where the group path's two-warp programs
    (which K shares) need 128 registers per thread.
    """
    D = max(DK, DV)
    cfg = {"block_t": 16, "heads_per_program": 1, "d_split": 1, "split_kv": True,
           "num_warps": 4, "groups": False, "v_words": True, "parts": "kv", "maxnreg": None,
           "token_major": False, "v_spec": False, "byte_tokens": 16}
    # 5D V bytes one by one
    v_bytes = dict(d_split=_row_chunks(DK, DV), block_t=4 if T <= 128 else 16, token_major=D < 256,
                   byte_tokens=4 if T <= _DECODE_LANES_MAX_T else 16)
    big_d256 = D == 256 and T * H * DV >= _GROUPS_MIN_V_BYTES_D256
    if layout_5d and not native_fp8:
        cfg.update(v_bytes)
        if big_d256:
            cfg["d_split"] = 1  # whole rows of 256 dims
    elif layout_5d:
        if T > _GROUPS_MIN_T and D < 256:
            cfg.update(groups=True, heads_per_program=_heads_per_program(H, D, 256), token_major=True,
                       v_spec=True)
        elif big_d256:
            cfg.update(groups=True, d_split=_row_chunks(DK, DV), token_major=True)
        else:
            cfg.update(v_bytes)
    elif T <= 128:
        cfg.update(block_t=4)
    else:
        hb = _heads_per_program(H, D, 512)
        block_t = 4 if T <= 2048 else (32 if hb * D >= 512 else 16)
        cfg.update(block_t=block_t, heads_per_program=hb)
    return cfg


# AMD: elements a lane quantises per program (the tile over the program's
# lanes). 16 keeps every serving shape at or under 64 VGPRs (8 waves per
# SIMD) with the fewest instructions per element; see _launch_config_amd.
_AMD_ELEMENTS_PER_LANE = 16


def _launch_config_amd(T: int, H: int, DK: int, DV: int, layout_5d: bool, native_fp8: bool,
                       target: KernelTarget) -> dict:
    """AMD (gfx942, gfx950): tiles chosen from the compile figures, not from
    timing. Speed on AMD hardware is unmeasured.

    Figures: ``lab/write_config_sweep.py``, each arch in its own process,
    Triton 3.5.1, 3.6.0, 3.7.0, 3.8.0 and 3.9.0, buffer ops on and off,
    caches under and over 2 GiB (LARGE), pages 16/32/64, tensor and float
    scales, Qwen3.5 TP8 (1 KV head, D=256), TP1 (2, 256) and a Llama-like
    layer (8, 128), T = 1, 16, 37, 2048, 32768 (4096 and 8192 compile to the
    32768 kernel). With these rules every one of those kernels compiles, has
    no spills and no scratch, uses the hardware conversion
    (``v_cvt_pk_fp8_f32``), takes at most 60 VGPRs and 56 SGPRs and 4 KiB of
    LDS, and runs 8 waves per SIMD.

    * 5D V bytes one by one at every size, never the group path. The H200's
      group path (past 4096 tokens at D=128, from 8 MiB of V at D=256) took
      106 SGPRs and spilled 6-26 of them on Triton 3.7-3.9 (3.8.0 gfx942,
      Qwen3.5 TP8, T=32768: 87 VGPRs, 18 spills, 4 waves; gfx950 with buffer
      ops: 126-145 VGPRs, 3-4 waves); on 3.5/3.6 it did not spill but held
      up to 142 VGPRs (3-8 waves, 4 on gfx942). With 4 waves per program it spilled 14 SGPRs
      for two heads, and with one head issued 2.8-3.4 wave instructions per
      element where the bytes path issues 0.73 (3.8.0 gfx942, T=32768).
    * 5D windows as on NVIDIA's bytes path (4 tokens up to T = 128, 16
      beyond; rows of 256 dims over two programs); NHD heads up to 512
      elements per program as on NVIDIA, and NHD windows past 128 tokens of
      4096 elements at every T (16 tokens of 256 dims, 8 of 512; NVIDIA
      takes 4 tokens up to 2048 and 16-32 beyond): the H200's 32 x 512 tile took
      141-147 VGPRs on gfx942 and 198-202 on gfx950 with buffer ops (Triton
      3.6-3.9; 3 and 2 waves); 8 x 512 takes 44 (3.8.0 gfx942).
    * ``num_warps`` such that each 64-lane wave quantises 16 elements per
      lane (1 to 4 waves per program): 16 per lane was the fewest wave
      instructions per element at 8 waves per SIMD (a 5D window of 16 x 128:
      0.73 against 0.90 with 8 per lane; the H200's 4-wave decode windows
      of 4 x 128, 2 per lane: 2.1, against 0.87 as one wave); 32 per lane
      took 78 VGPRs with buffer ops (6 waves). 5D windows that hold both V
      store paths (129-2048 tokens: windows inside runs stored as loaded,
      the others in the decode lane order) take 8 per lane: with 16, gfx950
      needed 73-74 VGPRs with buffer ops (6 waves), with 8 it needs 52.
    * ``byte_tokens`` and the launch order as on NVIDIA: they change which
      addresses a store covers, not the registers.

    The same rules serve the integer encoder (the format the arch does not
    convert: e4m3fn on gfx942, e4m3fnuz on gfx950): 8 waves, no spills
    (Triton 3.8.0 gfx942 with buffer ops, T = 1, 2048, 32768).
    """
    D = max(DK, DV)
    cfg = _launch_config_nvidia(T, H, DK, DV, layout_5d, native_fp8)
    cfg.update(groups=False, v_spec=False, maxnreg=None)
    if layout_5d:
        cfg.update(block_t=4 if T <= 128 else 16, heads_per_program=1, d_split=_row_chunks(DK, DV),
                   token_major=D < 256, byte_tokens=4 if T <= _DECODE_LANES_MAX_T else 16)
    elif T <= 128:
        cfg.update(block_t=4, heads_per_program=1)
    else:
        hb = _heads_per_program(H, D, 512)
        row = hb * triton.next_power_of_2(D)
        cfg.update(heads_per_program=hb, block_t=max(4, min(32, 4096 // row)))
    lanes = target.warp_size or 64
    per_lane = _AMD_ELEMENTS_PER_LANE
    if layout_5d and cfg["byte_tokens"] < cfg["block_t"]:
        per_lane //= 2  # two V store paths in one program (run windows, decode lanes)
    tile = cfg["block_t"] * cfg["heads_per_program"] * (triton.next_power_of_2(D) // cfg["d_split"])
    cfg["num_warps"] = max(1, min(4, tile // (lanes * per_lane)))
    return cfg


@functools.lru_cache(maxsize=1024)
def default_config(T: int, H: int, DK: int, DV: int, layout_5d: bool, native: bool,
                    target: KernelTarget) -> Mapping:
    return MappingProxyType(check_config(launch_config(T, H, DK, DV, layout_5d, native, target), H, DK, DV,
                                          layout_5d))


def check_config(cfg: dict, H: int, DK: int, DV: int, layout_5d: bool) -> dict:
    """``cfg`` checked against the shapes (ValueError naming the key), groups
    switched off for NHD."""
    groups = bool(cfg["groups"]) and layout_5d
    bt = cfg["block_t"]
    if bt < 1 or bt & (bt - 1) or (groups and bt < X_FP8):
        raise ValueError(
            f"_config block_t: expected a power of two{f' >= {X_FP8} with groups' if groups else ''}, got {bt}"
        )
    hb = cfg["heads_per_program"]
    if hb < 1 or H % hb or hb & (hb - 1):
        raise ValueError(f"_config heads_per_program: expected a power of two dividing H={H}, got {hb}")
    ds = cfg["d_split"]
    min_chunk = X_FP8 if layout_5d else 1
    if (ds < 1 or ds & (ds - 1) or triton.next_power_of_2(DK) // ds < min_chunk
            or triton.next_power_of_2(DV) // ds < min_chunk):
        raise ValueError(f"_config d_split: expected a power of two leaving >= {min_chunk} dims per program, got {ds}")
    if cfg["parts"] not in ("kv", "k", "v") or (cfg["parts"] != "kv" and not cfg["split_kv"]):
        raise ValueError(f"_config parts: expected 'kv', or 'k' / 'v' with split_kv, got {cfg['parts']!r}")
    cap = cfg["maxnreg"]
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or not 16 <= cap <= 255):
        raise ValueError(f"_config maxnreg: expected None or an int in 16..255, got {cap!r}")
    cfg["groups"] = groups
    cfg["v_words"] = bool(cfg["v_words"]) and groups
    cfg["v_spec"] = bool(cfg["v_spec"]) and cfg["v_words"]
    cfg["token_major"] = bool(cfg["token_major"])
    lt = cfg["byte_tokens"]
    if isinstance(lt, bool) or not isinstance(lt, int) or lt < 1 or lt & (lt - 1):
        raise ValueError(f"_config byte_tokens: expected a power of two, got {lt!r}")
    return cfg
