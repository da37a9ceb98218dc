"""``sglang-kv5d selftest``: a Qwen3.5-like model's attention through patched SGLang.

What runs, with the overlay active in this process:

* real SGLang pools, on the chosen device: a HybridLinearKVPool (every 4th
  layer full attention) around a SHUFFLE 5D **fp8** MHA pool, and an SWAKVPool
  (sliding-window and full layers) with **bf16** 5D buffers;
* a real ``AiterAttnBackend`` built from a minimal model runner, whose layout
  flags come from the pool-layout-detection patch;
* several requests of different lengths through chunked prefill, two of them
  reusing a shared page-aligned prefix, then decode steps for all of them;
* every KV write through the patched ``set_kv_buffer`` (fused FP8 write for the
  fp8 pool, k_scale != 1) and every attention through the patched
  ``forward_extend_vectorized_5d`` / ``forward_decode_vectorized_5d`` as
  ``aiter_backend`` binds them (aiter where it is usable, else the portable
  Triton kernels).

Each attention output is compared with a float64 reference computed from the
logical K/V the "model" produced (quantised to fp8 with the stated semantics
where the pool is fp8), independent of the cache layout, so a wrong write, a
wrong read, a wrong mask or a wrong sub-pool fails.

On ROCm with aiter usable the requests run twice, once on each attention path
(``aiter``, then ``triton``: the portable kernels), fresh pools and the same
seeded requests, each against float64, and the report says what served each
path (aiter, or portable for the configurations aiter could not run). For
the aiter path over the fp8 pool, the extend reference follows that path's
numerics: a batch without prefixes attends over the new bf16 K/V (no cache
read), otherwise over the cache with the query quantized per tensor to fp8
(aiter's batch prefill takes q, k and v of one dtype). On CUDA and CPU one
run, as SGLANG_KV5D_ATTN_IMPL selects. SGLang's aiter pool layout
is only chosen on ROCm (``memory_pool._use_aiter``), so on other devices the
selftest switches it on for its own pools.

Random data comes from a fixed seed; the model is random: only attention and
the KV cache are under test.
"""

from __future__ import annotations

import importlib
import inspect
import math
import os
import time
import types
from dataclasses import asdict, dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

NS = types.SimpleNamespace


@dataclass(frozen=True)
class Geometry:
    """One selftest configuration (Qwen3.5-like full-attention layers)."""

    name: str
    num_layers: int = 4  # hybrid model: layers 3, 7, ... are full attention
    full_every: int = 4
    hq: int = 4
    hkv: int = 1
    head_dim: int = 256
    page: int = 64
    prefix: int = 64  # shared, page-aligned prefix
    own_lengths: Tuple[int, ...] = (40, 100, 30)  # per request, after the prefix (3rd has no prefix)
    chunk: int = 64  # chunked-prefill budget per request per step
    decode_steps: int = 3
    swa_window: int = 48  # sliding_window_size of the SWA pool's window layers
    k_scale: float = 0.5
    v_scale: float = 2.0


CPU_DEFAULT = Geometry(name="cpu-small")
GPU_DEFAULT = Geometry(
    name="gpu-large",
    num_layers=8,
    prefix=512,
    own_lengths=(1500, 3000, 700, 2100),
    chunk=1024,
    decode_steps=8,
    swa_window=256,
)


@dataclass
class PhaseResult:
    phase: str
    pool: str
    calls: int = 0
    tokens: int = 0
    seconds: float = 0.0
    max_abs_err: float = 0.0
    max_ref: float = 0.0
    failures: List[str] = field(default_factory=list)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict:
        d = asdict(self)
        d["tokens_per_s"] = self.tokens_per_s
        return d


# --------------------------------------------------------------------------
# float64 reference


def reference_attention(q, k, v, q_pos, *, sm_scale: float, window: int = -1):
    """float64 attention for one sequence.

    q ``(n, Hq, D)``; k, v ``(L, Hkv, D)`` (all tokens so far, float64);
    q_pos ``(n,)`` absolute positions. Causal; with ``window >= 0`` a query at
    position p sees keys p - window .. p (SGLang's sliding_window_size rule).
    """
    import torch

    hq, hkv = q.shape[1], k.shape[1]
    g = hq // hkv
    kk = k.repeat_interleave(g, dim=1)  # (L, Hq, D)
    vv = v.repeat_interleave(g, dim=1)
    s = torch.einsum("nhd,lhd->hnl", q.double(), kk) * sm_scale
    kpos = torch.arange(k.shape[0], dtype=torch.int64)
    mask = kpos[None, :] <= q_pos[:, None]
    if window >= 0:
        mask &= kpos[None, :] >= q_pos[:, None] - window
    s = s.masked_fill(~mask[None], float("-inf"))
    p = torch.softmax(s, dim=-1)
    return torch.einsum("hnl,lhd->nhd", p, vv)


# --------------------------------------------------------------------------
# SGLang objects


def _accepted(fn, kwargs):
    params = inspect.signature(fn).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return dict(kwargs)
    return {k: v for k, v in kwargs.items() if k in params}


def build_pools(geo: Geometry, device: str, fp8_dtype, total_tokens: int):
    """(hybrid pool with a 5D fp8 full pool, SWA pool with 5D bf16 buffers)."""
    import torch

    mp = importlib.import_module("sglang.srt.mem_cache.memory_pool")
    swa = importlib.import_module("sglang.srt.mem_cache.swa_memory_pool")
    size = total_tokens + geo.page
    full_ids = [i for i in range(geo.num_layers) if (i + 1) % geo.full_every == 0]
    hybrid_kwargs = dict(size=size, dtype=fp8_dtype, page_size=geo.page, head_num=geo.hkv, head_dim=geo.head_dim,
                         full_attention_layer_ids=full_ids, device=device, mamba_pool=None,
                         enable_memory_saver=False, enable_kv_cache_copy=False, use_mla=False)
    hybrid = mp.HybridLinearKVPool(**_accepted(mp.HybridLinearKVPool.__init__, hybrid_kwargs))
    swa_kwargs = dict(size=size, size_swa=size, page_size=geo.page, dtype=torch.bfloat16, head_num=geo.hkv,
                      head_dim=geo.head_dim, swa_attention_layer_ids=[0, 2], full_attention_layer_ids=[1, 3],
                      device=device, token_to_kv_pool_class=mp.MHATokenToKVPool, enable_memory_saver=False)
    swa_pool = swa.SWAKVPool(**_accepted(swa.SWAKVPool.__init__, swa_kwargs))
    return hybrid, swa_pool, full_ids


def _fake_runtime_context(module, page_size: int) -> dict:
    """Replace SGLang's runtime-context accessors on ``module``; returns the originals.

    Which accessors exist depends on the SGLang version (get_parallel /
    get_schedule / get_spec / is_dp_attention_enabled on 0.5.23).
    """
    spec = NS(speculative_num_draft_tokens=None, speculative_num_steps=None, speculative_algorithm=None,
              speculative_attention_mode="prefill")
    fakes = {"get_parallel": lambda: NS(attn_tp_size=1, attn_tp_rank=0, attn_dcp_size=1),
             "get_schedule": lambda: NS(page_size=page_size),
             "get_spec": lambda: spec,
             "is_dp_attention_enabled": lambda: False}
    saved = {}
    for name, fake in fakes.items():
        if hasattr(module, name):
            saved[name] = getattr(module, name)
            setattr(module, name, fake)
    return saved


def build_backend(pool, *, num_q_heads: int, num_kv_heads: int, head_dim: int, page_size: int, device: str = "cpu",
                  context_len: int = 4096, max_bs: int = 16, dtype=None):
    """A real AiterAttnBackend over ``pool`` from a minimal model runner.

    Only what ``AiterAttnBackend.__init__`` reads is provided; SGLang's runtime
    context accessors are replaced for the duration of the constructor.
    """
    import torch

    dtype = dtype or torch.bfloat16
    ab = importlib.import_module("sglang.srt.layers.attention.aiter_backend")
    model_config = NS(dtype=dtype, is_multimodal=False, num_attention_heads=num_q_heads, head_dim=head_dim,
                      get_num_kv_heads=lambda tp: num_kv_heads, attention_arch=None, context_len=context_len,
                      v_head_dim=head_dim, is_hybrid_swa=False)
    req_to_token_pool = NS(req_to_token=torch.zeros(max_bs, context_len, dtype=torch.int32, device=device),
                           size=max_bs)
    server_args = NS(page_size=page_size, speculative_num_draft_tokens=None, speculative_num_steps=None,
                     speculative_algorithm=None, speculative_attention_mode="prefill", enable_dp_attention=False,
                     kv_cache_dtype="auto")
    runner = NS(model_config=model_config, device=device, kv_cache_dtype=dtype, dtype=dtype,
                req_to_token_pool=req_to_token_pool, kv_index_translator=None, token_to_kv_pool=pool,
                token_to_kv_pool_allocator=NS(get_kvcache=lambda: pool), server_args=server_args,
                is_draft_worker=False, sliding_window_size=None, page_size=page_size)
    saved = _fake_runtime_context(ab, page_size)
    try:
        return ab.AiterAttnBackend(runner)
    finally:
        for name, value in saved.items():
            setattr(ab, name, value)


# --------------------------------------------------------------------------
# The run


@dataclass
class _Request:
    rid: int
    length: int  # prompt length
    prefix_shared: bool
    pages: List[int]
    done: int = 0  # tokens already in the cache

    def slot(self, pos: int, page: int) -> int:
        return self.pages[pos // page] * page + pos % page


class _Model:
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


def _logical(x, fp8_dtype, scale):
    """What the cache should hold for ``x``, as float64: fp8(x/scale)*scale, or x."""
    import torch

    if fp8_dtype is None:
        return x.detach().cpu().double()
    from .kernels.fp8_reference import quantize_fp8_fp32

    bits = quantize_fp8_fp32(x.detach().cpu(), scale, fp8_dtype)
    return bits.view(fp8_dtype).to(torch.float64) * scale


def run_selftest(geo: Geometry, device: str, progress: Optional[Callable[[str], None]] = None, *,
                 both_paths: Optional[bool] = None) -> dict:
    """Run one configuration; returns a JSON-serialisable report.

    ``both_paths``: run the aiter and the portable path (None: on ROCm when
    aiter is usable; see :func:`attention_paths`)."""
    say = progress or (lambda _m: None)
    if device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    os.environ["SGLANG_AITER_KV_CACHE_LAYOUT"] = "vectorized_5d"

    import sglang_kv5d

    status = sglang_kv5d.activate()
    import torch

    mp = importlib.import_module("sglang.srt.mem_cache.memory_pool")
    ab = importlib.import_module("sglang.srt.layers.attention.aiter_backend")
    mp._use_aiter = True  # SGLang picks the aiter pool layout only on ROCm; force it for these pools
    status = sglang_kv5d.status()
    needed = ("pool-layout-detection", "attention-dispatch-5d", "fp8-kv-write")
    not_applied = {p.name: f"{p.state}: {p.reason}" for p in status.patches if p.name in needed and p.state != "applied"}
    if not_applied:
        return {"ok": False, "geometry": asdict(geo), "device": device, "phases": [],
                "error": f"patches not applied: {not_applied}"}

    fp8_dtype = torch.float8_e4m3fn
    if device != "cpu" and getattr(torch.version, "hip", None):
        props = torch.cuda.get_device_properties(0)
        if getattr(props, "gcnArchName", "").startswith("gfx94"):
            fp8_dtype = torch.float8_e4m3fnuz
    from . import attention as _attention

    paths, why = attention_paths(device, both=both_paths)
    say(f"attention paths: {', '.join(paths)} ({why})")
    phases, failures, flags, path_info = [], [], {}, {}
    saved = os.environ.get(_attention.ENV_IMPL)
    try:
        for path in paths:
            if path != "default":
                os.environ[_attention.ENV_IMPL] = path
            _attention.reset_state()
            p_phases, p_failures, flags = _run_path(geo, device, fp8_dtype, torch, mp, ab, say, path)
            served = _served(path, _attention)
            path_info[path] = served
            for ph in p_phases:
                ph["path"] = path
            phases += p_phases
            failures += [(f"[{path}] " if len(paths) > 1 else "") + f for f in p_failures]
            say(f"path {path}: {served['ran']}")
    finally:
        if saved is None:
            os.environ.pop(_attention.ENV_IMPL, None)
        else:
            os.environ[_attention.ENV_IMPL] = saved
        _attention.reset_state()
    for name, f in flags.items():
        if not f["kv_cache_is_vectorized_5d"] or not f["decode_page_table"]:
            failures.append(f"{name}: backend layout flags wrong: {f}")

    return {
        "ok": not failures,
        "geometry": asdict(geo),
        "device": device,
        "fp8_dtype": str(fp8_dtype).replace("torch.", ""),
        "attention_impl": _attention.selected_impl(),
        "attention_paths": path_info,
        "attention_paths_why": why,
        "backend_flags": flags,
        "phases": phases,
        "failures": failures,
        "sglang": status.sglang_version,
        "patches": {p.name: p.state for p in status.patches},
    }


def attention_paths(device: str, *, both: Optional[bool] = None) -> Tuple[List[str], str]:
    """Which attention paths the selftest runs, and why.

    On ROCm with aiter usable (it imports and has pa_decode_gluon,
    get_recommended_splits and mha_batch_prefill_func): both, ``aiter`` then
    ``triton`` (the portable kernels), on the same requests, so the first
    MI300/MI355 run checks each against float64. Elsewhere (CUDA, CPU, ROCm
    with SGLANG_KV5D_ATTN_IMPL=triton): one run as that variable selects
    ("default"); ROCm without aiter: the portable path, saying why.
    ``both`` forces the choice (tests emulate ROCm with the fake aiter).
    """
    from . import attention as _attention

    if both is None:
        import torch

        rocm = device != "cpu" and bool(getattr(torch.version, "hip", None))
        if not rocm:
            return ["default"], f"not ROCm: {_attention.ENV_IMPL}={_attention.selected_impl()}"
        both = _attention.selected_impl() != "triton"  # an explicit portable-only choice is kept
    if not both:
        return ["default"], f"{_attention.ENV_IMPL}={_attention.selected_impl()}"
    fns, err = _attention._aiter_functions(_attention._DECODE_FNS + _attention._EXTEND_FNS)
    missing = [n for n in _attention._DECODE_FNS + _attention._EXTEND_FNS if n not in fns]
    if err or missing:
        _attention.reset_state()
        why = f"aiter is not importable ({err})" if err else f"aiter has no {', '.join(missing)}"
        return ["triton"], f"ROCm, but {why}: portable path only"
    return ["aiter", "triton"], "ROCm with aiter: both paths on the same requests"


def _served(path: str, _attention) -> dict:
    """What served a path's calls: the configurations aiter could not run went portable."""
    fallbacks = {_attention._key_text(k): why for k, why in _attention.fallback_configs().items()}
    if path == "triton":
        ran = "portable Triton kernels"
    elif path == "aiter":
        ran = "aiter" + (f", portable for {len(fallbacks)} configuration(s)" if fallbacks else "")
    else:
        impl = _attention.selected_impl()
        ran = {"triton": "portable Triton kernels"}.get(impl, f"{impl} (aiter where usable, else portable)")
    return {"ran": ran, "fallbacks": fallbacks}


def _run_path(geo, device, fp8_dtype, torch, mp, ab, say, path):
    """One pass of the requests through the patched attention; (phases, failures, flags)."""
    page = geo.page
    reqs: List[_Request] = []
    next_page = 0
    shared_pages = list(range(geo.prefix // page))
    next_page = len(shared_pages)
    for rid, own in enumerate(geo.own_lengths):
        shared = rid < len(geo.own_lengths) - 1
        length = (geo.prefix if shared else 0) + own
        total = length + geo.decode_steps
        n_pages = -(-total // page)
        pages = []
        if shared:
            pages = list(shared_pages)
        while len(pages) < n_pages:
            pages.append(next_page)
            next_page += 1
        reqs.append(_Request(rid, length, shared, pages))
    total_tokens = next_page * page
    max_len = max(r.length for r in reqs) + geo.decode_steps
    say(f"building pools ({total_tokens} slots, page {page}, {geo.hq}/{geo.hkv} heads, D={geo.head_dim}) on {device}")
    hybrid, swa_pool, full_ids = build_pools(geo, device, fp8_dtype, total_tokens)

    pools = {
        "hybrid-fp8": dict(pool=hybrid, layers=full_ids, fp8=fp8_dtype, windows={}),
        "swa-bf16": dict(pool=swa_pool, layers=[0, 1, 2, 3], fp8=None, windows={0: geo.swa_window, 2: geo.swa_window}),
    }
    flags = {}
    for name, cfg in pools.items():
        backend = build_backend(cfg["pool"], num_q_heads=geo.hq, num_kv_heads=geo.hkv, head_dim=geo.head_dim,
                                page_size=page, device=device, context_len=max(4096, max_len + page))
        cfg["backend"] = backend
        flags[name] = {
            "kv_cache_is_vectorized_5d": bool(backend.kv_cache_is_vectorized_5d),
            "decode_page_table": bool(getattr(backend, "decode_uses_page_table", backend.use_triton_unified_attention)),
        }
        cfg["layer_objs"] = {}
        for lid in cfg["layers"]:
            window = cfg["windows"].get(lid, -1)
            cfg["layer_objs"][lid] = NS(
                layer_id=lid, tp_q_head_num=geo.hq, tp_k_head_num=geo.hkv, tp_v_head_num=geo.hkv,
                qk_head_dim=geo.head_dim, v_head_dim=geo.head_dim, scaling=1.0 / math.sqrt(geo.head_dim),
                sliding_window_size=window, logit_cap=0.0,
                k_scale=torch.tensor([geo.k_scale], dtype=torch.float32, device=device) if cfg["fp8"] else None,
                v_scale=torch.tensor([geo.v_scale], dtype=torch.float32, device=device) if cfg["fp8"] else None,
                k_scale_float=geo.k_scale if cfg["fp8"] else None, v_scale_float=geo.v_scale if cfg["fp8"] else None,
            )
        # logical (float64) K/V per request and layer, for the reference
        cfg["kv"] = {(r.rid, lid): ([], []) for r in reqs for lid in cfg["layers"]}

    model = _Model(geo, device)
    results: Dict[Tuple[str, str], PhaseResult] = {}
    write_loc = getattr(mp, "KVWriteLoc", None)

    def result(phase, pool_name):
        return results.setdefault((phase, pool_name), PhaseResult(phase, pool_name))

    def compare(res: PhaseResult, out, ref, what: str):
        out64 = out.detach().cpu().double().reshape(ref.shape)
        if not torch.isfinite(out64).all():
            res.failures.append(f"{what}: non-finite output")
            return
        err = float((out64 - ref).abs().max()) if ref.numel() else 0.0
        bound = 2e-2 * max(1.0, float(ref.abs().max()) if ref.numel() else 0.0)
        res.max_abs_err = max(res.max_abs_err, err)
        res.max_ref = max(res.max_ref, float(ref.abs().max()) if ref.numel() else 0.0)
        if err > bound:
            res.failures.append(f"{what}: max |error| {err:.3e} > {bound:.3e}")

    # ---- chunked prefill: each step takes up to `chunk` tokens of every unfinished request
    step = 0
    while any(r.done < r.length for r in reqs):
        batch = []
        for r in reqs:
            if r.done >= r.length:
                continue
            if r.prefix_shared and r.rid > 0:
                if reqs[0].done < geo.prefix:
                    continue  # request 0 has not written the shared prefix yet
                if r.done == 0:
                    r.done = geo.prefix  # radix-cache hit: the prefix pages are reused, not rewritten
            batch.append((r, r.done, min(geo.chunk, r.length - r.done)))
        step += 1
        _extend_step(batch, pools, model, geo, device, torch, ab, write_loc, result, compare, reqs, path)
        for r, start, n in batch:
            r.done = start + n
    say(f"prefill done in {step} chunked steps")

    # ---- decode steps for every request
    for _ in range(geo.decode_steps):
        _decode_step(reqs, pools, model, geo, device, torch, ab, write_loc, result, compare)
        for r in reqs:
            r.done += 1
    say(f"{geo.decode_steps} decode steps done")

    phases = [res.to_dict() for res in results.values()]
    failures = [f"{p['phase']}/{p['pool']}: {f}" for p in phases for f in p["failures"]]
    return phases, failures, flags


def _extend_step(batch, pools, model, geo, device, torch, ab, write_loc, result, compare, reqs, path):
    if not batch:
        return
    page = geo.page
    for name, cfg in pools.items():
        pool, backend = cfg["pool"], cfg["backend"]
        for lid, layer in cfg["layer_objs"].items():
            qs, ks, vs, locs, slots, qo, kvp, seq_lens, prefix_lens = [], [], [], [], [], [0], [0], [], []
            for r, start, n in batch:
                q, k, v = model.qkv(n)
                qs.append(q)
                ks.append(k)
                vs.append(v)
                locs.extend(r.slot(p, page) for p in range(start, start + n))
                slots.extend(r.slot(p, page) for p in range(start + n))
                qo.append(qo[-1] + n)
                kvp.append(kvp[-1] + start + n)
                seq_lens.append(start + n)
                prefix_lens.append(start)
            q, k, v = torch.cat(qs), torch.cat(ks), torch.cat(vs)
            loc = torch.tensor(locs, dtype=torch.int64, device=device)
            loc_arg = write_loc(loc=loc, swa_loc=loc) if write_loc is not None else loc
            res = result("extend", name)
            t0 = time.perf_counter()
            pool.set_kv_buffer(layer, loc_arg, k, v, layer.k_scale, layer.v_scale)
            meta = NS(
                kv_indices=torch.tensor(slots, dtype=torch.int32, device=device),
                kv_indptr=torch.tensor(kvp, dtype=torch.int32, device=device),
                qo_indptr=torch.tensor(qo, dtype=torch.int32, device=device),
                max_q_len=max(n for _, _, n in batch), max_kv_len=max(seq_lens),
                swa_page_table=torch.tensor(slots, dtype=torch.int32, device=device) if lid in cfg["windows"] else None,
            )
            backend.forward_metadata = meta
            backend.qo_indptr = meta.qo_indptr  # SGLang <= 0.5.22 reads it from the backend
            fb = NS(batch_size=len(batch), seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=device),
                    seq_lens_cpu=torch.tensor(seq_lens), seq_lens_sum=sum(seq_lens),
                    extend_prefix_lens_cpu=prefix_lens, extend_seq_lens_cpu=[n for _, _, n in batch])
            window = cfg["windows"].get(lid, -1)
            out = ab.forward_extend_vectorized_5d(backend, q.reshape(q.shape[0], -1), k, v, layer, fb, len(batch) + 1,
                                                  (window, -1) if window >= 0 else (-1, -1), None)
            if device != "cpu":
                torch.cuda.synchronize()
            res.seconds += time.perf_counter() - t0
            res.calls += 1
            res.tokens += q.shape[0]
            # reference, one request at a time
            fresh = all(start == 0 for _, start, _ in batch)
            q_ref = _aiter_extend_query(q, cfg["fp8"]) if path == "aiter" and cfg["fp8"] and not fresh else None
            row = 0
            for (r, start, n), q_r, k_r, v_r in zip(batch, qs, ks, vs):
                lk, lv = cfg["kv"][(r.rid, lid)]
                _extend_logical(cfg, r, lid, start, k_r, v_r, layer, reqs)
                keys = torch.cat(cfg["kv"][(r.rid, lid)][0])[: start + n]
                vals = torch.cat(cfg["kv"][(r.rid, lid)][1])[: start + n]
                if path == "aiter" and cfg["fp8"] and fresh:
                    # aiter path, no request with a prefix: attention over the new bf16 k/v (no cache read)
                    keys, vals = k_r.cpu().double(), v_r.cpu().double()
                q64 = q_r.cpu().double() if q_ref is None else q_ref[row: row + n]
                ref = reference_attention(q64, keys, vals, torch.arange(start, start + n),
                                          sm_scale=layer.scaling, window=window)
                compare(res, out[row: row + n], ref, f"layer {lid} request {r.rid} tokens {start}..{start + n - 1}")
                row += n


def _aiter_extend_query(q, fp8_dtype):
    """The query the aiter extend path attends with over an fp8 cache: the
    batch quantized per tensor (``attention.quantize_per_tensor``: aiter's
    batch prefill takes q, k and v of one dtype), dequantized, float64."""
    from .attention import quantize_per_tensor

    qq, scale = quantize_per_tensor(q, fp8_dtype)
    return (qq.float() * scale).cpu().double()


def _extend_logical(cfg, r, lid, start, k_r, v_r, layer, reqs):
    """Append this chunk's logical K/V; shared-prefix requests copy request 0's prefix."""
    lk, lv = cfg["kv"][(r.rid, lid)]
    have = sum(x.shape[0] for x in lk)
    if have < start and r.prefix_shared and r.rid > 0:
        src_k, src_v = cfg["kv"][(reqs[0].rid, lid)]
        import torch

        lk.append(torch.cat(src_k)[have:start])
        lv.append(torch.cat(src_v)[have:start])
    lk.append(_logical(k_r, cfg["fp8"], layer.k_scale_float))
    lv.append(_logical(v_r, cfg["fp8"], layer.v_scale_float))


def _decode_step(reqs, pools, model, geo, device, torch, ab, write_loc, result, compare):
    page = geo.page
    bs = len(reqs)
    max_pages = max(len(r.pages) for r in reqs)
    for name, cfg in pools.items():
        pool, backend = cfg["pool"], cfg["backend"]
        for lid, layer in cfg["layer_objs"].items():
            q, k, v = model.qkv(bs)
            loc = torch.tensor([r.slot(r.done, page) for r in reqs], dtype=torch.int64, device=device)
            loc_arg = write_loc(loc=loc, swa_loc=loc) if write_loc is not None else loc
            res = result("decode", name)
            t0 = time.perf_counter()
            pool.set_kv_buffer(layer, loc_arg, k, v, layer.k_scale, layer.v_scale)
            table = torch.zeros(bs, max_pages, dtype=torch.int32, device=device)
            for i, r in enumerate(reqs):
                table[i, : len(r.pages)] = torch.tensor(r.pages, dtype=torch.int32)
            backend.forward_metadata = NS(kv_indices=table, kv_indptr=None, qo_indptr=None,
                                          swa_page_table=table if lid in cfg["windows"] else None,
                                          max_kv_len=max(r.done + 1 for r in reqs))
            seq_lens = [r.done + 1 for r in reqs]
            fb = NS(batch_size=bs, seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=device),
                    seq_lens_cpu=torch.tensor(seq_lens), seq_lens_sum=sum(seq_lens))
            o = torch.full((bs, geo.hq * geo.head_dim), float("nan"), dtype=torch.bfloat16, device=device)
            k_cache = pool.get_key_buffer(layer.layer_id)
            v_cache = pool.get_value_buffer(layer.layer_id)
            ab.forward_decode_vectorized_5d(backend, q.reshape(bs, -1), layer, fb, k_cache, v_cache, o, None)
            if device != "cpu":
                torch.cuda.synchronize()
            res.seconds += time.perf_counter() - t0
            res.calls += 1
            res.tokens += bs
            window = cfg["windows"].get(lid, -1)
            for i, r in enumerate(reqs):
                lk, lv = cfg["kv"][(r.rid, lid)]
                lk.append(_logical(k[i: i + 1], cfg["fp8"], layer.k_scale_float))
                lv.append(_logical(v[i: i + 1], cfg["fp8"], layer.v_scale_float))
                keys, vals = torch.cat(lk), torch.cat(lv)
                ref = reference_attention(q[i: i + 1].cpu().double(), keys, vals, torch.tensor([r.done]),
                                          sm_scale=layer.scaling, window=window)
                compare(res, o[i], ref, f"layer {lid} request {r.rid} decode position {r.done}")


def render(reports: Sequence[dict]) -> str:
    lines = []
    for rep in reports:
        geo = rep["geometry"]
        lines.append(
            f"selftest {geo['name']} on {rep['device']}: {geo['hq']}/{geo['hkv']} heads, D={geo['head_dim']}, "
            f"page {geo['page']}, fp8 {rep.get('fp8_dtype', '?')}, attention impl {rep.get('attention_impl', '?')}, "
            f"SGLang {rep.get('sglang', '?')}"
        )
        if rep.get("error"):
            lines.append(f"  ERROR: {rep['error']}")
            continue
        paths = rep.get("attention_paths", {})
        if paths:
            lines.append(f"  attention paths ({rep.get('attention_paths_why', '')}):")
            for name, info in paths.items():
                lines.append(f"    {name}: {info['ran']}")
                for cfg, why in info.get("fallbacks", {}).items():
                    lines.append(f"      portable for {cfg}: {why}")
        lines.append(f"  {'path':7} {'phase':7} {'pool':11} {'calls':>5} {'tokens':>7} {'max |err|':>10} "
                     f"{'max |ref|':>9} {'tokens/s':>10}  result")
        for p in rep["phases"]:
            lines.append(
                f"  {p.get('path', ''):7} {p['phase']:7} {p['pool']:11} {p['calls']:5d} {p['tokens']:7d} "
                f"{p['max_abs_err']:10.2e} {p['max_ref']:9.2f} {p['tokens_per_s']:10.1f}  "
                f"{'ok' if not p['failures'] else 'MISMATCH'}"
            )
        for name, f in rep.get("backend_flags", {}).items():
            lines.append(f"  backend over {name}: 5D={f['kv_cache_is_vectorized_5d']} "
                         f"decode page table={f['decode_page_table']}")
        for f in rep.get("failures", [])[:20]:
            lines.append(f"  FAIL {f}")
        lines.append(f"  => {'PASS' if rep['ok'] else 'FAIL'}")
    return "\n".join(lines)
