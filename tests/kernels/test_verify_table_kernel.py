"""The one-launch verify page-table kernel (sglang_kv5d/kernels/verify_table.py)
equals the torch builder bit for bit, under the Triton CPU interpreter.

Every case draws fresh random data, poisons the output buffers (each a view
into a larger buffer, so the columns past the width and the rows past ``bs``
are there to be trampled), runs the kernel and the torch builder on equal
copies and compares the whole buffers. Hostile metadata (sequence lengths
past every row, negative or at the integer limits; request indices outside
``req_to_token``; slots negative, past the SWA mapping or at the limits) is
mixed into every case. Then: views, refusals, and the dispatch in
``build_verify_page_tables`` (kernel on a GPU device, torch fallback once a
launch fails, logged once).
"""

from __future__ import annotations

import logging

import pytest
import torch

from sglang_kv5d import kernel_check
from sglang_kv5d.kernels import verify_table as vt
from sglang_kv5d.platform import INTERPRETER, known_target
from sglang_kv5d.speculative import verify_tables
from sglang_kv5d.speculative.verify_tables import build_verify_page_tables_torch

POISON = -7
I32, I64 = torch.iinfo(torch.int32), torch.iinfo(torch.int64)
# the default configuration, one chunk of 16 columns per program, and
# 8-column chunks on 2 programs per row (the grid-stride loop)
CONFIGS = (None, {"block": 16}, {"block": 8, "programs": 2})
WIDTHS = (1, 3, 16, 17, 40, 65)


def _hostile(n, dtype, gen, lo, hi, extremes):
    """``n`` values of ``dtype``: most uniform in [lo, hi), some at ``extremes``."""
    v = torch.randint(lo, hi, (n,), generator=gen, dtype=torch.int64)
    pick = torch.rand(n, generator=gen) < 0.25
    ext = torch.tensor(extremes, dtype=torch.int64)
    v = torch.where(pick, ext[torch.randint(0, len(ext), (n,), generator=gen)], v)
    return v.to(dtype)


def _limits(dtype):
    info = torch.iinfo(dtype)
    return [info.min, info.max, info.min + 1, info.max - 1, -1]


def _data(gen, bs, width, page, dtype, swa):
    rows = int(torch.randint(1, 12, (), generator=gen))
    # rows name fewer pages than the width, about as many, or more
    cols = max(1, int(torch.randint(max(1, (width - 3) * page), (width + 3) * page + 1, (), generator=gen)))
    n_map = int(torch.randint(1, 4 * rows * cols + 2, (), generator=gen))
    r2t = _hostile(rows * cols, dtype, gen, -page, n_map + page, _limits(dtype)).reshape(rows, cols)
    rp = _hostile(bs, dtype, gen, -2, rows + 2, _limits(dtype))
    seq = _hostile(bs, dtype, gen, -2 * page, cols + 2 * page, _limits(dtype) + [cols - 1, cols, 0])
    mapping = _hostile(n_map, dtype, gen, -page, 8 * n_map, _limits(dtype)) if swa else None
    return r2t, rp, seq, mapping


def _buffers(bs, width, dtype, gen):
    """Poisoned ``(bs + extra, width)`` views of wider buffers (and their base)."""
    extra_rows, extra_cols = int(torch.randint(0, 3, (), generator=gen)), int(torch.randint(0, 3, (), generator=gen))
    base = torch.full((bs + extra_rows, width + extra_cols), POISON, dtype=dtype)
    return base, base[:, :width]


def _both(r2t, rp, seq, n, page, mapping, width, out_dtype, gen, cfg=None, **kw):
    """Run the kernel and the torch builder on equal poisoned buffers; return both bases."""
    bs = rp.shape[0]
    base_k, out_k = _buffers(bs, width, out_dtype, gen)
    base_t, out_t = base_k.clone(), None
    out_t = base_t[:, :width]
    swa_k = swa_t = sbase_k = sbase_t = None
    if mapping is not None:
        sbase_k = torch.full_like(base_k, POISON - 1)
        sbase_t = sbase_k.clone()
        swa_k, swa_t = sbase_k[:, :width], sbase_t[:, :width]
    got = vt.verify_page_tables(r2t, rp, seq, n, page, out_k, mapping, swa_k, _config=cfg, **kw)
    exp = build_verify_page_tables_torch(r2t, rp, seq, n, page, out_t, mapping, swa_t)
    assert got[0].data_ptr() == out_k.data_ptr() and got[0].shape == (bs, width)
    assert (got[1] is None) == (mapping is None)
    assert torch.equal(base_k, base_t), (cfg, base_k, base_t)
    if mapping is not None:
        assert torch.equal(sbase_k, sbase_t), (cfg, sbase_k, sbase_t)
    assert (base_k[bs:] == POISON).all() and (base_k[:, width:] == POISON).all()
    return exp


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64], ids=["int32", "int64"])
@pytest.mark.parametrize("swa", [False, True], ids=["full", "swa"])
@pytest.mark.parametrize("page", [16, 64])
@pytest.mark.parametrize("bs", range(1, 10))
def test_kernel_equals_the_torch_builder(bs, page, swa, dtype):
    gen = torch.Generator().manual_seed(1000 * bs + 10 * page + 2 * swa + (dtype == torch.int64))
    for width in WIDTHS:
        for cfg in CONFIGS:
            n = int(torch.randint(1, 20, (), generator=gen))
            r2t, rp, seq, mapping = _data(gen, bs, width, page, dtype, swa)
            out_dtype = torch.int32 if torch.rand((), generator=gen) < 0.7 else torch.int64
            _both(r2t, rp, seq, n, page, mapping, width, out_dtype, gen, cfg)


@pytest.mark.parametrize("swa", [False, True], ids=["full", "swa"])
def test_mixed_index_dtypes_and_serving_shapes(swa):
    """req_to_token int32 (SGLang's pool), indices and lengths int64 or int32,
    the mapping int64; rows of prefix + drafts at the context limit."""
    gen = torch.Generator().manual_seed(7 + swa)
    page, n, ctx, bs = 16, 4, 256, 5
    width = verify_tables.verify_table_width(ctx, n, page)
    for idx_dtype in (torch.int64, torch.int32):
        r2t = torch.randint(page, 4096, (8, ctx + 4 + n), generator=gen, dtype=torch.int32)  # block ids >= 1
        rp = torch.randperm(8, generator=gen)[:bs].to(idx_dtype)
        seq = torch.tensor([ctx - 1, 0, 5, ctx - 1 - n, ctx - 1], dtype=idx_dtype)
        mapping = torch.randperm(4096, generator=gen) if swa else None
        exp = _both(r2t, rp, seq, n, page, mapping, width, torch.int32, gen)
        assert exp[0][0].ne(0).sum() == width  # at the limit the row is full, and no wider


@pytest.mark.parametrize("n,page", [(2, 1), (0, 16), (-40, 16), (5, 3), (7, 48)])
def test_unusual_pages_and_draft_counts(n, page):
    """page 1, non-power-of-two pages, no drafts, a negative draft count."""
    gen = torch.Generator().manual_seed(page * 100 + n + 50)
    for width in (1, 9, 33):
        r2t, rp, seq, mapping = _data(gen, 6, width, page, torch.int64, True)
        _both(r2t, rp, seq, n, page, mapping, width, torch.int32, gen, {"block": 8})


def test_integer_limits_exactly():
    """Floor division at the int64 limits, sums that wrap, clamps at both ends."""
    r2t = torch.tensor([[I64.min, I64.max, -1, -16, -17, 15, 16, 0]] * 2)
    rp = torch.tensor([1, I64.min, I64.max, 0])
    seq = torch.tensor([I64.max, I64.min, 100, I64.max - 20])
    mapping = torch.tensor([I64.min, -1, I64.max, 5] + [3] * 30)
    for page in (1, 16):
        for out_dtype in (torch.int32, torch.int64):
            _both(r2t, rp, seq, 4, page, mapping, 9, out_dtype, torch.Generator().manual_seed(page))


def test_views_of_req_to_token_and_metadata():
    """Transposed, strided, expanded req_to_token; strided indices and lengths."""
    gen = torch.Generator().manual_seed(21)
    page, width, bs = 16, 12, 7
    big = torch.randint(0, 5000, (3 * 200, 24), generator=gen, dtype=torch.int32)
    views = {
        "transposed": torch.randint(0, 5000, (200, 9), generator=gen, dtype=torch.int32).t(),
        "strided": big[1::3, ::2],  # (200, 12), row stride 72, column stride 2
        "expanded rows": torch.randint(0, 5000, (1, 180), generator=gen, dtype=torch.int32).expand(9, 180),
        "column slice": big[:9, 3:],
    }
    meta = torch.randint(-3, 12, (3 * bs,), generator=gen)
    rp, seq = meta[::3], torch.randint(-20, 220, (2 * bs,), generator=gen)[1::2]
    mapping = torch.randint(0, 9000, (2 * 6000,), generator=gen)[::2]
    for name, r2t in views.items():
        assert not r2t.is_contiguous(), name
        for m in (None, mapping):
            _both(r2t, rp, seq, 3, page, m, width, torch.int32, gen, {"block": 8})


def test_column_major_table_is_taken():
    gen = torch.Generator().manual_seed(5)
    r2t = torch.randint(0, 900, (4, 100), generator=gen, dtype=torch.int32)
    rp, seq = torch.tensor([3, 0, 1]), torch.tensor([99, 3, 40])
    out = torch.full((7, 3), POISON, dtype=torch.int32).t()  # (3, 7) column-major
    ref = torch.full((3, 7), POISON, dtype=torch.int32)
    vt.verify_page_tables(r2t, rp, seq, 2, 16, out, _config={"block": 4})
    build_verify_page_tables_torch(r2t, rp, seq, 2, 16, ref)
    assert torch.equal(out, ref)


def test_refusals_are_clear_and_write_nothing():
    r2t = torch.zeros(2, 40, dtype=torch.int32)
    rp, seq = torch.tensor([0, 1]), torch.tensor([5, 6])
    out = torch.full((2, 4), POISON, dtype=torch.int32)
    cases = [
        (dict(seq_lens=seq.float()), "seq_lens is torch.float32"),
        (dict(req_to_token=r2t.to(torch.int16)), "req_to_token is torch.int16"),
        (dict(out=out.to(torch.int16)), "out is torch.int16"),
        (dict(out=torch.full((1, 4), POISON, dtype=torch.int32).expand(2, 4)), "share memory"),
        (dict(out=torch.full((2, 1), POISON, dtype=torch.int32).expand(2, 4)), "share memory"),
        (dict(swa_mapping=torch.arange(50, dtype=torch.int16), swa_out=out.clone()), "swa_mapping is torch.int16"),
    ]
    for change, message in cases:
        args = dict(req_to_token=r2t, req_pool_indices=rp, seq_lens=seq, draft_num=2, page_size=16, out=out)
        args.update(change)
        with pytest.raises(ValueError, match=message):
            vt.verify_page_tables(**args)
        assert (out == POISON).all()
    shape_errors = [
        (dict(seq_lens=torch.tensor([5])), "does not match req_pool_indices"),
        (dict(req_to_token=torch.zeros(0, 40, dtype=torch.int32)), "is empty"),
        (dict(req_to_token=torch.zeros(40, dtype=torch.int32)), "must be 2-D"),
        (dict(page_size=0), "page_size must be in"),
        (dict(out=out[:1]), "fewer than 2 rows"),
        (dict(swa_mapping=torch.zeros(0, dtype=torch.int64), swa_out=out.clone()), "swa_mapping is empty"),
        (dict(swa_mapping=torch.zeros(3, 3, dtype=torch.int64), swa_out=out.clone()), "must be 1-D"),
        (dict(draft_num=2**63), "is not an int64"),
    ]
    for change, message in shape_errors:
        args = dict(req_to_token=r2t, req_pool_indices=rp, seq_lens=seq, draft_num=2, page_size=16, out=out)
        args.update(change)
        for fn in (vt.verify_page_tables, build_verify_page_tables_torch, verify_tables.build_verify_page_tables):
            with pytest.raises(ValueError, match=message):
                fn(**args)
        assert (out == POISON).all()


def test_nothing_to_write_launches_nothing(monkeypatch):
    monkeypatch.setattr(vt, "_verify_page_table_kernel", None)  # a launch would raise TypeError
    r2t = torch.zeros(0, 0, dtype=torch.int32)  # empty is fine when nothing is read
    out = torch.full((3, 0), POISON, dtype=torch.int32)
    t, s = vt.verify_page_tables(r2t, torch.zeros(2, dtype=torch.int64), torch.zeros(2, dtype=torch.int64), 4, 16, out)
    assert t.shape == (2, 0) and s is None
    out = torch.full((3, 5), POISON, dtype=torch.int32)
    t, _ = vt.verify_page_tables(r2t, torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64), 4, 16, out)
    assert t.shape == (0, 5) and (out == POISON).all()


def test_launch_config_per_target():
    assert vt.launch_config(4097, known_target("gfx942")) == (1024, 4)
    assert vt.launch_config(4097, known_target("sm_90")) == (1024, 4)
    assert vt.launch_config(65, known_target("gfx950")) == (128, 1)
    assert vt.launch_config(513, known_target("sm_90")) == (1024, 4)
    assert vt.launch_config(1, known_target("gfx942")) == (64, 1)
    assert vt.launch_config(1, INTERPRETER) == (32, 1)
    with pytest.raises(ValueError, match="powers of two"):
        vt.verify_page_tables(torch.zeros(1, 16, dtype=torch.int32), torch.zeros(1, dtype=torch.int64),
                              torch.zeros(1, dtype=torch.int64), 1, 16, torch.zeros(1, 2, dtype=torch.int32),
                              _config={"block": 6})


# ---------------------------------------------------------------------------
# build_verify_page_tables: the kernel on a GPU device, the torch path after a failure


@pytest.fixture
def gpu_dispatch(monkeypatch):
    """CPU tensors dispatched as if on a GPU (the kernel runs in the interpreter)."""
    kernel_check.reset()
    monkeypatch.setattr(verify_tables, "_on_gpu", lambda out: True)
    yield
    kernel_check.reset()


class _Counting:
    def __init__(self, fn, make_error=None):
        self.fn, self.make_error, self.calls = fn, make_error, 0

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.calls += 1
            if self.make_error is not None:
                raise self.make_error()
            return self.fn[grid](*args, **kwargs)

        return launch


def _serving_args(gen, swa):
    r2t = torch.randint(0, 4096, (6, 90), generator=gen, dtype=torch.int32)
    rp, seq = torch.tensor([5, 0, -3, 99]), torch.tensor([89, 0, 17, I64.max])
    mapping = torch.randint(-5, 4096, (4096,), generator=gen) if swa else None
    return r2t, rp, seq, mapping


@pytest.mark.parametrize("swa", [False, True], ids=["full", "swa"])
def test_gpu_device_takes_the_kernel(monkeypatch, gpu_dispatch, swa):
    counting = _Counting(vt._verify_page_table_kernel)
    monkeypatch.setattr(vt, "_verify_page_table_kernel", counting)
    r2t, rp, seq, mapping = _serving_args(torch.Generator().manual_seed(3), swa)
    out = torch.full((6, 7), POISON, dtype=torch.int32)
    swa_out = None if mapping is None else out.clone()
    ref, ref_swa = out.clone(), None if swa_out is None else swa_out.clone()
    t, s = verify_tables.build_verify_page_tables(r2t, rp, seq, 4, 16, out, swa_mapping=mapping, swa_out=swa_out)
    build_verify_page_tables_torch(r2t, rp, seq, 4, 16, ref, mapping, ref_swa)
    assert counting.calls == 1 and t.data_ptr() == out.data_ptr()
    assert torch.equal(out, ref) and (s is None or torch.equal(swa_out, ref_swa))


def test_cpu_device_takes_the_torch_builder(monkeypatch):
    counting = _Counting(vt._verify_page_table_kernel)
    monkeypatch.setattr(vt, "_verify_page_table_kernel", counting)
    r2t, rp, seq, _ = _serving_args(torch.Generator().manual_seed(4), False)
    out = torch.full((6, 7), POISON, dtype=torch.int32)
    verify_tables.build_verify_page_tables(r2t, rp, seq, 4, 16, out)
    assert counting.calls == 0 and (out[4:] == POISON).all() and (out[:4] != POISON).all()


def test_refused_tensors_take_the_torch_builder_without_a_failure(monkeypatch, gpu_dispatch):
    counting = _Counting(vt._verify_page_table_kernel)
    monkeypatch.setattr(vt, "_verify_page_table_kernel", counting)
    r2t, rp, seq, _ = _serving_args(torch.Generator().manual_seed(6), False)
    out = torch.full((6, 7), POISON, dtype=torch.int32)
    ref = out.clone()
    verify_tables.build_verify_page_tables(r2t.to(torch.int16), rp, seq, 4, 16, out)
    build_verify_page_tables_torch(r2t.to(torch.int16), rp, seq, 4, 16, ref)
    assert counting.calls == 0 and torch.equal(out, ref) and not kernel_check.failures()


@pytest.mark.parametrize("error", [
    lambda: RuntimeError("hipErrorInvalidImage: device kernel image is invalid\nmore"),
    lambda: __import__("triton").runtime.errors.OutOfResources(70000, 65536, "shared memory"),
], ids=["driver", "resources"])
def test_a_failing_kernel_falls_back_once_and_logs_once(monkeypatch, gpu_dispatch, caplog, error):
    failing = _Counting(vt._verify_page_table_kernel, error)
    monkeypatch.setattr(vt, "_verify_page_table_kernel", failing)
    gen = torch.Generator().manual_seed(8)
    caplog.set_level(logging.WARNING, logger="sglang_kv5d")
    for swa in (True, True, True):
        r2t, rp, seq, mapping = _serving_args(gen, swa)
        out = torch.full((6, 7), POISON, dtype=torch.int32)
        swa_out = out.clone()
        ref, ref_swa = out.clone(), out.clone()
        verify_tables.build_verify_page_tables(r2t, rp, seq, 4, 16, out, swa_mapping=mapping, swa_out=swa_out)
        build_verify_page_tables_torch(r2t, rp, seq, 4, 16, ref, mapping, ref_swa)
        assert torch.equal(out, ref) and torch.equal(swa_out, ref_swa)
    assert failing.calls == 1  # known bad after the first failure: not tried again
    (kernel, key), = kernel_check.failures()
    assert kernel == verify_tables.KERNEL_NAME and key.page == 16 and key.swa_mapping == "int64"
    warnings = [r for r in caplog.records if "verify_page_tables" in r.getMessage()]
    assert len(warnings) == 1 and "torch verify-table builder" in warnings[0].getMessage()
    # another configuration (no SWA) is its own key: tried, fails, recorded once more
    r2t, rp, seq, _ = _serving_args(gen, False)
    verify_tables.build_verify_page_tables(r2t, rp, seq, 4, 16, torch.zeros(4, 7, dtype=torch.int32))
    assert failing.calls == 2 and len(kernel_check.failures()) == 2


def test_host_validation_errors_are_not_kernel_failures(gpu_dispatch):
    with pytest.raises(ValueError, match="does not match"):
        verify_tables.build_verify_page_tables(torch.zeros(2, 40, dtype=torch.int32), torch.tensor([0, 1]),
                                               torch.tensor([3]), 2, 16, torch.zeros(2, 4, dtype=torch.int32))
    assert not kernel_check.failures()


def test_a_kernel_module_that_does_not_import_is_recorded_once(monkeypatch, gpu_dispatch, caplog):
    import builtins

    real_import = builtins.__import__

    def no_kernel(name, globals=None, locals=None, fromlist=(), level=0):
        if fromlist and "verify_table" in fromlist and name.endswith("kernels"):
            raise ImportError("triton is broken here")
        return real_import(name, globals, locals, fromlist, level)

    monkeypatch.setattr(verify_tables, "_kernel_module", None)
    monkeypatch.setattr(builtins, "__import__", no_kernel)
    caplog.set_level(logging.WARNING, logger="sglang_kv5d")
    r2t, rp, seq, _ = _serving_args(torch.Generator().manual_seed(9), False)
    for _ in range(2):
        out = torch.full((4, 7), POISON, dtype=torch.int32)
        verify_tables.build_verify_page_tables(r2t, rp, seq, 4, 16, out)
        ref = torch.full((4, 7), POISON, dtype=torch.int32)
        build_verify_page_tables_torch(r2t, rp, seq, 4, 16, ref)
        assert torch.equal(out, ref)
    assert list(kernel_check.failures()) == [(verify_tables.KERNEL_NAME, ("import",))]
    assert len([r for r in caplog.records if "at import" in r.getMessage()]) == 1
