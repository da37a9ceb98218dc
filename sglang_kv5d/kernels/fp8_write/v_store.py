"""The fused FP8 write's V side (``@triton.jit`` only): ``v_part`` writes one
program's V rows, NHD rows per token, or SHUFFLE 5D V (``(blocks, H, page/X,
D_v, X)``, one token owning one byte of every 16-byte vector) either byte by
byte or, with ``GROUPS``, complete aligned groups of X slots as whole vectors
(``V_WORDS``: transposed in registers from 32-bit words of 16-bit inputs).
How and when each path runs: the package docstring and ``config.py``.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .quantize import load_slots, quantize, scale_and_rcp

__all__ = ["v_part"]


@triton.jit
def _v_rows(src, load_t, d, DV: tl.constexpr, PADDED: tl.constexpr):
    """The input rows ``src`` (pointers, (BLOCK_T, HB, BDV)) of the tokens in
    ``load_t`` (``PADDED``: and the dims ``d`` < DV); 1.0 elsewhere."""
    m = load_t[:, None, None]
    if PADDED:
        m = m & (d < DV)[None, None, :]
    return tl.load(src, mask=m, other=1.0)


@triton.jit
def _v_slot_offsets(s, H: tl.constexpr, DV: tl.constexpr, PAGE: tl.constexpr, X: tl.constexpr):
    """Byte offset in a 5D V cache of head 0, dim 0 of slots ``s``:
    V5d[blk, 0, t // X, 0, t % X] with blk = s // PAGE, t = s % PAGE."""
    blk = s // PAGE
    in_page = s - blk * PAGE
    return blk * (H * DV * PAGE) + (in_page // X) * (DV * X) + (in_page % X)


@triton.jit
def _store_v_bytes(code, vc_ptr, s, heads, d, store_t,
                   H: tl.constexpr, HB: tl.constexpr, DV: tl.constexpr, BDV: tl.constexpr,
                   PADDED: tl.constexpr, PAGE: tl.constexpr, X: tl.constexpr, BLOCK_T: tl.constexpr,
                   FLAT: tl.constexpr, FLAT_OFFSETS: tl.constexpr):
    """5D V, token by token: one byte per (token, head, d), 16 bytes apart.

    ``code`` (BLOCK_T, HB, BDV) fp8 bytes; ``s`` (BLOCK_T,) the tokens' slots;
    ``store_t`` (BLOCK_T,) which tokens to store; ``heads`` (HB,) head ids;
    ``d`` (BDV,) dims (``PADDED``: mask d >= DV).

    The lanes of the store should walk tokens first: on a run, 16 lanes then
    fill one 16-byte vector (on scattered slots one store touches a cache
    line per token; ``_v_bytes_by_lanes`` is for those). With ``FLAT`` that
    order is explicit: the tile is stored as one 1-D tensor, tokens
    innermost. Without it the order is the tie-break of Triton's coalescing
    pass between axes of which none is contiguous: tokens first in Triton
    3.6, dims first from 3.7 (whole vectors then come from 16 stores). The
    bytes path stores flat (the same sm_90 SASS as the 3-D tile on Triton
    3.6); the group path, whose byte stores are only the edges of runs and
    decode tokens, keeps the 3-D tile (flat, it needs 56 registers instead
    of 50 for the Llama-like default on 3.6).

    ``FLAT_OFFSETS`` (AMD) flattens the integer offsets and adds them to the
    base pointer once: AMD's pointer canonicalisation (buffer ops, on by
    default from Triton 3.6) cannot legalise a reshape of a tensor of
    pointers. NVIDIA keeps the pointer reshape its timings were taken with.
    """
    vbase = _v_slot_offsets(s, H, DV, PAGE, X)
    if FLAT:
        N: tl.constexpr = HB * BDV * BLOCK_T
        m = store_t[None, None, :]
        if PADDED:
            m = m & (d < DV)[None, :, None]
        m = tl.reshape(tl.broadcast_to(m, (HB, BDV, BLOCK_T)), (N,))
        vals = tl.reshape(tl.permute(code, (1, 2, 0)), (N,))
        if FLAT_OFFSETS:
            off = vbase[None, None, :] + (heads * (DV * PAGE))[:, None, None] + (d * X)[None, :, None]
            tl.store(vc_ptr + tl.reshape(off, (N,)), vals, mask=m)
        else:
            dst = (vc_ptr + vbase[None, None, :] + (heads * (DV * PAGE))[:, None, None]
                   + (d * X)[None, :, None])
            tl.store(tl.reshape(dst, (N,)), vals, mask=m)
    else:
        dst = (vc_ptr + vbase[:, None, None] + (heads * (DV * PAGE))[None, :, None]
               + (d * X)[None, None, :])
        m = store_t[:, None, None]
        if PADDED:
            m = m & (d < DV)[None, None, :]
        tl.store(dst, code, mask=m)


@triton.jit
def _v_bytes_by_lanes(v_ptr, vc_ptr, i0, s, store_t, heads, d, stride_vt, vs, vrcp,
                      H: tl.constexpr, HB: tl.constexpr, DV: tl.constexpr, BDV: tl.constexpr,
                      PADDED: tl.constexpr, PAGE: tl.constexpr, X: tl.constexpr, BLOCK_T: tl.constexpr,
                      LT: tl.constexpr, FMA_DIV: tl.constexpr, FNUZ: tl.constexpr, NATIVE: tl.constexpr):
    """5D V of the tokens ``store_t`` (BLOCK_T,) of the window at token ``i0``
    (slots ``s``), loaded, quantised and stored as a (LT, BDV, HB, BLOCK_T / LT)
    tile (token t = g * LT + l at [l, d, h, g]), so that a store's adjacent
    lanes walk LT tokens, then dims: a store of scattered slots touches LT
    cache lines instead of one per lane. Lanes follow the axes in the order
    Triton's coalescing pass picks when no axis is contiguous (first to last
    in Triton 3.6, last to first in later versions); either way tokens, then
    dims. The rows are loaded here (Triton 3.6 loads them as 16-byte vectors
    and transposes them through shared memory), after the caller's decision,
    so this is for windows known to be scattered.
    """
    G: tl.constexpr = BLOCK_T // LT
    l = tl.arange(0, LT)[:, None, None, None]
    g = tl.arange(0, G)[None, None, None, :]
    dd = d[None, :, None, None]
    hh = heads[None, None, :, None]
    st = tl.permute(tl.reshape(store_t.to(tl.int32), (G, LT)), (1, 0))[:, None, None, :] != 0
    if PADDED:
        st = st & (dd < DV)
    src = v_ptr + (i0 + g * LT + l) * stride_vt + hh * DV + dd
    code = quantize(tl.load(src, mask=st, other=1.0), vs, vrcp, FMA_DIV, FNUZ, NATIVE)
    vbase = _v_slot_offsets(s, H, DV, PAGE, X)
    vb = tl.permute(tl.reshape(vbase, (G, LT)), (1, 0))[:, None, None, :]
    tl.store(vc_ptr + vb + dd * X + hh * (DV * PAGE), code, mask=st)


@triton.jit
def _run_like(loc_ptr, i0, T, stride_loc, BLOCK_T: tl.constexpr):
    """Does the window of BLOCK_T tokens at ``i0`` start and end inside runs
    of consecutive slots (loc[i0 + 1] == loc[i0] + 1 and the same for its last
    two tokens)? Prefill windows do, with at most a run boundary inside;
    decode windows do not. Four scalar loads, no reduction. It decides only
    how V bytes are stored, never what is written."""
    last = i0 + (BLOCK_T - 1)
    full = last < T
    a0 = tl.load(loc_ptr + i0 * stride_loc, mask=full, other=0)
    a1 = tl.load(loc_ptr + (i0 + 1) * stride_loc, mask=full, other=0)
    b0 = tl.load(loc_ptr + (last - 1) * stride_loc, mask=full, other=0)
    b1 = tl.load(loc_ptr + last * stride_loc, mask=full, other=0)
    return (a1 - a0 == 1) & (b1 - b0 == 1)


@triton.jit
def _two_token_bytes(w0, w1, vs, vrcp, IN_BF16: tl.constexpr,
                     FMA_DIV: tl.constexpr, FNUZ: tl.constexpr, NATIVE: tl.constexpr):
    """fp8 bytes of two tokens' words ``w0``, ``w1`` (N int32 words of two
    16-bit elements, dims 2p and 2p+1): (even-dim bytes, odd-dim bytes), each
    (N, 2) = (word, token). Quantising two tokens together lets the hardware
    convert them with one packed instruction."""
    if IN_BF16:  # bf16 -> fp32 is a shift of the bits
        lo0 = (w0 << 16).to(tl.float32, bitcast=True)
        hi0 = (w0 & -65536).to(tl.float32, bitcast=True)
        lo1 = (w1 << 16).to(tl.float32, bitcast=True)
        hi1 = (w1 & -65536).to(tl.float32, bitcast=True)
    else:  # fp16
        lo0 = w0.to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
        hi0 = (w0 >> 16).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
        lo1 = w1.to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
        hi1 = (w1 >> 16).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
    even = quantize(tl.join(lo0, lo1), vs, vrcp, FMA_DIV, FNUZ, NATIVE)
    odd = quantize(tl.join(hi0, hi1), vs, vrcp, FMA_DIV, FNUZ, NATIVE)
    return even, odd


@triton.jit
def _sixteen_tokens(t0, t1, t2, t3, t4, t5, t6, t7, N: tl.constexpr):
    """Eight (N, 2) byte tiles (tokens 2k, 2k+1 in tile k) -> (N, 16), token-ordered.

    Joins keep every byte in the thread that quantised it (no shared memory).
    Each join appends an axis: after the three joins the axes are (N, token
    bit 0, bit 3, bit 2, bit 1); the permute puts them in token order."""
    u0 = tl.join(t0, t4)
    u1 = tl.join(t1, t5)
    u2 = tl.join(t2, t6)
    u3 = tl.join(t3, t7)
    v0 = tl.join(u0, u2)
    v1 = tl.join(u1, u3)
    w = tl.join(v0, v1)
    return tl.reshape(tl.permute(w, (0, 2, 3, 4, 1)), (N, 16))


@triton.jit
def _group_word_ids(c, h0, d0, H: tl.constexpr, DV: tl.constexpr, BDV: tl.constexpr,
                    PAGE: tl.constexpr, X: tl.constexpr, CHUNK: tl.constexpr):
    """Chunk ``c`` of a program's words: (input word offset in a row, mask of
    real dims, cache offset of the dim-2p vector within the group), each (CHUNK,)."""
    PW: tl.constexpr = BDV // 2  # words per head in this program
    w = c * CHUNK + tl.arange(0, CHUNK)
    h = h0 + w // PW
    p = d0 // 2 + w % PW
    return h * (DV // 2) + p, p < DV // 2, h * (DV * PAGE) + p * (2 * X)


@triton.jit
def _group_rows(wp, row, sw, w_off, m):
    """Words ``w_off`` of the 16 input rows ``row`` .. ``row + 15`` (16 tensors)."""
    return (tl.load(wp + (row + 0) * sw + w_off, mask=m, other=0),
            tl.load(wp + (row + 1) * sw + w_off, mask=m, other=0),
            tl.load(wp + (row + 2) * sw + w_off, mask=m, other=0),
            tl.load(wp + (row + 3) * sw + w_off, mask=m, other=0),
            tl.load(wp + (row + 4) * sw + w_off, mask=m, other=0),
            tl.load(wp + (row + 5) * sw + w_off, mask=m, other=0),
            tl.load(wp + (row + 6) * sw + w_off, mask=m, other=0),
            tl.load(wp + (row + 7) * sw + w_off, mask=m, other=0),
            tl.load(wp + (row + 8) * sw + w_off, mask=m, other=0),
            tl.load(wp + (row + 9) * sw + w_off, mask=m, other=0),
            tl.load(wp + (row + 10) * sw + w_off, mask=m, other=0),
            tl.load(wp + (row + 11) * sw + w_off, mask=m, other=0),
            tl.load(wp + (row + 12) * sw + w_off, mask=m, other=0),
            tl.load(wp + (row + 13) * sw + w_off, mask=m, other=0),
            tl.load(wp + (row + 14) * sw + w_off, mask=m, other=0),
            tl.load(wp + (row + 15) * sw + w_off, mask=m, other=0))


@triton.jit
def _store_group_rows(ws, vc_ptr, lslot, dst_off, m, vs, vrcp, H: tl.constexpr, DV: tl.constexpr,
                      PAGE: tl.constexpr, X: tl.constexpr, CHUNK: tl.constexpr,
                      IN_BF16: tl.constexpr, FMA_DIV: tl.constexpr, FNUZ: tl.constexpr,
                      NATIVE: tl.constexpr):
    """Quantise the 16 rows' words ``ws`` (``_group_rows``) and store the two
    16-byte vectors of dims 2p and 2p+1 (adjacent in the cache) of the group
    at slots ``lslot`` .. ``lslot + 15``: the transposition from rows to
    vectors happens in registers."""
    lblk = lslot // PAGE
    base = lblk * (H * DV * PAGE) + ((lslot - lblk * PAGE) // X) * (DV * X)
    e0, o0 = _two_token_bytes(ws[0], ws[1], vs, vrcp, IN_BF16, FMA_DIV, FNUZ, NATIVE)
    e1, o1 = _two_token_bytes(ws[2], ws[3], vs, vrcp, IN_BF16, FMA_DIV, FNUZ, NATIVE)
    e2, o2 = _two_token_bytes(ws[4], ws[5], vs, vrcp, IN_BF16, FMA_DIV, FNUZ, NATIVE)
    e3, o3 = _two_token_bytes(ws[6], ws[7], vs, vrcp, IN_BF16, FMA_DIV, FNUZ, NATIVE)
    e4, o4 = _two_token_bytes(ws[8], ws[9], vs, vrcp, IN_BF16, FMA_DIV, FNUZ, NATIVE)
    e5, o5 = _two_token_bytes(ws[10], ws[11], vs, vrcp, IN_BF16, FMA_DIV, FNUZ, NATIVE)
    e6, o6 = _two_token_bytes(ws[12], ws[13], vs, vrcp, IN_BF16, FMA_DIV, FNUZ, NATIVE)
    e7, o7 = _two_token_bytes(ws[14], ws[15], vs, vrcp, IN_BF16, FMA_DIV, FNUZ, NATIVE)
    even = _sixteen_tokens(e0, e1, e2, e3, e4, e5, e6, e7, CHUNK)
    odd = _sixteen_tokens(o0, o1, o2, o3, o4, o5, o6, o7, CHUNK)
    dst = vc_ptr + base + dst_off[:, None] + tl.arange(0, X)[None, :]
    tl.store(dst, even, mask=m[:, None])
    tl.store(dst + X, odd, mask=m[:, None])


@triton.jit
def v_part(v_ptr, vc_ptr, loc_ptr, v_scale, i0, h0, d0, T, stride_vt, stride_loc, n_slots,
            vc_stride_s, vc_stride_h,
            H: tl.constexpr, HB: tl.constexpr, DV: tl.constexpr, BDV: tl.constexpr,
            D_SPLIT: tl.constexpr,
            PAGE: tl.constexpr, X: tl.constexpr, LAYOUT_5D: tl.constexpr, BLOCK_T: tl.constexpr,
            BYTE_TOKENS: tl.constexpr, V_SCALE_PTR: tl.constexpr, GROUPS: tl.constexpr, V_WORDS: tl.constexpr,
            V_SPEC: tl.constexpr,
            CHUNK: tl.constexpr, IN_BF16: tl.constexpr, FMA_DIV: tl.constexpr, FNUZ: tl.constexpr,
            NATIVE: tl.constexpr, LARGE: tl.constexpr, FLAT_OFFSETS: tl.constexpr):
    """V of HB heads, dims d0 .. d0+BDV, for a window of tokens (5D with GROUPS:
    whole 16-byte vectors where aligned groups of X slots are complete).
    ``i0`` is the window's first token."""
    rows = i0 + tl.arange(0, BLOCK_T)
    s, ok, in_t = load_slots(loc_ptr, rows, T, stride_loc, n_slots, LARGE)
    vs, vrcp = scale_and_rcp(v_scale, V_SCALE_PTR)
    hh = tl.arange(0, HB)
    d = d0 + tl.arange(0, BDV)
    src_rows = (v_ptr + (rows * stride_vt)[:, None, None] + ((h0 + hh) * DV)[None, :, None]
                + d[None, None, :])
    if not LAYOUT_5D:
        lm = in_t[:, None, None]  # loads: rows in range (not waiting for loc)
        sm = ok[:, None, None]  # stores: addressed slots
        if BDV * D_SPLIT != DV:  # padded head dim
            dm = (d < DV)[None, None, :]
            lm = lm & dm
            sm = sm & dm
        x = tl.load(src_rows, mask=lm, other=1.0)
        code = quantize(x, vs, vrcp, FMA_DIV, FNUZ, NATIVE)
        dst = (vc_ptr + (s * vc_stride_s)[:, None, None] + ((h0 + hh) * vc_stride_h)[None, :, None]
               + d[None, None, :])
        tl.store(dst, code, mask=sm)
    elif not GROUPS:
        # Loaded and quantised before the slots are looked at (loads do not wait
        # for loc); only the way the bytes are stored depends on them: a window
        # inside runs as loaded (its bytes fill whole vectors), any other window
        # with the lanes on BYTE_TOKENS tokens (decode: fewer cache lines per store).
        x = _v_rows(src_rows, in_t, d, DV, BDV * D_SPLIT != DV)
        if BYTE_TOKENS == BLOCK_T:
            code = quantize(x, vs, vrcp, FMA_DIV, FNUZ, NATIVE)
            _store_v_bytes(code, vc_ptr, s, h0 + hh, d, ok, H, HB, DV, BDV, BDV * D_SPLIT != DV, PAGE, X,
                           BLOCK_T, True, FLAT_OFFSETS)
        elif _run_like(loc_ptr, i0, T, stride_loc, BLOCK_T):
            code = quantize(x, vs, vrcp, FMA_DIV, FNUZ, NATIVE)
            _store_v_bytes(code, vc_ptr, s, h0 + hh, d, ok, H, HB, DV, BDV, BDV * D_SPLIT != DV, PAGE, X,
                           BLOCK_T, True, FLAT_OFFSETS)
        else:
            _v_bytes_by_lanes(v_ptr, vc_ptr, i0, s, ok, h0 + hh, d, stride_vt, vs, vrcp, H, HB, DV, BDV,
                              BDV * D_SPLIT != DV, PAGE, X, BLOCK_T, BYTE_TOKENS, FMA_DIV, FNUZ, NATIVE)
    else:
        # Which tokens sit in a complete aligned group of X consecutive slots?
        # Token i with slot s and r = s % X belongs to the group that starts at
        # token g = i - r; it is complete when loc[g + j] == s - r + j for all j.
        r = s % X
        g = rows - r
        j = tl.arange(0, X)
        g_ok = ok & (g >= 0) & (g + (X - 1) < T)
        if V_WORDS:
            wp = v_ptr.to(tl.pointer_type(tl.int32), bitcast=True)
            sw = stride_vt // 2
        if V_SPEC:
            # (one X-block per window, one chunk of words) The only token that
            # can lead a complete group here is the window's last addressed
            # token with slot % X == 0: the X - 1 tokens after a leader carry
            # its group's other slots. Fetch that token's 16 rows now, while
            # the group is checked, instead of after the check.
            cand = tl.max(tl.where(ok & (r == 0), tl.arange(0, BLOCK_T), -1), axis=0)
            w_off, wm, dst_off = _group_word_ids(0, h0, d0, H, DV, BDV, PAGE, X, CHUNK)
            crow = i0 + cand
            ws = _group_rows(wp, crow, sw, w_off, wm & (cand >= 0) & (crow + (X - 1) < T))
        sg = tl.load(loc_ptr + (g[:, None] + j[None, :]) * stride_loc,
                     mask=g_ok[:, None], other=-1)
        same = (sg == (s - r)[:, None] + j[None, :]).to(tl.int32)
        covered = g_ok & (tl.min(same, axis=1) == 1)

        # Tokens outside complete groups: one byte per (token, head, d).
        scattered = ok & (covered == 0)
        if tl.sum(scattered.to(tl.int32), axis=0) > 0:
            # (loaded only now, for these tokens) Next to complete groups, the
            # bytes of a run's edges are stored as loaded; in a window without
            # any, with the lanes on BYTE_TOKENS tokens.
            if BYTE_TOKENS == BLOCK_T:
                code = quantize(_v_rows(src_rows, scattered, d, DV, BDV * D_SPLIT != DV), vs, vrcp, FMA_DIV,
                                 FNUZ, NATIVE)
                _store_v_bytes(code, vc_ptr, s, h0 + hh, d, scattered, H, HB, DV, BDV, BDV * D_SPLIT != DV,
                               PAGE, X, BLOCK_T, False, FLAT_OFFSETS)
            elif tl.sum(covered.to(tl.int32), axis=0) > 0:
                code = quantize(_v_rows(src_rows, scattered, d, DV, BDV * D_SPLIT != DV), vs, vrcp, FMA_DIV,
                                 FNUZ, NATIVE)
                _store_v_bytes(code, vc_ptr, s, h0 + hh, d, scattered, H, HB, DV, BDV, BDV * D_SPLIT != DV,
                               PAGE, X, BLOCK_T, False, FLAT_OFFSETS)
            else:
                _v_bytes_by_lanes(v_ptr, vc_ptr, i0, s, scattered, h0 + hh, d, stride_vt, vs, vrcp, H, HB, DV,
                                  BDV, BDV * D_SPLIT != DV, PAGE, X, BLOCK_T, BYTE_TOKENS, FMA_DIV, FNUZ, NATIVE)

        # Complete groups that start in this window (at most one per X tokens):
        # load the (X tokens, HB, D) tile, store it as HB*D vectors of X bytes.
        leader = covered & (r == 0)
        G: tl.constexpr = BLOCK_T // X
        if V_WORDS:
            # 16-bit inputs: one group per X-block of the window, transposed in
            # registers (_group_rows, _store_group_rows).
            # One reduction per X-block finds its leader: slot and offset in
            # the block packed as slot * X + offset + 1 (0: no group starts
            # there). It fits: without LARGE, n_slots * X <= the cache's bytes.
            # Each thread takes one word (dims 2p, 2p+1) of each of the group's
            # 16 rows, CHUNK words at a time (CHUNK = the program's threads, so
            # that the store needs no layout change).
            tok = tl.arange(0, BLOCK_T)
            for gi in tl.static_range(G):
                lead_g = leader & (tok // X == gi)
                packed = tl.sum(tl.where(lead_g, s * X + (tok % X) + 1, 0), axis=0)
                if packed > 0:
                    lslot = (packed - 1) // X
                    if V_SPEC:  # the leader is the candidate fetched above
                        _store_group_rows(ws, vc_ptr, lslot, dst_off, wm, vs, vrcp, H, DV, PAGE, X,
                                          CHUNK, IN_BF16, FMA_DIV, FNUZ, NATIVE)
                    else:
                        lrow = i0 + gi * X + (packed - 1) % X
                        for c in tl.static_range((HB * BDV // 2) // CHUNK):
                            w_off, wm, dst_off = _group_word_ids(c, h0, d0, H, DV, BDV, PAGE, X, CHUNK)
                            ws = _group_rows(wp, lrow, sw, w_off, wm)
                            _store_group_rows(ws, vc_ptr, lslot, dst_off, wm, vs, vrcp, H, DV, PAGE, X,
                                              CHUNK, IN_BF16, FMA_DIV, FNUZ, NATIVE)
        elif tl.sum(leader.to(tl.int32), axis=0) > 0:
            lead2 = tl.reshape(leader.to(tl.int32), (G, X)) != 0
            rows2 = tl.reshape(rows, (G, X))
            slot2 = tl.reshape(s, (G, X))
            has = tl.max(lead2.to(tl.int32), axis=1) > 0
            lrow = tl.sum(tl.where(lead2, rows2, 0), axis=1)
            # Recompute the group base from the leader's slot with constant
            # multipliers: then the compiler can prove 16-byte alignment and
            # emits 16-byte stores (it cannot see through a reduced base).
            lslot = tl.sum(tl.where(lead2, slot2, 0), axis=1)
            lblk = lslot // PAGE
            lbase = lblk * (H * DV * PAGE) + ((lslot - lblk * PAGE) // X) * (DV * X)
            # tile (group, head, d, token-in-group)
            m4 = has[:, None, None, None]
            if BDV * D_SPLIT != DV:
                m4 = m4 & (d < DV)[None, None, :, None]
            src = (v_ptr + ((lrow[:, None] + j[None, :]) * stride_vt)[:, None, None, :]
                   + ((h0 + hh) * DV)[None, :, None, None] + d[None, None, :, None])
            x = tl.load(src, mask=m4, other=1.0)
            code = quantize(x, vs, vrcp, FMA_DIV, FNUZ, NATIVE)
            dst = (vc_ptr + lbase[:, None, None, None] + ((h0 + hh) * (DV * PAGE))[None, :, None, None]
                   + (d * X)[None, None, :, None] + j[None, None, None, :])
            tl.store(dst, code, mask=m4)
