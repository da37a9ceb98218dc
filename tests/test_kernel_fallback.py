"""A kernel failure never reaches SGLang: fallback, one warning, no retry, checks before traffic.

Real SGLang pools (CPU, Triton interpreter) and SGLang's own set_kv_buffer;
failures are forced by replacing the kernel's launch with one that raises a
real Triton exception (CompilationError, OutOfResources) or a driver-style
RuntimeError, as a ROCm Triton that cannot compile the 5D write would. For
attention, aiter is the fake under tests/fake_aiter.
"""

from __future__ import annotations

import ast
import logging
import types

import pytest
import torch
import triton
from triton.compiler.errors import CompilationError
from triton.runtime.errors import OutOfResources

import sglang_kv5d
import sglang_kv5d.kernels as kernels
from sglang_kv5d import attention as attn
from sglang_kv5d import kernel_check
from sglang_kv5d import config, kernel_failures
from sglang_kv5d.activation import Kv5dNotReadyError
from sglang_kv5d.kernels import fp8_write
from tests.helpers.fake_aiter import fake_aiter, no_aiter  # noqa: F401  (fixtures)
from tests.helpers.pools import enable_5d, make_hybrid_pool, make_mha_pool

FP8 = torch.float8_e4m3fn
BF16 = torch.bfloat16


def compile_error():
    return CompilationError("def _write_kv_fp8_kernel(k_ptr):\n    pass\n", ast.parse("x").body[0],
                            "failed to legalize operation 'tt.store' (forced by the test)")


ERRORS = {
    "compile": (compile_error, "CompilationError: failed to legalize operation 'tt.store'"),
    "resources": (lambda: OutOfResources(300000, 65536, "shared memory"),
                  "OutOfResources: out of resource: shared memory, Required: 300000"),
    "driver": (lambda: RuntimeError("hipErrorInvalidImage: device kernel image is invalid\nmore detail"),
               "RuntimeError: hipErrorInvalidImage: device kernel image is invalid"),
}


class FailingLaunch:
    """Stands in for ``kernel[grid](...)``: every launch raises ``make()``."""

    def __init__(self, make):
        self.make = make
        self.attempts = 0

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.attempts += 1
            raise self.make()

        return launch


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    monkeypatch.delenv(config.ATTN_IMPL, raising=False)
    kernel_check.reset()
    attn.reset_state()
    yield
    kernel_check.reset()
    attn.reset_state()


@pytest.fixture
def overlay():
    st = sglang_kv5d.activate(patches=["fp8-kv-write"], strict=False)
    assert st.patch("fp8-kv-write").state in ("applied", "pending"), st
    yield
    sglang_kv5d.deactivate()


def _warnings(caplog, word="kernel"):
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and word in r.getMessage()]


def _inputs(T, H, D, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(T, H, D, generator=g) * 2).to(BF16), (torch.randn(T, H, D, generator=g) * 2).to(BF16)


def _sglang_write(factory, layer_id, loc, k, v, k_scale, v_scale):
    """SGLang's own set_kv_buffer (overlay off) on a twin pool."""
    sglang_kv5d.deactivate()
    try:
        twin = factory()
        twin.set_kv_buffer(types.SimpleNamespace(layer_id=layer_id), loc, k.clone(), v.clone(), k_scale, v_scale)
        return twin
    finally:
        sglang_kv5d.activate(patches=["fp8-kv-write"], strict=False)


def _mentions_facts(message, error_text, shapes=("bfloat16 -> float8_e4m3fn",)):
    assert "write_kv_fp8" in message, message
    for s in shapes:
        assert s in message, message
    assert f"Triton {triton.__version__}" in message, message
    assert "target Triton CPU interpreter" in message, message
    assert error_text in message, message
    assert "\n" not in message.split("): ", 1)[1], message  # the error's first line only
    assert "SGLang's own set_kv_buffer" in message, message


# ------------------------------------------------------------- the FP8 write


@pytest.mark.parametrize("layout", ["vectorized_5d", "nhd"])
@pytest.mark.parametrize("error", list(ERRORS))
def test_launch_failure_gives_sglangs_result_once(monkeypatch, overlay, caplog, layout, error):
    enable_5d(monkeypatch, layout)
    factory = lambda: make_mha_pool(dtype=FP8, page_size=16, head_num=2, head_dim=64, layer_num=2, size=128)  # noqa: E731
    pool = factory()  # the check before traffic ran with the real kernel (5D) and passed
    make, text = ERRORS[error]
    failing = FailingLaunch(make)
    monkeypatch.setattr(fp8_write.host, "WRITE_KERNEL", failing)
    layer = types.SimpleNamespace(layer_id=1)
    k, v = _inputs(20, 2, 64, seed=1)
    loc = torch.arange(30, 50)
    with caplog.at_level(logging.INFO, logger="sglang_kv5d"):
        assert pool.set_kv_buffer(layer, loc, k.clone(), v.clone(), 0.5, 2.0) is None  # no exception
        # a second call, another token count (another Triton variant): not tried again
        k2, v2 = _inputs(3, 2, 64, seed=2)
        pool.set_kv_buffer(layer, torch.tensor([60, 61, 100]), k2.clone(), v2.clone(), 0.5, 2.0)
    assert failing.attempts == 1
    warns = _warnings(caplog, "write_kv_fp8")
    assert len(warns) == 1, warns
    _mentions_facts(warns[0], text, shapes=("bfloat16 -> float8_e4m3fn", "2 heads", "head dims 64/64"))
    assert "at run time" in warns[0]
    twin = _sglang_write(factory, 1, loc, k, v, 0.5, 2.0)
    twin.set_kv_buffer(layer, torch.tensor([60, 61, 100]), k2.clone(), v2.clone(), 0.5, 2.0)
    for mine, theirs in ((pool.k_buffer, twin.k_buffer), (pool.v_buffer, twin.v_buffer)):
        assert torch.equal(mine[1], theirs[1])  # SGLang's own bytes
        assert torch.equal(mine[0], theirs[0])
    (key, reason), = kernel_check.failures().items()
    assert key[0] == "write_kv_fp8" and key[1].layout == ("5d" if layout == "vectorized_5d" else "nhd")
    assert reason.startswith(text.split(":")[0])


def test_hybrid_pool_falls_back_through_its_inner_pool(monkeypatch, overlay, caplog):
    enable_5d(monkeypatch)
    factory = lambda: make_hybrid_pool(dtype=FP8, page_size=16, head_num=1, head_dim=64)  # noqa: E731
    pool = factory()
    failing = FailingLaunch(compile_error)
    monkeypatch.setattr(fp8_write.host, "WRITE_KERNEL", failing)
    k, v = _inputs(17, 1, 64, seed=3)
    loc = torch.arange(16, 33)
    with caplog.at_level(logging.WARNING, logger="sglang_kv5d"):
        pool.set_kv_buffer(types.SimpleNamespace(layer_id=7), loc, k.clone(), v.clone(), 1.0, 1.0)
        pool.set_kv_buffer(types.SimpleNamespace(layer_id=3), loc, k.clone(), v.clone(), 1.0, 1.0)
    assert failing.attempts == 1 and len(_warnings(caplog, "write_kv_fp8")) == 1
    twin = _sglang_write(factory, 7, loc, k, v, 1.0, 1.0)
    assert torch.equal(pool.full_kv_pool.k_buffer[1], twin.full_kv_pool.k_buffer[1])
    assert torch.equal(pool.full_kv_pool.v_buffer[1], twin.full_kv_pool.v_buffer[1])


def test_validation_errors_are_not_kernel_failures(monkeypatch, overlay, caplog):
    """An input the host check refuses (ValueError: a non-contiguous head dim)
    goes to SGLang's write with one warning, the kernel is not marked bad, and
    a good call afterwards takes the kernel. (A refused scale is not handed
    over: tests/test_fp8_scales.py.)"""
    enable_5d(monkeypatch)
    pool = make_mha_pool(dtype=FP8, page_size=16, head_num=1, head_dim=64, layer_num=1, size=64)
    calls = []
    real = fp8_write.WRITE_KERNEL

    class Counting:
        def __getitem__(self, grid):
            calls.append(grid)
            return real[grid]

    monkeypatch.setattr(fp8_write.host, "WRITE_KERNEL", Counting())
    k, v = _inputs(4, 1, 64, seed=4)
    layer = types.SimpleNamespace(layer_id=0)
    strided = torch.empty(4, 1, 128, dtype=k.dtype)[:, :, ::2]
    strided.copy_(k)
    with caplog.at_level(logging.WARNING, logger="sglang_kv5d"):
        pool.set_kv_buffer(layer, torch.arange(4), strided, v.clone(), 1.0, 1.0)
    assert calls == [] and kernel_check.failures() == {}
    warns = _warnings(caplog, "not taken")
    assert len(warns) == 1 and "head dim must be contiguous" in warns[0], warns
    pool.set_kv_buffer(layer, torch.arange(4, 8), k.clone(), v.clone(), 1.0, 1.0)
    assert len(calls) == 1


# ---------------------------------------------------- the check before traffic


def test_pool_whose_kernel_cannot_compile_logs_the_fallback_at_creation(monkeypatch, overlay, caplog):
    enable_5d(monkeypatch)
    failing = FailingLaunch(compile_error)
    monkeypatch.setattr(fp8_write.host, "WRITE_KERNEL", failing)
    factory = lambda: make_mha_pool(dtype=FP8, page_size=16, head_num=2, head_dim=128, layer_num=1, size=64)  # noqa: E731
    with caplog.at_level(logging.WARNING, logger="sglang_kv5d"):
        pool = factory()
        assert failing.attempts == 1  # at creation, before any write
        warns = _warnings(caplog, "write_kv_fp8")
        assert len(warns) == 1, warns
        _mentions_facts(warns[0], ERRORS["compile"][1], shapes=("bfloat16 -> float8_e4m3fn", "head dims 128/128",
                                                                   "page 16", "5D cache"))
        assert "in the check before traffic" in warns[0]
        k, v = _inputs(5, 2, 128, seed=5)
        loc = torch.tensor([1, 2, 3, 40, 41])
        pool.set_kv_buffer(types.SimpleNamespace(layer_id=0), loc, k.clone(), v.clone(), 1.0, 1.0)
    assert failing.attempts == 1  # the write went to SGLang without trying the kernel
    assert len(_warnings(caplog, "write_kv_fp8")) == 1
    twin = _sglang_write(factory, 0, loc, k, v, 1.0, 1.0)
    assert torch.equal(pool.k_buffer[0], twin.k_buffer[0]) and torch.equal(pool.v_buffer[0], twin.v_buffer[0])
    (result,) = [r for r in kernel_check.check_results().values()]
    assert not result.ok and result.variants == (1,) and result.error.startswith("CompilationError")


def test_check_runs_once_per_configuration_and_states_its_cost(monkeypatch, overlay, caplog):
    enable_5d(monkeypatch)
    attempts = []
    real = fp8_write.WRITE_KERNEL

    class Counting:
        def __getitem__(self, grid):
            attempts.append(grid)
            return real[grid]

    monkeypatch.setattr(fp8_write.host, "WRITE_KERNEL", Counting())
    with caplog.at_level(logging.INFO, logger="sglang_kv5d"):
        make_mha_pool(dtype=FP8, page_size=16, head_num=1, head_dim=64, layer_num=1, size=64)
        make_mha_pool(dtype=FP8, page_size=16, head_num=1, head_dim=64, layer_num=3, size=256)  # same shapes
        make_mha_pool(dtype=torch.bfloat16, page_size=16, head_num=1, head_dim=64, layer_num=1, size=64)  # no fp8
    assert len(attempts) == 1
    infos = [r.getMessage() for r in caplog.records if "kernel check" in r.getMessage()]
    assert len(infos) == 1 and "write_kv_fp8 ran for" in infos[0] and " s (Triton " in infos[0], infos


def test_no_check_without_5d(monkeypatch, overlay):
    enable_5d(monkeypatch, "nhd")
    failing = FailingLaunch(compile_error)
    monkeypatch.setattr(fp8_write.host, "WRITE_KERNEL", failing)
    make_mha_pool(dtype=FP8, page_size=16, head_num=1, head_dim=64, layer_num=1, size=64)
    assert failing.attempts == 0 and kernel_check.failures() == {}


def test_check_fp8_write_pure_function_skips_oversized_scratch():
    r = kernel_check.check_fp8_write(in_dtype=BF16, fp8_dtype=FP8, cache_dtype=torch.uint8, heads=1, head_dim=32,
                                     v_head_dim=32, page=16, layout_5d=True, device="cpu",
                                     token_counts=(2, 1 << 30))
    assert r.ok and r.variants == (2,) and r.error is None and r.seconds >= 0
    assert kernel_check.check_fp8_write(in_dtype=BF16, fp8_dtype=FP8, cache_dtype=torch.uint8, heads=1,
                                        head_dim=32, v_head_dim=32, page=16, layout_5d=True, device="cpu") is r


# ------------------------------------------------ portable attention kernels


def _failing_kernel(make, calls):
    def kernel(*args, **kwargs):
        calls.append(1)
        raise make()

    return kernel


@pytest.mark.parametrize("fn", ["decode", "extend"])
def test_portable_failure_falls_back_to_aiter_once(monkeypatch, fake_aiter, caplog, fn):
    from tests.test_attention_dispatch import build, close, run_decode, run_extend

    monkeypatch.setenv(config.ATTN_IMPL, "triton")  # the portable path first
    calls = []
    monkeypatch.setitem(vars(kernels), f"{fn}_attention_5d", _failing_kernel(ERRORS["resources"][0], calls))
    s = build(monkeypatch, mode=fn, prefix=(2, 5, 1) if fn == "extend" else None)
    with caplog.at_level(logging.WARNING, logger="sglang_kv5d"):
        out1 = run_decode(s) if fn == "decode" else run_extend(s)
        out2 = run_decode(s) if fn == "decode" else run_extend(s)
    assert len(calls) == 1  # remembered: not tried again
    aiter_fn = "pa_decode_gluon" if fn == "decode" else "mha_batch_prefill_func"
    assert len(fake_aiter._fake.calls(aiter_fn)) == 2
    close(out1, s.reference())
    close(out2, s.reference())
    warns = _warnings(caplog, f"{fn}_attention_5d")
    assert len(warns) == 1, warns
    w = warns[0]
    assert "OutOfResources: out of resource: shared memory" in w and f"Triton {triton.__version__}" in w
    assert "aiter serves it" in w and "kv bfloat16" in w and "page 16" in w, w


def test_portable_failure_without_aiter_raises_not_ready(monkeypatch, no_aiter, caplog):
    from tests.test_attention_dispatch import build, run_decode

    calls = []
    monkeypatch.setitem(vars(kernels), "decode_attention_5d", _failing_kernel(compile_error, calls))
    s = build(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="sglang_kv5d"):
        with pytest.raises(Kv5dNotReadyError) as info:
            run_decode(s)
        with pytest.raises(Kv5dNotReadyError):
            run_decode(s)
    assert len(calls) == 1
    msg = str(info.value)
    assert "decode_attention_5d" in msg and "CompilationError: failed to legalize" in msg, msg
    assert "aiter is not importable" in msg and "Fix:" in msg and "SGLANG_AITER_KV_CACHE_LAYOUT" in msg, msg
    assert isinstance(info.value.__cause__, CompilationError)
    assert len(_warnings(caplog, "decode_attention_5d")) == 1


def test_portable_validation_errors_propagate(monkeypatch, fake_aiter):
    """TypeError / ValueError from the overlay's host checks are not kernel failures."""
    from tests.test_attention_dispatch import build, run_decode

    monkeypatch.setenv(config.ATTN_IMPL, "triton")

    def refuses(*args, **kwargs):
        # a host check of the overlay's own code raises (here: the FP8 write's scale check)
        fp8_write.host._check_scale("k_scale", 1e-40, torch.device("cpu"))

    monkeypatch.setitem(vars(kernels), "decode_attention_5d", refuses)
    s = build(monkeypatch)
    with pytest.raises(ValueError, match="k_scale"):
        run_decode(s)
    assert kernel_check.failures() == {} and not fake_aiter._fake.calls("pa_decode_gluon")


# ------------------------------------------ the attention decision at startup


def _result(ok, kernel="decode_attention_5d"):
    return kernel_check.CheckResult(kernel, None, ok, None if ok else "CompilationError: boom", 0.1, ())


@pytest.mark.parametrize("impl,aiter_problem,checks,path", [
    ("auto", None, None, "aiter"),                      # aiter serves: portable not checked
    ("aiter", None, None, "aiter"),
    ("triton", None, [True, True], "portable"),
    ("triton", None, [True, False], "aiter"),           # portable broken, aiter there
    ("auto", "aiter is not importable (ImportError: x)", [True, True], "portable"),
    ("auto", "aiter is not importable (ImportError: x)", [False, True], "none"),
])
def test_attention_startup_decision(impl, aiter_problem, checks, path):
    asked = []

    def check(fallback):
        asked.append(fallback)
        return [_result(ok) for ok in checks]

    d = kernel_check.attention_startup(impl=impl, aiter_problem=aiter_problem, check=check)
    assert d.path == path, d
    assert (asked == []) == (checks is None)
    if path == "none":
        assert "CompilationError: boom" in d.message and "aiter is not importable" in d.message
        assert "Fix:" in d.message and "SGLANG_AITER_KV_CACHE_LAYOUT" in d.message


@pytest.mark.parametrize("strict", [True, False])
def test_backend_without_a_working_attention_path_refuses_to_start(monkeypatch, no_aiter, caplog, strict):
    """A real AiterAttnBackend over a 5D pool, no aiter, portable decode kernel
    failing: strict mode raises Kv5dNotReadyError when the backend is built
    (before any traffic); non-strict builds it and logs the same message."""
    import importlib

    from tests.helpers.backend import make_aiter_backend

    st = sglang_kv5d.activate(strict=strict)
    try:
        importlib.import_module("sglang.srt.layers.attention.aiter_backend")
        assert sglang_kv5d.status().patch("attention-dispatch-5d").state == "applied", st
        enable_5d(monkeypatch)
        pool = make_mha_pool(dtype=BF16, page_size=16, head_num=1, head_dim=64, layer_num=1, size=64)
        calls = []
        monkeypatch.setitem(vars(kernels), "decode_attention_5d", _failing_kernel(compile_error, calls))
        monkeypatch.setitem(vars(kernels), "extend_attention_5d", lambda *a, **kw: None)
        with caplog.at_level(logging.WARNING, logger="sglang_kv5d"):
            if strict:
                with pytest.raises(Kv5dNotReadyError) as info:
                    make_aiter_backend(pool, num_q_heads=4, num_kv_heads=1, head_dim=64)
                msg = str(info.value)
            else:
                backend = make_aiter_backend(pool, num_q_heads=4, num_kv_heads=1, head_dim=64)
                assert backend.kv_cache_is_vectorized_5d is True
                (msg,) = _warnings(caplog, "no working 5D attention path")
                assert "SGLANG_KV5D_STRICT=0" in msg
        assert len(calls) == 1
        assert "no working 5D attention path" in msg and "decode_attention_5d" in msg and "Fix:" in msg, msg
        assert "CompilationError: failed to legalize" in msg and "aiter is not importable" in msg, msg
    finally:
        sglang_kv5d.deactivate()


def test_backend_with_working_kernels_logs_the_path(monkeypatch, no_aiter, caplog):
    """The real portable kernels (interpreter) pass the check at backend build."""
    import importlib

    from tests.helpers.backend import make_aiter_backend

    sglang_kv5d.activate(strict=True)
    try:
        importlib.import_module("sglang.srt.layers.attention.aiter_backend")
        enable_5d(monkeypatch)
        pool = make_mha_pool(dtype=FP8, page_size=16, head_num=1, head_dim=64, layer_num=1, size=64)
        with caplog.at_level(logging.INFO, logger="sglang_kv5d"):
            make_aiter_backend(pool, num_q_heads=4, num_kv_heads=1, head_dim=64)
        msgs = [r.getMessage() for r in caplog.records]
        assert any("5D attention: the portable Triton kernels serve 5D attention" in m for m in msgs), msgs
        ran = sorted(r.kernel for r in kernel_check.check_results().values() if r.ok)
        assert ran == ["decode_attention_5d", "extend_attention_5d", "write_kv_fp8"], kernel_check.check_results()
        assert kernel_check.failures() == {}
    finally:
        sglang_kv5d.deactivate()


def test_first_failure_inside_a_capture_falls_back_and_says_so(monkeypatch, overlay, caplog):
    """No GPU here: the capture state is the one fact replaced (torch's
    is_current_stream_capturing, read through kernel_failures.capturing)."""
    enable_5d(monkeypatch)
    factory = lambda: make_mha_pool(dtype=FP8, page_size=16, head_num=1, head_dim=64, layer_num=1, size=64)  # noqa: E731
    pool = factory()
    failing = FailingLaunch(ERRORS["driver"][0])
    monkeypatch.setattr(fp8_write.host, "WRITE_KERNEL", failing)
    monkeypatch.setattr(kernel_failures, "capturing", lambda: True)
    k, v = _inputs(2, 1, 64, seed=6)
    loc = torch.tensor([7, 8])
    with caplog.at_level(logging.WARNING, logger="sglang_kv5d"):
        for _ in range(3):
            pool.set_kv_buffer(types.SimpleNamespace(layer_id=0), loc, k.clone(), v.clone(), 1.0, 1.0)
    assert failing.attempts == 1  # never retried, inside the capture or after it
    (w,) = _warnings(caplog, "write_kv_fp8")
    assert "at run time, inside a CUDA-graph capture" in w, w
    twin = _sglang_write(factory, 0, loc, k, v, 1.0, 1.0)
    assert torch.equal(pool.k_buffer[0], twin.k_buffer[0]) and torch.equal(pool.v_buffer[0], twin.v_buffer[0])


# ---------------------------------------------------------------------------
# the packed verify kernel of a speculative 5D target, checked at backend build


def _eagle():
    import importlib

    return importlib.import_module("sglang.srt.speculative.spec_info").SpeculativeAlgorithm.EAGLE


def _spec_target(monkeypatch, *, drafts=4):
    import importlib

    from tests.helpers.backend import make_aiter_backend

    for module in ("sglang.srt.mem_cache.kv_cache_configurator", "sglang.srt.layers.attention.aiter_backend"):
        importlib.import_module(module)  # a server has both loaded: draft-pool-nhd and target-verify-5d apply
    enable_5d(monkeypatch)
    pool = make_mha_pool(dtype=FP8, page_size=16, head_num=1, head_dim=64, layer_num=1, size=64)
    return make_aiter_backend(pool, num_q_heads=4, num_kv_heads=1, head_dim=64, spec_algorithm=_eagle(),
                              num_draft_tokens=drafts)


@pytest.mark.parametrize("aiter_present", [True, False])
def test_speculative_target_checks_the_verify_kernel_at_build(monkeypatch, request, caplog, aiter_present):
    """Real kernels (interpreter): the packed verify variant compiles and runs before traffic,
    also when aiter serves decode and extend (verify always runs the portable kernel)."""
    from tests.helpers.subproc import sglang_version
    from sglang_kv5d.versions import parse_version

    if parse_version(sglang_version()) < parse_version("0.5.23"):
        pytest.skip("target-verify-5d serves SGLang 0.5.23 (decode_uses_page_table)")
    request.getfixturevalue("fake_aiter" if aiter_present else "no_aiter")
    sglang_kv5d.activate(strict=True)
    try:
        with caplog.at_level(logging.INFO, logger="sglang_kv5d"):
            _spec_target(monkeypatch, drafts=4)
        verified = [r for (kernel, _), r in kernel_check.check_results().items() if kernel == kernel_check.VERIFY]
        assert len(verified) == 1 and verified[0].ok and verified[0].key[1] == 4, kernel_check.check_results()
        assert any("packed verify kernel ran" in r.getMessage() for r in caplog.records)
    finally:
        sglang_kv5d.deactivate()


@pytest.mark.parametrize("strict", [True, False])
def test_a_failing_verify_kernel_stops_the_speculative_target(monkeypatch, fake_aiter, caplog, strict):
    """aiter present (decode and extend served), the packed verify kernel failing: the backend refuses
    at build naming target-verify-5d and the kernel error; a target without speculative decoding is not affected."""
    from tests.helpers.subproc import sglang_version
    from sglang_kv5d.versions import parse_version

    if parse_version(sglang_version()) < parse_version("0.5.23"):
        pytest.skip("target-verify-5d serves SGLang 0.5.23 (decode_uses_page_table)")
    real = kernels.decode_attention_5d
    calls = []

    def decode(*args, queries_per_seq=1, **kwargs):
        if queries_per_seq > 1:
            calls.append(queries_per_seq)
            raise compile_error()
        return real(*args, **kwargs)

    monkeypatch.setitem(vars(kernels), "decode_attention_5d", decode)
    sglang_kv5d.activate(strict=strict)
    try:
        with caplog.at_level(logging.WARNING, logger="sglang_kv5d"):
            if strict:
                with pytest.raises(Kv5dNotReadyError) as info:
                    _spec_target(monkeypatch)
                msg = str(info.value)
            else:
                _spec_target(monkeypatch)
                (msg,) = _warnings(caplog, "target-verify-5d cannot serve")
        assert calls == [4]
        assert "target-verify-5d cannot serve speculative verify" in msg and "no fallback" in msg, msg
        assert "CompilationError: failed to legalize" in msg and "Fix:" in msg, msg
        kernel_check.reset()
        from tests.helpers.backend import make_aiter_backend

        pool = make_mha_pool(dtype=FP8, page_size=16, head_num=1, head_dim=64, layer_num=1, size=64)
        make_aiter_backend(pool, num_q_heads=4, num_kv_heads=1, head_dim=64)  # no speculative decoding: no check
        assert calls == [4]
    finally:
        sglang_kv5d.deactivate()
