"""Fused FP8 KV write on a real GPU, at full size.

Same checks as tests/kernels/test_fp8_write.py (bit-exact against torch's own
rounding of the fp32 quotient, the float64 reference within one step on a tiny
share, exactly the addressed bytes changed, inputs untouched), plus: both FP8
encoders (hardware conversion and the integer one), CUDA-graph replay with
scales and slot ids changed between replays, caches over 2**31 bytes, and the
round trip through SGLang's 5D reader when SGLang is importable.

The kernel module is imported inside the tests, never at collection: on a CPU
machine the interpreter flag must be in place before any kernel is decorated.
"""

from __future__ import annotations

import importlib

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(),
                       reason="needs a CUDA/ROCm GPU: torch.cuda.is_available() is False"),
]

FN, FNUZ = torch.float8_e4m3fn, torch.float8_e4m3fnuz
# (H, D_k, D_v). The 5D defaults cover both V paths: bytes one by one at
# T = 4096 for D = 256, whole-vector groups at T = 32768 (8 MiB of V and more
# for D = 256, every D <= 128 past 1024 tokens).
GEOMETRIES = [(1, 256, 256), (8, 128, 128), (2, 128, 64), (2, 256, 256)]


@pytest.fixture(scope="module")
def fw():
    return importlib.import_module("sglang_kv5d.kernels.fp8_write")


@pytest.fixture(scope="module")
def ref():
    return importlib.import_module("sglang_kv5d.kernels.fp8_reference")


def _check(fw, ref, k, v, kc, vc, loc, ks, vs, fp8_dtype, layout, *, pass_dtype=None,
           f64=True, **kw):
    H, DK, DV = k.shape[1], k.shape[2], v.shape[2]
    before = [ref.bits(t) for t in (k, v, loc)]
    kc0, vc0 = kc.view(torch.uint8).clone(), vc.view(torch.uint8).clone()
    fw.write_kv_fp8(k, v, kc, vc, loc, ks, vs, fp8_dtype=pass_dtype, **kw)
    torch.cuda.synchronize()
    for b, t in zip(before, (k, v, loc)):
        assert torch.equal(b, ref.bits(t)), "an input changed"
    kb, vb = kc.view(torch.uint8), vc.view(torch.uint8)
    e32k, e32v = ref.reference_write_kv_fp8(k, v, kc0, vc0, loc, ks, vs, fp8_dtype=fp8_dtype, mode="fp32")
    for got, exp, name in ((kb, e32k, "K"), (vb, e32v, "V")):
        n_bad = int((got != exp).sum())
        assert n_bad == 0, f"{name}: {n_bad} bytes differ from torch's rounding"
    km, vm = ref.addressed_masks(layout, tuple(kb.shape), tuple(vb.shape), loc, H, DK, DV)
    km, vm = km.to(kb.device), vm.to(vb.device)
    assert torch.equal(kb[~km], kc0[~km]) and torch.equal(vb[~vm], vc0[~vm])
    if f64:
        e64k, e64v = ref.reference_write_kv_fp8(k, v, kc0, vc0, loc, ks, vs, fp8_dtype=fp8_dtype, mode="f64")
        written = int(km.sum()) + int(vm.sum())
        off = 0
        for got, exp, m in ((kb, e64k, km), (vb, e64v, vm)):
            dist = ref.fp8_step_distance(got[m], exp[m], fp8_dtype)
            assert dist.numel() == 0 or int(dist.max()) <= 1
            off += int((dist == 1).sum())
        # double rounding (fp32 quotient, then fp8): 1.1e-4 .. 1.6e-4 observed on the H200
        assert off <= max(2, 1e-3 * written), f"{off}/{written} one step off float64"


@pytest.mark.parametrize("encoder", ["auto", "bits"])
@pytest.mark.parametrize("fp8_dtype", [FN, FNUZ], ids=["e4m3fn", "e4m3fnuz"])
@pytest.mark.parametrize("layout", ["5d", "nhd"])
@pytest.mark.parametrize("geo", GEOMETRIES, ids=lambda g: f"H{g[0]}-Dk{g[1]}-Dv{g[2]}")
def test_full_size_prefill_and_decode(fw, ref, geo, layout, fp8_dtype, encoder):
    if encoder == "bits" and (fp8_dtype == FNUZ or geo != GEOMETRIES[0]):
        pytest.skip("integer encoder forced for e4m3fn on one geometry only (e4m3fnuz always uses it)")
    H, DK, DV = geo
    page = 64
    dev = torch.device("cuda")
    gen = torch.Generator().manual_seed(H * 1000 + DK + DV + len(layout))
    gd = torch.Generator(device=dev).manual_seed(5)
    for T, kind, pad in ((32768, "runs", 0), (4096, "mixed", 64), (96, "scattered", 0)):
        n_blocks = (T * 5 // 4) // page + 4 if kind != "mixed" else T // 4
        k = ref.make_input(T, H, DK, torch.bfloat16, gen=gd, device=dev, token_pad=pad)
        v = ref.make_input(T, H, DV, torch.bfloat16, gen=gd, device=dev, token_pad=pad)
        kc, vc = ref.make_caches(layout, n_blocks, page, H, DK, DV, gen=gd, device=dev, typed=fp8_dtype)
        if kind == "runs":
            from sglang_kv5d.bench.fp8_write import prefill_loc

            loc = prefill_loc(T, n_blocks * page, page, gen=gen, device=dev)
        else:
            loc = ref.loc_pattern(kind, T, n_blocks * page, page, gen=gen).to(dev)
        ks = torch.tensor([0.6], device=dev)
        _check(fw, ref, k, v, kc, vc, loc, ks, 1.7, fp8_dtype, layout, f64=(T != 32768 or H == 1),
               _encoder=encoder)


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@pytest.mark.parametrize("encoder", ["auto", "bits"])
@pytest.mark.parametrize("fp8_dtype", [FN, FNUZ], ids=["e4m3fn", "e4m3fnuz"])
def test_encoder_extremes_on_the_device(fw, ref, fp8_dtype, encoder):
    """Every fp8 value, the midpoints between neighbours and one float32 step
    either side of them, overflow, +/-inf and NaN, through the device's own
    conversion (hardware ``cvt.satfinite`` for e4m3fn on sm_89+): bit-exact
    against torch; inf saturates to +/-FMAX, NaN stays NaN. With a scale of
    1e-30 every finite quotient overflows float32 and must saturate as well."""
    dev = torch.device("cuda")
    vals = ref.fp8_values(fp8_dtype)
    pos = vals[torch.isfinite(vals) & (vals >= 0)].unique().sort().values
    mids = ((pos[1:] + pos[:-1]) / 2).float()
    fmax = ref.FP8_MAX[fp8_dtype]
    extra = torch.tensor([0.0, 1e-45, 2.0**-12, fmax, fmax + 1, fmax * 1.03, fmax * 2, 1e6, 3.0e38,
                          float("inf")])
    mag = torch.cat([pos.float(), mids, torch.nextafter(mids, torch.full_like(mids, float("inf"))),
                     torch.nextafter(mids, torch.zeros_like(mids)), extra])
    x = torch.cat([mag, -mag, torch.tensor([float("nan"), -0.0]), torch.tensor([float("nan")]).neg()])
    n = (x.numel() + 15) // 16 * 16
    x = torch.cat([x, torch.ones(n - x.numel())]).view(-1, 1, 16)
    T = x.shape[0]
    xd = x.to(dev)
    for scale in (1.0, 1e-30):
        kc = torch.zeros(T, 1, 16, dtype=torch.uint8, device=dev)
        vc = torch.zeros(T, 1, 16, dtype=torch.uint8, device=dev)
        fw.write_kv_fp8(xd, xd, kc, vc, torch.arange(T, device=dev), scale, scale,
                        fp8_dtype=fp8_dtype, _encoder=encoder)
        exp = ref.quantize_fp8_fp32(x, scale, fp8_dtype).flatten()
        xf = x.flatten()
        num = ~torch.isnan(xf)
        for c in (kc, vc):
            got = c.cpu().flatten()
            assert torch.equal(got[num], exp[num]), f"{int((got[num] != exp[num]).sum())} codes differ"
        f = kc.cpu().view(fp8_dtype).float().flatten()
        assert torch.isnan(f[~num]).all() and torch.isnan(vc.cpu().view(fp8_dtype).float().flatten()[~num]).all()
        finite = f[num]
        assert not torch.isnan(finite).any() and float(finite.abs().max()) == fmax


@pytest.mark.parametrize("in_dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize("layout", ["5d", "nhd"])
def test_other_input_dtypes(fw, ref, in_dtype, layout):
    dev = torch.device("cuda")
    gd = torch.Generator(device=dev).manual_seed(9)
    gen = torch.Generator().manual_seed(9)
    H, D, page, T = 2, 128, 64, 8192
    nb = T // page + 8
    k = ref.make_input(T, H, D, in_dtype, gen=gd, device=dev, token_pad=32)
    v = ref.make_input(T, H, D, in_dtype, gen=gd, device=dev)
    kc, vc = ref.make_caches(layout, nb, page, H, D, D, gen=gd, device=dev)
    loc = ref.loc_pattern("mixed", T, nb * page, page, gen=gen).to(dev, torch.int32)
    _check(fw, ref, k, v, kc, vc, loc, 0.33, torch.tensor([2.0], device=dev), FNUZ, layout, pass_dtype=FNUZ)


@pytest.mark.parametrize("layout", ["5d", "nhd"])
def test_cuda_graph_replay_reads_scales_and_slots_on_device(fw, ref, layout):
    dev = torch.device("cuda")
    gd = torch.Generator(device=dev).manual_seed(3)
    H, D, page, T, nb = 2, 256, 64, 512, 24
    k = ref.make_input(T, H, D, torch.bfloat16, gen=gd, device=dev)
    v = ref.make_input(T, H, D, torch.bfloat16, gen=gd, device=dev)
    kc, vc = ref.make_caches(layout, nb, page, H, D, D, gen=gd, device=dev, typed=FN)
    loc = torch.arange(T, device=dev) + 37
    ks = torch.tensor([1.0], device=dev)
    vs = torch.tensor([1.0], device=dev)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fw.write_kv_fp8(k, v, kc, vc, loc, ks, vs)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fw.write_kv_fp8(k, v, kc, vc, loc, ks, vs)
    # new scales, new slots (now scattered), new inputs: all read at replay time
    ks.fill_(0.25)
    vs.fill_(3.0)
    loc.copy_(torch.randperm(nb * page, device=dev)[:T])
    k.copy_(ref.make_input(T, H, D, torch.bfloat16, gen=gd, device=dev))
    kc0, vc0 = kc.view(torch.uint8).clone(), vc.view(torch.uint8).clone()
    graph.replay()
    torch.cuda.synchronize()
    ek, ev = ref.reference_write_kv_fp8(k, v, kc0, vc0, loc, 0.25, 3.0, fp8_dtype=FN, mode="fp32")
    assert torch.equal(kc.view(torch.uint8), ek) and torch.equal(vc.view(torch.uint8), ev)


@pytest.mark.parametrize("cfg", [None, dict(groups=True, block_t=16)], ids=["default", "v-groups"])
def test_caches_over_2gib_use_64bit_offsets(fw, ref, cfg):
    """The last 48 slots of a >2 GiB pool, bytes one by one (default at T=52)
    and as three complete V groups (the group path's 64-bit addressing)."""
    dev = torch.device("cuda")
    H, D, page = 8, 128, 64
    nb = (2**31) // (H * D * page) + 64  # > 2**31 bytes per cache
    try:
        kc = torch.full((nb, H, D // 16, page, 16), 0x5A, dtype=torch.uint8, device=dev)
        vc = torch.full((nb, H, page // 16, D, 16), 0x5A, dtype=torch.uint8, device=dev)
    except torch.cuda.OutOfMemoryError:
        pytest.skip("not enough GPU memory for two >2 GiB caches")
    gd = torch.Generator(device=dev).manual_seed(4)
    T = 52
    k = ref.make_input(T, H, D, torch.bfloat16, gen=gd, device=dev)
    v = ref.make_input(T, H, D, torch.bfloat16, gen=gd, device=dev)
    top = nb * page
    loc = torch.cat([torch.arange(top - 48, top), torch.tensor([0, 1, page, top // 2])]).to(dev)
    fw.write_kv_fp8(k, v, kc, vc, loc, 1.5, 0.5, fp8_dtype=FN, _config=cfg)
    torch.cuda.synchronize()
    qk = ref.quantize_fp8_fp32(k, 1.5, FN)
    qv = ref.quantize_fp8_fp32(v, 0.5, FN)
    # last 48 tokens of the pool: the last 48 slots of the last block
    b = nb - 1
    got_k = kc[b, :, :, page - 48:, :].permute(2, 0, 1, 3).reshape(48, H, D)
    got_v = vc[b, :, 1:, :, :].permute(0, 1, 3, 2).reshape(H, 48, D).transpose(0, 1)
    assert torch.equal(got_k, qk[:48]) and torch.equal(got_v, qv[:48])
    del kc, vc
    torch.cuda.empty_cache()


@pytest.mark.parametrize("fp8_dtype", [FN, FNUZ], ids=["e4m3fn", "e4m3fnuz"])
def test_round_trip_with_sglang_gather(fw, ref, fp8_dtype):
    shuffle = pytest.importorskip(
        "sglang.kernels.ops.kvcache.shuffle_5d_cache",
        reason="SGLang's 0.5.23 5D reader (sglang.kernels.ops.kvcache.shuffle_5d_cache) not importable",
    )
    dev = torch.device("cuda")
    gd = torch.Generator(device=dev).manual_seed(6)
    H, D, page, T = 2, 256, 64, 20000
    nb = T // page + 8
    k = ref.make_input(T, H, D, torch.bfloat16, gen=gd, device=dev)
    v = ref.make_input(T, H, D, torch.bfloat16, gen=gd, device=dev)
    kc, vc = ref.make_caches("5d", nb, page, H, D, D, gen=gd, device=dev)
    loc = torch.randperm(nb * page, device=dev)[:T]
    loc[:5000] = torch.arange(5000, device=dev) + 3  # a long run too
    used = torch.zeros(nb * page, dtype=torch.bool, device=dev)
    used[loc[:5000]] = True
    rest = torch.nonzero(~used).flatten()
    loc[5000:] = rest[torch.randperm(rest.numel(), device=dev)[: T - 5000]]
    fw.write_kv_fp8(k, v, kc, vc, loc, 0.5, torch.tensor([2.0], device=dev), fp8_dtype=fp8_dtype)
    k_out, v_out = shuffle.launch_gather_shuffle_5d_to_linear(kc, vc, loc)
    assert torch.equal(k_out, ref.quantize_fp8_fp32(k, 0.5, fp8_dtype))
    assert torch.equal(v_out, ref.quantize_fp8_fp32(v, 2.0, fp8_dtype))


@pytest.mark.parametrize("layout", ["5d", "nhd"])
def test_store_floor_writes_the_addressed_bytes_on_the_device(ref, layout):
    """The benchmark's store floor (compiled, full size) writes exactly what
    the fused write addresses: prefill runs (whole-vector groups and loose
    edges), decode slots, and skipped / out-of-range ids."""
    from sglang_kv5d.bench import store_floor
    from sglang_kv5d.bench.fp8_write import decode_loc, prefill_loc

    dev = torch.device("cuda")
    gen = torch.Generator().manual_seed(8)
    gd = torch.Generator(device=dev).manual_seed(8)
    H, D, page = 8, 128, 64
    for T, kind in ((4096, "runs"), (2048, "decode")):
        n_blocks = (T * 5 // 4) // page + 4
        kc, vc = ref.make_caches(layout, n_blocks, page, H, D, D, gen=gd, device=dev)
        if kind == "runs":
            loc = prefill_loc(T, n_blocks * page, page, gen=gen, device=dev)
        else:
            loc = decode_loc(T, n_blocks * page, gen=gen, device=dev)
        loc[::97] = -1
        loc[5] = n_blocks * page  # past the cache: skipped
        k0, v0 = kc.clone(), vc.clone()
        floor = store_floor.StoreFloor(kc, vc, loc)
        floor()
        torch.cuda.synchronize()
        km, vm = ref.addressed_masks(layout, tuple(kc.shape), tuple(vc.shape), loc, H, D, D)
        km, vm = km.to(dev), vm.to(dev)
        assert bool((kc[km] == store_floor._CODE).all()) and bool((vc[vm] == store_floor._CODE).all())
        assert torch.equal(kc[~km], k0[~km]) and torch.equal(vc[~vm], v0[~vm])
        if layout == "5d" and kind == "runs":
            assert floor.plan.leaders.numel() > 0  # the whole-vector programs ran
