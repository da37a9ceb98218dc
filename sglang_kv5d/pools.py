"""KV pool layout detection and per-layer sub-pool resolution.

Pure functions over SGLang's KV pool objects. This module never imports
SGLang: it recognises pools by the attributes they carry, so subclasses,
wrappers and nestings of the upstream classes work without being named.

Pool shapes recognised (attribute names as in every tested SGLang):

    leaf MHA pool     ``k_buffer`` / ``v_buffer``: lists with one tensor per
                      layer; ``start_layer``, ``page_size``, ``head_num``,
                      ``head_dim``, ``v_head_dim``, ``dtype``, ``store_dtype``,
                      optional ``layer_transfer_counter`` (layer-wise loading)
    SWA composite     ``layers_mapping`` ({global id: (sub id, is_swa)}),
                      ``full_kv_pool``, ``swa_kv_pool``, ``_wait_for_layer``
    hybrid composite  ``full_attention_layer_id_mapping`` ({global id: dense
                      id}), ``full_kv_pool``, ``_wait_for_layer``; the
                      linear-attention (Mamba / Gated-DeltaNet) layers have no
                      KV buffers at all

"vectorized_5d" (AITER SHUFFLE 5D) is decided from the physical buffers, never
from the ``kv_cache_layout`` label alone::

    K: (num_blocks, H, D // X, page, X)      V: (num_blocks, H, page // X, D_v, X)
    X = 16 // storage itemsize                (8 for bf16/fp16, 16 for fp8 stored as uint8)

A pool labelled ``vectorized_5d`` whose buffers are the 4-D / 3-D page-major
views of the unified-memory pools is therefore *not* 5D.

Disagreements are errors, never guesses (:class:`PoolLayoutError`):

* a leaf whose K buffers are 5D while its V buffers are not (or the reverse),
  or whose layers disagree with each other;
* a rank-5 buffer whose shape does not match the pool's geometry;
* a composite whose attention sub-pools disagree (one 5D, one not). A kernel
  choice is made once per backend, so a mixed composite cannot be served
  correctly by either the 5D or the NHD code path.

Sub-pools without any attention layer (an SWA pool with no full layers, for
example) do not vote.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from .surface import attr_name

__all__ = [
    "PoolLayoutError",
    "LayerNotFoundError",
    "is_vectorized_5d",
    "describe_layout",
    "resolve_kv_subpool",
    "iter_leaf_pools",
    "unchecked_composites",
    "vector_width",
]

#: Bytes per SHUFFLE vector: X = VECTOR_BYTES // storage itemsize.
VECTOR_BYTES = 16

_MAX_DEPTH = 16


class PoolLayoutError(RuntimeError):
    """A pool's physical buffers contradict each other or the pool's geometry."""


class LayerNotFoundError(KeyError, ValueError):
    """A layer id that no KV sub-pool holds (unknown, or a linear-attention layer).

    Subclasses both ``KeyError`` (what ``SWAKVPool.layers_mapping[...]`` raises)
    and ``ValueError`` (what ``HybridLinearKVPool._transfer_full_attention_id``
    raises), so callers written against either keep working.
    """

    def __init__(self, message: str, layer_id: Any = None, valid_ids: Sequence[int] = ()):
        super().__init__(message)
        self.message = message
        self.layer_id = layer_id
        self.valid_ids = tuple(valid_ids)

    def __str__(self) -> str:  # KeyError would repr() the message
        return self.message


# --------------------------------------------------------------------------
# Pool kinds (duck typing)
# --------------------------------------------------------------------------


def _name(pool: Any) -> str:
    return type(pool).__name__


def _is_swa_composite(pool: Any) -> bool:
    return (
        isinstance(getattr(pool, "layers_mapping", None), dict)
        and hasattr(pool, "full_kv_pool")
        and hasattr(pool, "swa_kv_pool")
    )


def _is_hybrid_composite(pool: Any) -> bool:
    return isinstance(
        getattr(pool, "full_attention_layer_id_mapping", None), dict
    ) and hasattr(pool, "full_kv_pool")


def _is_composite(pool: Any) -> bool:
    return _is_swa_composite(pool) or _is_hybrid_composite(pool)


def _is_leaf(pool: Any) -> bool:
    return hasattr(pool, "k_buffer") and hasattr(pool, "v_buffer")


def _children(pool: Any) -> List[Tuple[str, Any]]:
    """Attention sub-pools of a composite, as (attribute name, pool)."""
    out: List[Tuple[str, Any]] = []
    if _is_swa_composite(pool):
        for attr in ("full_kv_pool", "swa_kv_pool"):
            sub = getattr(pool, attr, None)
            if sub is not None:
                out.append((attr, sub))
    elif _is_hybrid_composite(pool):
        sub = getattr(pool, "full_kv_pool", None)
        if sub is not None:
            out.append(("full_kv_pool", sub))
    return out


def iter_leaf_pools(pool: Any, _depth: int = 0) -> Iterator[Any]:
    """Yield every leaf (non-composite) pool reachable from ``pool``."""
    if _depth > _MAX_DEPTH:
        raise PoolLayoutError(f"{_name(pool)}: pool nesting deeper than {_MAX_DEPTH}")
    if _is_composite(pool):
        for _, sub in _children(pool):
            yield from iter_leaf_pools(sub, _depth + 1)
    else:
        yield pool


def unchecked_composites(pool: Any, checked: Sequence[type], _path: str = "", _depth: int = 0) -> List[Tuple[str, Any]]:
    """``(path, composite)`` for every composite in the tree whose exact class is
    not one of ``checked``, outermost first (a subclass of a checked class is not
    checked: it may read its buffers its own way). ``path`` is "" for ``pool``
    itself, else the attributes leading to it (``full_kv_pool.swa_kv_pool``)."""
    if _depth > _MAX_DEPTH:
        raise PoolLayoutError(f"{_name(pool)}: pool nesting deeper than {_MAX_DEPTH}")
    if not _is_composite(pool):
        return []
    out = [] if type(pool) in tuple(checked) else [(_path, pool)]
    for attr, sub in _children(pool):
        out += unchecked_composites(sub, checked, f"{_path}.{attr}" if _path else attr, _depth + 1)
    return out


# --------------------------------------------------------------------------
# Physical layout of one leaf
# --------------------------------------------------------------------------


def vector_width(store_itemsize: int) -> int:
    """X for a storage element size in bytes (8 for 2-byte, 16 for 1-byte)."""
    if store_itemsize <= 0 or VECTOR_BYTES % store_itemsize:
        raise PoolLayoutError(f"no SHUFFLE vector width for itemsize {store_itemsize}")
    return VECTOR_BYTES // store_itemsize


def _buffers(pool: Any, attr: str) -> Optional[List[Any]]:
    bufs = getattr(pool, attr, None)
    if bufs is None:
        return None
    try:
        return list(bufs)
    except TypeError:
        return [bufs]


def _geometry(pool: Any) -> Dict[str, Optional[int]]:
    head_dim = getattr(pool, "head_dim", None)
    v_head_dim = getattr(pool, "v_head_dim", None)
    return {
        "page": getattr(pool, "page_size", None),
        "heads": getattr(pool, "head_num", None),
        "head_dim": head_dim,
        "v_head_dim": v_head_dim if v_head_dim is not None else head_dim,
    }


def _check_5d(t: Any, kind: str, geo: Dict[str, Optional[int]]) -> Optional[str]:
    """None when ``t`` is a consistent 5D K (kind 'K') or V buffer, else why not."""
    shape = tuple(t.shape)
    itemsize = t.element_size()
    x = VECTOR_BYTES // itemsize if itemsize and VECTOR_BYTES % itemsize == 0 else None
    if x is None:
        return f"itemsize {itemsize} has no 16-byte vector width"
    blocks, heads = shape[0], shape[1]
    page, h, d, dv = geo["page"], geo["heads"], geo["head_dim"], geo["v_head_dim"]
    if kind == "K":
        expect = (blocks, h, None if d is None else d // x, page, x)
        names = ("blocks", "H", "D/X", "page", "X")
    else:
        expect = (blocks, h, None if page is None else page // x, dv, x)
        names = ("blocks", "H", "page/X", "D_v", "X")
    bad = [
        f"{n}={got} (expected {want})"
        for n, got, want in zip(names, shape, expect)
        if want is not None and got != want
    ]
    if kind == "K" and d is not None and d % x:
        bad.append(f"head_dim {d} not divisible by X={x}")
    if kind == "V" and page is not None and page % x:
        bad.append(f"page_size {page} not divisible by X={x}")
    if heads <= 0 or blocks <= 0:
        bad.append("empty leading dims")
    if t.stride(-1) != 1:
        bad.append("last dim not contiguous")
    return "; ".join(bad) or None


def _side_layout(pool: Any, attr: str, kind: str) -> Tuple[Optional[bool], str]:
    """(True/False/None, detail) for all K or all V buffers of one leaf."""
    bufs = _buffers(pool, attr)
    if not bufs:
        return None, f"no {attr}"
    geo = _geometry(pool)
    verdicts = []
    for i, t in enumerate(bufs):
        if t is None or not hasattr(t, "shape"):
            return None, f"{attr}[{i}] is not allocated"
        if t.dim() == 5:
            why = _check_5d(t, kind, geo)
            if why is not None:
                raise PoolLayoutError(
                    f"{_name(pool)}: {attr}[{i}] has rank 5, shape {tuple(t.shape)} "
                    f"dtype {t.dtype}, but is not a SHUFFLE 5D {kind} buffer for "
                    f"page_size={geo['page']} head_num={geo['heads']} "
                    f"head_dim={geo['head_dim']} v_head_dim={geo['v_head_dim']}: {why}"
                )
            verdicts.append(True)
        else:
            verdicts.append(False)
    if all(verdicts):
        return True, f"{attr} 5D {tuple(bufs[0].shape)}"
    if not any(verdicts):
        return False, f"{attr} {bufs[0].dim()}-D {tuple(bufs[0].shape)}"
    five = [i for i, v in enumerate(verdicts) if v]
    other = [i for i, v in enumerate(verdicts) if not v]
    raise PoolLayoutError(
        f"{_name(pool)}: {attr} mixes SHUFFLE 5D layers {five} with non-5D layers {other}"
    )


def _leaf_is_5d(pool: Any) -> Optional[bool]:
    if not _is_leaf(pool):
        return False  # MLA / index-only / unknown pools: never SHUFFLE 5D
    k5, _ = _side_layout(pool, "k_buffer", "K")
    v5, _ = _side_layout(pool, "v_buffer", "V")
    if k5 is None and v5 is None:
        return None
    if k5 is None or v5 is None or k5 != v5:
        raise PoolLayoutError(
            f"{_name(pool)}: K buffers are {_word(k5)} but V buffers are {_word(v5)}; "
            "a SHUFFLE 5D pool needs both K (blocks, H, D/X, page, X) and "
            "V (blocks, H, page/X, D, X)"
        )
    return k5


def _word(v: Optional[bool]) -> str:
    return {True: "SHUFFLE 5D", False: "not 5D", None: "missing"}[v]


def _is_5d(pool: Any, depth: int = 0) -> Optional[bool]:
    if depth > _MAX_DEPTH:
        raise PoolLayoutError(f"{_name(pool)}: pool nesting deeper than {_MAX_DEPTH}")
    if not _is_composite(pool):
        return _leaf_is_5d(pool)
    votes: List[Tuple[str, bool]] = []
    for attr, sub in _children(pool):
        v = _is_5d(sub, depth + 1)
        if v is not None:
            votes.append((f"{attr}={_name(sub)}", v))
    if not votes:
        return None
    if all(v for _, v in votes):
        return True
    if not any(v for _, v in votes):
        return False
    detail = ", ".join(f"{a} is {_word(v)}" for a, v in votes)
    raise PoolLayoutError(
        f"{_name(pool)}: attention sub-pools disagree on the KV layout ({detail}); "
        "one attention backend cannot serve both layouts"
    )


def is_vectorized_5d(pool: Any) -> bool:
    """True when every attention KV buffer reachable from ``pool`` is SHUFFLE 5D.

    Walks SWA and hybrid composites (and nestings) down to the leaf MHA pools and
    inspects their buffers. A pool without any allocated attention buffer is not
    5D. Raises :class:`PoolLayoutError` for contradictory layouts (see module doc).
    """
    return bool(_is_5d(pool))


# --------------------------------------------------------------------------
# Human-readable description
# --------------------------------------------------------------------------


def _describe_leaf(pool: Any) -> str:
    name = _name(pool)
    label = getattr(pool, "kv_cache_layout", None)
    label_s = f"label={label!r}" if label is not None else "no label"
    if not _is_leaf(pool):
        return f"{name}[no k_buffer/v_buffer (not an MHA pool); {label_s}]"
    kb = _buffers(pool, "k_buffer") or []
    vb = _buffers(pool, "v_buffer") or []
    try:
        five = _leaf_is_5d(pool)
    except PoolLayoutError as e:
        return f"{name}[INCONSISTENT: {e}; {label_s}]"
    if five is None:
        return f"{name}[no allocated buffers; {label_s}]"
    dtype = getattr(pool, "dtype", None)
    store = getattr(pool, "store_dtype", None)
    kshape = tuple(kb[0].shape) if kb else ()
    vshape = tuple(vb[0].shape) if vb else ()
    dt = _dtype_name(dtype)
    if store is not None and store != dtype:
        dt += f" stored as {_dtype_name(store)}"
    kind = "vectorized_5d" if five else f"{len(kshape)}-D (not 5D)"
    extra = ""
    if five:
        extra = f", X={kshape[-1]}"
    elif label == "vectorized_5d":
        extra = ", labelled vectorized_5d but the buffers are not 5D"
    return (
        f"{name}[{kind}: {len(kb)} layer(s), page_size={getattr(pool, 'page_size', '?')}, "
        f"K {kshape} V {vshape}{extra}, {dt}; {label_s}]"
    )


def _dtype_name(dtype: Any) -> str:
    s = str(dtype)
    return s[len("torch."):] if s.startswith("torch.") else s


def describe_layout(pool: Any, _depth: int = 0) -> str:
    """One-line description of a pool tree and its physical layout. Never raises."""
    try:
        if _depth > _MAX_DEPTH:
            return f"{_name(pool)}[...]"
        if not _is_composite(pool):
            return _describe_leaf(pool)
        parts = [f"{attr}={describe_layout(sub, _depth + 1)}" for attr, sub in _children(pool)]
        verdict = ""
        if _depth == 0:
            try:
                verdict = " => vectorized_5d" if is_vectorized_5d(pool) else " => not 5D"
            except PoolLayoutError as e:
                verdict = f" => INCONSISTENT ({e})"
        return f"{_name(pool)}({', '.join(parts)}){verdict}"
    except Exception as e:  # pragma: no cover - describing must never fail
        return f"{_name(pool)}[<cannot describe: {type(e).__name__}: {e}>]"


# --------------------------------------------------------------------------
# Layer -> (leaf pool, local index)
# --------------------------------------------------------------------------


_WAIT_FOR_LAYER = attr_name("memory_pool.HybridLinearKVPool._wait_for_layer")  # composites' own wait


def _wait(pool: Any, layer_id: int) -> None:
    """Layer-wise load wait of a composite, as its own getters do it."""
    waiter = getattr(pool, _WAIT_FOR_LAYER, None)
    if callable(waiter):
        waiter(layer_id)
        return
    counter = getattr(pool, "layer_transfer_counter", None)
    if counter is not None:
        counter.wait_until(layer_id - (getattr(pool, "start_layer", 0) or 0))


def _linear_ids(pool: Any) -> List[int]:
    mamba = getattr(pool, "mamba_pool", None)
    ids = getattr(mamba, "mamba_layer_ids", None) if mamba is not None else None
    try:
        return sorted(int(i) for i in ids) if ids is not None else []
    except TypeError:
        return []


def resolve_kv_subpool(pool: Any, layer_id: int) -> Tuple[Any, int]:
    """The leaf MHA pool holding ``layer_id`` and the index into its buffer lists.

    Waits for layer-wise loading first, at every level, exactly where SGLang's
    own getters wait: a composite's ``_wait_for_layer(layer_id)`` (global id),
    and for a leaf its ``layer_transfer_counter.wait_until(layer_id -
    start_layer)``. (Composites register ``None`` on their children, so the
    nested waits are no-ops there.) No KV buffer is read before the waits.

    Raises :class:`LayerNotFoundError` for a layer no sub-pool holds (unknown
    ids, linear-attention layers of a hybrid model), listing the valid ids.
    """
    return _resolve(pool, layer_id, 0, ())


def _resolve(pool: Any, layer_id: int, depth: int, path: Tuple[str, ...]) -> Tuple[Any, int]:
    if depth > _MAX_DEPTH:
        raise PoolLayoutError(f"{_name(pool)}: pool nesting deeper than {_MAX_DEPTH}")
    where = " -> ".join(path + (_name(pool),))

    if _is_swa_composite(pool):
        mapping = pool.layers_mapping
        if layer_id not in mapping:
            valid = sorted(mapping)
            raise LayerNotFoundError(
                f"layer {layer_id} is not an attention layer of {where}; "
                f"valid layer ids: {valid}",
                layer_id,
                valid,
            )
        _wait(pool, layer_id)
        sub_id, is_swa = mapping[layer_id]
        attr = "swa_kv_pool" if is_swa else "full_kv_pool"
        return _resolve(getattr(pool, attr), sub_id, depth + 1, path + (f"{_name(pool)}.{attr}",))

    if _is_hybrid_composite(pool):
        mapping = pool.full_attention_layer_id_mapping
        if layer_id not in mapping:
            valid = sorted(mapping)
            linear = _linear_ids(pool)
            what = (
                "a linear-attention layer"
                if layer_id in linear
                else "not a full-attention layer (linear-attention or unknown)"
            )
            raise LayerNotFoundError(
                f"layer {layer_id} of {where} is {what}; it has no KV cache. "
                f"Valid full-attention layer ids: {valid}",
                layer_id,
                valid,
            )
        _wait(pool, layer_id)
        return _resolve(
            pool.full_kv_pool,
            mapping[layer_id],
            depth + 1,
            path + (f"{_name(pool)}.full_kv_pool",),
        )

    if not _is_leaf(pool):
        raise PoolLayoutError(
            f"{where} has no k_buffer/v_buffer: not an MHA KV pool (MLA or unknown)"
        )
    start = getattr(pool, "start_layer", 0) or 0
    n = getattr(pool, "layer_num", None)
    if not isinstance(n, int):
        n = len(_buffers(pool, "k_buffer") or [])
    local = layer_id - start
    if not 0 <= local < n:
        valid = list(range(start, start + n))
        raise LayerNotFoundError(
            f"layer {layer_id} is not held by {where}; valid layer ids: {valid}",
            layer_id,
            valid,
        )
    counter = getattr(pool, "layer_transfer_counter", None)
    if counter is not None:
        counter.wait_until(local)
    return pool, local
