"""5D decode / extend attention under the Triton CPU interpreter, against float64 references.

Small shapes only (the interpreter runs every program in numpy). Outputs are
poisoned with NaN before each call; caches hold fresh random data, and the slots
past each context (and the block-table entries past each sequence) are poisoned
too, so reading anything outside the context shows up.
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported anywhere below

import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from sglang_kv5d.kernels import attention_5d as A  # noqa: E402
from sglang_kv5d.kernels.attention_5d.kernel_common import fp8_to_f16  # noqa: E402
from sglang_kv5d.kernels.attention_reference import (  # noqa: E402
    decode_attention_5d_ref,
    extend_attention_5d_ref,
    gather_kv_5d,
    nhd_to_5d,
)

FN = torch.float8_e4m3fn
FNUZ = torch.float8_e4m3fnuz
POISON_BLOCK = 1_000_000  # block-table entries past the context: never read


def _x(dtype) -> int:
    return 16 if dtype in (FN, FNUZ, torch.uint8) else 8


def make_cache(
    num_blocks, page, H_kv, D, kv_dtype, *, gen, fp8_dtype=None, scale=1.0
):
    """Random 5D K/V caches. Returns (k5, v5, K_real, V_real) with NHD float64 truths."""
    k = torch.randn(num_blocks, page, H_kv, D, generator=gen, dtype=torch.float64)
    v = torch.randn(num_blocks, page, H_kv, D, generator=gen, dtype=torch.float64)
    if kv_dtype in (FN, FNUZ) or kv_dtype == torch.uint8:
        fdt = kv_dtype if kv_dtype != torch.uint8 else fp8_dtype
        kq = (k / scale).clamp(-200, 200).to(fdt)
        vq = (v / scale).clamp(-200, 200).to(fdt)
        k5, v5 = nhd_to_5d(kq.view(torch.uint8), vq.view(torch.uint8), 16)
        if kv_dtype != torch.uint8:
            k5, v5 = k5.view(fdt), v5.view(fdt)
    else:
        k5, v5 = nhd_to_5d(k.to(kv_dtype), v.to(kv_dtype), 8)
    return k5, v5


def make_tables(ctx_lens, page, num_blocks, *, gen, max_blocks=None):
    B = len(ctx_lens)
    need = [max(1, -(-c // page)) for c in ctx_lens]
    width = max_blocks or max(need)
    perm = torch.randperm(num_blocks, generator=gen)
    assert sum(need) <= num_blocks
    bt = torch.full((B, width), POISON_BLOCK, dtype=torch.int32)
    o = 0
    for b, n in enumerate(need):
        bt[b, :n] = perm[o : o + n].to(torch.int32)
        o += n
    return bt


def poison_tail(k5, v5, bt, ctx_lens, page):
    """Write NaN into the slots past each context in its last page."""
    X = k5.shape[-1]
    nan_byte = None
    if k5.dtype in (FN, FNUZ, torch.uint8):
        nan_byte = 0x7F if (k5.dtype == FN) else 0x80
    for b, c in enumerate(ctx_lens):
        if c % page == 0 or c == 0:
            continue
        blk = int(bt[b, c // page])
        t0 = c % page
        if nan_byte is not None:
            ku, vu = k5.view(torch.uint8), v5.view(torch.uint8)
            ku[blk, :, :, t0:, :] = nan_byte
            for t in range(t0, page):
                vu[blk, :, t // X, :, t % X] = nan_byte
        else:
            k5[blk, :, :, t0:, :] = float("nan")
            for t in range(t0, page):
                v5[blk, :, t // X, :, t % X] = float("nan")


def tol(kv_dtype):
    return dict(atol=3e-2, rtol=3e-2)


def check(out, ref, kv_dtype, what=""):
    assert torch.isfinite(out.float()).all(), f"{what}: non-finite output (poison leaked)"
    torch.testing.assert_close(out.double(), ref, **tol(kv_dtype), msg=lambda m: f"{what}: {m}")


def run_decode(
    *,
    B_ctx,
    H_q,
    H_kv,
    D,
    page,
    kv_dtype,
    fp8_dtype=None,
    window=-1,
    sinks=False,
    cap=0.0,
    num_splits=None,
    scale_kind="float",
    q_dtype=torch.bfloat16,
    seed=0,
    config=None,
):
    gen = torch.Generator().manual_seed(seed)
    nblocks = sum(max(1, -(-c // page)) for c in B_ctx) + 3
    is_fp8 = kv_dtype in (FN, FNUZ, torch.uint8)
    scale = 0.05 if is_fp8 else 1.0
    k5, v5 = make_cache(nblocks, page, H_kv, D, kv_dtype, gen=gen, fp8_dtype=fp8_dtype, scale=scale)
    bt = make_tables(B_ctx, page, nblocks, gen=gen)
    poison_tail(k5, v5, bt, B_ctx, page)
    ctx = torch.tensor(B_ctx, dtype=torch.int32)
    B = len(B_ctx)
    q = torch.randn(B, H_q, D, generator=gen).to(q_dtype)
    sk = torch.randn(H_q, generator=gen) * 2 if sinks else None
    if is_fp8:
        ks, vs = (scale, scale * 1.5) if scale_kind == "float" else (
            torch.tensor([scale], dtype=torch.float32),
            torch.tensor([scale * 1.5], dtype=torch.float32),
        )
    else:
        ks = vs = None
    sm = 1.0 / math.sqrt(D)
    out = torch.full((B, H_q, D), float("nan"), dtype=q_dtype)
    res = A.decode_attention_5d(
        q, k5, v5, bt, ctx, sm_scale=sm, k_scale=ks, v_scale=vs, fp8_dtype=fp8_dtype,
        sliding_window=window, sinks=sk, logit_cap=cap, num_splits=num_splits, out=out, _config=config,
    )
    assert res is out
    ref = decode_attention_5d_ref(
        q, k5, v5, bt, ctx, sm_scale=sm, k_scale=ks, v_scale=vs, fp8_dtype=fp8_dtype,
        sliding_window=window, sinks=sk, logit_cap=cap,
    )
    check(out, ref, kv_dtype, f"decode {kv_dtype} ctx={B_ctx} G={H_q // H_kv} D={D} page={page}")


# ----------------------------------------------------------------------------- decode

DECODE_CASES = [
    # (B_ctx, H_q, H_kv, D, page, kv_dtype, fp8_dtype)
    ([1, 37, 129], 4, 1, 64, 16, torch.bfloat16, None),
    ([64, 65, 200], 8, 2, 128, 64, torch.bfloat16, None),
    ([5, 130], 16, 1, 256, 64, torch.bfloat16, None),
    ([70, 33], 2, 2, 64, 8, torch.float16, None),
    ([17, 90], 3, 1, 96, 24, torch.bfloat16, None),
    ([100], 32, 2, 64, 32, torch.bfloat16, None),
    ([1, 64, 150], 4, 1, 64, 16, FN, None),
    ([77, 129], 8, 2, 128, 64, FNUZ, None),
    ([40, 3], 4, 2, 64, 32, torch.uint8, FN),
    ([95], 16, 1, 256, 16, torch.uint8, FNUZ),
]


@pytest.mark.parametrize("case", DECODE_CASES, ids=lambda c: f"ctx{c[0]}-g{c[1]//c[2]}-d{c[3]}-p{c[4]}-{str(c[5]).split('.')[-1]}")
@pytest.mark.parametrize("splits", [1, 3, None])
def test_decode_basic(case, splits):
    B_ctx, H_q, H_kv, D, page, kvd, f8 = case
    run_decode(B_ctx=B_ctx, H_q=H_q, H_kv=H_kv, D=D, page=page, kv_dtype=kvd, fp8_dtype=f8, num_splits=splits)


@pytest.mark.parametrize(
    "kvd,f8,window,sinks,cap,splits",
    [
        (torch.bfloat16, None, 20, False, 0.0, 1),
        (torch.bfloat16, None, 20, True, 0.0, 4),
        (torch.bfloat16, None, 63, False, 30.0, 2),
        (torch.bfloat16, None, -1, True, 5.0, 5),
        (FN, None, 33, True, 0.0, 3),
        (FNUZ, None, 7, False, 10.0, 1),
        (torch.uint8, FN, -1, True, 2.0, 2),
    ],
)
def test_decode_features(kvd, f8, window, sinks, cap, splits):
    run_decode(
        B_ctx=[1, 19, 64, 150], H_q=8, H_kv=2, D=64, page=16, kv_dtype=kvd, fp8_dtype=f8,
        window=window, sinks=sinks, cap=cap, num_splits=splits, seed=7,
    )


@pytest.mark.parametrize("kvd", [FN, FNUZ])
def test_decode_fp8_tensor_scales(kvd):
    run_decode(
        B_ctx=[9, 100], H_q=4, H_kv=1, D=128, page=32, kv_dtype=kvd, scale_kind="tensor",
        num_splits=2, seed=3,
    )


def test_decode_fp32_and_fp16_queries():
    run_decode(B_ctx=[50, 7], H_q=4, H_kv=2, D=64, page=16, kv_dtype=torch.bfloat16, q_dtype=torch.float32)
    run_decode(B_ctx=[50, 7], H_q=4, H_kv=2, D=64, page=16, kv_dtype=FN, q_dtype=torch.float16)


def test_decode_window_semantics_exact_keys():
    """A one-hot V per position tells exactly which keys the decode token saw."""
    page, D, W, ctx = 16, 64, 10, 45
    nb = 4
    k = torch.zeros(nb, page, 1, D, dtype=torch.float64)
    v = torch.zeros(nb, page, 1, D, dtype=torch.float64)
    for p in range(nb * page):
        v[p // page, p % page, 0, p % D] = 1.0  # positions < 64 each own a column
    k5, v5 = nhd_to_5d(k.to(torch.float16), v.to(torch.float16), 8)
    bt = torch.arange(nb, dtype=torch.int32)[None]
    q = torch.zeros(1, 1, D, dtype=torch.float16)
    out = A.decode_attention_5d(
        q, k5, v5, bt, torch.tensor([ctx], dtype=torch.int32), sm_scale=1.0, sliding_window=W, num_splits=2
    )
    seen = (out[0, 0].float() > 1e-3).nonzero().flatten().tolist()
    assert seen == list(range(ctx - 1 - W, ctx)), seen  # W + 1 keys: p - W .. p


def test_decode_reads_int64_tables_and_lengths():
    """SGLang's seq_lens are int64: the kernel reads them (and int64 page tables)
    as they are, bit for bit the same as int32; other dtypes are refused."""
    gen = torch.Generator().manual_seed(5)
    ctx_lens, page, H_q, H_kv, D = [70, 33, 5], 16, 4, 2, 64
    nb = sum(-(-c // page) for c in ctx_lens) + 2
    k5, v5 = make_cache(nb, page, H_kv, D, torch.bfloat16, gen=gen)
    bt = make_tables(ctx_lens, page, nb, gen=gen)
    q = torch.randn(len(ctx_lens), H_q, D, generator=gen).bfloat16()
    ctx = torch.tensor(ctx_lens, dtype=torch.int32)
    a = A.decode_attention_5d(q, k5, v5, bt, ctx, sm_scale=0.125, num_splits=2)
    b = A.decode_attention_5d(q, k5, v5, bt.long(), ctx.long(), sm_scale=0.125, num_splits=2)
    assert torch.equal(a.view(torch.int16), b.view(torch.int16))
    with pytest.raises(TypeError, match="context_lens"):
        A.decode_attention_5d(q, k5, v5, bt, ctx.float(), sm_scale=0.125)
    with pytest.raises(TypeError, match="block_tables"):
        A.decode_attention_5d(q, k5, v5, bt.float(), ctx, sm_scale=0.125)


def test_decode_empty_batch():
    k5 = torch.randn(2, 1, 8, 16, 8).bfloat16()
    v5 = torch.randn(2, 1, 2, 64, 8).bfloat16()
    q = torch.empty(0, 4, 64, dtype=torch.bfloat16)
    out = A.decode_attention_5d(
        q, k5, v5, torch.empty(0, 3, dtype=torch.int32), torch.empty(0, dtype=torch.int32), sm_scale=0.1
    )
    assert out.shape == (0, 4, 64)


def test_default_splits_from_shapes_only(monkeypatch):
    dev = torch.device("cpu")
    assert A.default_num_splits(1, 1, 1, 32768, dev) > 1
    assert A.default_num_splits(128, 8, 1, 32768, dev) == 1
    assert A.default_num_splits(1, 1, 1, 16, dev) == 1
    # the H200's 132 SMs: the choices measured in docs/benchmarks.md
    monkeypatch.setattr(A.config, "_sm_count", lambda device: 132)
    assert A.default_num_splits(1, 1, 1, 1024, dev) == 32  # 32 tokens per split, under one wave
    assert A.default_num_splits(1, 1, 1, 8192, dev) == 132  # one wave of 62-token splits
    assert A.default_num_splits(1, 2, 1, 8192, dev) == 128  # 64 tokens per split
    assert A.default_num_splits(1, 1, 1, 32768, dev) == 256  # the cap
    assert A.default_num_splits(32, 1, 1, 32768, dev) == 9  # two waves (no occupancy known)
    assert A.default_num_splits(128, 2, 1, 8192, dev) == 2
    # with the compiled kernel's resident CTAs per SM: the most splits that fill one wave
    assert A.default_num_splits(32, 1, 1, 8192, dev, resident=3) == 12  # 384 CTAs in 396 slots
    assert A.default_num_splits(32, 2, 1, 8192, dev, resident=3) == 6
    assert A.default_num_splits(32, 1, 1, 8192, dev, resident=2) == 8  # fp8, 224 registers
    assert A.default_num_splits(128, 2, 1, 8192, dev, resident=2) == 1  # 256 CTAs in 264 slots
    assert A.default_num_splits(256, 8, 1, 8192, dev, resident=3) == 1  # more work than slots
    # the token floor and the cap still hold
    assert A.default_num_splits(1, 1, 1, 1024, dev, resident=3) == 32
    assert A.default_num_splits(1, 1, 1, 8192, dev, resident=3) == 132
    assert A.default_num_splits(1, 1, 1, 32768, dev, resident=4) == 256


def test_decode_config_takes_64_token_tiles_where_pages_allow():
    # every dtype and head dim, pages of 64: 64-token tiles, 3 stages, no register cap
    for D, X, fp8 in ((256, 8, False), (256, 16, True), (128, 8, False), (128, 16, True)):
        assert A.config._decode_config(D, 4, 64, X, fp8) == (64, 16, 4, 3, True)
    # pages of 32 / 16: tiles no longer than a page
    assert A.config._decode_config(256, 8, 32, 8, False)[0] == 32
    assert A.config._decode_config(256, 8, 16, 16, True)[0] == 16
    # 64 query heads per KV head at D=256: 8 warps
    assert A.config._decode_config(256, 64, 64, 8, False)[:3] == (64, 64, 8)


def test_register_cap_is_ignored_off_nvidia():
    """The interpreter (and ROCm) get no maxnreg option; results stay exact."""
    gen = torch.Generator().manual_seed(8)
    page, D, H_q, H_kv = 32, 64, 4, 1
    lens = [40, 70]
    nb = sum(-(-c // page) for c in lens) + 1
    k5, v5 = make_cache(nb, page, H_kv, D, torch.bfloat16, gen=gen)
    bt = make_tables(lens, page, nb, gen=gen)
    ctx = torch.tensor(lens, dtype=torch.int32)
    q = torch.randn(len(lens), H_q, D, generator=gen).bfloat16()
    out = A.decode_attention_5d(q, k5, v5, bt, ctx, sm_scale=0.125, num_splits=2,
                                _config=(32, 16, 4, 3, True, 128))
    ref = decode_attention_5d_ref(q, k5, v5, bt, ctx, sm_scale=0.125)
    check(out, ref, torch.bfloat16, "maxnreg config on the interpreter")


def test_resident_ctas_per_sm_limits():
    # registers: 168 per thread x 128 threads -> 3 CTAs; 183 -> 2 (the H200 sweep's kernels)
    assert A.resident_ctas_per_sm(168, 4, 41988) == 3
    assert A.resident_ctas_per_sm(183, 4, 41984) == 2
    # shared memory: 75776 bytes (+1 KiB reserved) -> 3 CTAs when registers allow more
    assert A.resident_ctas_per_sm(64, 4, 75776) == 3
    # threads: 8 warps -> at most 8 CTAs; tiny kernels stop at 32
    assert A.resident_ctas_per_sm(16, 8, 0) == 8
    assert A.resident_ctas_per_sm(16, 1, 0) == 32


def test_resident_ctas_of_a_compiled_kernel_uses_the_device_limits(monkeypatch):
    """Registers, warps and shared memory come from the compiled kernel, the SM
    limits from the device's properties (here a smaller SM than sm_90's)."""
    from types import SimpleNamespace

    ck = SimpleNamespace(n_regs=168, metadata=SimpleNamespace(num_warps=4, shared=41988))
    props = SimpleNamespace(regs_per_multiprocessor=65536, shared_memory_per_multiprocessor=101376,
                            max_threads_per_multi_processor=1536)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: props)
    assert A.resident_ctas_of(ck, torch.device("cuda")) == 2  # shared memory: 101376 // 43012
    props.shared_memory_per_multiprocessor = 233472
    assert A.resident_ctas_of(ck, torch.device("cuda")) == 3  # registers, as on the H200


def test_split_count_is_reported_and_interpreter_uses_the_two_wave_rule():
    g = torch.Generator().manual_seed(5)
    k5 = torch.randn(4, 1, 8, 16, 8, generator=g).bfloat16()
    v5 = torch.randn(4, 1, 2, 64, 8, generator=g).bfloat16()
    q = torch.randn(2, 4, 64, generator=g).bfloat16()
    bt = torch.tensor([[0, 1], [2, 3]], dtype=torch.int32)
    ctx = torch.tensor([20, 32], dtype=torch.int32)
    info = {}
    A.decode_attention_5d(q, k5, v5, bt, ctx, sm_scale=0.125, _info=info)
    expect = A.default_num_splits(2, 1, 1, 32, torch.device("cpu"))
    assert info["num_splits"] == expect
    assert len(info["config"]) == 5


def test_layout_errors():
    k5 = torch.randn(2, 1, 8, 16, 8).bfloat16()
    v5 = torch.randn(2, 1, 2, 64, 8).bfloat16()
    q = torch.randn(1, 4, 64).bfloat16()
    bt = torch.zeros(1, 1, dtype=torch.int32)
    ctx = torch.ones(1, dtype=torch.int32)
    with pytest.raises(ValueError):
        A.decode_attention_5d(q, k5.view(torch.uint8), v5.view(torch.uint8), bt, ctx, sm_scale=1.0)
    with pytest.raises(ValueError):
        A.decode_attention_5d(q, k5, v5[:, :, :1], bt, ctx, sm_scale=1.0)
    with pytest.raises(ValueError):
        A.decode_attention_5d(
            torch.randn(1, 3, 64).bfloat16(), k5.repeat(1, 2, 1, 1, 1), v5.repeat(1, 2, 1, 1, 1), bt, ctx,
            sm_scale=1.0,
        )


# ----------------------------------------------------------------------------- fp8 decode


@pytest.mark.parametrize("fdt,mode", [(FN, A.kernel_common.FP8_EMU_E4M3FN), (FNUZ, A.kernel_common.FP8_EMU_E4M3FNUZ)])
def test_fp8_integer_decode_bit_exact(fdt, mode):
    import triton
    import triton.language as tl

    @triton.jit
    def _k(X, Y, MODE: tl.constexpr, MUL: tl.constexpr):
        r = tl.arange(0, 256)
        x = tl.load(X + r)
        y = fp8_to_f16(x, MODE).to(tl.float32) * MUL
        tl.store(Y + r, y)

    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    y = torch.empty(256, dtype=torch.float32)
    mul = 256.0 if fdt == FN else 128.0
    _k[(1,)](codes, y, MODE=mode, MUL=mul)
    want = codes.view(fdt).to(torch.float32)
    nan = torch.isnan(want)
    assert torch.equal(torch.isnan(y), nan)
    assert torch.equal(y[~nan].view(torch.int32), want[~nan].view(torch.int32))  # bit-exact, -0 too


# ----------------------------------------------------------------------------- extend


def run_extend(
    *,
    seqs,  # list of (prefix_len, extend_len)
    H_q,
    H_kv,
    D,
    page,
    kv_dtype,
    fp8_dtype=None,
    causal=True,
    window=-1,
    sinks=False,
    cap=0.0,
    seed=0,
    config=None,
):
    gen = torch.Generator().manual_seed(seed)
    kv_lens = [p + e for p, e in seqs]
    nblocks = sum(max(1, -(-c // page)) for c in kv_lens) + 2
    is_fp8 = kv_dtype in (FN, FNUZ, torch.uint8)
    scale = 0.05 if is_fp8 else 1.0
    k5, v5 = make_cache(nblocks, page, H_kv, D, kv_dtype, gen=gen, fp8_dtype=fp8_dtype, scale=scale)
    bt = make_tables(kv_lens, page, nblocks, gen=gen)
    poison_tail(k5, v5, bt, kv_lens, page)
    qo = [0]
    for _, e in seqs:
        qo.append(qo[-1] + e)
    qo_indptr = torch.tensor(qo, dtype=torch.int32)
    T = qo[-1]
    q = torch.randn(T, H_q, D, generator=gen).to(torch.bfloat16)
    sk = torch.randn(H_q, generator=gen) * 2 if sinks else None
    ks, vs = (scale, scale * 0.5) if is_fp8 else (None, None)
    sm = 1.0 / math.sqrt(D)
    out = torch.full((T, H_q, D), float("nan"), dtype=torch.bfloat16)
    kvl = torch.tensor(kv_lens, dtype=torch.int32)
    A.extend_attention_5d(
        q, k5, v5, bt, qo_indptr, kvl, sm_scale=sm, causal=causal, k_scale=ks, v_scale=vs,
        fp8_dtype=fp8_dtype, sliding_window=window, sinks=sk, logit_cap=cap, out=out, _config=config,
    )
    ref = extend_attention_5d_ref(
        q, k5, v5, bt, qo_indptr, kvl, sm_scale=sm, causal=causal, k_scale=ks, v_scale=vs,
        fp8_dtype=fp8_dtype, sliding_window=window, sinks=sk, logit_cap=cap,
    )
    check(out, ref, kv_dtype, f"extend {kv_dtype} seqs={seqs}")


EXTEND_CASES = [
    # (seqs, H_q, H_kv, D, page, kv_dtype, fp8_dtype)
    ([(0, 20), (0, 1), (0, 45)], 4, 2, 64, 16, torch.bfloat16, None),
    ([(33, 17), (64, 40), (5, 1)], 8, 2, 128, 64, torch.bfloat16, None),
    ([(100, 30)], 4, 1, 256, 32, torch.bfloat16, None),
    ([(10, 9), (0, 33)], 3, 1, 96, 24, torch.float16, None),
    ([(16, 16), (0, 20)], 4, 2, 64, 16, FN, None),
    ([(50, 21)], 16, 1, 128, 64, FNUZ, None),
    ([(7, 12), (30, 5)], 4, 4, 64, 32, torch.uint8, FN),
]


@pytest.mark.parametrize("case", EXTEND_CASES, ids=lambda c: f"g{c[1]//c[2]}-d{c[3]}-p{c[4]}-{str(c[5]).split('.')[-1]}")
def test_extend_basic(case):
    seqs, H_q, H_kv, D, page, kvd, f8 = case
    run_extend(seqs=seqs, H_q=H_q, H_kv=H_kv, D=D, page=page, kv_dtype=kvd, fp8_dtype=f8)


@pytest.mark.parametrize(
    "kvd,f8,causal,window,sinks,cap",
    [
        (torch.bfloat16, None, True, 12, False, 0.0),
        (torch.bfloat16, None, True, 12, True, 20.0),
        (torch.bfloat16, None, False, -1, True, 0.0),
        (torch.bfloat16, None, False, 9, False, 0.0),
        (FN, None, True, 20, True, 5.0),
        (torch.uint8, FNUZ, True, -1, False, 3.0),
    ],
)
def test_extend_features(kvd, f8, causal, window, sinks, cap):
    run_extend(
        seqs=[(0, 37), (40, 25), (3, 1), (70, 0)], H_q=4, H_kv=2, D=64, page=16, kv_dtype=kvd,
        fp8_dtype=f8, causal=causal, window=window, sinks=sinks, cap=cap, seed=11,
    )


def test_extend_matches_decode_for_one_token():
    """extend with one new token per sequence == decode (same window convention)."""
    gen = torch.Generator().manual_seed(5)
    page, D, H_q, H_kv = 16, 64, 4, 2
    lens = [30, 71]
    nb = 10
    k5, v5 = make_cache(nb, page, H_kv, D, torch.bfloat16, gen=gen)
    bt = make_tables(lens, page, nb, gen=gen)
    q = torch.randn(2, H_q, D, generator=gen).bfloat16()
    kvl = torch.tensor(lens, dtype=torch.int32)
    for W in (-1, 9):
        d = A.decode_attention_5d(q, k5, v5, bt, kvl, sm_scale=0.1, sliding_window=W, num_splits=2)
        e = A.extend_attention_5d(
            q, k5, v5, bt, torch.tensor([0, 1, 2], dtype=torch.int32), kvl, sm_scale=0.1, sliding_window=W
        )
        torch.testing.assert_close(d.float(), e.float(), atol=1e-2, rtol=1e-2)


def test_reference_gather_roundtrip():
    gen = torch.Generator().manual_seed(1)
    k = torch.randn(3, 16, 2, 64, generator=gen, dtype=torch.float64)
    v = torch.randn(3, 16, 2, 64, generator=gen, dtype=torch.float64)
    k5, v5 = nhd_to_5d(k, v, 8)
    gk, gv = gather_kv_5d(k5, v5, torch.tensor([2, 0, 1]), 40)
    want_k = torch.cat([k[2], k[0], k[1]])[:40]
    want_v = torch.cat([v[2], v[0], v[1]])[:40]
    assert torch.equal(gk, want_k) and torch.equal(gv, want_v)
    # element-level definition of the layout
    assert k5[1, 1, 3, 5, 2] == k[1, 5, 1, 3 * 8 + 2]
    assert v5[1, 1, 5 // 8, 7, 5 % 8] == v[1, 5, 1, 7]


@pytest.mark.parametrize(
    "config",
    [(32, 16, 4, 1, False), (64, 16, 8, 3, False), (16, 16, 4, 2, True), (32, 32, 4, 2, True)],
)
@pytest.mark.parametrize("kvd", [torch.bfloat16, FN])
def test_decode_tile_configs(config, kvd):
    """Every tile shape / load strategy the tuner may pick gives the same answer."""
    gen = torch.Generator().manual_seed(21)
    page, D, H_q, H_kv = 32, 128, 8, 2
    lens = [1, 45, 97, 160]
    nb = sum(-(-c // page) for c in lens) + 1
    is_fp8 = kvd == FN
    k5, v5 = make_cache(nb, page, H_kv, D, kvd, gen=gen, scale=0.05 if is_fp8 else 1.0)
    bt = make_tables(lens, page, nb, gen=gen)
    poison_tail(k5, v5, bt, lens, page)
    ctx = torch.tensor(lens, dtype=torch.int32)
    q = torch.randn(len(lens), H_q, D, generator=gen).bfloat16()
    ks = 0.05 if is_fp8 else None
    for splits in (1, 3):
        out = torch.full_like(q, float("nan"))
        A.decode_attention_5d(
            q, k5, v5, bt, ctx, sm_scale=0.09, k_scale=ks, v_scale=ks, sliding_window=50,
            num_splits=splits, out=out, _config=config,
        )
        ref = decode_attention_5d_ref(q, k5, v5, bt, ctx, sm_scale=0.09, k_scale=ks, v_scale=ks, sliding_window=50)
        check(out, ref, kvd, f"config {config} splits {splits}")


def _bad_tail_expected(q, k5, v5, rows, lens, page, kvd, group_rows):
    """float64 output ``(len(lens), H_q, D)``: row ``i`` reads table row
    ``i // group_rows`` up to ``lens[i]``, keys of block ids outside the cache
    left out."""
    nb = k5.shape[0]
    outs = []
    for i, n in enumerate(lens):
        row = rows[i // group_rows]
        k, v = gather_kv_5d(k5, v5, torch.tensor([b if 0 <= b < nb else 1 for b in row], dtype=torch.int32), n,
                            fp8_dtype=FN if kvd == FN else None)
        valid = torch.tensor([0 <= row[t // page] < nb for t in range(n)])
        s = torch.einsum("hd,nd->hn", q[i].double(), k[:, 0].double()) * q.shape[-1] ** -0.5
        s = s.masked_fill(~valid[None], float("-inf"))
        outs.append(torch.softmax(s, -1) @ v[:, 0].double())
    return torch.stack(outs)


@pytest.mark.parametrize("kvd,D", [(torch.bfloat16, 64), (FN, 256), (torch.bfloat16, 256)],
                         ids=["bf16-d64", "fp8-d256", "bf16-d256"])
@pytest.mark.parametrize("drafts,H_q", [(1, 2), (4, 2), (16, 8)], ids=["decode", "verify4", "verify16x8"])
def test_bad_block_in_the_masked_tail_tile_leaves_no_trace(kvd, D, drafts, H_q):
    """A block id outside the cache in the tiles that are masked per key (the
    decode's peeled last tile; the packed verify rows' last tiles) drops its
    keys, though the block read in its place (block 0) holds NaN: the bad id
    joins the key masks there (scores -inf, V rows zeroed) instead of a select
    on the softmax state. Bad ids in the unmasked tiles before them too; 128
    packed rows at D=256 (one 128-row tile) included."""
    gen = torch.Generator().manual_seed(29)
    page, nb = (64 if drafts == 16 else 16), 7
    k5, v5 = make_cache(nb, page, 1, D, kvd, gen=gen)
    if kvd == FN:
        k5.view(torch.uint8)[0] = 0x7F
        v5.view(torch.uint8)[0] = 0x7F
    else:
        k5[0] = float("nan")
        v5[0] = float("nan")
    # seq 0: the last, partial page is a bad id; seq 1: the first page is
    rows = [[2, 3, nb + 4], [-3, 5, 6]]
    prefix = [3 * page - drafts - 3, 3 * page - drafts - 1]  # the last draft inside the third page
    lens = [p + t + 1 for p in prefix for t in range(drafts)]
    q = torch.randn(len(lens), H_q, D, generator=gen).bfloat16()
    bt = torch.tensor(rows, dtype=torch.int32)
    ctx = torch.tensor(lens, dtype=torch.int32)
    sc = 1.0 if kvd == FN else None
    for splits in (1, 2):
        out = torch.full_like(q, float("nan"))
        A.decode_attention_5d(q, k5, v5, bt, ctx, sm_scale=D ** -0.5, k_scale=sc, v_scale=sc, num_splits=splits,
                              queries_per_seq=drafts, out=out)
        assert torch.isfinite(out.float()).all(), f"NaN from the block read in place of a bad id (splits {splits})"
        torch.testing.assert_close(out.double(), _bad_tail_expected(q, k5, v5, rows, lens, page, kvd, drafts),
                                   atol=3e-2, rtol=3e-2)


def test_packed_verify_config_at_d256_takes_128_row_tiles():
    """128 or more packed verify rows at D=256 (NVIDIA): one 128-row tile, 8
    warps, 2 stages, 32-token tiles, masked tiles (not the select) for fp8
    too; fewer rows and decode keep their tiles."""
    from sglang_kv5d.platform import known_target

    assert A.config._decode_config(256, 128, 64, 8, False, packed=True) == (32, 128, 8, 2, True)
    assert A.config._decode_config(256, 128, 64, 16, True, packed=True) == (32, 128, 8, 2, True)
    assert A.config._decode_config(256, 256, 64, 16, True, packed=True) == (32, 128, 8, 2, True)
    assert A.config._decode_config(256, 128, 16, 8, False, packed=True)[0] == 16
    for X, fp8 in ((8, False), (16, True)):
        assert A.config._decode_config(256, 64, 64, X, fp8, packed=True) == A.config._decode_config(256, 64, 64, X, fp8)
        assert A.config._decode_config(256, 4, 64, X, fp8, packed=True) == (64, 16, 4, 3, True)
        assert A.config._decode_config(128, 128, 64, X, fp8, packed=True) == A.config._decode_config(128, 128, 64, X, fp8)
    sm90, gfx = known_target("sm_90"), known_target("gfx942")
    assert A.config.mask_tile(sm90, 256, True, 128) and not A.config.mask_tile(sm90, 256, True, 64)
    assert not A.config.mask_tile(gfx, 256, True, 128)


def test_splits_fill_waves_when_one_split_leaves_a_wave_part_empty():
    """With the resident CTAs known: one split per tile that fits one wave but
    fills under 90% of it, two overflowing it, takes the fewest splits (up to
    4) whose waves are at least 90% full (H200: fp8 32/8 D=128 bs 32, 256 CTAs
    of 3 resident per SM: 3 splits)."""
    dev = torch.device("cpu")
    assert A.default_num_splits(32, 8, 1, 8192, dev, resident=3, sms=132) == 3  # 768 CTAs in 2 x 396
    assert A.default_num_splits(32, 8, 1, 8192, dev, resident=2, sms=132) == 1  # 256 in 264: 97% full
    assert A.default_num_splits(40, 8, 1, 8192, dev, resident=3, sms=132) == 1  # 320 in 396: 81%, no s <= 4 fills
    assert A.default_num_splits(25, 8, 1, 8192, dev, resident=3, sms=132) == 1  # 200 CTAs: no s <= 4 fills 90%
    assert A.default_num_splits(24, 11, 1, 8192, dev, resident=3, sms=132) == 3  # 264 CTAs: 792 in 2 waves
    assert A.default_num_splits(32, 8, 1, 128, dev, resident=3, sms=132) == 2  # the token floor caps it


# ----------------------------------------------------------------------------- AMD tiles

AMD_ATTENTION_CASES = [
    # (H_q, H_kv, D, kv dtype): the Qwen3.5 TP8 and Llama-like shapes, bf16 and fp8
    (4, 1, 256, torch.bfloat16),
    (4, 1, 256, FNUZ),
    (8, 2, 128, torch.bfloat16),
    (8, 2, 128, FN),
]


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
@pytest.mark.parametrize("case", AMD_ATTENTION_CASES, ids=lambda c: f"g{c[0] // c[1]}-d{c[2]}-{str(c[3]).split('.')[-1]}")
def test_amd_tiles_against_float64(arch, case):
    """The tiles ``decode_config`` / ``extend_config`` pick for gfx942 and
    gfx950 (16/32-token decode tiles, one stage, per-token addressing; 8-wave
    extend programs), run by the interpreter (the integer fp8 decode: the
    hardware conversion is the AMD compile gate's to show)."""
    from sglang_kv5d.platform import known_target

    H_q, H_kv, D, kvd = case
    x = 16 if kvd in (FN, FNUZ) else 8
    target = known_target(arch)
    dcfg = A.decode_config(D, H_q // H_kv, 64, x, kvd in (FN, FNUZ), target)
    ecfg = A.extend_config(D, H_q // H_kv, 64, x, kvd in (FN, FNUZ), target)
    assert dcfg[3] == 1 and dcfg[4] is False and ecfg[2] == 8
    run_decode(B_ctx=[1, 70, 130], H_q=H_q, H_kv=H_kv, D=D, page=64, kv_dtype=kvd, num_splits=2, config=dcfg)
    run_extend(seqs=[(0, 20), (70, 17)], H_q=H_q, H_kv=H_kv, D=D, page=64, kv_dtype=kvd, config=ecfg)
