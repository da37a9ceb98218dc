"""What the selftest runs: requests, a random "model", the pools under test,
and the state a pass through the phases shares.

Random data comes from a fixed seed; the model is random: only attention and
the KV cache are under test. The reference side keeps, per pool, request and
layer, the logical float64 K/V the model produced (quantised to fp8 with the
kernel's semantics where the pool is fp8), independent of the cache layout.
"""

from __future__ import annotations

import math
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

from .geometry import Geometry
from .report import PhaseResult

NS = types.SimpleNamespace


@dataclass
class Request:
    rid: int
    length: int  # prompt length
    prefix_shared: bool
    pages: List[int]
    done: int = 0  # tokens already in the cache

    def slot(self, pos: int, page: int) -> int:
        return self.pages[pos // page] * page + pos % page


def plan_requests(geo: Geometry) -> Tuple[List[Request], int]:
    """The requests and their pages; all but the last share the page-aligned
    prefix (the same pages). Returns (requests, slots needed)."""
    page = geo.page
    shared_pages = list(range(geo.prefix // page))
    next_page = len(shared_pages)
    reqs: List[Request] = []
    for rid, own in enumerate(geo.own_lengths):
        shared = rid < len(geo.own_lengths) - 1
        length = (geo.prefix if shared else 0) + own
        n_pages = -(-(length + geo.decode_steps + geo.verify_tokens) // page)
        pages = list(shared_pages) if shared else []
        while len(pages) < n_pages:
            pages.append(next_page)
            next_page += 1
        reqs.append(Request(rid, length, shared, pages))
    return reqs, next_page * page


class Model:
    """Random "model": per layer and token, q/k/v from a seeded generator."""

    def __init__(self, geo: Geometry, device: str, seed: int = 1234):
        import torch

        self.geo = geo
        self.device = device
        self.gen = torch.Generator(device="cpu").manual_seed(seed)

    def qkv(self, n: int):
        import torch

        g = self.geo
        q = torch.randn(n, g.hq, g.head_dim, generator=self.gen) * 1.5
        k = torch.randn(n, g.hkv, g.head_dim, generator=self.gen) * 2.0
        v = torch.randn(n, g.hkv, g.head_dim, generator=self.gen) * 2.0
        return (q.to(torch.bfloat16).to(self.device), k.to(torch.bfloat16).to(self.device),
                v.to(torch.bfloat16).to(self.device))


def logical(x, fp8_dtype, scale):
    """What the cache should hold for ``x``, as float64: fp8(x/scale)*scale, or x."""
    import torch

    if fp8_dtype is None:
        return x.detach().cpu().double()
    from ..kernels.fp8_reference import quantize_fp8_fp32

    bits = quantize_fp8_fp32(x.detach().cpu(), scale, fp8_dtype)
    return bits.view(fp8_dtype).to(torch.float64) * scale


@dataclass
class PoolCase:
    """One pool under test, its backend, its layers and the reference K/V."""

    name: str
    pool: Any
    layers: List[int]
    fp8: Any  # the pool's fp8 dtype, or None for a bf16 pool
    windows: Dict[int, int]  # layer id -> sliding_window_size (window layers only)
    backend: Any = None
    layer_objs: Dict[int, Any] = field(default_factory=dict)
    kv: Dict[Tuple[int, int], Tuple[list, list]] = field(default_factory=dict)  # (rid, layer) -> chunks

    def window(self, lid: int) -> int:
        return self.windows.get(lid, -1)

    def make_layers(self, geo: Geometry, device: str) -> None:
        """RadixAttention-like layer objects (what the backend reads of a layer)."""
        import torch

        for lid in self.layers:
            scales = self.fp8 is not None
            self.layer_objs[lid] = NS(
                layer_id=lid, tp_q_head_num=geo.hq, tp_k_head_num=geo.hkv, tp_v_head_num=geo.hkv,
                qk_head_dim=geo.head_dim, v_head_dim=geo.head_dim, scaling=1.0 / math.sqrt(geo.head_dim),
                sliding_window_size=self.window(lid), logit_cap=0.0, is_cross_attention=False,
                k_scale=torch.tensor([geo.k_scale], dtype=torch.float32, device=device) if scales else None,
                v_scale=torch.tensor([geo.v_scale], dtype=torch.float32, device=device) if scales else None,
                k_scale_float=geo.k_scale if scales else None, v_scale_float=geo.v_scale if scales else None,
            )

    def append_logical(self, rid: int, lid: int, k, v) -> None:
        layer = self.layer_objs[lid]
        lk, lv = self.kv[(rid, lid)]
        lk.append(logical(k, self.fp8, layer.k_scale_float))
        lv.append(logical(v, self.fp8, layer.v_scale_float))


@dataclass
class Run:
    """One pass of the requests through the patched attention, shared by the phases."""

    geo: Geometry
    device: str
    path: str  # "aiter" | "triton" | "default" (as SGLANG_KV5D_ATTN_IMPL selects)
    cases: Dict[str, PoolCase]
    reqs: List[Request]
    model: Model
    extend_fn: Callable  # the patched functions, as aiter_backend binds them
    decode_fn: Callable
    write_loc: Optional[Callable]  # SGLang's KVWriteLoc (0.5.16+), or None: plain slots
    say: Callable[[str], None]
    results: Dict[Tuple[str, str], PhaseResult] = field(default_factory=dict)

    def result(self, phase: str, pool: str) -> PhaseResult:
        return self.results.setdefault((phase, pool), PhaseResult(phase, pool))

    def loc_arg(self, loc):
        """Slots as set_kv_buffer takes them in this SGLang."""
        return self.write_loc(loc=loc, swa_loc=loc) if self.write_loc is not None else loc

    def sync(self) -> None:
        if self.device != "cpu":
            import torch

            torch.cuda.synchronize()
