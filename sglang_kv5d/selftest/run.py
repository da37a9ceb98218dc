"""One selftest configuration end to end: activate, pick the attention paths,
and per path build fresh pools and a backend and run the phases."""

from __future__ import annotations

import importlib
import os
from dataclasses import asdict
from typing import Callable, List, Optional, Tuple

from ..surface import AITER_BACKEND, ENV_KV_CACHE_LAYOUT, MEMORY_POOL, attr_name, import_object
from .geometry import Geometry
from .phases import PHASES
from .sglang_objects import build_backend, build_pools
from .workload import Model, PoolCase, Run, plan_requests

# The patches the selftest exercises; it reports an error when one is not applied.
NEEDED = ("pool-layout-detection", "attention-dispatch-5d", "fp8-kv-write")


def run_selftest(geo: Geometry, device: str, progress: Optional[Callable[[str], None]] = None, *,
                 both_paths: Optional[bool] = None) -> dict:
    """Run one configuration; returns a JSON-serialisable report.

    ``both_paths``: run the aiter and the portable path (None: on ROCm when
    aiter is usable; see :func:`attention_paths`)."""
    say = progress or (lambda _m: None)
    if device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    os.environ[ENV_KV_CACHE_LAYOUT] = "vectorized_5d"

    from ..activation import activate, status as overlay_status

    activate(route="api")  # as sglang_kv5d.activate() does
    import torch

    mp = importlib.import_module(MEMORY_POOL)
    importlib.import_module(AITER_BACKEND)  # the patches install when their modules are imported
    # SGLang picks the aiter pool layout only on ROCm (read once at import); force it for these pools.
    setattr(mp, attr_name("memory_pool._use_aiter"), True)
    from ..state import APPLIED, UPSTREAM  # upstream: that SGLang has the fix (re-verified at backend build)

    status = overlay_status()
    not_applied = {p.name: f"{p.state}: {p.reason}" for p in status.patches if p.name in NEEDED and p.state not in (APPLIED, UPSTREAM)}
    if not_applied:
        return {"ok": False, "geometry": asdict(geo), "device": device, "phases": [],
                "error": f"patches not applied: {not_applied}"}

    fp8_dtype = _fp8_dtype(device, torch)
    from .. import attention as _attention
    from ..config import ATTN_IMPL

    paths, why = attention_paths(device, both=both_paths)
    say(f"attention paths: {', '.join(paths)} ({why})")
    phases, failures, flags, path_info = [], [], {}, {}
    saved = os.environ.get(ATTN_IMPL)
    try:
        for path in paths:
            if path != "default":
                os.environ[ATTN_IMPL] = path
            _attention.reset_state()
            p_phases, p_failures, flags = _run_path(geo, device, fp8_dtype, say, path)
            served = _served(path, _attention)
            path_info[path] = served
            for ph in p_phases:
                ph["path"] = path
            phases += p_phases
            failures += [(f"[{path}] " if len(paths) > 1 else "") + f for f in p_failures]
            say(f"path {path}: {served['ran']}")
    finally:
        if saved is None:
            os.environ.pop(ATTN_IMPL, None)
        else:
            os.environ[ATTN_IMPL] = saved
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


def _fp8_dtype(device: str, torch):
    """The fp8 KV dtype of this device (platform.fp8_dtype of its arch; the CPU: e4m3fn)."""
    from ..platform import device_arch, fp8_dtype

    return fp8_dtype(None if device == "cpu" else device_arch(0))


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
    from .. import attention as _attention
    from ..config import ATTN_IMPL

    if both is None:
        import torch

        rocm = device != "cpu" and bool(getattr(torch.version, "hip", None))
        if not rocm:
            return ["default"], f"not ROCm: {ATTN_IMPL}={_attention.selected_impl()}"
        both = _attention.selected_impl() != "triton"  # an explicit portable-only choice is kept
    if not both:
        return ["default"], f"{ATTN_IMPL}={_attention.selected_impl()}"
    fns, err = _attention.aiter_functions(_attention.DECODE_FNS + _attention.EXTEND_FNS)
    missing = [n for n in _attention.DECODE_FNS + _attention.EXTEND_FNS if n not in fns]
    if err or missing:
        _attention.reset_state()
        why = f"aiter is not importable ({err})" if err else f"aiter has no {', '.join(missing)}"
        return ["triton"], f"ROCm, but {why}: portable path only"
    return ["aiter", "triton"], "ROCm with aiter: both paths on the same requests"


def _served(path: str, _attention) -> dict:
    """What served a path's calls: the configurations aiter could not run went portable."""
    fallbacks = {_attention.key_text(k): why for k, why in _attention.fallback_configs().items()}
    if path == "triton":
        ran = "portable Triton kernels"
    elif path == "aiter":
        ran = "aiter" + (f", portable for {len(fallbacks)} configuration(s)" if fallbacks else "")
    else:
        impl = _attention.selected_impl()
        ran = {"triton": "portable Triton kernels"}.get(impl, f"{impl} (aiter where usable, else portable)")
    return {"ran": ran, "fallbacks": fallbacks}


def _run_path(geo: Geometry, device: str, fp8_dtype, say, path: str):
    """One pass of the requests through the patched attention; (phases, failures, flags)."""
    reqs, total_tokens = plan_requests(geo)
    max_len = max(r.length for r in reqs) + geo.decode_steps
    say(f"building pools ({total_tokens} slots, page {geo.page}, {geo.hq}/{geo.hkv} heads, D={geo.head_dim}) "
        f"on {device}")
    hybrid, swa_pool, full_ids = build_pools(geo, device, fp8_dtype, total_tokens)
    cases = {
        "hybrid-fp8": PoolCase("hybrid-fp8", hybrid, full_ids, fp8_dtype, {}),
        "swa-bf16": PoolCase("swa-bf16", swa_pool, [0, 1, 2, 3], None, {0: geo.swa_window, 2: geo.swa_window}),
    }
    flags = {}
    for name, case in cases.items():
        case.backend = build_backend(case.pool, num_q_heads=geo.hq, num_kv_heads=geo.hkv, head_dim=geo.head_dim,
                                     page_size=geo.page, device=device, context_len=max(4096, max_len + geo.page))
        flags[name] = {
            "kv_cache_is_vectorized_5d": bool(case.backend.kv_cache_is_vectorized_5d),
            "decode_page_table": bool(getattr(case.backend, "decode_uses_page_table",
                                              case.backend.use_triton_unified_attention)),
        }
        case.make_layers(geo, device)
        case.kv = {(r.rid, lid): ([], []) for r in reqs for lid in case.layers}

    ab = importlib.import_module(AITER_BACKEND)  # the patched functions as aiter_backend binds them
    write_loc = None
    try:
        write_loc = import_object("memory_pool.KVWriteLoc")
    except LookupError:
        pass  # 0.5.13.post1: set_kv_buffer takes the slots
    run = Run(geo=geo, device=device, path=path, cases=cases, reqs=reqs, model=Model(geo, device),
              extend_fn=getattr(ab, attr_name("aiter_utils.forward_extend_vectorized_5d")),
              decode_fn=getattr(ab, attr_name("aiter_utils.forward_decode_vectorized_5d")),
              write_loc=write_loc, say=say)
    for phase in PHASES:
        phase.run(run)

    phases = [res.to_dict() for res in run.results.values()]
    failures = [f"{p['phase']}/{p['pool']}: {f}" for p in phases for f in p["failures"]]
    return phases, failures, flags
