"""Fused FP8 KV write (sglang_kv5d.kernels.fp8_write) under the Triton CPU interpreter.

Every case starts from fresh random inputs (never zero) and caches poisoned with
a random byte pattern, then checks:
  * bit-identity with torch's own rounding of the fp32 quotient (clamp + .to(fp8)),
  * at most one FP8 step from the float64 reference, on a counted, tiny share,
  * exactly the addressed bytes changed (flat-index address formulas),
  * the inputs (k, v, loc, scales) are bit-identical after the call.
"""

from __future__ import annotations

import importlib
import os

import pytest
import torch

os.environ.setdefault("TRITON_INTERPRET", "1")

from sglang_kv5d.kernels import fp8_reference as ref  # noqa: E402
from sglang_kv5d.kernels import fp8_write as fw  # noqa: E402
from sglang_kv5d.platform import INTERPRETER, known_target  # noqa: E402

SM90 = known_target("sm_90")

FN, FNUZ = torch.float8_e4m3fn, torch.float8_e4m3fnuz
CODE_MAX = {FN: 0x7E, FNUZ: 0x7F}


@pytest.fixture(scope="module", autouse=True)
def _interpreted_kernels():
    """If some earlier import decorated the kernels for a GPU, redo it interpreted."""
    global fw
    if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") == "1":
        if type(fw.WRITE_KERNEL).__name__ != "InterpretedFunction":
            for module in (fw.quantize, fw.v_store, fw.kernel, fw.host):  # the Triton code, then its launcher
                importlib.reload(module)
            fw = importlib.reload(fw)
    yield


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _write_and_check(k, v, kc, vc, loc, ks, vs, fp8_dtype, layout, *, pass_dtype=None,
                     max_f64_share=2e-3, **kw):
    """Run the kernel and check everything; returns the number of bytes written."""
    H, DK, DV = k.shape[1], k.shape[2], v.shape[2]
    before = [ref.bits(t) for t in (k, v, loc)]
    scale_before = [ref.bits(s) for s in (ks, vs) if isinstance(s, torch.Tensor)]
    kc0, vc0 = kc.view(torch.uint8).clone(), vc.view(torch.uint8).clone()

    fw.write_kv_fp8(k, v, kc, vc, loc, ks, vs, fp8_dtype=pass_dtype, **kw)

    # inputs untouched
    for b, t in zip(before, (k, v, loc)):
        assert torch.equal(b, ref.bits(t)), "an input changed"
    for b, s in zip(scale_before, [s for s in (ks, vs) if isinstance(s, torch.Tensor)]):
        assert torch.equal(b, ref.bits(s)), "a scale tensor changed"

    kb, vb = kc.view(torch.uint8), vc.view(torch.uint8)
    km, vm = ref.addressed_masks(layout, kb.shape, vb.shape, loc, H, DK, DV)
    # bytes outside the addressed set are untouched
    assert torch.equal(kb[~km], kc0[~km]), "K bytes outside the addressed slots changed"
    assert torch.equal(vb[~vm], vc0[~vm]), "V bytes outside the addressed slots changed"

    # bit-exact against torch's fp32 quotient rounded by .to(fp8)
    e32k, e32v = ref.reference_write_kv_fp8(k, v, kc0, vc0, loc, ks, vs,
                                            fp8_dtype=fp8_dtype, mode="fp32")
    for got, exp, name in ((kb, e32k, "K"), (vb, e32v, "V")):
        bad = (got != exp).nonzero()
        assert bad.numel() == 0, f"{name}: {bad.shape[0]} bytes differ from torch, first at {bad[:4].tolist()}"

    # the float64 reference: equal, or one fp8 step apart on a tiny counted share
    e64k, e64v = ref.reference_write_kv_fp8(k, v, kc0, vc0, loc, ks, vs,
                                            fp8_dtype=fp8_dtype, mode="f64")
    written = int(km.sum()) + int(vm.sum())
    off = 0
    for got, exp, m in ((kb, e64k, km), (vb, e64v, vm)):
        dist = ref.fp8_step_distance(got[m], exp[m], fp8_dtype)
        assert dist.numel() == 0 or int(dist.max()) <= 1, "more than one fp8 step from the float64 reference"
        off += int((dist == 1).sum())
    assert off <= max(2, max_f64_share * written), f"{off}/{written} one step off float64"
    return written


# --------------------------------------------------------------------------- #
# The encoder itself                                                          #
# --------------------------------------------------------------------------- #


def _special_values(fp8_dtype):
    vals = ref.fp8_values(fp8_dtype)
    grid = vals[torch.isfinite(vals)].unique().sort().values  # increasing, both signs
    pos = grid[grid >= 0]
    mids = (pos[1:] + pos[:-1]) / 2
    f32 = torch.float32
    mids32 = mids.to(f32)
    up = torch.nextafter(mids32, torch.full_like(mids32, float("inf")))
    down = torch.nextafter(mids32, torch.zeros_like(mids32))
    fmax = ref.FP8_MAX[fp8_dtype]
    extra = torch.tensor([0.0, 1e-45, 1e-40, 2.0**-12, fmax, fmax + 1, fmax * 1.03, fmax * 1.1,
                          fmax * 2, 1e6, 3.0e38, float("inf")], dtype=f32)
    mag = torch.cat([pos.to(f32), mids32, up, down, extra])
    allv = torch.cat([mag, -mag, torch.tensor([-0.0], dtype=f32)])
    g = _gen(7)
    rnd = torch.randn(4096, generator=g) * torch.pow(2.0, torch.randint(-30, 30, (4096,), generator=g).float())
    return torch.cat([allv, rnd.to(f32)])


@pytest.mark.parametrize("fp8_dtype", [FN, FNUZ])
def test_encoder_bit_exact_on_grid_midpoints_and_extremes(fp8_dtype):
    x = _special_values(fp8_dtype)
    n = (x.numel() + 15) // 16 * 16
    x = torch.cat([x, torch.ones(n - x.numel())]).view(-1, 1, 16)
    T = x.shape[0]
    kc = torch.zeros(T, 1, 16, dtype=torch.uint8)
    vc = torch.zeros(T, 1, 16, dtype=torch.uint8)
    loc = torch.arange(T)
    fw.write_kv_fp8(x, x, kc, vc, loc, 1.0, 1.0, fp8_dtype=fp8_dtype)
    exp = ref.quantize_fp8_fp32(x, 1.0, fp8_dtype)
    assert torch.equal(kc, exp) and torch.equal(vc, exp)
    # with scale 1 and fp32 inputs the quotient is exact: float64 agrees too
    assert torch.equal(kc, ref.quantize_fp8_f64(x, 1.0, fp8_dtype))


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@pytest.mark.parametrize("fp8_dtype", [FN, FNUZ])
def test_saturation_inf_and_nan(fp8_dtype):
    fmax = ref.FP8_MAX[fp8_dtype]
    vals = torch.tensor([fmax * 1.0001, fmax * 5, 1e30, float("inf"), -fmax * 7, -float("inf"),
                         3.0e38, -3.0e38, float("nan"), 1.0, -1.0, 0.5, 2.0, -2.0, 100.0, -0.001],
                        dtype=torch.float32)
    x = vals.view(1, 1, 16)
    kc = torch.zeros(1, 1, 16, dtype=fp8_dtype)
    vc = torch.zeros(1, 1, 16, dtype=fp8_dtype)
    # V: the quotient x / 1e-30 overflows fp32 for every finite input: saturates too
    fw.write_kv_fp8(x, x, kc, vc, torch.zeros(1, dtype=torch.int32), 1.0, 1e-30)
    P, N = CODE_MAX[fp8_dtype], CODE_MAX[fp8_dtype] | 0x80
    kb, vb = kc.view(torch.uint8)[0, 0].tolist(), vc.view(torch.uint8)[0, 0].tolist()
    assert kb[:8] == [P, P, P, P, N, N, P, N]
    assert vb[:8] == [P, P, P, P, N, N, P, N]
    assert vb[9:] == [P, N, P, P, N, P, N]
    assert kb[9:] == ref.quantize_fp8_fp32(vals[9:], 1.0, fp8_dtype).tolist()
    for c in (kc, vc):
        f = c.float()[0, 0]
        assert torch.isnan(f[8])
        assert not torch.isnan(torch.cat([f[:8], f[9:]])).any()
        assert float(f.abs().nan_to_num(0).max()) == fmax
    # a NaN with the sign bit set is NaN too (e4m3fn: 0xFF; e4m3fnuz has one NaN, 0x80)
    neg_nan = torch.full((1, 1, 16), float("nan")).neg()
    assert neg_nan.view(torch.int32)[0, 0, 0] < 0
    fw.write_kv_fp8(neg_nan, neg_nan, kc, vc, torch.zeros(1, dtype=torch.int32), 1.0, 1e-30)
    for c in (kc, vc):
        assert set(c.view(torch.uint8).flatten().tolist()) == ({0xFF} if fp8_dtype == FN else {0x80})


# --------------------------------------------------------------------------- #
# Full writes against the references                                          #
# --------------------------------------------------------------------------- #

CASES = [
    # layout, fp8, input dtype, H, DK, DV, page, token_pad, loc kind, scale kinds, typed cache
    ("5d", FN, torch.bfloat16, 2, 32, 32, 32, 0, "runs", ("tensor", "float"), False),
    ("5d", FNUZ, torch.bfloat16, 1, 64, 32, 64, 24, "mixed", ("float", "tensor"), True),
    ("5d", FN, torch.float16, 1, 32, 48, 32, 8, "tricky", ("tensor", "tensor"), True),
    ("5d", FNUZ, torch.float16, 2, 16, 16, 16, 0, "scattered", ("float", "float"), False),
    ("5d", FN, torch.float32, 1, 32, 32, 32, 3, "runs", ("float", "tensor"), False),
    ("5d", FNUZ, torch.float32, 2, 48, 16, 32, 0, "tricky", ("tensor", "float"), True),
    ("nhd", FN, torch.bfloat16, 2, 32, 32, 32, 0, "mixed", ("tensor", "float"), True),
    ("nhd", FNUZ, torch.bfloat16, 1, 64, 24, 16, 8, "runs", ("float", "tensor"), False),
    ("nhd", FN, torch.float16, 3, 16, 16, 16, 0, "scattered", ("tensor", "tensor"), False),
    ("nhd", FNUZ, torch.float16, 1, 40, 40, 16, 5, "tricky", ("float", "float"), True),
    ("nhd", FN, torch.float32, 2, 16, 32, 16, 0, "runs", ("float", "tensor"), True),
    ("nhd", FNUZ, torch.float32, 1, 32, 32, 16, 16, "mixed", ("tensor", "float"), False),
]


def _scale(kind, value):
    return torch.tensor([value], dtype=torch.float32) if kind == "tensor" else value


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(str(x).replace("torch.", "") for x in c[:5] + c[8:9]))
def test_write_matches_references(case):
    layout, fp8_dtype, in_dtype, H, DK, DV, page, pad, kind, scale_kinds, typed = case
    g = _gen(CASES.index(case))
    n_blocks = 12
    T = 90
    k = ref.make_input(T, H, DK, in_dtype, gen=g, token_pad=pad)
    v = ref.make_input(T, H, DV, in_dtype, gen=g, token_pad=pad)
    kc, vc = ref.make_caches(layout, n_blocks, page, H, DK, DV, gen=g,
                             typed=fp8_dtype if typed else None)
    loc = ref.loc_pattern(kind, T, n_blocks * page, page, gen=g)
    ks = _scale(scale_kinds[0], 0.37)
    vs = _scale(scale_kinds[1], 1.9)
    _write_and_check(k, v, kc, vc, loc, ks, vs, fp8_dtype, layout,
                     pass_dtype=None if typed else fp8_dtype)


CONFIGS = [
    # the V group detection for windows of 1, 2 and 4 groups, K/V split or not,
    # one or two heads per program, head rows split over programs
    dict(groups=True, block_t=16, split_kv=True, heads_per_program=1),
    dict(groups=True, block_t=32, split_kv=False, heads_per_program=2),
    dict(groups=True, block_t=64, split_kv=True, heads_per_program=2),
    dict(groups=True, block_t=16, split_kv=True, heads_per_program=2, d_split=2),
    dict(groups=True, block_t=32, split_kv=False, heads_per_program=1, d_split=2),
    # every V byte stored on its own, windows of 1 .. 16 tokens
    dict(groups=False, block_t=1, split_kv=True, heads_per_program=1),
    dict(groups=False, block_t=4, split_kv=False, heads_per_program=2),
    dict(groups=False, block_t=8, split_kv=True, heads_per_program=2, d_split=2),
    dict(groups=False, block_t=16, split_kv=True, heads_per_program=1, d_split=2),
    # a register cap is a launch option only (ignored off NVIDIA GPUs)
    dict(groups=True, block_t=16, split_kv=True, heads_per_program=2, maxnreg=40),
    # launch order: these shapes (D = 32) default to token-major (a 1-D grid,
    # the programs of one window next to each other); the 3-D grid as well
    dict(groups=True, block_t=16, split_kv=True, heads_per_program=1, d_split=2, token_major=False),
    dict(groups=True, block_t=32, split_kv=False, heads_per_program=1, token_major=False),
    dict(groups=False, block_t=4, split_kv=True, heads_per_program=1, d_split=2, token_major=False),
    dict(groups=True, block_t=16, split_kv=True, heads_per_program=2, v_spec=True),
    dict(groups=True, block_t=16, split_kv=False, heads_per_program=1, d_split=2, v_spec=True),
    # V bytes stored with the lanes on 4, 2 or 1 tokens before the next dim
    # (byte_tokens), in the bytes path and for the group path's scattered tokens
    dict(groups=False, block_t=16, split_kv=True, heads_per_program=2, byte_tokens=4),
    dict(groups=False, block_t=8, split_kv=False, heads_per_program=1, d_split=2, byte_tokens=1),
    dict(groups=True, block_t=16, split_kv=True, heads_per_program=2, byte_tokens=4),
    dict(groups=True, block_t=32, split_kv=False, heads_per_program=1, d_split=2, byte_tokens=2),
    # the group path as the GPU defaults run it (every scattered token stored as loaded)
    dict(groups=True, block_t=16, split_kv=True, heads_per_program=2, v_spec=True, byte_tokens=16),
    dict(groups=True, block_t=16, split_kv=True, heads_per_program=1, d_split=2, byte_tokens=16),
]


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: "-".join(f"{k}{int(v)}" for k, v in c.items()))
@pytest.mark.parametrize("kind", ["runs", "tricky", "mixed"])
def test_every_launch_configuration_writes_the_same_bytes(cfg, kind):
    g = _gen(cfg["block_t"] * 7 + len(kind) + cfg["heads_per_program"] + 3 * cfg.get("d_split", 1))
    H, D, page, n_blocks, T = 2, 32, 32, 10, 100
    k = ref.make_input(T, H, D, torch.bfloat16, gen=g, token_pad=16)
    v = ref.make_input(T, H, D, torch.bfloat16, gen=g, token_pad=16)
    kc, vc = ref.make_caches("5d", n_blocks, page, H, D, D, gen=g)
    loc = ref.loc_pattern(kind, T, n_blocks * page, page, gen=g)
    _write_and_check(k, v, kc, vc, loc, 0.5, 0.75, FN, "5d", pass_dtype=FN, _config=cfg)


@pytest.mark.parametrize("cfg", [dict(groups=False, block_t=16, heads_per_program=2, byte_tokens=4),
                                 dict(groups=False, block_t=8, byte_tokens=2, d_split=2),
                                 dict(groups=True, block_t=16, heads_per_program=2, byte_tokens=4, v_words=False)])
@pytest.mark.parametrize("kind", ["scattered", "mixed"])
def test_byte_store_lane_orders_with_padded_dims(cfg, kind):
    """byte_tokens < block_t stores the V bytes from a permuted tile: head
    dims that are not a power of two (DV = 48 in a 64-wide tile) stay masked,
    K and V head dims differ."""
    g = _gen(83 + cfg["block_t"] + len(kind))
    H, DK, DV, page, n_blocks, T = 2, 32, 48, 32, 12, 90
    k = ref.make_input(T, H, DK, torch.float16, gen=g, token_pad=8)
    v = ref.make_input(T, H, DV, torch.float16, gen=g, token_pad=8)
    kc, vc = ref.make_caches("5d", n_blocks, page, H, DK, DV, gen=g, typed=FNUZ)
    loc = ref.loc_pattern(kind, T, n_blocks * page, page, gen=g)
    _write_and_check(k, v, kc, vc, loc, 0.75, 1.5, FNUZ, "5d", pass_dtype=None, _config=cfg)


@pytest.mark.parametrize("cfg", [dict(groups=True, block_t=16), dict(groups=True, block_t=32, heads_per_program=2),
                                 dict(groups=True, block_t=64, d_split=2, split_kv=False)])
def test_group_fast_path_on_long_runs(cfg):
    """Windows inside long runs take the fast path (no per-token detection):
    runs from unaligned starts, across page boundaries, between scattered slots."""
    g = _gen(61 + cfg["block_t"])
    H, D, page, n_blocks = 2, 32, 32, 24
    pieces = [torch.arange(3 * page + 7, 3 * page + 7 + 150),  # unaligned, crosses 4 pages
              torch.tensor([-1, 20 * page + 3, 21 * page + 30]),  # a skip, two scattered slots
              torch.arange(10 * page + 16, 10 * page + 16 + 131),  # aligned start, ends mid-group
              torch.arange(16 * page + 5, 16 * page + 5 + 20)]  # a short run at the end
    loc = torch.cat(pieces)
    T = loc.shape[0]
    k = ref.make_input(T, H, D, torch.bfloat16, gen=g, token_pad=8)
    v = ref.make_input(T, H, D, torch.bfloat16, gen=g)
    kc, vc = ref.make_caches("5d", n_blocks, page, H, D, D, gen=g)
    _write_and_check(k, v, kc, vc, loc, 0.5, 1.25, FN, "5d", pass_dtype=FN, _config=cfg)


@pytest.mark.parametrize("cfg", [dict(block_t=2, heads_per_program=1, d_split=4),
                                 dict(block_t=8, heads_per_program=2, split_kv=False),
                                 dict(block_t=4, heads_per_program=1, d_split=2, token_major=True)])
def test_nhd_launch_configurations_with_padded_dims(cfg):
    g = _gen(41 + cfg["block_t"])
    H, DK, DV, T = 2, 40, 24, 37
    k = ref.make_input(T, H, DK, torch.float16, gen=g, token_pad=8)
    v = ref.make_input(T, H, DV, torch.float16, gen=g)
    kc, vc = ref.make_caches("nhd", 8, 16, H, DK, DV, gen=g, typed=FNUZ)
    loc = ref.loc_pattern("mixed", T, 8 * 16, 16, gen=g)
    _write_and_check(k, v, kc, vc, loc, 0.8, torch.tensor([1.3]), FNUZ, "nhd", _config=cfg)


@pytest.mark.parametrize("T", [40, 200])
def test_default_config_with_wide_and_uneven_head_dims(T):
    """K 96 / V 320 dims: rows split over two programs with the dims past 96 / 320 masked."""
    g = _gen(44 + T)
    H, DK, DV, page, n_blocks = 1, 96, 320, 16, 16
    assert fw.launch_config(T, H, DK, DV, True, True, SM90)["d_split"] == 2
    k = ref.make_input(T, H, DK, torch.bfloat16, gen=g)
    v = ref.make_input(T, H, DV, torch.bfloat16, gen=g)
    kc, vc = ref.make_caches("5d", n_blocks, page, H, DK, DV, gen=g, typed=FN)
    loc = ref.loc_pattern("mixed", T, n_blocks * page, page, gen=g)
    _write_and_check(k, v, kc, vc, loc, 0.3719, 1.9137, FN, "5d")


def test_launch_order_default():
    """Token-major for 5D rows of up to 128 dims (H200 sweep), the 3-D grid elsewhere."""
    assert fw.launch_config(4096, 8, 128, 128, True, True, SM90)["token_major"] is True
    assert fw.launch_config(16, 8, 64, 64, True, True, SM90)["token_major"] is True
    assert fw.launch_config(4096, 2, 256, 256, True, True, SM90)["token_major"] is False
    assert fw.launch_config(4096, 8, 128, 128, False, True, SM90)["token_major"] is False


def test_d128_bytes_up_to_4096_tokens_with_decode_windows_on_4_tokens():
    """D <= 128: V bytes one by one up to 4096 tokens, whole-vector groups past
    that; up to 2048 tokens (any D) windows not inside runs store with the
    lanes on 4 tokens."""
    for T in (129, 1024, 2048, 2049, 4096):
        cfg = fw.launch_config(T, 8, 128, 128, True, True, SM90)
        assert (cfg["groups"], cfg["block_t"], cfg["token_major"]) == (False, 16, True)
        assert cfg["byte_tokens"] == (4 if T <= 2048 else 16)
    assert fw.launch_config(8192, 2, 256, 256, True, True, SM90)["byte_tokens"] == 16  # bytes, D = 256, prefill sizes
    assert fw.launch_config(2048, 2, 256, 256, True, True, SM90)["byte_tokens"] == 4
    big = fw.launch_config(4097, 8, 128, 128, True, True, SM90)
    assert (big["groups"], big["v_spec"], big["byte_tokens"]) == (True, True, 16)
    assert fw.launch_config(128, 8, 128, 128, True, True, SM90)["block_t"] == 4  # 4-token windows: stored as loaded


@pytest.mark.parametrize("kind", ["runs", "scattered", "mixed", "tricky"])
def test_default_bytes_path_on_runs_and_decode_windows(kind):
    """The default configuration between 128 and 4096 tokens: windows inside
    runs and the others (decode) take different stores; both write the same
    bytes, including windows at the end of the tokens."""
    g = _gen(91 + len(kind))
    H, D, page, n_blocks, T = 2, 64, 32, 24, 300
    assert fw.launch_config(T, H, D, D, True, True, SM90)["byte_tokens"] == 4
    k = ref.make_input(T, H, D, torch.bfloat16, gen=g, token_pad=8)
    v = ref.make_input(T, H, D, torch.bfloat16, gen=g)
    kc, vc = ref.make_caches("5d", n_blocks, page, H, D, D, gen=g, typed=FN)
    loc = ref.loc_pattern(kind, T, n_blocks * page, page, gen=g)
    _write_and_check(k, v, kc, vc, loc, 0.6, torch.tensor([1.1]), FN, "5d")


def test_integer_encoder_stores_5d_v_bytes_one_by_one_at_every_size():
    """native_fp8=False (e4m3fnuz, ROCm, the interpreter): no group path; rows
    of 256 dims whole from 8 MiB of V per call, split below; NHD unchanged."""
    for T, H, D in ((8192, 8, 128), (262144, 8, 128), (16384, 2, 256), (262144, 1, 256), (4096, 2, 256)):
        native, bits = fw.launch_config(T, H, D, D, True, True, SM90), fw.launch_config(T, H, D, D, True, False, SM90)
        assert bits["groups"] is False and bits["block_t"] == 16 and bits["byte_tokens"] == 16
        whole = D == 256 and T * H * D >= 1 << 23
        assert bits["d_split"] == (1 if whole else fw.config._row_chunks(D, D))
        assert bits["token_major"] is (D < 256)
        assert native["groups"] is (T * H * D >= 1 << 23 if D == 256 else T > 4096)
    assert fw.launch_config(100, 2, 256, 256, True, False, SM90)["block_t"] == 4
    assert fw.launch_config(2048, 2, 64, 64, True, False, SM90)["byte_tokens"] == 4
    for T in (16, 4096, 262144):
        assert fw.launch_config(T, 8, 128, 128, False, False, SM90) == fw.launch_config(T, 8, 128, 128, False, True, SM90)


def test_d256_groups_from_8_mib_of_v():
    """D = 256: V bytes one by one below 8 MiB of V per call, whole-vector groups
    (one head, rows split over two programs, token-major) from there on."""
    small = fw.launch_config(16384, 1, 256, 256, True, True, SM90)
    assert (small["groups"], small["d_split"], small["token_major"]) == (False, 2, False)
    for T, H in ((32768, 1), (16384, 2), (262144, 2)):
        big = fw.launch_config(T, H, 256, 256, True, True, SM90)
        assert (big["groups"], big["heads_per_program"], big["d_split"], big["token_major"]) == (True, 1, 2, True)
    assert fw.launch_config(300000, 1, 512, 512, True, True, SM90)["groups"] is False  # other widths unchanged


def test_launch_config_is_valid_for_any_shape():
    """The shipped rule never picks a configuration the kernel would refuse."""
    for layout_5d in (True, False):
        for DK in (16, 32, 48, 64, 96, 128, 192, 256, 320, 384, 512, 576, 1024):
            for DV in (16, 64, 128, 384, 512) if layout_5d else (16, 40, 128, 576):
                for H in (1, 2, 3, 8, 16):
                    for T in (1, 100, 129, 1500, 5000, 40000):
                        plan = fw.host._Plan(T, H, DK, DV, layout_5d, 64, 1 << 20, FN, None, None)
                        for native in (True, False):
                            for target in (SM90, INTERPRETER, known_target("gfx942"), known_target("gfx950")):
                                cfg = fw.host._resolve_config(plan, None, native, target)
                                assert cfg["d_split"] & (cfg["d_split"] - 1) == 0


@pytest.mark.parametrize("bad,match", [
    (dict(groups=True, block_t=8), "block_t"),  # groups need whole groups per window
    (dict(block_t=3, groups=False), "block_t"),
    (dict(heads_per_program=3), "heads_per_program"),
    (dict(d_split=4), "d_split"),  # 32 dims / 4 < one 16-byte vector
    (dict(parts="k", split_kv=False), "parts"),
    (dict(windows=4), "unknown"),
    (dict(maxnreg=8), "maxnreg"),
    (dict(maxnreg=64.0), "maxnreg"),
])
def test_bad_private_config_raises_before_writing(bad, match):
    g = _gen(43)
    kc, vc = ref.make_caches("5d", 2, 16, 2, 32, 32, gen=g, typed=FN)
    kc0, vc0 = kc.view(torch.uint8).clone(), vc.view(torch.uint8).clone()
    k = ref.make_input(20, 2, 32, torch.bfloat16, gen=g)
    with pytest.raises(ValueError, match=match):
        fw.write_kv_fp8(k, k, kc, vc, torch.arange(20), 1.0, 1.0, _config=bad)
    assert torch.equal(kc.view(torch.uint8), kc0) and torch.equal(vc.view(torch.uint8), vc0)


@pytest.mark.parametrize("offset", [0, 3, 15, 16, 17])
def test_run_aligned_to_the_slot_grid_not_to_the_token_grid(offset):
    """A long run starting at token `offset`, slot 5 mod 16, then one ending exactly at T."""
    g = _gen(offset)
    H, D, page, n_blocks = 1, 32, 64, 6
    head = 5 * page + torch.randperm(page, generator=g)[:offset]  # scattered prefix, page 5
    run = torch.arange(64 + 5, 64 + 5 + 70)
    tail = torch.arange(4 * 64, 4 * 64 + 32)  # two complete groups ending at T
    loc = torch.cat([head, run, tail]).to(torch.int32)
    T = loc.numel()
    k = ref.make_input(T, H, D, torch.float16, gen=g)
    v = ref.make_input(T, H, D, torch.float16, gen=g)
    kc, vc = ref.make_caches("5d", n_blocks, page, H, D, D, gen=g, typed=FNUZ)
    _write_and_check(k, v, kc, vc, loc, torch.tensor(2.5), 0.01, FNUZ, "5d")


@pytest.mark.parametrize("block_t", [16, 32])
def test_group_candidates_that_are_not_complete_groups(block_t):
    """Tokens that look like group leaders from their own slot and the slot X-1
    tokens later, but whose groups are broken: two such candidates in one
    X-block, a candidate with a foreign slot inside, and then a real group.
    Every byte must still land (the byte path takes what the vector path
    does not)."""
    g = _gen(71 + block_t)
    H, D, page, n_blocks = 2, 32, 64, 4
    two = [0] + list(range(16, 30)) + [15, 31]  # candidates at tokens 0 (0..15) and 1 (16..31)
    broken = list(range(64, 80))
    broken[9] = 200  # starts at 64, ends at 79, a foreign slot inside
    real = list(range(128, 144))  # a complete group
    loc = torch.tensor(two + broken + real + [-1] * 3, dtype=torch.int64)
    T = loc.numel()
    k = ref.make_input(T, H, D, torch.bfloat16, gen=g)
    v = ref.make_input(T, H, D, torch.bfloat16, gen=g)
    kc, vc = ref.make_caches("5d", n_blocks, page, H, D, D, gen=g, typed=FN)
    _write_and_check(k, v, kc, vc, loc, 0.5, 0.75, FN, "5d",
                     _config=dict(groups=True, block_t=block_t))


def _unaligned_input(T, H, D, dtype, gen):
    """(T, H, D) input whose rows start 2 bytes past a 4-byte boundary."""
    flat = ref.make_input(1, 1, T * H * D + 1, dtype, gen=gen).reshape(-1)
    return flat[1:].view(T, H, D)


def test_v_words_eligibility():
    g = _gen(5)
    assert fw.host._v_words_ok(ref.make_input(8, 2, 32, torch.bfloat16, gen=g))
    assert fw.host._v_words_ok(ref.make_input(8, 2, 32, torch.float16, gen=g, token_pad=16))
    assert not fw.host._v_words_ok(ref.make_input(8, 2, 32, torch.float32, gen=g))
    assert not fw.host._v_words_ok(ref.make_input(8, 2, 32, torch.bfloat16, gen=g, token_pad=3))  # odd row stride
    assert not fw.host._v_words_ok(_unaligned_input(8, 2, 32, torch.bfloat16, g))


def test_v_words_launch_gives_each_thread_one_word():
    # NVIDIA defaults: 128 words on 4 warps of 32 threads, as chosen
    assert fw.config._v_words_launch(128, 4, 32, warps_fixed=False) == (128, 4)
    # 64 words: two warps, not four threads per word pair repeated
    assert fw.config._v_words_launch(64, 4, 32, warps_fixed=False) == (64, 2)
    # 64-thread wavefronts (AMD CDNA): 128 words fill 2 warps
    assert fw.config._v_words_launch(128, 4, 64, warps_fixed=False) == (128, 2)
    assert fw.config._v_words_launch(16, 4, 64, warps_fixed=False) == (16, 1)
    # more words than threads: chunks of one word per thread
    assert fw.config._v_words_launch(512, 4, 32, warps_fixed=False) == (128, 4)
    # warps the caller fixed (sweeps) are kept
    assert fw.config._v_words_launch(64, 4, 32, warps_fixed=True) == (64, 4)


def test_v_group_launch_fetches_rows_early_only_with_one_block_and_one_chunk():
    cfg = fw.launch_config(8192, 8, 128, 128, True, True, SM90)  # groups, 2 heads x 64 words, v_spec
    assert fw.config.v_group_launch(cfg, 128, v_ok=True, warp_size=32, warps_fixed=False) == (True, True, 128, 4)
    assert fw.config.v_group_launch(cfg, 128, v_ok=False, warp_size=32, warps_fixed=False) == (False, False, 1, 4)
    two_chunks = dict(cfg, num_warps=2)  # 128 words on 64 fixed threads
    assert fw.config.v_group_launch(two_chunks, 128, v_ok=True, warp_size=32, warps_fixed=True) == (True, False, 64, 2)
    two_blocks = dict(cfg, block_t=32)
    assert fw.config.v_group_launch(two_blocks, 128, v_ok=True, warp_size=32, warps_fixed=False)[:2] == (True, False)
    bytes_only = fw.launch_config(512, 8, 128, 128, True, True, SM90)
    assert fw.config.v_group_launch(bytes_only, 128, v_ok=True, warp_size=32, warps_fixed=False)[:2] == (False, False)


def test_warp_size_of_the_device(monkeypatch):
    from sglang_kv5d import platform as tg

    class Props:
        warp_size = 64
        multi_processor_count = 304

    tg._device_target.cache_clear()
    monkeypatch.setattr(tg, "interpreting", lambda: False)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: Props())
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index: (9, 0))
    assert tg.target_of(torch.device("cuda", 0)).warp_size == 64
    assert tg.target_of(torch.device("cpu")).warp_size == 32

    class NoWarp:
        multi_processor_count = 304
        gcnArchName = "gfx942:sramecc+:xnack-"

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: NoWarp())  # no warp_size
    monkeypatch.setattr(torch.version, "hip", "6.2")
    t = tg.target_of(torch.device("cuda", 1))
    assert t.warp_size == 64 and t.arch == "gfx942" and t.converts(torch.float8_e4m3fnuz)
    assert not t.converts(torch.float8_e4m3fn)
    tg._device_target.cache_clear()


V_WORDS_CASES = [
    # input dtype, unaligned rows, H, D, extra _config (groups on in every case)
    (torch.bfloat16, False, 2, 32, dict(block_t=16, heads_per_program=2)),
    (torch.bfloat16, False, 2, 64, dict(block_t=32, heads_per_program=2, num_warps=1)),  # 64 words in 2 chunks
    (torch.float16, False, 1, 48, dict(block_t=16)),  # padded dims: 24 of 32 words per row
    (torch.bfloat16, False, 2, 64, dict(block_t=16, d_split=2, split_kv=False)),
    (torch.bfloat16, True, 2, 32, dict(block_t=16)),  # unaligned: the tile path
    (torch.float16, True, 1, 48, dict(block_t=32)),
    (torch.bfloat16, False, 1, 256, dict(block_t=16, heads_per_program=1, d_split=1)),  # whole 256-dim rows
    (torch.bfloat16, False, 2, 256, dict(block_t=16, token_major=False)),
    # rows fetched before the group check (one X-block per window, one chunk of words)
    (torch.bfloat16, False, 2, 32, dict(block_t=16, heads_per_program=2, v_spec=True)),
    (torch.float16, False, 1, 48, dict(block_t=16, v_spec=True)),  # padded dims
    (torch.bfloat16, False, 1, 256, dict(block_t=16, d_split=2, v_spec=True)),
    (torch.bfloat16, False, 2, 64, dict(block_t=32, heads_per_program=2, v_spec=True)),  # two X-blocks: no speculation
]


@pytest.mark.parametrize("spec", [False, True])
def test_group_leader_after_other_aligned_slots_in_its_window(spec):
    """Windows whose first tokens have slots % 16 == 0 that lead no complete
    group, followed by a token that does: the leader is the window's last such
    token (the one the speculative fetch takes), never the first."""
    g = _gen(77)
    H, D, page, n_blocks = 2, 32, 32, 24
    loc = torch.cat([
        torch.tensor([5 * 16, 7 * 16 + 3, 9 * 16]),  # aligned, unaligned, aligned: no groups
        torch.arange(20 * 16, 20 * 16 + 16),  # a complete group from token 3 of window 0
        torch.tensor([11 * 16, 13 * 16 + 1, 14 * 16, -1, 15 * 16, 2 * 16 + 5]),  # window 1: aligned singles
        torch.arange(30 * 16, 30 * 16 + 16),  # a complete group from token 9 of window 1
        torch.tensor([3 * 16]),  # an aligned single that cannot complete a group (ends at T)
    ])
    T = loc.shape[0]
    k = ref.make_input(T, H, D, torch.bfloat16, gen=g)
    v = ref.make_input(T, H, D, torch.bfloat16, gen=g, token_pad=16)
    kc, vc = ref.make_caches("5d", n_blocks, page, H, D, D, gen=g, typed=FN)
    _write_and_check(k, v, kc, vc, loc, 0.5, 1.5, FN, "5d",
                     _config=dict(groups=True, block_t=16, heads_per_program=2, v_spec=spec))


@pytest.mark.parametrize("case", V_WORDS_CASES, ids=lambda c: f"{str(c[0])[6:]}-{'unaligned' if c[1] else 'aligned'}-h{c[2]}-d{c[3]}-{len(c[4])}"
                         + ("-spec" if c[4].get("v_spec") else ""))
def test_v_groups_transposed_in_registers_or_through_tiles_write_the_same_bytes(case):
    """The group path with 32-bit words (v_words) and with tiles: both exact,
    both the same bytes, on runs, broken groups and scattered slots."""
    dtype, unaligned, H, D, extra = case
    g = _gen(91 + D + H)
    page, n_blocks, T = 32, 12, 150
    k = ref.make_input(T, H, D, dtype, gen=g)
    v = _unaligned_input(T, H, D, dtype, g) if unaligned else ref.make_input(T, H, D, dtype, gen=g, token_pad=32)
    assert fw.host._v_words_ok(v) is not unaligned
    loc = ref.loc_pattern("mixed", T, n_blocks * page, page, gen=g)
    results = []
    for words in (True, False):
        kc, vc = ref.make_caches("5d", n_blocks, page, H, D, D, gen=_gen(3), typed=FN)
        # (the share one step off float64 is a property of these inputs, as the
        # bytes equal torch's fp32 quotient rounded to fp8; 37 of 14336 for D=64)
        _write_and_check(k, v, kc, vc, loc, 0.37, torch.tensor([1.9]), FN, "5d", max_f64_share=4e-3,
                         _config=dict(groups=True, v_words=words, **extra))
        results.append(vc.view(torch.uint8).clone())
    assert torch.equal(results[0], results[1])


@pytest.mark.parametrize("layout", ["5d", "nhd"])
def test_single_token_page_boundaries_and_skips(layout):
    g = _gen(11)
    H, D, page, n_blocks = 2, 32, 16, 4
    kc, vc = ref.make_caches(layout, n_blocks, page, H, D, D, gen=g, typed=FN)
    for slot in (0, page - 1, page, 2 * page + 7, n_blocks * page - 1, -1, -5):
        k = ref.make_input(1, H, D, torch.bfloat16, gen=g)
        v = ref.make_input(1, H, D, torch.bfloat16, gen=g)
        loc = torch.tensor([slot])
        n = _write_and_check(k, v, kc, vc, loc, 1.0, torch.tensor([0.3]), FN, layout)
        assert n == (0 if slot < 0 else 2 * H * D)


@pytest.mark.parametrize("layout", ["5d", "nhd"])
def test_zero_tokens_is_a_noop(layout):
    g = _gen(12)
    kc, vc = ref.make_caches(layout, 2, 16, 1, 16, 16, gen=g, typed=FN)
    kc0, vc0 = kc.view(torch.uint8).clone(), vc.view(torch.uint8).clone()
    k = torch.empty(0, 1, 16, dtype=torch.bfloat16)
    fw.write_kv_fp8(k, k, kc, vc, torch.empty(0, dtype=torch.int64), 1.0, 1.0)
    assert torch.equal(kc.view(torch.uint8), kc0) and torch.equal(vc.view(torch.uint8), vc0)


def test_all_negative_slots_write_nothing():
    g = _gen(13)
    kc, vc = ref.make_caches("5d", 2, 16, 1, 16, 16, gen=g)
    k = ref.make_input(40, 1, 16, torch.bfloat16, gen=g)
    n = _write_and_check(k, k, kc, vc, torch.full((40,), -1), 1.0, 1.0, FN, "5d", pass_dtype=FN)
    assert n == 0


def test_strided_loc_and_nhd_cache_views():
    """loc with a stride, NHD caches that are slices of a wider buffer (slot/head strides)."""
    g = _gen(14)
    H, D, slots, T = 2, 16, 64, 30
    big_k = ref.poison_like_shape((slots, H, D + 16), gen=g)
    big_v = ref.poison_like_shape((slots, H, D + 16), gen=g)
    kc, vc = big_k[:, :, :D], big_v[:, :, 16:]
    loc = ref.loc_pattern("mixed", 2 * T, slots, 16, gen=g)[::2]
    assert loc.stride(0) == 2
    k = ref.make_input(T, H, D, torch.bfloat16, gen=g)
    v = ref.make_input(T, H, D, torch.bfloat16, gen=g)
    outside = [big_k[:, :, D:].clone(), big_v[:, :, :16].clone()]
    kc0, vc0 = kc.clone(), vc.clone()
    fw.write_kv_fp8(k, v, kc, vc, loc, 0.8, 0.6, fp8_dtype=FNUZ)
    ek, ev = ref.reference_write_kv_fp8(k, v, kc0, vc0, loc, 0.8, 0.6, fp8_dtype=FNUZ, mode="fp32")
    assert torch.equal(kc, ek) and torch.equal(vc, ev)
    assert torch.equal(big_k[:, :, D:], outside[0]) and torch.equal(big_v[:, :, :16], outside[1])


# --------------------------------------------------------------------------- #
# Validation                                                                  #
# --------------------------------------------------------------------------- #


def _valid_args(layout="5d"):
    g = _gen(21)
    T, H, D, page, nb = 8, 2, 32, 32, 2
    k = ref.make_input(T, H, D, torch.bfloat16, gen=g)
    v = ref.make_input(T, H, D, torch.bfloat16, gen=g)
    kc, vc = ref.make_caches(layout, nb, page, H, D, D, gen=g, typed=FN)
    loc = torch.arange(T, dtype=torch.int64)
    return dict(k=k, v=v, k_cache=kc, v_cache=vc, loc=loc,
                k_scale=torch.tensor([0.5]), v_scale=1.0)


def _u8(a):
    a["k_cache"], a["v_cache"] = a["k_cache"].view(torch.uint8), a["v_cache"].view(torch.uint8)
    return a


BAD = [
    # (id, mutate(args) -> args, extra kwargs, exception, words in the message)
    ("scale-2-elements", lambda a: {**a, "k_scale": torch.tensor([0.5, 0.5])}, {}, ValueError, ["k_scale", "one-element"]),
    ("scale-float64", lambda a: {**a, "v_scale": torch.tensor([0.5], dtype=torch.float64)}, {}, TypeError, ["v_scale", "float32"]),
    ("scale-bf16", lambda a: {**a, "k_scale": torch.tensor([0.5], dtype=torch.bfloat16)}, {}, TypeError, ["k_scale", "float32"]),
    ("scale-device", lambda a: {**a, "v_scale": torch.tensor([0.5], device="meta")}, {}, ValueError, ["v_scale", "device"]),
    ("scale-zero", lambda a: {**a, "v_scale": 0.0}, {}, ValueError, ["v_scale", "positive"]),
    ("scale-negative", lambda a: {**a, "k_scale": -1.0}, {}, ValueError, ["k_scale", "positive"]),
    ("scale-inf", lambda a: {**a, "k_scale": float("inf")}, {}, ValueError, ["k_scale", "finite"]),
    ("scale-nan", lambda a: {**a, "v_scale": float("nan")}, {}, ValueError, ["v_scale", "finite"]),
    ("scale-fp32-underflow", lambda a: {**a, "v_scale": 1e-50}, {}, ValueError, ["v_scale", "float32"]),
    ("scale-fp32-overflow", lambda a: {**a, "k_scale": 1e39}, {}, ValueError, ["k_scale", "float32"]),
    ("scale-str", lambda a: {**a, "k_scale": "0.5"}, {}, TypeError, ["k_scale"]),
    ("scale-bool", lambda a: {**a, "k_scale": True}, {}, TypeError, ["k_scale"]),
    ("scale-none", lambda a: {**a, "v_scale": None}, {}, TypeError, ["v_scale"]),
    ("cache-bf16", lambda a: {**a, "k_cache": a["k_cache"].view(torch.uint8).to(torch.bfloat16),
                              "v_cache": a["v_cache"].view(torch.uint8).to(torch.bfloat16)}, {}, TypeError, ["k_cache", "float8"]),
    ("cache-e5m2", lambda a: {**a, "k_cache": a["k_cache"].view(torch.float8_e5m2),
                              "v_cache": a["v_cache"].view(torch.float8_e5m2)}, {}, TypeError, ["k_cache"]),
    ("cache-dtypes-differ", lambda a: {**a, "v_cache": a["v_cache"].view(torch.uint8)}, {}, TypeError, ["k_cache/v_cache"]),
    ("uint8-without-fp8_dtype", _u8, {}, TypeError, ["fp8_dtype", "required"]),
    ("fp8_dtype-e5m2", _u8, {"fp8_dtype": torch.float8_e5m2}, TypeError, ["fp8_dtype"]),
    ("fp8_dtype-disagrees", lambda a: a, {"fp8_dtype": FNUZ}, ValueError, ["fp8_dtype", "disagrees"]),
    ("k-int", lambda a: {**a, "k": a["k"].to(torch.int32)}, {}, TypeError, ["k:", "dtype"]),
    ("k-2d", lambda a: {**a, "k": a["k"].flatten(1)}, {}, ValueError, ["k:", "(T, H, D)"]),
    ("v-T-differs", lambda a: {**a, "v": a["v"][:-1]}, {}, ValueError, ["v:", "shape"]),
    ("v-H-differs", lambda a: {**a, "v": a["v"][:, :1]}, {}, ValueError, ["v:", "shape"]),
    ("k-dims-not-contiguous", lambda a: {**a, "k": a["k"].transpose(1, 2).contiguous().transpose(1, 2)}, {}, ValueError, ["k:", "stride(2)"]),
    ("v-heads-strided", lambda a: {**a, "v": torch.ones(8, 2, 48, dtype=torch.bfloat16)[:, :, :32]}, {}, ValueError, ["v:", "heads"]),
    ("loc-float", lambda a: {**a, "loc": a["loc"].float()}, {}, TypeError, ["loc", "int32"]),
    ("loc-2d", lambda a: {**a, "loc": a["loc"].view(2, 4)}, {}, ValueError, ["loc", "1-D"]),
    ("loc-short", lambda a: {**a, "loc": a["loc"][:-1]}, {}, ValueError, ["loc", "length"]),
    ("loc-list", lambda a: {**a, "loc": list(range(8))}, {}, TypeError, ["loc"]),
    ("loc-device", lambda a: {**a, "loc": torch.arange(8, device="meta")}, {}, ValueError, ["loc", "device"]),
    ("k5d-X8", lambda a: {**a, "k_cache": a["k_cache"].reshape(2, 2, 4, 32, 8)}, {}, ValueError, ["k_cache", "X = 16"]),
    ("k5d-H-wrong", lambda a: {**a, "k_cache": a["k_cache"].reshape(1, 4, 2, 32, 16)}, {}, ValueError, ["k_cache"]),
    ("v5d-page-mismatch", lambda a: {**a, "v_cache": a["v_cache"].reshape(2, 2, 1, 64, 16)}, {}, ValueError, ["v_cache", "page"]),
    ("v5d-D-wrong", lambda a: {**a, "v": torch.ones(8, 2, 16, dtype=torch.bfloat16)}, {}, ValueError, ["v_cache"]),
    ("v5d-blocks-differ", lambda a: {**a, "v_cache": a["v_cache"][:1]}, {}, ValueError, ["v_cache"]),
    ("k5d-not-contiguous", lambda a: {**a, "k_cache": a["k_cache"].transpose(0, 1)}, {}, ValueError, ["k_cache"]),
    ("ranks-mixed", lambda a: {**a, "v_cache": a["v_cache"].reshape(64, 2, 32)}, {}, ValueError, ["k_cache/v_cache", "5-D"]),
    ("cache-4d", lambda a: {**a, "k_cache": a["k_cache"].reshape(2, 2, 64, 16),
                            "v_cache": a["v_cache"].reshape(2, 2, 64, 16)}, {}, ValueError, ["k_cache/v_cache"]),
    ("k-not-tensor", lambda a: {**a, "k": a["k"].tolist()}, {}, TypeError, ["k:"]),
]


@pytest.mark.parametrize("bad", BAD, ids=[b[0] for b in BAD])
def test_validation_errors_leave_buffers_unchanged(bad):
    name, mutate, extra, exc, words = bad
    args = mutate(_valid_args())
    snap = {n: ref.bits(t) for n, t in args.items() if isinstance(t, torch.Tensor) and t.device.type == "cpu"}
    with pytest.raises(exc) as info:
        fw.write_kv_fp8(**args, **extra)
    msg = str(info.value)
    for w in words:
        assert w in msg, f"{w!r} not in {msg!r}"
    for n, b in snap.items():
        assert torch.equal(ref.bits(args[n]), b), f"{n} changed although the call was refused"


def test_nhd_validation_shapes():
    a = _valid_args("nhd")
    with pytest.raises(ValueError, match="k_cache"):
        fw.write_kv_fp8(**{**a, "k_cache": a["k_cache"][:, :1]})
    with pytest.raises(ValueError, match="v_cache"):
        fw.write_kv_fp8(**{**a, "v_cache": a["v_cache"][:10]})
    with pytest.raises(ValueError, match="v_cache"):
        fw.write_kv_fp8(**{**a, "v_cache": a["v_cache"][:, :, :16]})


# --------------------------------------------------------------------------- #
# Round trip through SGLang's own 5D reader                                   #
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("fp8_dtype", [FN, FNUZ])
def test_round_trip_with_sglang_gather(fp8_dtype):
    shuffle = pytest.importorskip(
        "sglang.kernels.ops.kvcache.shuffle_5d_cache",
        reason="SGLang 0.5.23 layout module (sglang.kernels.ops.kvcache.shuffle_5d_cache) not importable",
    )
    if type(shuffle.gather_shuffle_5d_to_linear).__name__ != "InterpretedFunction":
        shuffle = importlib.reload(shuffle)
    g = _gen(31)
    H, D, page, nb, T = 2, 32, 32, 6, 70
    k = ref.make_input(T, H, D, torch.bfloat16, gen=g)
    v = ref.make_input(T, H, D, torch.bfloat16, gen=g)
    kc, vc = ref.make_caches("5d", nb, page, H, D, D, gen=g)
    loc = ref.loc_pattern("mixed", T, nb * page, page, gen=g)
    free = [s for s in range(nb * page) if s not in set(loc.tolist())]
    loc[loc < 0] = torch.tensor(free[: int((loc < 0).sum())], dtype=torch.int64)
    assert int(loc.min()) >= 0
    fw.write_kv_fp8(k, v, kc, vc, loc, 0.25, torch.tensor([3.0]), fp8_dtype=fp8_dtype)
    k_out, v_out = shuffle.launch_gather_shuffle_5d_to_linear(kc, vc, loc)
    assert torch.equal(k_out, ref.quantize_fp8_fp32(k, 0.25, fp8_dtype))
    assert torch.equal(v_out, ref.quantize_fp8_fp32(v, 3.0, fp8_dtype))


# --------------------------------------------------------------------------- #
# What AMD runs                                                               #
# --------------------------------------------------------------------------- #

AMD_CASES = [
    # (arch, layout, T the configuration is chosen for, H, D, loc kind): the
    # configurations launch_config picks with the hardware conversion (bytes
    # path with decode lanes, bytes path, the group path of D <= 128 past
    # 4096 tokens and of D = 256 from 8 MiB of V), run on 96 tokens
    ("gfx942", "5d", 16, 2, 32, "scattered"),
    ("gfx942", "5d", 3000, 2, 32, "mixed"),
    ("gfx950", "5d", 5000, 1, 64, "runs"),
    ("gfx942", "5d", 5000, 2, 32, "tricky"),
    ("gfx942", "5d", 40000, 1, 256, "runs"),
    ("gfx950", "nhd", 3000, 2, 32, "mixed"),
]


@pytest.mark.parametrize("arch,layout,T_cfg,H,D,kind", AMD_CASES, ids=lambda c: str(c))
def test_amd_launch_configurations_write_the_same_bytes(arch, layout, T_cfg, H, D, kind):
    """The configurations the host code picks for gfx942 / gfx950 (64-lane
    waves, the hardware-conversion launch_config, flat offsets for the byte
    stores), run by the interpreter with the integer encoder: the hardware
    conversion itself cannot run here (tests/test_amd_gate.py shows it is in
    the ISA; its numerics need an AMD GPU)."""
    from sglang_kv5d.platform import known_target

    target = known_target(arch)
    fp8 = FNUZ if arch == "gfx942" else FN
    g = _gen(T_cfg + H + D + len(kind))
    T, page, n_blocks = 96, 64, 6
    k = ref.make_input(T, H, D, torch.bfloat16, gen=g, token_pad=16)
    v = ref.make_input(T, H, D, torch.bfloat16, gen=g, token_pad=16)
    kc, vc = ref.make_caches(layout, n_blocks, page, H, D, D, gen=g)
    loc = ref.loc_pattern(kind, T, n_blocks * page, page, gen=g)
    cfg = fw.launch_config(T_cfg, H, D, D, layout == "5d", True, target)
    _write_and_check(k, v, kc, vc, loc, 0.5, 0.75, fp8, layout, pass_dtype=fp8, _config=cfg,
                     _encoder="bits", _target=target)
