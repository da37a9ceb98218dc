"""Contract: the overlay's aiter calls against aiter's real source.

The real source is test data in ``../shared/aiter-src`` (beside the checkout,
found from the repository root, not the working directory): one folder per
aiter version (release tags v0.1.10 .. v0.1.20.post1 and main e4048607), each
with ``pa_decode_gluon.py``, ``mha.py`` and ``cache.py``. Nothing of it is
copied here; it is parsed or loaded from there.

1. Binding: every aiter call the overlay makes (recorded through the fake
   aiter while the overlay runs the selftest's geometry over real SGLang
   pools, plus the bench's aiter peers) binds to each version's real
   signature, parsed with ``ast``: no unknown keyword, every parameter
   without a default given (``query_scale``/``compute_type``/``key_scale``...
   are required before v0.1.14), ``ps=True`` given explicitly (the default was
   False before v0.1.14, and the split count comes from
   ``get_recommended_splits``, which is meant for ``ps=True``).
2. The fake's signatures equal main-e4048607's.
3. The real Python wrappers (``pa_decode_gluon``, ``mha_batch_prefill_func``)
   are loaded with their imports stubbed (aiter's JIT, the architecture query)
   and the kernel launch replaced by a recorder, then run on the exact
   arguments the overlay built: their own argument checks must pass, and what
   they hand to the kernel is checked (quant modes, the 5D V layout, the
   batch-prefill kernel module the JIT would build).
4. Bad arguments: the real wrappers and the fake raise the same exception
   type for each of a list of mistakes.

Skipped, with the reason, when ``../shared/aiter-src`` is absent; every failure
to bind fails the test when it is present.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import inspect
import math
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from sglang_kv5d import attention as attn
from tests.helpers import pools as hp
from tests.helpers.fake_aiter import fake_aiter_on_path

REPO = Path(__file__).resolve().parents[1]
AITER_SRC = REPO.parent / "shared" / "aiter-src"
PA = "aiter/ops/triton/gluon/pa_decode_gluon.py"
MHA = "aiter/ops/mha.py"
CACHE = "aiter/ops/cache.py"
TYPES = "main-e4048607/aiter/ops/triton/utils/types.py"
MAIN = "main-e4048607"

pytestmark = [
    pytest.mark.sglang_independent,
    pytest.mark.skipif(not AITER_SRC.is_dir(),
                       reason=f"aiter source not found at {AITER_SRC} (CI keeps ../shared beside the checkout)"),
]


def _versions():
    if not AITER_SRC.is_dir():
        return []
    return sorted(d.name for d in AITER_SRC.iterdir() if (d / "aiter").is_dir())


VERSIONS = _versions()


def _vkey(version: str):
    """Sort key: main sorts last; v0.1.13.post1 -> (0, 1, 13, 1)."""
    if version.startswith("main"):
        return (99,)
    parts = version.lstrip("v").replace(".post", ".").split(".")
    return tuple(int(p) for p in parts)


def test_every_expected_version_is_there():
    assert VERSIONS, f"{AITER_SRC} holds no version folders"
    for v in ("v0.1.10", "v0.1.13.post1", "v0.1.14", "v0.1.20.post1", MAIN):
        assert v in VERSIONS, f"{v} missing from {AITER_SRC}"


# --------------------------------------------------------------------------
# Signatures from the real source (ast)


class _SourceDefault:
    """A default value as written in the source (not evaluated)."""

    def __init__(self, text):
        self.text = text

    def __repr__(self):
        return self.text


def _default(node):
    try:
        return ast.literal_eval(node)
    except Exception:
        return _SourceDefault(ast.unparse(node))


def ast_signature(version: str, relpath: str, name: str) -> inspect.Signature:
    tree = ast.parse((AITER_SRC / version / relpath).read_text(encoding="utf-8"))
    fns = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    assert fns, f"{name} not defined at top level of {version}/{relpath}"
    a = fns[-1].args
    P = inspect.Parameter
    params = []
    positional = a.posonlyargs + a.args
    defaults = [P.empty] * (len(positional) - len(a.defaults)) + [_default(d) for d in a.defaults]
    for i, (arg, d) in enumerate(zip(positional, defaults)):
        kind = P.POSITIONAL_ONLY if i < len(a.posonlyargs) else P.POSITIONAL_OR_KEYWORD
        params.append(P(arg.arg, kind, default=d))
    if a.vararg:
        params.append(P(a.vararg.arg, P.VAR_POSITIONAL))
    for arg, d in zip(a.kwonlyargs, a.kw_defaults):
        params.append(P(arg.arg, P.KEYWORD_ONLY, default=P.empty if d is None else _default(d)))
    if a.kwarg:
        params.append(P(a.kwarg.arg, P.VAR_KEYWORD))
    return inspect.Signature(params)


# --------------------------------------------------------------------------
# The overlay's calls, recorded through the fake in the selftest's geometry

HQ, HKV, D, PAGE = 4, 1, 256, 64
FP8 = torch.float8_e4m3fn
BF16 = torch.bfloat16


def _layer(layer_id, window, k_scale=None, v_scale=None):
    from sglang.srt.layers.radix_attention import RadixAttention

    layer = RadixAttention(num_heads=HQ, head_dim=D, scaling=1.0 / math.sqrt(D), num_kv_heads=HKV,
                           layer_id=layer_id, sliding_window_size=window, logit_cap=0.0)
    if k_scale is not None:
        layer.k_scale = torch.tensor([k_scale], dtype=torch.float32)
        layer.v_scale = torch.tensor([v_scale], dtype=torch.float32)
    return layer


def _scenario(kind, dtype, lens, prefix, mode, window=-1, seed=0):
    """Pool with ``lens`` tokens per request written, and SGLang-shaped objects."""
    g = torch.Generator().manual_seed(seed)
    if kind == "hybrid":
        pool = hp.make_hybrid_pool(num_layers=4, full_attention_layer_ids=[3], dtype=dtype, page_size=PAGE,
                                   head_num=HKV, head_dim=D, size=1024)
        layer_id = 3
    else:
        pool = hp.make_swa_pool(dtype=dtype, page_size=PAGE, head_num=HKV, head_dim=D, size=1024, size_swa=1024)
        layer_id = 2 if window >= 0 else 3
    from sglang_kv5d.pools import resolve_kv_subpool

    sub, local = resolve_kv_subpool(pool, layer_id)
    rows, slots, next_page = [], [], 1
    for n in lens:
        pages = list(range(next_page, next_page + -(-n // PAGE)))
        next_page += len(pages)
        rows.append(pages)
        t = torch.arange(n)
        s = torch.tensor(pages)[t // PAGE] * PAGE + t % PAGE
        k = torch.randn(n, HKV, D, generator=g)
        hp.write_tokens(sub, local, s, k, torch.randn(n, HKV, D, generator=g))
        slots.append(s)
    flat = torch.cat(slots).to(torch.int32)
    kv_indptr = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32)
    qlens = [1] * len(lens) if mode == "decode" else [n - p for n, p in zip(lens, prefix)]
    qo_indptr = torch.tensor([0] + torch.tensor(qlens).cumsum(0).tolist(), dtype=torch.int32)
    table = torch.zeros(len(lens), max(len(r) for r in rows), dtype=torch.int32)
    for b, r in enumerate(rows):
        table[b, : len(r)] = torch.tensor(r, dtype=torch.int32)
    idx = table if mode == "decode" else flat
    swa = kind == "swa" and window >= 0
    meta = SimpleNamespace(kv_indptr=kv_indptr, kv_indices=torch.zeros_like(idx) if swa else idx,
                           swa_page_table=idx if swa else None, qo_indptr=qo_indptr, max_q_len=max(qlens),
                           max_kv_len=max(lens))
    backend = SimpleNamespace(token_to_kv_pool=pool, forward_metadata=meta, input_dtype=BF16,
                              k_scale=torch.tensor([1.0]), v_scale=torch.tensor([1.0]))
    fb = SimpleNamespace(batch_size=len(lens), seq_lens=torch.tensor(lens, dtype=torch.int64),
                         seq_lens_sum=sum(lens), seq_lens_cpu=torch.tensor(lens, dtype=torch.int64),
                         extend_prefix_lens_cpu=list(prefix) if mode != "decode" else None)
    fp8 = dtype == FP8
    layer = _layer(layer_id, window, 0.5 if fp8 else None, 2.0 if fp8 else None)
    q = torch.randn(sum(qlens), HQ * D, generator=g).to(BF16)
    k_new = torch.randn(sum(qlens), HKV * D, generator=g).to(BF16)
    v_new = torch.randn(sum(qlens), HKV * D, generator=g).to(BF16)
    return SimpleNamespace(pool=pool, layer=layer, backend=backend, fb=fb, q=q, k=k_new, v=v_new, window=window,
                           bs=len(lens))


#: (name, pool kind, cache dtype, lens, prefix, mode, window, sinks)
SCENARIOS = [
    ("decode-fp8", "hybrid", FP8, (70, 5, 130), None, "decode", -1, False),
    ("decode-bf16-window-sinks", "swa", BF16, (70, 5), None, "decode", 48, True),
    ("decode-bf16-full", "swa", BF16, (70, 200), None, "decode", -1, False),
    ("extend-fp8-prefix", "hybrid", FP8, (100, 40), (64, 0), "extend", -1, False),
    ("extend-fp8-fresh", "hybrid", FP8, (40, 30), (0, 0), "extend", -1, False),
    ("extend-bf16-window-prefix", "swa", BF16, (100, 30), (64, 0), "extend", 48, False),
]


def _record():
    """{scenario: [(function name, kwargs)]} of the overlay's calls through the fake (strict: keywords only)."""
    out = {}
    with hp.vectorized_5d_env(), fake_aiter_on_path(strict=True) as aiter:
        for name, kind, dtype, lens, prefix, mode, window, with_sinks in SCENARIOS:
            attn.reset_state()
            aiter._fake.reset()
            s = _scenario(kind, dtype, lens, prefix, mode, window)
            sinks = torch.linspace(-1.0, 1.0, HQ) if with_sinks else None
            if mode == "decode":
                o = torch.empty(s.bs, HQ * D, dtype=BF16)
                kc, vc = s.pool.get_kv_buffer(s.layer.layer_id)
                attn.forward_decode_vectorized_5d(s.backend, s.q, s.layer, s.fb, kc, vc, o, sinks)
            else:
                ws = (window, -1) if window >= 0 else (-1, -1)
                attn.forward_extend_vectorized_5d(s.backend, s.q, s.k, s.v, s.layer, s.fb, s.bs + 1, ws, sinks)
            assert not attn.fallback_configs(), f"{name}: the overlay fell back: {attn.fallback_configs()}"
            calls = [(c.name, c.args, dict(c.kwargs)) for c in aiter._fake.CALLS]
            assert calls, f"{name}: the overlay made no aiter call"
            assert all(not a for _, a, _ in calls), f"{name}: positional arguments to aiter"
            out[name] = [(n, kw) for n, _, kw in calls]
        attn.reset_state()
    return out


@pytest.fixture(scope="module")
def overlay_calls():
    return _record()


def _bench_calls():
    """The bench's aiter peer calls, as its pure builders make them (no GPU)."""
    from sglang_kv5d.bench import aiter_peers

    return aiter_peers.example_calls()


WHERE = {"pa_decode_gluon": PA, "get_recommended_splits": PA, "mha_batch_prefill_func": MHA,
         "reshape_and_cache": CACHE}


@pytest.mark.parametrize("version", VERSIONS)
def test_overlay_calls_bind_to_the_real_signatures(version, overlay_calls):
    seen = set()
    for scen, calls in overlay_calls.items():
        for fn, kw in calls:
            sig = ast_signature(version, WHERE[fn], fn)
            try:
                sig.bind(**kw)
            except TypeError as e:
                pytest.fail(f"{scen}: {fn}(**{sorted(kw)}) does not bind to aiter {version}'s {sig}: {e}")
            seen.add(fn)
    assert seen == {"pa_decode_gluon", "get_recommended_splits", "mha_batch_prefill_func"}


@pytest.mark.parametrize("version", VERSIONS)
def test_bench_peer_calls_bind_to_the_real_signatures(version):
    for fn, kw in _bench_calls():
        sig = ast_signature(version, WHERE[fn], fn)
        try:
            sig.bind(**kw)
        except TypeError as e:
            pytest.fail(f"bench: {fn}(**{sorted(kw)}) does not bind to aiter {version}'s {sig}: {e}")


def test_version_rules_the_overlay_applies(overlay_calls):
    # Before v0.1.14 these parameters have no default; the overlay passes them always.
    required_old = ("context_partition_size", "compute_type", "query_scale", "key_scale", "value_scale")
    for v in VERSIONS:
        sig = ast_signature(v, PA, "pa_decode_gluon")
        no_default = {n for n, p in sig.parameters.items() if p.default is inspect.Parameter.empty}
        if _vkey(v) < (0, 1, 14):
            assert set(required_old) <= no_default, v
            assert sig.parameters["ps"].default is False, v
        else:
            assert not set(required_old) & no_default, v
            assert sig.parameters["ps"].default is True, v
    decode = [kw for calls in overlay_calls.values() for fn, kw in calls if fn == "pa_decode_gluon"]
    assert decode
    for kw in decode:
        assert set(required_old) <= set(kw)
        assert kw["ps"] is True and kw["context_partition_size"] == 256
    # get_recommended_splits: v0.1.10 .. v0.1.13 have no split_kv_blocks; the overlay never passes it
    old = ast_signature("v0.1.10", PA, "get_recommended_splits")
    assert "split_kv_blocks" not in old.parameters
    for calls in overlay_calls.values():
        for fn, kw in calls:
            if fn == "get_recommended_splits":
                assert set(kw) == {"num_sequences", "num_kv_heads"}
            if fn == "mha_batch_prefill_func":
                assert "sink_size" not in kw and "kv_block_descale" not in kw  # v0.1.15 / v0.1.12 only


def _fake_functions():
    with fake_aiter_on_path() as aiter:
        from aiter.ops.triton.gluon import pa_decode_gluon as pa

        return {"pa_decode_gluon": (PA, inspect.signature(pa.pa_decode_gluon)),
                "get_recommended_splits": (PA, inspect.signature(pa.get_recommended_splits)),
                "mha_batch_prefill_func": (MHA, inspect.signature(aiter.mha_batch_prefill_func))}


def _shape(sig: inspect.Signature):
    out = []
    for p in sig.parameters.values():
        d = p.default
        if isinstance(d, _SourceDefault):
            d = d.text
        elif d is not inspect.Parameter.empty and not isinstance(d, (int, float, str, bool, tuple, type(None))):
            d = repr(d)
        out.append((p.name, p.kind, d))
    return out


def test_fake_signatures_equal_main():
    for fn, (rel, fake_sig) in _fake_functions().items():
        real = _shape(ast_signature(MAIN, rel, fn))
        fake = _shape(fake_sig)
        assert fake == real, f"fake {fn}{fake_sig} differs from aiter {MAIN}"


# --------------------------------------------------------------------------
# Loading the real wrappers with stubbed imports and a recording launch


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _passthrough(*a, **kw):
    """Stands in for any aiter helper the wrappers import: a decorator (factory) or a no-op."""
    if len(a) == 1 and callable(a[0]) and not kw:
        return a[0]
    return _passthrough


class _StubModule(types.ModuleType):
    def __getattr__(self, n):
        if n.startswith("__"):
            raise AttributeError(n)
        return _passthrough


@contextlib.contextmanager
def real_aiter(version: str, arch: str = "gfx950"):
    """The real pa_decode_gluon and mha modules of ``version``, over the fake
    aiter package (for ``aiter.dtypes``: fp8 is e4m3fn, matching gfx950).

    Yields a namespace: ``pa`` and ``mha`` (the modules), ``launches`` (every
    kernel-wrapper call as (name, args, kwargs)), ``jit`` (every compile_ops
    call with the module name its gen_func chose).
    """
    launches, jit = [], []
    tag = version.replace(".", "_").replace("-", "_")

    def compile_ops(_md_name, fc_name=None, gen_func=None, gen_fake=None, **_kw):
        def deco(fn):
            def launch(*args, **kwargs):
                built = gen_func(*args, **kwargs) if gen_func else None  # compile_ops forwards the same args
                jit.append(SimpleNamespace(name=fc_name or fn.__name__, args=args, kwargs=kwargs,
                                           md_name=(built or {}).get("md_name")))
                return gen_fake(*args, **kwargs) if gen_fake else None
            return launch
        return deco

    def recorder(name):
        def rec(*args, **kwargs):
            launches.append((name, args, kwargs))
        return rec

    with fake_aiter_on_path() as aiter:
        arch_mod = types.ModuleType("aiter.ops.triton.utils._triton.arch_info")
        arch_mod.get_arch = lambda: arch
        sys.modules[arch_mod.__name__] = arch_mod
        import aiter.ops.triton.utils._triton as tpkg

        tpkg.arch_info = arch_mod
        tv = types.ModuleType("aiter.ops.triton.gluon.triton_version")
        tv.TRITON_VERSION_GE_3_6_0 = True
        sys.modules[tv.__name__] = tv
        _load("aiter.ops.triton.utils.types", AITER_SRC / TYPES)  # torch_to_triton_dtype (all versions)
        for n in ("aiter.jit", "aiter.jit.core", "aiter.jit.utils", "aiter.jit.utils.chip_info",
                  "aiter.jit.utils.mha_recipes", "aiter.jit.utils.torch_guard", "aiter.utility"):
            sys.modules[n] = _StubModule(n)
        core = sys.modules["aiter.jit.core"]
        core.compile_ops, core.CK_DIR, core.AITER_META_DIR, core.ENABLE_CK = compile_ops, "/ck", "/meta", True
        sys.modules["aiter.utility"].dtypes = aiter.dtypes
        pa = _load(f"aiter.ops.triton.gluon._real_pa_{tag}", AITER_SRC / version / PA)
        for fn in ("_paged_attention_decode_v2_with_dot_kernel_reshape_wrapper",
                   "_paged_attention_decode_v2_reduce_kernel_wrapper"):
            assert hasattr(pa, fn), f"{version}: {fn} missing; update the recorder"
            setattr(pa, fn, recorder(fn))
        mha = _load(f"aiter.ops._real_mha_{tag}", AITER_SRC / version / MHA)
        try:
            yield SimpleNamespace(pa=pa, mha=mha, launches=launches, jit=jit, aiter=aiter)
        finally:
            for n in [k for k in sys.modules if "_real_" in k or k.startswith("aiter.jit")]:
                sys.modules.pop(n, None)


@pytest.mark.parametrize("version", VERSIONS)
def test_real_pa_decode_gluon_accepts_the_overlays_arguments(version, overlay_calls):
    checked = 0
    with real_aiter(version) as real:
        for scen, calls in overlay_calls.items():
            for fn, kw in calls:
                if fn != "pa_decode_gluon":
                    continue
                real.launches.clear()
                assert real.pa.pa_decode_gluon(**kw) is None
                (kname, _, kernel), *reduce = real.launches
                assert kname.endswith("_reshape_wrapper")
                fp8 = kw["key_cache"].dtype == FP8
                # the scales reach the kernel exactly when the cache is fp8 (else it assumes X=8)
                assert kernel["KV_QUANT_MODE"] == (0 if fp8 else -1), scen
                assert kernel["QUERY_QUANT_MODE"] == -1, scen
                assert kernel["KV_16B_ELEMENT_COUNT"] == kw["key_cache"].shape[-1], scen
                assert kernel["VALUE_TRANSPOSED"] is True and kernel["KV_BLOCK_SIZE"] == PAGE
                assert kernel["HEAD_SIZE"] == D and kernel["query_group_size"] == HQ // HKV
                assert kernel["SLIDING_WINDOW"] == kw["sliding_window"] and kernel["sinks_ptr"] is kw["sinks"]
                assert kernel["PS"] is True and kernel["CDNA_VERSION"] == 4
                assert str(kernel["COMPUTE_TYPE"]) == "bf16"
                assert bool(reduce) == (kw["max_context_partition_num"] > 1), scen
                checked += 1
    assert checked == 3


def _run_real_mha(real, kw):
    real.jit.clear()
    out = real.mha.mha_batch_prefill_func(**kw)
    (j,) = real.jit
    return out, j


@pytest.mark.parametrize("version", VERSIONS)
def test_real_mha_batch_prefill_accepts_the_overlays_arguments(version, overlay_calls):
    checked = 0
    with real_aiter(version) as real:
        for scen, calls in overlay_calls.items():
            for fn, kw in calls:
                if fn != "mha_batch_prefill_func":
                    continue
                out, j = _run_real_mha(real, kw)
                q = kw["q"]
                assert tuple(out.shape) == (q.shape[0], HQ, D), scen
                fp8 = q.dtype == FP8
                # (the kernel's output type is in the module name: fp8bf16; before
                # v0.1.14 the torch.compile fake tensor is allocated in q's dtype)
                assert out.dtype == BF16 or _vkey(version) < (0, 1, 14)
                md = j.md_name
                assert md.startswith("mha_batch_prefill_fp8bf16" if fp8 else "mha_batch_prefill_bf16"), (scen, md)
                assert ("_pertensor" in md) == fp8 and ("_nqscale" in md) == (not fp8), (scen, md)
                assert "_mask" in md and "_nlogits" in md and "_nlse" in md and "_ndropout" in md, md
                if "sink" in md:
                    assert md.endswith("_nsink"), md
                checked += 1
    assert checked == 3


@pytest.mark.parametrize("version", [v for v in VERSIONS if _vkey(v) >= (0, 1, 14)])
def test_real_batch_prefill_builds_no_sink_kernel_for_sink_ptr_alone(version, overlay_calls):
    """Why the overlay sends extend layers with per-head sinks to the portable path.

    From v0.1.14 the JIT builds ``_sink`` instances only for ``sink_size > 0``
    with a mask (``cmdGenFunc_mha_batch_prefill``); per-head sink logits
    (``sink_ptr``) without sink tokens get the ``_nsink`` module. The C++ side
    (csrc/cpp_itfs/mha_fwd_batch_prefill.cu) selects ``has_sink = sink_size > 0``
    at v0.1.14 .. v0.1.18 (the sink logits are not applied) and
    ``sink_size > 0 || sink_ptr != nullptr`` from v0.1.19 (no matching kernel).
    """
    kw = next(kw for calls in overlay_calls.values() for fn, kw in calls
              if fn == "mha_batch_prefill_func" and kw["q"].dtype == BF16)
    with real_aiter(version) as real:
        _, j = _run_real_mha(real, dict(kw, sink_ptr=torch.zeros(HQ)))
        assert j.md_name.endswith("_nsink"), j.md_name
        if "sink_size" in ast_signature(version, MHA, "mha_batch_prefill_func").parameters:
            _, j = _run_real_mha(real, dict(kw, sink_ptr=torch.zeros(HQ), sink_size=1))
            assert j.md_name.endswith("_sink") and not j.md_name.endswith("_nsink"), j.md_name


# --------------------------------------------------------------------------
# The same mistakes, the same exception type, from the real wrapper and the fake


def _decode_kwargs(overlay_calls):
    return next(kw for calls in overlay_calls.values() for fn, kw in calls
                if fn == "pa_decode_gluon" and kw["key_cache"].dtype == FP8)


def _extend_kwargs(overlay_calls, dtype):
    return next(kw for calls in overlay_calls.values() for fn, kw in calls
                if fn == "mha_batch_prefill_func" and kw["q"].dtype == dtype)


DECODE_MISTAKES = {
    "output fp32": lambda kw: dict(kw, output=kw["output"].float()),
    "query fp32": lambda kw: dict(kw, query=kw["query"].float()),
    "query_length 5": lambda kw: dict(kw, query_length=5),
    "key cache 4D": lambda kw: dict(kw, key_cache=kw["key_cache"].flatten(-2)),
    "value cache 3D": lambda kw: dict(kw, value_cache=kw["value_cache"].flatten(-3)),
    "query 2D": lambda kw: dict(kw, query=kw["query"].flatten(-2)),
    "key_scale fp16": lambda kw: dict(kw, key_scale=kw["key_scale"].half()),
    "key/value scale shapes differ": lambda kw: dict(kw, value_scale=kw["value_scale"].reshape(1, 1, 1, 1)),
    "query_scale fp16": lambda kw: dict(kw, query_scale=torch.ones(1, dtype=torch.float16)),
}


def _outcome(fn, kw):
    try:
        fn(**kw)
    except Exception as e:  # noqa: BLE001 - compared below
        return type(e)
    return None


@pytest.mark.parametrize("mistake", sorted(DECODE_MISTAKES))
def test_decode_mistakes_raise_the_real_exception_type(mistake, overlay_calls):
    kw = DECODE_MISTAKES[mistake](_decode_kwargs(overlay_calls))
    with real_aiter(MAIN) as real:
        want = _outcome(real.pa.pa_decode_gluon, kw)
    assert want is not None, f"{mistake}: the real wrapper accepts it; drop it from the list"
    with fake_aiter_on_path() as aiter:
        from aiter.ops.triton.gluon.pa_decode_gluon import pa_decode_gluon

        got = _outcome(pa_decode_gluon, kw)
    assert got is want, f"{mistake}: real aiter raises {want.__name__}, the fake {getattr(got, '__name__', got)}"


EXTEND_MISTAKES = {
    "K and V head dims differ (3D)": lambda kw: dict(kw, v=kw["v"][..., :128].contiguous()),
    "head size not a multiple of 16/elem": lambda kw: dict(kw, q=kw["q"][..., :250].contiguous(),
                                                           k=kw["k"][..., :250].contiguous(),
                                                           v=kw["v"][..., :250].contiguous()),
    "K last stride not 1 (3D)": lambda kw: dict(kw, k=torch.stack([kw["k"], kw["k"]], -1)[..., 0]),
    "K 2D": lambda kw: dict(kw, k=kw["k"].flatten(-2)),
    "K and V ranks differ": lambda kw: dict(kw, k=kw["k"].unsqueeze(1)),
    "sink_ptr wrong length": lambda kw: dict(kw, sink_ptr=torch.zeros(HQ + 1)),
}


@pytest.mark.parametrize("mistake", sorted(EXTEND_MISTAKES))
def test_extend_mistakes_raise_the_real_exception_type(mistake, overlay_calls):
    kw = EXTEND_MISTAKES[mistake](_extend_kwargs(overlay_calls, BF16))
    with real_aiter(MAIN) as real:
        want = _outcome(real.mha.mha_batch_prefill_func, kw)
    assert want is not None, f"{mistake}: the real wrapper accepts it; drop it from the list"
    with fake_aiter_on_path() as aiter:
        got = _outcome(aiter.mha_batch_prefill_func, kw)
    assert got is want, f"{mistake}: real aiter raises {want.__name__}, the fake {getattr(got, '__name__', got)}"


@pytest.mark.parametrize("version", VERSIONS)
def test_real_wrappers_accept_the_bench_peer_arguments(version):
    """The bench's aiter peers (sglang_kv5d.bench.aiter_peers) pass the real wrappers' checks."""
    ran = set()
    with real_aiter(version) as real:
        for fn, kw in _bench_calls():
            if fn == "pa_decode_gluon":
                real.launches.clear()
                real.pa.pa_decode_gluon(**kw)
                kernel = real.launches[0][2]
                assert kernel["KV_QUANT_MODE"] == (0 if kw["key_cache"].dtype == FP8 else -1)
            elif fn == "mha_batch_prefill_func":
                _, j = _run_real_mha(real, kw)
                assert ("_pertensor" in j.md_name) == (kw["q"].dtype == FP8), j.md_name
            else:
                continue
            ran.add((fn, str(kw.get("key_cache", kw.get("q")).dtype)))
    assert len(ran) == 4


@pytest.mark.parametrize("version", VERSIONS)
def test_real_get_recommended_splits_on_the_overlays_arguments(version, overlay_calls, monkeypatch):
    """The real helper (device properties stubbed: an MI300X's 304 CUs) gives the split
    count the overlay sizes its buffers with: an int >= 1, at most 16 (8 from v0.1.14)."""
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda *a, **k: SimpleNamespace(multi_processor_count=304))
    seen = 0
    with real_aiter(version) as real:
        for calls in overlay_calls.values():
            for fn, kw in calls:
                if fn == "get_recommended_splits":
                    n = real.pa.get_recommended_splits(**kw)
                    assert isinstance(n, int) and 1 <= n <= (8 if _vkey(version) >= (0, 1, 14) else 16), n
                    seen += 1
    assert seen == 2  # the two full-attention decode scenarios (window layers use one split)
