"""The layout verdict's geometry and cases: one GPU's share of a model's
attention layers (from ``--heads/--kv-heads/--head-dim/--page-size/--tp`` or a
local ``config.json``), the default decode and prefill shapes, and one random
KV cache per row in both layouts.

``config.json`` is outside input: it is read only from a regular file of at
most :data:`MAX_CONFIG_BYTES`, parsed as strict JSON (no NaN / Infinity, no
duplicate keys), never executed (no ``trust_remote_code``, no Python), and every
field used is checked for type and range; a bad field raises
:class:`GeometryError` naming the field and the fix. Standard library only
(torch is imported by :func:`build_case` alone).
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import asdict, dataclass
from typing import Any, Mapping, Optional, Tuple

#: decode rows: batch sizes x context lengths (tokens per request, the new token included)
DECODE_BATCHES = (1, 32, 128)
DECODE_CONTEXTS = (4096, 32768)
#: prefill rows: (requests, new tokens per request in the chunk, cached prefix per request)
PREFILL_SHAPES = ((1, 4096, 0), (1, 4096, 28672), (4, 1024, 8192))
KV_DTYPES = ("fp8", "bf16")
DEFAULT_PAGE = 64

MAX_CONFIG_BYTES = 4 << 20
#: bounds of the fields taken from a config or the command line
MAX_HEADS = 1024
MAX_HEAD_DIM = 1024
MAX_LAYERS = 4096
MAX_TP = 64
MAX_PAGE = 1024
MAX_BATCH = 4096
MAX_TOKENS = 1 << 20
#: the config sections a multimodal checkpoint keeps its language model's fields in
_TEXT_SECTIONS = ("text_config", "language_config", "llm_config")


class GeometryError(ValueError):
    """A geometry value (command line or config.json) the benchmark cannot use."""


@dataclass(frozen=True)
class Geometry:
    """One model's attention geometry and the share of it one GPU holds.

    heads / kv_heads: the model's query / KV heads; head_dim: D (K and V);
    tp: tensor-parallel ranks; page: the KV page size in tokens; layers: all
    decoder layers; attention_layers: those with a KV cache (full attention;
    a hybrid's linear-attention layers have none). source: where it came from.
    """

    heads: int
    kv_heads: int
    head_dim: int
    tp: int = 1
    page: int = DEFAULT_PAGE
    layers: Optional[int] = None
    attention_layers: Optional[int] = None
    source: str = "command line"

    @property
    def h_q(self) -> int:
        """Query heads on one rank."""
        return self.heads // self.tp

    @property
    def h_kv(self) -> int:
        """KV heads on one rank (SGLang replicates KV heads when tp > kv_heads)."""
        return max(1, self.kv_heads // self.tp)

    def to_dict(self) -> dict:
        return asdict(self) | {"h_q_per_rank": self.h_q, "h_kv_per_rank": self.h_kv}


def _int(name: str, value: Any, lo: int, hi: int, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise GeometryError(f"{where}: {name} must be an integer in [{lo}, {hi}], got {value!r}; "
                            f"fix {name} or give the geometry with --heads/--kv-heads/--head-dim")
    if not lo <= value <= hi:
        raise GeometryError(f"{where}: {name}={value} is outside [{lo}, {hi}]; fix {name}")
    return value


def validate(g: Geometry, kv_dtypes=KV_DTYPES) -> Geometry:
    """``g`` when one rank's share of it runs in both layouts; else GeometryError
    naming the value: heads divisible by kv_heads and by tp, kv_heads divisible
    by tp (or tp by kv_heads: replicated KV heads), D a multiple of 16, and a
    page size the 5D layout allows for every cache dtype (page % X == 0, X = 16
    for fp8, 8 for bf16)."""
    w = g.source
    _int("heads", g.heads, 1, MAX_HEADS, w)
    _int("kv_heads", g.kv_heads, 1, MAX_HEADS, w)
    _int("head_dim", g.head_dim, 16, MAX_HEAD_DIM, w)
    _int("tp", g.tp, 1, MAX_TP, "command line")
    _int("page", g.page, 1, MAX_PAGE, "command line")
    if g.heads % g.kv_heads:
        raise GeometryError(f"{w}: heads={g.heads} is not a multiple of kv_heads={g.kv_heads}; fix the head counts")
    if g.heads % g.tp:
        raise GeometryError(f"{w}: heads={g.heads} is not divisible by --tp {g.tp}; pick a tp that divides it")
    if g.kv_heads % g.tp and g.tp % g.kv_heads:
        raise GeometryError(f"{w}: kv_heads={g.kv_heads} and --tp {g.tp}: one must divide the other "
                            "(SGLang splits or replicates KV heads); pick another tp")
    if g.head_dim % 16:
        raise GeometryError(f"{w}: head_dim={g.head_dim} is not a multiple of 16 (the 5D layout's X); "
                            "fix head_dim")
    for kv in kv_dtypes:
        x = 16 if kv == "fp8" else 8
        if g.page % x:
            raise GeometryError(f"--page-size {g.page} is not divisible by X={x} ({kv} KV cache): the 5D pool "
                                f"asserts page_size % X == 0; use a multiple of {x} (16, 32, 64)")
    if g.layers is not None:
        _int("num_hidden_layers", g.layers, 1, MAX_LAYERS, w)
    if g.attention_layers is not None:
        _int("attention layers", g.attention_layers, 1, g.layers or MAX_LAYERS, w)
    return g


def read_config(model_path: str) -> Mapping[str, Any]:
    """``model_path/config.json`` as a dict: a regular file of at most
    :data:`MAX_CONFIG_BYTES`, strict JSON, a top-level object. GeometryError otherwise."""
    if not isinstance(model_path, str) or not model_path or "\x00" in model_path:
        raise GeometryError("--model-path: give a local model directory holding config.json")
    path = os.path.join(model_path, "config.json")
    try:
        st = os.stat(path)  # a symlink (a Hugging Face cache) is followed; its target must be a regular file
    except OSError as exc:
        raise GeometryError(f"--model-path {model_path!r}: no readable config.json there ({exc.strerror}); "
                            "give a local model directory") from None
    if not stat.S_ISREG(st.st_mode):
        raise GeometryError(f"{path}: not a regular file; give a model directory with a config.json file")
    if st.st_size > MAX_CONFIG_BYTES:
        raise GeometryError(f"{path}: {st.st_size} bytes, over the {MAX_CONFIG_BYTES}-byte limit for a config; "
                            "give the geometry with --heads/--kv-heads/--head-dim instead")

    def no_constant(name):
        raise ValueError(f"{name} is not JSON")

    def no_duplicates(pairs):
        seen = {}
        for k, v in pairs:
            if k in seen:
                raise ValueError(f"duplicate key {k!r}")
            seen[k] = v
        return seen

    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_CONFIG_BYTES + 1)
        if len(raw) > MAX_CONFIG_BYTES:
            raise ValueError(f"over {MAX_CONFIG_BYTES} bytes")
        cfg = json.loads(raw.decode("utf-8"), parse_constant=no_constant, object_pairs_hook=no_duplicates)
    except (OSError, ValueError, RecursionError) as exc:
        raise GeometryError(f"{path}: not a valid JSON config ({type(exc).__name__}: {str(exc)[:200]}); "
                            "fix the file or give the geometry with --heads/--kv-heads/--head-dim") from None
    if not isinstance(cfg, dict):
        raise GeometryError(f"{path}: the top level must be a JSON object, got {type(cfg).__name__}")
    return cfg


def _text_section(cfg: Mapping[str, Any]) -> Mapping[str, Any]:
    for name in _TEXT_SECTIONS:
        sub = cfg.get(name)
        if isinstance(sub, dict) and "num_attention_heads" in sub:
            return sub
    return cfg


def _attention_layers(c: Mapping[str, Any], layers: int, where: str) -> int:
    """Layers with a KV cache: from ``layer_types`` (strings; "full_attention" /
    "attention" / "sliding_attention" count), else ``full_attention_interval``
    (every N-th layer, Qwen3-Next / Qwen3.5), else every layer."""
    types = c.get("layer_types")
    if types is not None:
        if (not isinstance(types, list) or len(types) != layers
                or not all(isinstance(t, str) and len(t) <= 64 for t in types)):
            raise GeometryError(f"{where}: layer_types must be a list of {layers} short strings (one per layer); "
                                "fix layer_types or num_hidden_layers")
        n = sum(t in ("full_attention", "attention", "sliding_attention") for t in types)
        if n == 0:
            raise GeometryError(f"{where}: layer_types names no attention layer; nothing holds a KV cache")
        return n
    interval = c.get("full_attention_interval")
    if interval is not None:
        interval = _int("full_attention_interval", interval, 1, layers, where)
        return layers // interval
    return layers


def geometry_from_config(model_path: str, *, tp: int = 1, page: int = DEFAULT_PAGE,
                         kv_dtypes=KV_DTYPES) -> Geometry:
    """The attention geometry in ``model_path/config.json`` (or its
    text_config): num_attention_heads, num_key_value_heads (default: the
    heads), head_dim (default hidden_size / heads), num_hidden_layers and the
    attention layers among them; validated (:func:`validate`)."""
    cfg = read_config(model_path)
    c = _text_section(cfg)
    where = os.path.join(model_path, "config.json")
    heads = _int("num_attention_heads", c.get("num_attention_heads"), 1, MAX_HEADS, where)
    kv = c.get("num_key_value_heads", heads)
    kv = _int("num_key_value_heads", heads if kv is None else kv, 1, MAX_HEADS, where)
    hd = c.get("head_dim")
    if hd is None:
        hidden = _int("hidden_size", c.get("hidden_size"), 1, MAX_HEADS * MAX_HEAD_DIM, where)
        if hidden % heads:
            raise GeometryError(f"{where}: no head_dim, and hidden_size={hidden} is not a multiple of "
                                f"num_attention_heads={heads}; add head_dim")
        hd = hidden // heads
    hd = _int("head_dim", hd, 16, MAX_HEAD_DIM, where)
    layers = _int("num_hidden_layers", c.get("num_hidden_layers"), 1, MAX_LAYERS, where)
    att = _attention_layers(c, layers, where)
    return validate(Geometry(heads, kv, hd, tp, page, layers, att, source=where), kv_dtypes)


def build_case(geom: Geometry, bs: int, prior: int, new: int, kv: str, device, *, fp8_dtype=None, seed: int = 0):
    """One row's tensors, the same random K/V in both layouts, for ``bs``
    requests of ``prior`` cached tokens plus ``new`` tokens each (decode:
    new = 1; every token, the new ones included, already in the cache, as when
    attention runs after the write). Pages of the requests are distinct and
    shuffled. Returns a dict:

    k5 ``(blocks, H_kv, D/X, page, X)``, v5 ``(blocks, H_kv, page/X, D, X)``;
    k_nhd, v_nhd ``(blocks * page, H_kv, D)``; cache dtype ``fp8_dtype`` (fp8) or
    bf16; bt int32 ``(bs, pages per request)``; kv_lens int32 ``(bs,)`` =
    prior + new; slots int64 ``(bs * (prior + new),)`` request by request;
    new_slots int64 ``(bs * new,)`` (the write's destinations); qo_indptr,
    kv_indptr int32 ``(bs + 1,)``; q bf16 ``(bs * new, H_q, D)``; k_new, v_new
    bf16 ``(bs * new, H_kv, D)`` (the write's inputs); one fp32 ``(1,)`` (scales).
    """
    import torch

    from ..platform import FP8_E4M3FN, fp8_torch_dtype

    page, H_q, H_kv, D = geom.page, geom.h_q, geom.h_kv, geom.head_dim
    fp8 = kv == "fp8"
    store = (fp8_dtype or fp8_torch_dtype(FP8_E4M3FN)) if fp8 else torch.bfloat16
    X = 16 if fp8 else 8
    total = prior + new
    per = -(-total // page)
    nb = bs * per + 1
    g = torch.Generator(device=device).manual_seed(seed)
    gh = torch.Generator().manual_seed(seed)

    def rnd(shape):
        return torch.randn(shape, generator=g, device=device, dtype=torch.bfloat16)

    k5 = rnd((nb, H_kv, D // X, page, X)).to(store)
    v5 = rnd((nb, H_kv, page // X, D, X)).to(store)
    k_nhd = k5.permute(0, 3, 1, 2, 4).reshape(nb * page, H_kv, D).contiguous()
    v_nhd = v5.permute(0, 2, 4, 1, 3).reshape(nb * page, H_kv, D).contiguous()
    bt = torch.randperm(nb, generator=gh)[: bs * per].view(bs, per).to(torch.int32)
    t = torch.arange(total)
    slots = (bt.long()[:, t // page] * page + t % page)
    new_slots = slots[:, prior:].reshape(-1)
    case = dict(
        k5=k5, v5=v5, k_nhd=k_nhd, v_nhd=v_nhd, bt=bt, slots=slots.reshape(-1), new_slots=new_slots,
        kv_lens=torch.full((bs,), total, dtype=torch.int32), qo_indptr=(torch.arange(bs + 1) * new).to(torch.int32),
        kv_indptr=(torch.arange(bs + 1) * total).to(torch.int32),
    )
    case = {k: v.to(device) for k, v in case.items()}
    case.update(
        q=rnd((bs * new, H_q, D)), k_new=rnd((bs * new, H_kv, D)), v_new=rnd((bs * new, H_kv, D)),
        one=torch.ones(1, dtype=torch.float32, device=device), fp8=fp8, store=store, X=X, page=page,
        bs=bs, prior=prior, new=new, H_q=H_q, H_kv=H_kv, D=D,
    )
    return case


def shapes(decode_batches, decode_contexts, prefill_shapes) -> Tuple[list, list]:
    """([(bs, ctx)], [(requests, new, prefix)]), each value bounded; GeometryError otherwise."""
    dec = [(_int("batch", b, 1, MAX_BATCH, "--batches"), _int("context", c, 2, MAX_TOKENS, "--contexts"))
           for b in decode_batches for c in decode_contexts]
    pre = []
    for r, n, p in prefill_shapes:
        pre.append((_int("requests", r, 1, MAX_BATCH, "--prefill"), _int("new tokens", n, 1, MAX_TOKENS, "--prefill"),
                    _int("prefix", p, 0, MAX_TOKENS, "--prefill")))
    for bs, ctx in dec:
        if bs * ctx > 64 * MAX_TOKENS:
            raise GeometryError(f"decode batch {bs} x context {ctx} is over {64 * MAX_TOKENS} cached tokens; "
                                "use a smaller batch or context")
    for r, n, p in pre:
        if r * (n + p) > 64 * MAX_TOKENS:
            raise GeometryError(f"prefill {r} x ({n} + {p}) is over {64 * MAX_TOKENS} cached tokens; use less")
    return dec, pre


def parse_ints(text: str, name: str, *, max_items: int = 16) -> Tuple[int, ...]:
    """"1,32,128" -> (1, 32, 128): at most ``max_items`` positive decimal integers (bounds: :func:`shapes`)."""
    items = [t.strip() for t in str(text).split(",")]
    if not items or len(items) > max_items or not all(t.isdigit() and len(t) <= 8 for t in items):
        raise GeometryError(f"{name} {text!r}: expected up to {max_items} comma-separated positive integers, "
                            "e.g. 1,32,128")
    return tuple(int(t) for t in items)


def parse_prefill(text: str, *, max_items: int = 16) -> Tuple[Tuple[int, int, int], ...]:
    """"1x4096+0,4x1024+8192" -> ((1, 4096, 0), (4, 1024, 8192)): REQUESTSxNEW+PREFIX items."""
    out = []
    items = [t.strip() for t in str(text).split(",")]
    for t in items:
        head, plus, prefix = t.partition("+")
        req, x, new = head.partition("x")
        parts = (req, new, prefix if plus else "0")
        if not x or len(items) > max_items or not all(p.isdigit() and len(p) <= 8 for p in parts):
            raise GeometryError(f"--prefill {text!r}: expected up to {max_items} comma-separated "
                                "REQUESTSxNEW+PREFIX items, e.g. 1x4096+0,4x1024+8192")
        out.append(tuple(int(p) for p in parts))
    return tuple(out)
