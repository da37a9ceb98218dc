"""prefix-valid-write-5d on real SGLang pools (CPU, Triton interpreter).

``MHATokenToKVPool.set_kv_buffer_prefix_valid`` takes its tiled Triton path
when ``memory_pool._is_cuda or memory_pool._is_hip``; the tests force
``_is_hip`` so that path (what runs on ROCm) runs under the interpreter.

Every layer buffer is replaced by a view at the start of a larger allocation
filled with a poison byte, so a write outside the buffer lands in memory the
test owns and can read back (the guard), and an untouched slot still reads as
poison.

(a) without the patch, a 5D pool: each committed row's bytes land at
    ``loc * stride(0)`` (a page per slot), mostly past the buffer's end, and
    the addressed slots are never written;
(b) with the patch, a 5D pool gathered back to NHD equals SGLang's own
    prefix-valid write on an NHD pool of the same data byte for byte (bf16,
    float8_e4m3fn, float8_e4m3fnuz; ragged lengths, page crossings, zero
    committed rows), the guards and every other byte stay poison, the inputs
    are not modified; with a scale that is not a power of two the fp8 cache
    equals what set_kv_buffer writes for the committed tokens;
(c) an NHD pool reaches the original unchanged.
"""

from __future__ import annotations

import importlib
import types

import pytest
import torch

import sglang_kv5d
from sglang_kv5d import kernel_check
from sglang_kv5d import prefix_valid as core
from sglang_kv5d.kernels import fp8_write
from sglang_kv5d.kernels.fp8_reference import fp8_step_distance, quantize_fp8_fp32
from sglang_kv5d.surface import SURFACES
from tests.helpers.pools import enable_5d, make_mha_pool, memory_pool_module

POISON = 0xA5
H, D, PAGE, SIZE = 2, 64, 16, 64  # 5 blocks of 16 slots (slot 0..79)
PATCHES = ["fp8-kv-write", "prefix-valid-write-5d"]

mp = memory_pool_module()
if not hasattr(mp.MHATokenToKVPool, "set_kv_buffer_prefix_valid"):
    pytest.skip("this SGLang has no MHATokenToKVPool.set_kv_buffer_prefix_valid (from 0.5.16)",
                allow_module_level=True)

FP8_DTYPES = [d for d in (getattr(torch, "float8_e4m3fn", None), getattr(torch, "float8_e4m3fnuz", None)) if d]


def _sglang_gather():
    """SGLang's own 5D -> linear gather (an independent reader of the layout)."""
    for target in SURFACES["kernels.launch_gather_shuffle_5d_to_linear"].targets:
        module, _, name = target.partition(":")
        try:
            return getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            continue
    pytest.fail("SGLang's launch_gather_shuffle_5d_to_linear is not importable")


# --------------------------------------------------------------------------- #
# Pools with poisoned guards                                                   #
# --------------------------------------------------------------------------- #


class Guarded:
    """A pool whose layer buffers are views into poisoned, larger allocations."""

    def __init__(self, pool, guard_bytes):
        self.pool = pool
        self.alloc = {}
        for name in ("k_buffer", "v_buffer"):
            bufs = getattr(pool, name)
            for i, buf in enumerate(bufs):
                nbytes = buf.numel() * buf.element_size()
                alloc = torch.full((nbytes + guard_bytes,), POISON, dtype=torch.uint8)
                bufs[i] = alloc[:nbytes].view(buf.dtype).view(buf.shape)
                self.alloc[(name, i)] = (alloc, nbytes)

    def bytes(self, name, i):
        return self.alloc[(name, i)][0]

    def inside(self, name, i):
        alloc, n = self.alloc[(name, i)]
        return alloc[:n]

    def guard(self, name, i):
        alloc, n = self.alloc[(name, i)]
        return alloc[n:]


def _pool(layout, dtype, monkeypatch, guard_bytes):
    enable_5d(monkeypatch, layout)
    pool = make_mha_pool(dtype=dtype, page_size=PAGE, head_num=H, head_dim=D, layer_num=2, size=SIZE)
    assert pool.k_buffer[0].dim() == (5 if layout == "vectorized_5d" else 3)
    return Guarded(pool, guard_bytes)


def _layer(layer_id):
    return types.SimpleNamespace(layer_id=layer_id, k_scale=None, v_scale=None, k_scale_float=None,
                                 v_scale_float=None)


def _rows(B, W, seed, scale_hint):
    g = torch.Generator().manual_seed(seed)
    k = (torch.randn(B * W, H, D, generator=g) * scale_hint).to(torch.bfloat16)
    v = (torch.randn(B * W, H, D, generator=g) * scale_hint).to(torch.bfloat16)
    return k, v


def _commit(pool, layer_id, loc_2d, lens, k, v, k_scale, v_scale, monkeypatch):
    """set_kv_buffer_prefix_valid on the HIP path (``memory_pool._is_hip`` forced)."""
    monkeypatch.setattr(mp, "_is_hip", True)  # the tiled Triton path of CUDA / HIP
    try:
        pool.set_kv_buffer_prefix_valid(_layer(layer_id), loc_2d, lens, k, v, k_scale, v_scale)
    finally:
        monkeypatch.setattr(mp, "_is_hip", False)


def _sglang_commit(pool, layer_id, loc_2d, lens, k, v, k_scale, v_scale, monkeypatch):
    """SGLang's own HIP-path commit as a ROCm platform whose fp8 dtype is the pool's runs it.

    There SGLang 0.5.23 sends float scales to a fused tiled fp8 kernel that the
    Triton interpreter cannot run (it lacks ``get_bf16``). Scales given as
    1-element 1-D tensors take the eager branch of the same method instead:
    divide, saturate to the fp8 range (the pool's dtype is the platform's),
    cast, then the tiled byte copy. For the scales of the exact comparisons
    (powers of two) both branches compute the same bytes; the GPU test
    compares against the fused kernel itself.
    """
    if pool.dtype in FP8_DTYPES:
        monkeypatch.setattr(mp, "fp8_dtype", pool.dtype)
    as_tensor = lambda s: None if s is None else torch.tensor([float(s)], dtype=torch.float32)  # noqa: E731
    _commit(pool, layer_id, loc_2d, lens, k, v, as_tensor(k_scale), as_tensor(v_scale), monkeypatch)


def _nhd_of_5d(pool, layer, n_slots):
    """(slots, H, D) K and V of one 5D layer, gathered by SGLang's own kernel (storage bytes)."""
    slots = torch.arange(n_slots, dtype=torch.int64)
    kb, vb = pool.k_buffer[layer], pool.v_buffer[layer]
    if kb.dtype != torch.uint8 and kb.element_size() == 1:
        kb, vb = kb.view(torch.uint8), vb.view(torch.uint8)
    k, v = _sglang_gather()(kb, vb, slots)
    return k.contiguous().view(torch.uint8), v.contiguous().view(torch.uint8)


def _nhd_bytes(pool, layer):
    return (pool.k_buffer[layer].contiguous().view(torch.uint8).reshape(pool.k_buffer[layer].shape[0], -1),
            pool.v_buffer[layer].contiguous().view(torch.uint8).reshape(pool.v_buffer[layer].shape[0], -1))


@pytest.fixture
def overlay():
    kernel_check.reset()
    st = sglang_kv5d.activate(patches=PATCHES, strict=False)
    for name in PATCHES:
        assert st.patch(name).state in ("applied", "pending"), st
    yield
    sglang_kv5d.deactivate()
    kernel_check.reset()


class LaunchCounter:
    def __init__(self, kernel):
        self.kernel = kernel
        self.launches = 0

    def __getitem__(self, grid):
        self.launches += 1
        return self.kernel[grid]

    def __getattr__(self, name):
        return getattr(self.kernel, name)


@pytest.fixture
def fused_launches(monkeypatch):
    counter = LaunchCounter(fp8_write.WRITE_KERNEL)
    monkeypatch.setattr(fp8_write.host, "WRITE_KERNEL", counter)
    return counter


# Ragged lengths, a row crossing a page boundary (14..21), scattered slots, a
# row committing nothing, entries past a row's length that are no slot at all
# (never read), a length past the row width.
LOC = torch.tensor([
    [14, 15, 16, 17, 18, 19, 20, 21],
    [33, 34, 35, 10**9, -7, 38, 39, 40],
    [70, 2, 79, 48, 49, 50, 51, 52],
    [60, 61, 62, 63, 64, 65, 66, 67],
])
LENS = torch.tensor([9, 3, 4, 0])
COMMITTED = [(b, j) for b in range(LOC.shape[0]) for j in range(LOC.shape[1]) if j < int(LENS[b])]
MAX_SLOT = max(int(LOC[b, j]) for b, j in COMMITTED)


def test_core_selects_the_committed_rows():
    loc = torch.tensor([[5, 6, 7], [8, 9, 10], [11, 12, 13]], dtype=torch.int32)
    lens = torch.tensor([2, -1, 7], dtype=torch.int32)
    assert core.masked_slots(loc, lens).tolist() == [5, 6, -1, -1, -1, -1, 11, 12, 13]
    assert core.masked_slots(loc, lens).dtype == torch.int64
    assert core.committed_rows(loc, lens).tolist() == [0, 1, 6, 7, 8]
    assert core.committed_rows(loc, torch.zeros(3, dtype=torch.int32)).numel() == 0
    core.check_prefix_args(loc, lens, 9, 9)
    for args, match in (((loc.reshape(-1), lens, 9, 9), "rank-2"), ((loc, lens[:2], 9, 9), "commit_lens"),
                        ((loc, lens.reshape(3, 1), 9, 9), "commit_lens"), ((loc, lens, 9, 8), "KV rows")):
        with pytest.raises(ValueError, match=match):
            core.check_prefix_args(*args)


# --------------------------------------------------------------------------- #
# (a) upstream on a 5D pool                                                    #
# --------------------------------------------------------------------------- #


def test_upstream_tiled_path_writes_pages_apart_out_of_bounds(monkeypatch):
    kernel_check.reset()
    block_bytes = H * D * PAGE * 2  # bf16 5D: stride(0) is a whole page (all heads)
    g = _pool("vectorized_5d", torch.bfloat16, monkeypatch, guard_bytes=(MAX_SLOT + 1) * block_bytes)
    pool = g.pool
    assert pool.k_buffer[1].stride(0) * 2 == block_bytes
    k, v = _rows(*LOC.shape, seed=1, scale_hint=1.0)
    _commit(pool, 1, LOC, LENS, k.clone(), v.clone(), None, None, monkeypatch)

    row_bytes = H * D * 2
    k_rows = k.view(torch.uint8).reshape(k.shape[0], -1)
    alloc = g.bytes("k_buffer", 1)
    inside = g.inside("k_buffer", 1).numel()
    out_of_bounds = 0
    for b, j in COMMITTED:
        s = int(LOC[b, j])
        # the row of token (b, j) is at byte s * stride(0), whole
        assert torch.equal(alloc[s * block_bytes: s * block_bytes + row_bytes], k_rows[b * LOC.shape[1] + j])
        out_of_bounds += s * block_bytes >= inside
    assert out_of_bounds == sum(int(LOC[b, j]) >= pool.k_buffer[1].shape[0] for b, j in COMMITTED) > 10
    assert bool((g.guard("k_buffer", 1) != POISON).any()) and bool((g.guard("v_buffer", 1) != POISON).any())
    # ... while no addressed slot holds its row; in the blocks no stray copy hit
    # (a copy at s * stride(0) inside the buffer lands in block s) they are all poison
    kk, vv = _nhd_of_5d(pool, 1, pool.k_buffer[1].shape[0] * PAGE)
    hit_blocks = {int(LOC[b, j]) for b, j in COMMITTED if int(LOC[b, j]) < pool.k_buffer[1].shape[0]}
    clean = 0
    for b, j in COMMITTED:
        s, r = int(LOC[b, j]), b * LOC.shape[1] + j
        assert not torch.equal(kk[s].reshape(-1), k_rows[r]), s
        if s // PAGE not in hit_blocks:
            assert bool((kk[s] == POISON).all()) and bool((vv[s] == POISON).all()), s
            clean += 1
    assert clean >= 10


# --------------------------------------------------------------------------- #
# (b) the patch on a 5D pool against SGLang on NHD                             #
# --------------------------------------------------------------------------- #


def _reference_nhd(dtype, k, v, k_scale, v_scale, monkeypatch, loc=LOC, lens=LENS):
    """SGLang's own prefix-valid write (HIP path) on an NHD pool, no overlay."""
    sglang_kv5d.deactivate()
    try:
        g = _pool("nhd", dtype, monkeypatch, guard_bytes=4096)
        _sglang_commit(g.pool, 1, loc, lens, k.clone(), v.clone(), k_scale, v_scale, monkeypatch)
        assert bool((g.guard("k_buffer", 1) == POISON).all())
        return g
    finally:
        sglang_kv5d.activate(patches=PATCHES, strict=False)


# fp8 inputs reach past the format's max where SGLang saturates its prefix-valid
# writes (0.5.23: saturate_to_fp8_range); 0.5.16 casts without saturating (NaN
# on e4m3fnuz, which the overlay does not reproduce), so there they stay in range.
FP8_HINT = 200.0 if hasattr(mp, "saturate_to_fp8_range") else 20.0
CASES = [(torch.bfloat16, 1.0, 1.0, 3.0)] + [(d, s, t, FP8_HINT) for d in FP8_DTYPES for s, t in ((1.0, 1.0), (0.5, 2.0))]


@pytest.mark.parametrize("dtype,k_scale,v_scale,hint", CASES,
                         ids=[f"{str(c[0])[6:]}-{c[1]}-{c[2]}" for c in CASES])
def test_5d_commit_equals_sglang_on_nhd(monkeypatch, overlay, fused_launches, dtype, k_scale, v_scale, hint):
    g = _pool("vectorized_5d", dtype, monkeypatch, guard_bytes=1 << 20)
    pool = g.pool
    k, v = _rows(*LOC.shape, seed=2, scale_hint=hint)
    k0, v0 = k.clone(), v.clone()
    before = fused_launches.launches
    _commit(pool, 1, LOC, LENS, k, v, k_scale, v_scale, monkeypatch)
    fp8 = dtype in FP8_DTYPES
    assert fused_launches.launches - before == (1 if fp8 else 0)  # fp8: one fused launch, no host sync
    assert torch.equal(k.view(torch.int16), k0.view(torch.int16)) and torch.equal(v.view(torch.int16), v0.view(torch.int16))
    for name in ("k_buffer", "v_buffer"):
        assert bool((g.guard(name, 1) == POISON).all()), name
        assert bool((g.inside(name, 0) == POISON).all()), name  # the other layer

    ref = _reference_nhd(dtype, k0, v0, k_scale, v_scale, monkeypatch)
    rk, rv = _nhd_bytes(ref.pool, 1)
    n_slots = pool.k_buffer[1].shape[0] * PAGE
    kk, vv = _nhd_of_5d(pool, 1, n_slots)
    assert rk.shape[0] == n_slots
    assert torch.equal(kk.reshape(n_slots, -1), rk) and torch.equal(vv.reshape(n_slots, -1), rv)
    written = sorted({int(LOC[b, j]) for b, j in COMMITTED})
    untouched = [s for s in range(n_slots) if s not in written]
    assert bool((kk[untouched] == POISON).all()) and bool((vv[untouched] == POISON).all())
    assert not bool((kk[written] == POISON).all(dim=-1).all(dim=-1).any())


@pytest.mark.parametrize("dtype", [torch.bfloat16] + FP8_DTYPES[:1], ids=lambda d: str(d)[6:])
def test_zero_committed_rows_write_nothing(monkeypatch, overlay, dtype):
    g = _pool("vectorized_5d", dtype, monkeypatch, guard_bytes=1 << 16)
    k, v = _rows(*LOC.shape, seed=3, scale_hint=1.0)
    _commit(g.pool, 0, LOC, torch.tensor([0, 0, -1, 0]), k, v, 1.0, 1.0, monkeypatch)
    for name in ("k_buffer", "v_buffer"):
        for i in (0, 1):
            assert bool((g.bytes(name, i) == POISON).all()), (name, i)


@pytest.mark.parametrize("fp8_dtype", FP8_DTYPES, ids=lambda d: str(d)[6:])
def test_5d_commit_equals_set_kv_buffer_of_the_committed_tokens(monkeypatch, overlay, fp8_dtype):
    """Any scale: the committed tokens' bytes are what set_kv_buffer writes for them
    (fp8-kv-write's fused write). SGLang's NHD prefix-valid kernel rounds twice
    (to the input dtype after the scale, then to fp8): at most one fp8 step apart."""
    k_scale, v_scale = 0.37, torch.tensor([1.9])
    k, v = _rows(*LOC.shape, seed=4, scale_hint=FP8_HINT / 4)
    ours = _pool("vectorized_5d", fp8_dtype, monkeypatch, guard_bytes=1 << 16)
    _commit(ours.pool, 1, LOC, LENS, k, v, k_scale, v_scale, monkeypatch)
    twin = _pool("vectorized_5d", fp8_dtype, monkeypatch, guard_bytes=1 << 16)
    rows = torch.tensor([b * LOC.shape[1] + j for b, j in COMMITTED])
    slots = torch.tensor([int(LOC[b, j]) for b, j in COMMITTED])
    twin.pool.set_kv_buffer(_layer(1), slots, k[rows], v[rows], k_scale, v_scale)
    for name in ("k_buffer", "v_buffer"):
        assert torch.equal(ours.bytes(name, 1), twin.bytes(name, 1)), name

    ref = _reference_nhd(fp8_dtype, k, v, k_scale, float(v_scale), monkeypatch)
    n_slots = ours.pool.k_buffer[1].shape[0] * PAGE
    kk, vv = _nhd_of_5d(ours.pool, 1, n_slots)
    rk, rv = _nhd_bytes(ref.pool, 1)
    for x, scale, ours_nhd, theirs in ((k, k_scale, kk, rk), (v, v_scale, vv, rv)):
        a = ours_nhd[slots].reshape(len(slots), -1)
        assert torch.equal(a, quantize_fp8_fp32(x[rows], scale, fp8_dtype).reshape(len(slots), -1))
        dist = fp8_step_distance(a, theirs[slots], fp8_dtype)
        assert int(dist.max()) <= 1  # SGLang's double rounding: one code at a tie of the second rounding


def test_bf16_route_is_sglang_own_5d_writer(monkeypatch, overlay):
    """A bf16 5D pool commits through set_kv_buffer (SGLang's own 5D writer), once, with only the committed rows."""
    g = _pool("vectorized_5d", torch.bfloat16, monkeypatch, guard_bytes=1 << 16)
    calls = []
    real = type(g.pool).set_kv_buffer

    def spy(self, layer, loc, cache_k, cache_v, *a, **kw):
        calls.append(loc.clone())
        return real(self, layer, loc, cache_k, cache_v, *a, **kw)

    monkeypatch.setattr(type(g.pool), "set_kv_buffer", spy)
    k, v = _rows(*LOC.shape, seed=5, scale_hint=1.0)
    _commit(g.pool, 1, LOC, LENS, k, v, None, None, monkeypatch)
    assert len(calls) == 1 and calls[0].tolist() == [int(LOC[b, j]) for b, j in COMMITTED]


@pytest.mark.parametrize("dtype", [torch.bfloat16] + FP8_DTYPES[:1], ids=lambda d: str(d)[6:])
def test_flat_rows_write_what_head_rows_write(monkeypatch, overlay, dtype):
    """(rows, H * D) inputs, as SGLang's NHD commit accepts them, write the same bytes."""
    k, v = _rows(*LOC.shape, seed=8, scale_hint=3.0)
    flat = _pool("vectorized_5d", dtype, monkeypatch, guard_bytes=1 << 12)
    _commit(flat.pool, 1, LOC, LENS, k.reshape(k.shape[0], -1), v.reshape(v.shape[0], -1), 0.5, 2.0, monkeypatch)
    heads = _pool("vectorized_5d", dtype, monkeypatch, guard_bytes=1 << 12)
    _commit(heads.pool, 1, LOC, LENS, k, v, 0.5, 2.0, monkeypatch)
    for name in ("k_buffer", "v_buffer"):
        assert torch.equal(flat.bytes(name, 1), heads.bytes(name, 1)), name
    assert not bool((heads.inside("k_buffer", 1) == POISON).all())


def test_fp8_inputs_the_fused_write_refuses_go_through_set_kv_buffer(monkeypatch, overlay, fused_launches):
    """A float64 tensor scale (the fused write takes float32 only): the committed
    rows reach set_kv_buffer, which writes them as it would any such call."""
    fp8 = FP8_DTYPES[0]
    k, v = _rows(*LOC.shape, seed=9, scale_hint=3.0)
    ks, vs = torch.tensor([0.5], dtype=torch.float64), torch.tensor([2.0], dtype=torch.float64)
    ours = _pool("vectorized_5d", fp8, monkeypatch, guard_bytes=1 << 12)
    twin = _pool("vectorized_5d", fp8, monkeypatch, guard_bytes=1 << 12)
    _commit(ours.pool, 1, LOC, LENS, k, v, ks, vs, monkeypatch)
    rows = torch.tensor([b * LOC.shape[1] + j for b, j in COMMITTED])
    slots = torch.tensor([int(LOC[b, j]) for b, j in COMMITTED])
    twin.pool.set_kv_buffer(_layer(1), slots, k[rows], v[rows], ks, vs)
    for name in ("k_buffer", "v_buffer"):
        assert torch.equal(ours.bytes(name, 1), twin.bytes(name, 1)), name
    assert not bool((ours.inside("k_buffer", 1) == POISON).all())


def test_a_failing_fused_kernel_is_recorded_and_not_tried_again(monkeypatch, overlay):
    fp8 = FP8_DTYPES[0]
    k, v = _rows(*LOC.shape, seed=10, scale_hint=3.0)
    ours = _pool("vectorized_5d", fp8, monkeypatch, guard_bytes=1 << 12)
    twin = _pool("vectorized_5d", fp8, monkeypatch, guard_bytes=1 << 12)
    tries = []

    class Broken:
        def __getitem__(self, grid):
            def launch(*a, **kw):
                tries.append(grid)
                raise RuntimeError("launch failed (test)")
            return launch

    monkeypatch.setattr(fp8_write.host, "WRITE_KERNEL", Broken())
    _commit(ours.pool, 1, LOC, LENS, k, v, 0.5, 2.0, monkeypatch)
    assert len(tries) == 1 and kernel_check.FAILED
    _commit(ours.pool, 1, LOC, LENS, k, v, 0.5, 2.0, monkeypatch)
    assert len(tries) == 1  # the configuration is known to fail: straight to set_kv_buffer
    rows = torch.tensor([b * LOC.shape[1] + j for b, j in COMMITTED])
    slots = torch.tensor([int(LOC[b, j]) for b, j in COMMITTED])
    twin.pool.set_kv_buffer(_layer(1), slots, k[rows], v[rows], 0.5, 2.0)
    for name in ("k_buffer", "v_buffer"):
        assert torch.equal(ours.bytes(name, 1), twin.bytes(name, 1)), name
    assert not bool((ours.inside("k_buffer", 1) == POISON).all())


def test_bad_shapes_raise_before_writing(monkeypatch, overlay):
    g = _pool("vectorized_5d", torch.bfloat16, monkeypatch, guard_bytes=1 << 12)
    k, v = _rows(*LOC.shape, seed=6, scale_hint=1.0)
    with pytest.raises(ValueError, match="loc_2d must be rank-2"):
        _commit(g.pool, 1, LOC.reshape(-1), LENS, k, v, None, None, monkeypatch)
    with pytest.raises(ValueError, match="commit_lens"):
        _commit(g.pool, 1, LOC, LENS[:3], k, v, None, None, monkeypatch)
    with pytest.raises(ValueError, match="KV rows must match"):
        _commit(g.pool, 1, LOC, LENS, k[:-1], v[:-1], None, None, monkeypatch)
    assert bool((g.bytes("k_buffer", 1) == POISON).all())


@pytest.mark.parametrize("value", [0.0, float("nan"), 1e-40], ids=repr)
def test_a_refused_scale_raises_naming_this_patch_and_writes_nothing(monkeypatch, overlay, fused_launches, caplog,
                                                                     value):
    """A refused k_scale stops the commit with ScaleError naming prefix-valid-write-5d
    and the layer: no launch, no cache byte written, no "input not taken" warning
    (the scale is the problem, not the input), no kernel failure recorded."""
    g = _pool("vectorized_5d", FP8_DTYPES[0], monkeypatch, guard_bytes=1 << 12)
    k, v = _rows(*LOC.shape, seed=7, scale_hint=1.0)
    before = fused_launches.launches
    with caplog.at_level("WARNING", logger="sglang_kv5d"):
        with pytest.raises(fp8_write.ScaleError,
                           match=r"prefix-valid-write-5d: layer 1: k_scale: .*nothing was written"):
            _commit(g.pool, 1, LOC, LENS, k, v, value, 1.0, monkeypatch)
    assert fused_launches.launches == before
    assert not [r for r in caplog.records if "not taken" in r.getMessage()]
    assert kernel_check.failures() == {}
    for name in ("k_buffer", "v_buffer"):
        assert bool((g.bytes(name, 1) == POISON).all()), name


# --------------------------------------------------------------------------- #
# (c) NHD pools reach the original                                             #
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("dtype", [torch.bfloat16] + FP8_DTYPES[:1], ids=lambda d: str(d)[6:])
def test_nhd_pool_reaches_the_original(monkeypatch, overlay, fused_launches, dtype):
    calls = []
    impls = [n for n in ("_set_kv_buffer_prefix_valid_impl", "_set_kv_buffer_prefix_valid_impl_fp8") if hasattr(mp, n)]
    for n in impls:
        real = getattr(mp, n)
        monkeypatch.setattr(mp, n, (lambda real, n: lambda *a, **kw: (calls.append(n), real(*a, **kw))[1])(real, n))
    g = _pool("nhd", dtype, monkeypatch, guard_bytes=4096)
    k, v = _rows(*LOC.shape, seed=7, scale_hint=3.0)
    before = fused_launches.launches
    _sglang_commit(g.pool, 1, LOC, LENS, k.clone(), v.clone(), 1.0, 1.0, monkeypatch)
    assert fused_launches.launches == before and len(calls) == 1  # SGLang's own tiled kernel, once
    for n in impls:
        monkeypatch.setattr(mp, n, getattr(mp, n))
    ref = _reference_nhd(dtype, k, v, 1.0, 1.0, monkeypatch)
    assert torch.equal(g.bytes("k_buffer", 1), ref.bytes("k_buffer", 1))
    assert torch.equal(g.bytes("v_buffer", 1), ref.bytes("v_buffer", 1))


def test_only_the_mha_pool_defines_the_commit_write():
    """The pool DFLASH commits into is its draft runner's MHATokenToKVPool. The
    composite pools neither define nor forward set_kv_buffer_prefix_valid (a
    call on them raises AttributeError upstream), so wrapping the MHA method
    covers every commit; a release that adds forwarding shows up here."""
    swa = importlib.import_module("sglang.srt.mem_cache.swa_memory_pool")
    for cls in (mp.HybridLinearKVPool, swa.SWAKVPool):
        assert not hasattr(cls, "set_kv_buffer_prefix_valid"), cls.__name__
