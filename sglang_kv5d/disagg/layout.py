"""What a PD node reports as its KV byte layout in the bootstrap handshake.

Pure functions (no SGLang import). From 0.5.23 SGLang sends one string per prefill
rank, ``kv_layout``, through the bootstrap server to the decode side, which
compares it with its own (``CommonKVManager.try_ensure_parallel_info``), and
hashes it into the KV checksum signature (``kv_layout_signature``). Upstream
fills it only for DeepSeekV4 pools; for every MHA pool it is None, so a 5D
prefill and an NHD decode (or fp8 e4m3fnuz on MI300 against e4m3fn on MI355,
both called ``fp8_e4m3`` by SGLang) pair silently: the pages are the same
number of bytes, and the decode node reads 5D bytes as NHD.

The descriptor names every attention sub-pool and its byte encoding, decided
from the physical buffers (``sglang_kv5d.pools``), never from labels::

    kv5d.v1|full=vectorized_5d:x16:float8_e4m3fn:p64:d256:dv256:h1|swa=...

    version tag   ``kv5d.v1`` (the overlay's; a peer string without it is not ours)
    role          ``full`` (an MHA pool, the full-attention side of a hybrid pool)
                  and ``swa`` (the sliding-window side of an SWA pool); nested
                  composites give dotted roles (``full.swa``)
    layout        ``nhd`` (3-D (slots, H, D)), ``hnd`` (SGLANG_USE_HND_KVCACHE) or
                  ``vectorized_5d`` (K (blocks, H, D/X, page, X), V (blocks, H, page/X, D_v, X))
    x<X>          SHUFFLE vector width (16 bytes / element size); ``x0`` for nhd/hnd
    dtype         the pool's torch KV dtype (``bfloat16``, ``float8_e4m3fn``, ``float8_e4m3fnuz``)
    p<page>       tokens per page;  d<D> / dv<D_v>: K / V head_dim
    h<H>          KV heads held by this rank (per attention-TP rank)

Roles are sorted, so equal pools give equal strings. :func:`parse` reads a
peer's string as hostile input (bounded length, strict grammar, an error that
names the field); :func:`compare` judges two descriptors and the two roles'
attention-TP sizes and returns None or a refusal that names both values and
the fix.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple

from .. import config
from ..pools import PoolLayoutError, is_vectorized_5d
from ..surface_names import ENV_USE_HND_KVCACHE

__all__ = [
    "TAG",
    "MAX_LEN",
    "DescriptorError",
    "SubPool",
    "Descriptor",
    "describe_pool",
    "descriptor_for",
    "format_descriptor",
    "is_overlay_descriptor",
    "parse",
    "compare",
    "missing_peer_message",
]

TAG = "kv5d.v1"
MAX_LEN = 1024  # a real descriptor is < 200 characters; longer peer strings are refused unread
_MAX_ROLES = 8
_MAX_DEPTH = 8
LAYOUTS = ("nhd", "hnd", "vectorized_5d")

_ROLE = r"[a-z]{1,8}(?:\.[a-z]{1,8}){0,3}"
_PART_RE = re.compile(
    rf"^(?P<role>{_ROLE})=(?P<layout>nhd|hnd|vectorized_5d):x(?P<x>0|[1-9][0-9]?):"
    r"(?P<dtype>[a-z][a-z0-9_]{0,31}):p(?P<page>[1-9][0-9]{0,5}):d(?P<head_dim>[1-9][0-9]{0,4}):"
    r"dv(?P<v_head_dim>[1-9][0-9]{0,4}):h(?P<heads>[1-9][0-9]{0,3})$"
)
_FIELDS = ("layout", "x", "dtype", "page", "head_dim", "v_head_dim", "heads")

_FIX = {
    "layout": (f"run both roles with the same {config.LAYOUT} (and {ENV_USE_HND_KVCACHE}), "
               "with sglang-kv5d active on both"),
    "x": "run both roles with the same KV cache dtype and layout",
    "dtype": ("run both roles with the same --kv-cache-dtype on the same GPU generation (fp8_e4m3 is "
              "float8_e4m3fnuz on MI300/gfx942 and float8_e4m3fn on MI355/gfx950: the bytes differ)"),
    "page": "run both roles with the same --page-size",
    "head_dim": "serve the same model on both roles",
    "v_head_dim": "serve the same model on both roles",
    "heads": "serve the same model with the same attention TP on both roles",
    "roles": "serve the same model (the same attention sub-pools: full / sliding window) on both roles",
    "tag": "upgrade sglang-kv5d to the same version on both roles",
}


class DescriptorError(ValueError):
    """A descriptor string (usually the peer's) that does not follow the grammar."""


@dataclass(frozen=True)
class SubPool:
    """One attention sub-pool's byte encoding (all ints > 0 except x, 0 for nhd/hnd)."""

    role: str
    layout: str
    x: int
    dtype: str
    page: int
    head_dim: int
    v_head_dim: int
    heads: int

    def text(self) -> str:
        return (f"{self.role}={self.layout}:x{self.x}:{self.dtype}:p{self.page}:d{self.head_dim}:"
                f"dv{self.v_head_dim}:h{self.heads}")


@dataclass(frozen=True)
class Descriptor:
    tag: str
    subpools: Tuple[SubPool, ...]  # sorted by role

    def by_role(self) -> Dict[str, SubPool]:
        return {s.role: s for s in self.subpools}

    @property
    def is_5d(self) -> bool:
        return any(s.layout == "vectorized_5d" for s in self.subpools)

    def text(self) -> str:
        return "|".join([self.tag] + [s.text() for s in self.subpools])


# --------------------------------------------------------------------------
# From a pool


def _dtype_name(dtype: Any) -> str:
    s = str(dtype)
    return s[len("torch."):] if s.startswith("torch.") else s


def _leaves(pool: Any, role: Optional[str], depth: int) -> List[Tuple[str, Any]]:
    """(role, leaf) for every attention leaf; None role = not describable (MLA / unknown)."""
    if depth > _MAX_DEPTH:
        raise PoolLayoutError(f"{type(pool).__name__}: pool nesting deeper than {_MAX_DEPTH}")
    if isinstance(getattr(pool, "layers_mapping", None), dict) and hasattr(pool, "swa_kv_pool"):
        out: List[Tuple[str, Any]] = []
        for attr, name in (("full_kv_pool", "full"), ("swa_kv_pool", "swa")):
            sub = getattr(pool, attr, None)
            if sub is not None:
                out += _leaves(sub, name if role is None else f"{role}.{name}", depth + 1)
        return out
    if isinstance(getattr(pool, "full_attention_layer_id_mapping", None), dict) and hasattr(pool, "full_kv_pool"):
        # hybrid linear: the full-attention side only (Mamba / GDN state is not KV)
        return _leaves(pool.full_kv_pool, role, depth + 1)
    return [(role or "full", pool)]


def _subpool(role: str, leaf: Any) -> Optional[SubPool]:
    kb = getattr(leaf, "k_buffer", None)
    if kb is None or getattr(leaf, "v_buffer", None) is None:
        raise _NotMha(type(leaf).__name__)
    try:
        k0 = list(kb)[0]
    except (TypeError, IndexError):
        return None  # a sub-pool without layers has nothing to transfer
    five = is_vectorized_5d(leaf)  # raises PoolLayoutError for contradictory buffers
    head_dim = int(leaf.head_dim)
    v_head_dim = getattr(leaf, "v_head_dim", None)
    layout = "vectorized_5d" if five else ("hnd" if getattr(leaf, "use_hnd", False) else "nhd")
    return SubPool(
        role=role,
        layout=layout,
        x=int(k0.shape[-1]) if five else 0,
        dtype=_dtype_name(leaf.dtype),
        page=int(leaf.page_size),
        head_dim=head_dim,
        v_head_dim=int(v_head_dim) if v_head_dim is not None else head_dim,
        heads=int(leaf.head_num),
    )


class _NotMha(Exception):
    pass


def describe_pool(pool: Any) -> Optional[Descriptor]:
    """The descriptor of a token-to-KV pool (MHA, SWAKVPool, HybridLinearKVPool, nested).

    None when a sub-pool is not an MHA pool (MLA, DeepSeekV4, index-only pools:
    never SHUFFLE 5D; upstream's own ``kv_layout`` covers those that need one)
    or when no sub-pool holds a layer. Raises
    :class:`sglang_kv5d.pools.PoolLayoutError` for contradictory buffers.
    """
    try:
        parts = [_subpool(role, leaf) for role, leaf in _leaves(pool, None, 0)]
    except _NotMha:
        return None
    subs = tuple(sorted((p for p in parts if p is not None), key=lambda s: s.role))
    if not subs:
        return None
    roles = [s.role for s in subs]
    if len(set(roles)) != len(roles):
        raise PoolLayoutError(f"{type(pool).__name__}: two attention sub-pools share the role(s) {roles}")
    return Descriptor(TAG, subs)


def descriptor_for(pool: Any) -> Optional[str]:
    """:func:`describe_pool` as the handshake string, or None."""
    d = describe_pool(pool)
    return None if d is None else d.text()


def format_descriptor(subpools: List[Mapping[str, Any]]) -> str:
    """A descriptor string from explicit fields (the doctor's configured geometry),
    validated by :func:`parse`."""
    subs = sorted((SubPool(**dict(s)) for s in subpools), key=lambda s: s.role)
    return parse(Descriptor(TAG, tuple(subs)).text()).text()


# --------------------------------------------------------------------------
# From a peer (hostile)


def is_overlay_descriptor(value: Any) -> bool:
    """Does ``value`` claim to be the overlay's descriptor (a str with our tag)?"""
    return isinstance(value, str) and value.split("|", 1)[0] == TAG


def parse(text: Any) -> Descriptor:
    """Parse a descriptor string; raises :class:`DescriptorError` naming the field.

    Accepts only what :func:`describe_pool` writes: ``str`` of at most
    MAX_LEN ASCII characters, the tag, 1 .. 8 sub-pools each matching the
    grammar, unique roles in sorted order, X consistent with the layout.
    """
    if not isinstance(text, str):
        raise DescriptorError(f"kv_layout descriptor must be a string, got {type(text).__name__}")
    if len(text) > MAX_LEN:
        raise DescriptorError(f"kv_layout descriptor is {len(text)} characters, more than {MAX_LEN}")
    if not text.isascii() or not text.isprintable():
        raise DescriptorError("kv_layout descriptor has non-printable or non-ASCII characters")
    parts = text.split("|")
    if parts[0] != TAG:
        raise DescriptorError(f"kv_layout descriptor tag is {parts[0][:32]!r}, expected {TAG!r}")
    if not 2 <= len(parts) <= _MAX_ROLES + 1:
        raise DescriptorError(f"kv_layout descriptor has {len(parts) - 1} sub-pools, expected 1 .. {_MAX_ROLES}")
    subs: List[SubPool] = []
    for i, part in enumerate(parts[1:], 1):
        m = _PART_RE.match(part)
        if m is None:
            raise DescriptorError(f"kv_layout descriptor sub-pool {i} {part[:80]!r}: {_first_bad_field(part)}")
        g = m.groupdict()
        sub = SubPool(role=g["role"], layout=g["layout"], x=int(g["x"]), dtype=g["dtype"], page=int(g["page"]),
                      head_dim=int(g["head_dim"]), v_head_dim=int(g["v_head_dim"]), heads=int(g["heads"]))
        if (sub.layout == "vectorized_5d") != (sub.x > 0):
            raise DescriptorError(f"kv_layout descriptor sub-pool {sub.role}: field x is x{sub.x}, which "
                                  f"layout {sub.layout} does not allow (x>0 exactly for vectorized_5d)")
        subs.append(sub)
    roles = [s.role for s in subs]
    if roles != sorted(set(roles)):
        raise DescriptorError(f"kv_layout descriptor roles {roles} are not unique and sorted")
    return Descriptor(TAG, tuple(subs))


def _first_bad_field(part: str) -> str:
    role, eq, rest = part.partition("=")
    if not eq or not re.fullmatch(_ROLE, role):
        return "field role (expected full, swa or dotted lower-case names, then '=')"
    fields = rest.split(":")
    pats = (r"nhd|hnd|vectorized_5d", r"x(0|[1-9][0-9]?)", r"[a-z][a-z0-9_]{0,31}", r"p[1-9][0-9]{0,5}",
            r"d[1-9][0-9]{0,4}", r"dv[1-9][0-9]{0,4}", r"h[1-9][0-9]{0,3}")
    if len(fields) != len(pats):
        return f"{len(fields)} ':'-separated fields, expected {len(pats)} ({', '.join(_FIELDS)})"
    for name, pat, got in zip(_FIELDS, pats, fields):
        if not re.fullmatch(pat, got):
            return f"field {name} is {got[:32]!r} (expected {pat})"
    return "does not match the grammar"  # pragma: no cover


# --------------------------------------------------------------------------
# Judging a pair


def _refusal(what: str, local: str, peer: str, fix_key: str, local_role: str, peer_role: str) -> str:
    return (f"sglang-kv5d: PD KV layout mismatch ({what}): {local_role} reports {local!r}, {peer_role} reports "
            f"{peer!r}; the transferred pages would be read in another byte layout (silently wrong attention). "
            f"Fix: {_FIX[fix_key]}.")


def compare(
    local: str,
    peer: Any,
    *,
    local_tp: Optional[int] = None,
    peer_tp: Optional[int] = None,
    head_slice_5d: bool = False,
    local_role: str = "decode",
    peer_role: str = "prefill",
) -> Optional[str]:
    """None when the peer's pages can be moved into ours, else a refusal message.

    ``local`` is this node's descriptor (trusted), ``peer`` the peer's report
    (hostile; must be an overlay descriptor: check :func:`is_overlay_descriptor`
    or handle ``None`` with :func:`missing_peer_message` first). Every sub-pool
    must agree on layout, X, dtype, page, head_dim and v_head_dim. Heads per
    rank and attention TP: equal TP needs equal heads; different TP sizes are
    SGLang's head-sliced transfer, which is right for NHD/HND pools and for 5D
    pools only with ``head_slice_5d`` (the overlay's pd-head-slice-5d).
    """
    mine = parse(local)
    try:
        theirs = parse(peer)
    except DescriptorError as exc:
        return (f"sglang-kv5d: PD handshake: the {peer_role} node's kv_layout is not a valid sglang-kv5d "
                f"descriptor ({exc}); {local_role} reports {local!r}. Fix: {_FIX['tag']}.")
    a, b = mine.by_role(), theirs.by_role()
    if set(a) != set(b):
        return _refusal(f"attention sub-pools {sorted(a)} vs {sorted(b)}", local, peer, "roles", local_role, peer_role)
    tp_differs = local_tp is not None and peer_tp is not None and local_tp != peer_tp
    for role in sorted(a):
        for name in _FIELDS[:-1]:
            va, vb = getattr(a[role], name), getattr(b[role], name)
            if va != vb:
                return _refusal(f"{role} {name} {va} vs {vb}", local, peer, name, local_role, peer_role)
        if not tp_differs and a[role].heads != b[role].heads:
            return _refusal(f"{role} KV heads per rank {a[role].heads} vs {b[role].heads} at the same attention TP",
                            local, peer, "heads", local_role, peer_role)
    if tp_differs and mine.is_5d and not head_slice_5d:
        return (f"sglang-kv5d: PD attention-TP mismatch over SHUFFLE 5D: {local_role} attn_tp_size={local_tp} "
                f"({local!r}), {peer_role} attn_tp_size={peer_tp} ({peer!r}). SGLang's transfer for different TP "
                "sizes slices each page by heads at NHD offsets, which on a 5D page copies the wrong bytes. "
                "Fix: use the same attention TP on both roles, or install the overlay's head-sliced 5D transfer "
                "(patch pd-head-slice-5d).")
    return None


def missing_peer_message(local: str, *, local_role: str = "decode", peer_role: str = "prefill") -> str:
    """Why a peer that reports no kv_layout (no sglang-kv5d there, or an older SGLang) is refused."""
    return (f"sglang-kv5d: PD handshake: the {peer_role} node reports no kv_layout while this {local_role} node "
            f"reports {local!r}: the {peer_role} node does not run sglang-kv5d (or runs an SGLang without the "
            "PD layout handshake, before 0.5.23), so nothing guarantees its pages are in the same byte layout "
            f"(5D vs NHD, fp8 e4m3fn vs e4m3fnuz). Fix: install and activate sglang-kv5d on the {peer_role} node "
            f"with the same {config.LAYOUT}, or set {config.STRICT}=0 to accept the pairing.")
