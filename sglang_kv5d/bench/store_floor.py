"""The store floor of an FP8 KV write: the time of writing the bytes that
``write_kv_fp8`` writes for a given ``loc`` when nothing is read and nothing is
computed. The benchmark times it next to the fused kernel and the peers, so a
row shows how much of a gap is the cache layout and how much the writer.

One Triton launch writes a constant byte to exactly the cache bytes the fused
write addresses (every valid slot of ``loc``: slot ids >= 0 and < slots; K and
V; NHD or SHUFFLE 5D), from three kinds of programs:

    K rows       ``block_s`` slots x one head: 5D K as 16-byte vectors (one per
                 16 dims), NHD rows as they lie
    V groups     (5D) one complete aligned group of 16 slots x one head: its
                 D_v x 16 bytes are contiguous and go out as whole 16-byte
                 vectors. ``plan_slots`` finds the groups on the host, before
                 timing; a real writer has to find them itself, so on prefill
                 runs this floor is below anything a writer can reach
    V bytes      ``block_s`` slots x one head: the slots outside complete
                 groups, one byte per (slot, dim), 16 bytes apart; the lanes of
                 a store walk up to 4 slots, then dims (4 cache lines per store
                 on scattered slots). NHD V rows come from the K-row programs

``block_s`` (1, 4 or 16 slots per program) trades programs for work per
program: small calls want many short programs, large ones fewer. The floor of
a row is the fastest of them (``block_sizes``).

On scattered (decode) slots hardly any group is complete, so the floor is the
cost of the layout itself: in 5D a token's V bytes land in H x D_v different 16-byte
vectors (H x D_v / 2 partially written 32-byte sectors), where an NHD row is
H x D_v / 32 whole sectors.

Needs torch and Triton; ``plan_slots`` is pure torch (CPU tests run the kernel
in the Triton interpreter).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

X = 16  # bytes per 5D vector (fp8)
_LANE_SLOTS = 4  # V bytes: slots a store's adjacent lanes walk before dims (at most)
_CODE = 0x38  # the constant byte written (1.0 in e4m3fn)


def block_sizes(T: int) -> tuple:
    """Slots per program worth timing for a call of T tokens: one-slot
    programs only for small calls (past 4096 tokens they only add programs)."""
    return (1, 4, 16) if T <= 4096 else (4, 16)


def num_warps(block_s: int, row: int) -> int:
    """Warps per program for ``block_s`` slots of ``row`` (the wider head dim,
    a power of two) bytes: about 16 bytes per lane and store in the K
    programs, at least one warp, at most four."""
    return max(1, min(4, block_s * row // 512))


class SlotPlan(NamedTuple):
    """Which cache bytes a write of ``loc`` touches, as the floor kernel takes them.

    ``slots``: (N,) int64, the distinct valid slots, ascending (K, and NHD V);
    ``leaders``: (G,) int64, first slot of each complete aligned group of 16
    (5D V stored as whole vectors); ``loose``: (L,) int64, the slots outside
    complete groups (5D V stored byte by byte). All on ``loc``'s device.
    """

    slots: torch.Tensor
    leaders: torch.Tensor
    loose: torch.Tensor


def plan_slots(loc: torch.Tensor, n_slots: int) -> SlotPlan:
    """Split the valid slots of ``loc`` ((T,) integer; ids < 0 or >= n_slots
    are skipped, as the fused write skips them) into complete aligned groups of
    16 and the rest. Repeated slots count once."""
    s = torch.unique(loc[(loc >= 0) & (loc < n_slots)].to(torch.int64))
    blocks, counts = torch.unique(s // X, return_counts=True)
    full = blocks[counts == X]
    leaders = full * X
    loose = s[~torch.isin(s // X, full)]
    return SlotPlan(s, leaders, loose)


@triton.jit
def _store_floor_kernel(slots_ptr, n_s, leaders_ptr, loose_ptr, n_loose, kc_ptr, vc_ptr,
                        n_k_programs, n_group_programs,
                        H: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr, BDK: tl.constexpr,
                        BDV: tl.constexpr, PAGE: tl.constexpr, XB: tl.constexpr,
                        LAYOUT_5D: tl.constexpr, BLOCK_S: tl.constexpr, LANE_S: tl.constexpr,
                        CODE: tl.constexpr):
    """Grid (n_k_programs + n_group_programs + loose programs,): K programs
    (BLOCK_S of the sorted int64 ``slots`` x one head; NHD: K and V rows),
    then 5D V group programs (one int64 leader slot of ``leaders`` x one head),
    then 5D V byte programs (BLOCK_S of ``loose`` x one head). ``kc_ptr`` /
    ``vc_ptr``: the uint8 caches, NHD (slots, H, D) or 5D K (blocks, H, DK/XB,
    PAGE, XB) and V (blocks, H, PAGE/XB, DV, XB). Writes CODE everywhere."""
    pid = tl.program_id(0)
    if pid < n_k_programs:
        # K rows (and NHD V rows): BLOCK_S slots x one head
        w = pid // H
        h = pid - w * H
        i = w * BLOCK_S + tl.arange(0, BLOCK_S)
        ok = i < n_s
        s = tl.load(slots_ptr + i, mask=ok, other=0)
        if LAYOUT_5D:
            c = tl.arange(0, BDK // XB)
            e = tl.arange(0, XB)
            blk = s // PAGE
            base = blk * (H * DK * PAGE) + (s - blk * PAGE) * XB + h * (DK * PAGE)
            dst = base[:, None, None] + (c * (PAGE * XB))[None, :, None] + e[None, None, :]
            m = ok[:, None, None] & (c * XB < DK)[None, :, None]
            tl.store(kc_ptr + dst, tl.full((BLOCK_S, BDK // XB, XB), CODE, tl.uint8), mask=m)
        else:
            dk = tl.arange(0, BDK)
            mk = ok[:, None] & (dk < DK)[None, :]
            tl.store(kc_ptr + (s * (H * DK) + h * DK)[:, None] + dk[None, :],
                     tl.full((BLOCK_S, BDK), CODE, tl.uint8), mask=mk)
            dv = tl.arange(0, BDV)
            mv = ok[:, None] & (dv < DV)[None, :]
            tl.store(vc_ptr + (s * (H * DV) + h * DV)[:, None] + dv[None, :],
                     tl.full((BLOCK_S, BDV), CODE, tl.uint8), mask=mv)
    elif pid < n_k_programs + n_group_programs:
        # 5D V, one complete group x one head: DV x 16 contiguous bytes
        g = (pid - n_k_programs) // H
        gh = (pid - n_k_programs) - g * H
        lead = tl.load(leaders_ptr + g)
        lead_blk = lead // PAGE
        lead_base = (lead_blk * (H * DV * PAGE) + gh * (DV * PAGE)
                     + ((lead - lead_blk * PAGE) // XB) * (DV * XB))
        f = tl.arange(0, BDV * XB)
        tl.store(vc_ptr + lead_base + f, tl.full((BDV * XB,), CODE, tl.uint8), mask=f < DV * XB)
    else:
        # 5D V, loose slots one byte at a time: flat tile (group of LANE_S
        # slots, dim, slot in group), slots innermost
        q = pid - n_k_programs - n_group_programs
        lw = q // H
        lh = q - lw * H
        li = lw * BLOCK_S + tl.arange(0, BLOCK_S)
        lok = li < n_loose
        ls = tl.load(loose_ptr + li, mask=lok, other=0)
        lblk = ls // PAGE
        in_page = ls - lblk * PAGE
        vb = lblk * (H * DV * PAGE) + (in_page // XB) * (DV * XB) + (in_page % XB) + lh * (DV * PAGE)
        G: tl.constexpr = BLOCK_S // LANE_S
        N: tl.constexpr = G * BDV * LANE_S
        d = tl.arange(0, BDV)
        dst = tl.reshape(vb, (G, LANE_S))[:, None, :] + (d * XB)[None, :, None]
        m = tl.reshape(lok, (G, LANE_S))[:, None, :] & (d < DV)[None, :, None]
        m = tl.broadcast_to(m, (G, BDV, LANE_S))
        tl.store(vc_ptr + tl.reshape(dst, (N,)), tl.full((N,), CODE, tl.uint8), mask=tl.reshape(m, (N,)))


def _layout(k_cache: torch.Tensor, v_cache: torch.Tensor):
    """(layout_5d, H, DK, DV, page, n_slots) of uint8 caches (NHD or 5D)."""
    if k_cache.dim() == 5:
        n_blocks, H, ck, page, x = k_cache.shape
        if x != X or tuple(v_cache.shape) != (n_blocks, H, page // X, v_cache.shape[3], X):
            raise ValueError(f"store floor: 5D caches of shapes {tuple(k_cache.shape)} and "
                             f"{tuple(v_cache.shape)} do not match")
        return True, H, ck * X, v_cache.shape[3], page, n_blocks * page
    if k_cache.dim() == 3 and v_cache.dim() == 3 and k_cache.shape[:2] == v_cache.shape[:2]:
        return False, k_cache.shape[1], k_cache.shape[2], v_cache.shape[2], 1, k_cache.shape[0]
    raise ValueError(f"store floor: expected NHD (slots, H, D) or 5D caches, got shapes "
                     f"{tuple(k_cache.shape)} and {tuple(v_cache.shape)}")


class StoreFloor:
    """A capturable callable that writes ``loc``'s cache bytes with a constant.

    ``k_cache``, ``v_cache``: contiguous caches of one layer as for
    ``write_kv_fp8`` (fp8 or uint8; NHD or 5D); ``block_s``: slots per
    program, 1, 4 or 16. The slot plan is made here, once, on the host side
    of the timing.
    """

    def __init__(self, k_cache: torch.Tensor, v_cache: torch.Tensor, loc: torch.Tensor, block_s: int = 16):
        if block_s not in (1, 4, 16):
            raise ValueError(f"store floor: block_s must be 1, 4 or 16, got {block_s!r}")
        if not (k_cache.is_contiguous() and v_cache.is_contiguous()):
            raise ValueError("store floor: caches must be contiguous")
        self.block_s = block_s
        self.kc = k_cache.view(torch.uint8)
        self.vc = v_cache.view(torch.uint8)
        self.layout_5d, self.H, self.DK, self.DV, self.page, n_slots = _layout(self.kc, self.vc)
        self.plan = plan_slots(loc, n_slots)
        n_s = self.plan.slots.numel()
        self.n_k = triton.cdiv(n_s, block_s) * self.H
        if self.layout_5d:
            self.n_g = self.plan.leaders.numel() * self.H
            self.n_b = triton.cdiv(self.plan.loose.numel(), block_s) * self.H
        else:
            self.n_g = self.n_b = 0
        self.num_warps = num_warps(block_s, triton.next_power_of_2(max(self.DK, self.DV)))

    def __call__(self) -> None:
        grid = self.n_k + self.n_g + self.n_b
        if grid == 0:
            return
        p = self.plan
        _store_floor_kernel[(grid,)](
            p.slots, p.slots.numel(), p.leaders, p.loose, p.loose.numel(), self.kc, self.vc,
            self.n_k, self.n_g,
            H=self.H, DK=self.DK, DV=self.DV, BDK=triton.next_power_of_2(self.DK),
            BDV=triton.next_power_of_2(self.DV), PAGE=self.page, XB=X, LAYOUT_5D=self.layout_5d,
            BLOCK_S=self.block_s, LANE_S=min(_LANE_SLOTS, self.block_s), CODE=_CODE, num_warps=self.num_warps)
