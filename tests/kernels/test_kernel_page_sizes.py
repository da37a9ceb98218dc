"""Pages 16 and 32 (64 the control) at Qwen3.5's serving head geometry, under the
Triton CPU interpreter, against float64.

Qwen3.5's full-attention layers have head_dim 256 and 2 KV heads: 1 KV head and
4 query heads per GPU at TP8 (4/1), 2 and 16 at TP1 (16/2). SGLang's SHUFFLE 5D
pool takes any page that X divides (X = 16 for fp8, 8 for bf16), and published
MI355X recipes serve Qwen3.5 at page 16, so every kernel the 5D paths run is
held against float64 at pages 16 and 32 here, on fresh random data with the
outputs poisoned first (NaN for attention, random bytes for the write) and the
slots past each context poisoned too:

* the fused FP8 KV write into 5D caches (e4m3fn, e4m3fnuz): bit-exact with
  torch's rounding, within one fp8 step of float64, no other byte touched;
* decode, direct (one split) and split-context, e4m3fn / e4m3fnuz / bf16,
  with the tiles picked for gfx950 (e4m3fn) and gfx942 (e4m3fnuz);
* speculative verify (the packed decode kernel, ``queries_per_seq`` 4 and
  16), causal and block-parallel;
* extend over a cached prefix that ends inside a page, causal and not;
* the verify page tables for a paged allocation at the context limit (the
  torch builder and the Triton kernel) feeding the verify kernel, whose
  float64 reference reads the tokens through ``req_to_token`` itself;
* two other pages the pool accepts: 8 (bf16, X=8) and 48 (fp8, no power of two).

Token counts stay small (a few pages per sequence): the interpreter runs every
program in numpy.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported below

import math  # noqa: E402

import pytest  # noqa: E402

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from sglang_kv5d.kernels import attention_5d as A  # noqa: E402
from sglang_kv5d.kernels import fp8_reference as fref  # noqa: E402
from sglang_kv5d.kernels.attention_reference import attention_ref, decode_attention_5d_ref  # noqa: E402
from sglang_kv5d.platform import known_target  # noqa: E402
from tests.kernels import test_attention_5d as T5  # noqa: E402  (its helpers; its tests run there)
from tests.kernels import test_fp8_write as TW  # noqa: E402

FN, FNUZ, BF16 = torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.bfloat16
D = 256
PAGES = (16, 32)
CONTROL = 64
#: the tiles a target picks, per KV dtype: e4m3fn is MI355X's (gfx950), e4m3fnuz MI300X's (gfx942)
ARCH = {FN: "gfx950", FNUZ: "gfx942", BF16: None}


def _name(dtype) -> str:
    return str(dtype).replace("torch.", "").replace("float8_", "")


def _x(dtype) -> int:
    return 16 if dtype in (FN, FNUZ) else 8


def _decode_cfg(kvd, group):
    """The decode tiles ``decode_config`` picks for ARCH[kvd] (None: the default,
    the interpreter's / H200's tiles)."""
    arch = ARCH[kvd]
    if arch is None:
        return None
    return lambda page: A.decode_config(D, group, page, _x(kvd), kvd != BF16, known_target(arch))


# ----------------------------------------------------------------------------- fused FP8 write

WRITE_CASES = [(page, fp8, h) for page in PAGES for fp8, h in ((FN, 1), (FNUZ, 2))] + [(CONTROL, FNUZ, 1)]


@pytest.mark.parametrize("page,fp8,heads", WRITE_CASES,
                         ids=[f"p{p}-{_name(f)}-h{h}" for p, f, h in WRITE_CASES])
def test_fp8_write_5d(page, fp8, heads):
    """The fused write into 5D caches of ``page`` tokens: prefill runs crossing
    pages, then decode-like scattered slots and skips (-1)."""
    g = torch.Generator().manual_seed(100 * page + heads)
    n_blocks = 4
    kc, vc = fref.make_caches("5d", n_blocks, page, heads, D, D, gen=g, typed=fp8)
    for kind, T in (("runs", 2 * page + 3), ("mixed", 24)):
        k = fref.make_input(T, heads, D, BF16, gen=g, token_pad=16)
        v = fref.make_input(T, heads, D, BF16, gen=g, token_pad=16)
        loc = fref.loc_pattern(kind, T, n_blocks * page, page, gen=g)
        # bit-exact with torch's fp32 quotient (the strict check); from float64 one fp8
        # step on up to 1% of the bytes: bf16 inputs that are exact multiples of 1.9
        # (23.75 = 12.5 x 1.9) have an fp32 quotient exactly on an fp8 midpoint, about
        # 0.5% of the V bytes at any shape (fp8_reference.quantize_fp8_f64, seeds 0-4)
        TW._write_and_check(k, v, kc, vc, loc, 0.37, 1.9, fp8, "5d", max_f64_share=1e-2)


# ----------------------------------------------------------------------------- decode

# (page, kv dtype, H_q, H_kv, splits): every dtype at pages 16 and 32, direct (1)
# and split (3) context, both head geometries; page 64 once each way
DECODE_CASES = [
    (16, FN, 4, 1, 1), (16, FNUZ, 16, 2, 3), (16, BF16, 4, 1, 3), (16, FN, 16, 2, 3), (16, BF16, 16, 2, 1),
    (16, FNUZ, 4, 1, 1),
    (32, FN, 16, 2, 1), (32, FNUZ, 4, 1, 3), (32, BF16, 16, 2, 3), (32, FN, 4, 1, 3), (32, BF16, 4, 1, 1),
    (32, FNUZ, 16, 2, 1),
    (CONTROL, FNUZ, 4, 1, 3), (CONTROL, BF16, 16, 2, 1),
]


@pytest.mark.parametrize("page,kvd,hq,hkv,splits", DECODE_CASES,
                         ids=[f"p{p}-{_name(k)}-{q}_{h}-s{s}" for p, k, q, h, s in DECODE_CASES])
def test_decode(page, kvd, hq, hkv, splits):
    cfg = _decode_cfg(kvd, hq // hkv)
    T5.run_decode(B_ctx=[1, page + 1, 2 * page + page // 2], H_q=hq, H_kv=hkv, D=D, page=page, kv_dtype=kvd,
                  num_splits=splits, seed=page + splits, config=cfg(page) if cfg else None)


# ----------------------------------------------------------------------------- verify


def run_verify(*, prefixes, n, hq, hkv, page, kvd, causal, splits=None, seed=0, config=None):
    """``len(prefixes)`` requests verifying ``n`` drafts each (their K/V already in
    the cache after the prefix) through the packed decode kernel."""
    gen = torch.Generator().manual_seed(seed)
    kv_lens = [p + n for p in prefixes]
    nblocks = sum(-(-c // page) for c in kv_lens) + 3
    fp8 = kvd in (FN, FNUZ)
    scale = 0.05 if fp8 else 1.0
    k5, v5 = T5.make_cache(nblocks, page, hkv, D, kvd, gen=gen, scale=scale)
    bt = T5.make_tables(kv_lens, page, nblocks, gen=gen)
    T5.poison_tail(k5, v5, bt, kv_lens, page)
    if causal:  # draft t sees its prefix and drafts 0 .. t
        rows = [p + t + 1 for p in prefixes for t in range(n)]
    else:  # block-parallel drafts see the whole block
        rows = [p + n for p in prefixes for _ in range(n)]
    ctx = torch.tensor(rows, dtype=torch.int32)
    q = torch.randn(len(rows), hq, D, generator=gen).to(BF16)
    ks, vs = (scale, scale * 1.5) if fp8 else (None, None)
    sm = 1.0 / math.sqrt(D)
    out = torch.full_like(q, float("nan"))
    A.decode_attention_5d(q, k5, v5, bt, ctx, sm_scale=sm, k_scale=ks, v_scale=vs, num_splits=splits, out=out,
                          queries_per_seq=n, _config=config)
    ref = decode_attention_5d_ref(q, k5, v5, bt.repeat_interleave(n, 0), ctx, sm_scale=sm, k_scale=ks, v_scale=vs)
    T5.check(out, ref, kvd, f"verify {kvd} page {page} n {n} heads {hq}/{hkv} causal {causal}")


# (page, kv dtype, H_q, H_kv, drafts, causal): 4 and 16 drafts at pages 16 and 32, every dtype
VERIFY_CASES = [
    (16, FN, 16, 2, 4, True), (16, FNUZ, 4, 1, 16, True), (16, BF16, 4, 1, 4, False),
    (32, FN, 4, 1, 16, True), (32, FNUZ, 16, 2, 4, False), (32, BF16, 16, 2, 4, True),
    (CONTROL, FN, 4, 1, 4, True),
]


@pytest.mark.parametrize("page,kvd,hq,hkv,n,causal", VERIFY_CASES,
                         ids=[f"p{p}-{_name(k)}-{q}_{h}-n{n}-{'causal' if c else 'block'}"
                              for p, k, q, h, n, c in VERIFY_CASES])
def test_verify(page, kvd, hq, hkv, n, causal):
    """Prefixes that end mid-page, at a page's last slot and at 0 (the drafts then cross pages)."""
    cfg = _decode_cfg(kvd, (hq // hkv) * n)
    run_verify(prefixes=[page + 5, 2 * page - 1, 0], n=n, hq=hq, hkv=hkv, page=page, kvd=kvd, causal=causal,
               splits=2, seed=page + n, config=cfg(page) if cfg else None)


# ----------------------------------------------------------------------------- extend

# (page, kv dtype, H_q, H_kv, causal)
EXTEND_CASES = [
    (16, FN, 4, 1, True), (16, FNUZ, 16, 2, False), (16, BF16, 16, 2, True), (16, BF16, 4, 1, False),
    (32, FN, 16, 2, False), (32, FNUZ, 4, 1, True), (32, BF16, 4, 1, True), (32, FN, 4, 1, False),
    (CONTROL, FNUZ, 4, 1, True),
]


@pytest.mark.parametrize("page,kvd,hq,hkv,causal", EXTEND_CASES,
                         ids=[f"p{p}-{_name(k)}-{q}_{h}-{'causal' if c else 'full'}" for p, k, q, h, c in EXTEND_CASES])
def test_extend_with_prefix(page, kvd, hq, hkv, causal):
    """A chunk after a cached prefix ending mid-page, one starting at a page
    boundary, and a fresh prompt; the tiles of ARCH[kvd]."""
    arch = ARCH[kvd]
    cfg = A.extend_config(D, hq // hkv, page, _x(kvd), kvd != BF16, known_target(arch)) if arch else None
    T5.run_extend(seqs=[(page + 3, 9), (page, page // 2 + 1), (0, 5)], H_q=hq, H_kv=hkv, D=D, page=page,
                  kv_dtype=kvd, causal=causal, seed=page + causal, config=cfg)


# ----------------------------------------------------------------------------- other pages SGLang accepts

# (page, kv dtype, arch of the tiles): bf16's X=8 allows page 8; 48 is a multiple of 16 but no power of two
OTHER_PAGES = [(8, BF16, "gfx942"), (48, FN, "gfx950")]


@pytest.mark.parametrize("page,kvd,arch", OTHER_PAGES, ids=[f"p{p}-{_name(k)}-{a}" for p, k, a in OTHER_PAGES])
def test_other_pages(page, kvd, arch):
    """Decode (split), verify and extend at pages outside 16/32/64 that the 5D pool
    accepts, with the tiles ``arch`` picks (4/1 heads)."""
    target, x, fp8 = known_target(arch), _x(kvd), kvd != BF16
    T5.run_decode(B_ctx=[3, 2 * page + 1, 5 * page - 2], H_q=4, H_kv=1, D=D, page=page, kv_dtype=kvd, num_splits=3,
                  seed=page, config=A.decode_config(D, 4, page, x, fp8, target))
    run_verify(prefixes=[page + 1, 3 * page - 2], n=4, hq=4, hkv=1, page=page, kvd=kvd, causal=True, splits=2,
               seed=page, config=A.decode_config(D, 16, page, x, fp8, target))
    T5.run_extend(seqs=[(page + 3, 9), (2 * page, 5)], H_q=4, H_kv=1, D=D, page=page, kv_dtype=kvd, seed=page,
                  config=A.extend_config(D, 4, page, x, fp8, target))


# ----------------------------------------------------------------------------- verify page tables


def _paged_requests(page, prefixes, n, context_len, gen):
    """req_to_token for requests allocated page by page (SGLang's paged
    allocator: a request's slots are whole pages, page-aligned), rows of
    ``context_len + n`` slots; pages shuffled over the pool (page 0 unused)."""
    width = context_len + n
    pages_per_row = -(-width // page)
    pool_pages = len(prefixes) * pages_per_row + 1
    perm = (torch.randperm(pool_pages - 1, generator=gen) + 1).tolist()
    r2t = torch.zeros(len(prefixes) + 1, pages_per_row * page, dtype=torch.int32)
    for r in range(len(prefixes)):
        own = perm[r * pages_per_row: (r + 1) * pages_per_row]
        t = torch.arange(pages_per_row * page)
        r2t[r + 1] = (torch.tensor(own)[t // page] * page + t % page).to(torch.int32)
    return r2t[:, :width].contiguous(), pool_pages


@pytest.mark.parametrize("page", PAGES + (CONTROL,))
@pytest.mark.parametrize("builder", ["torch", "triton"])
def test_verify_tables_feed_the_verify_kernel(page, builder):
    """Verify page tables at the context limit (a request whose prefix + drafts
    fill the context, one near it, one short), built by the torch builder or
    the Triton kernel into a poisoned, wider buffer; the verify kernel reads
    them; its float64 reference gathers every token through req_to_token, not
    through a page table."""
    from sglang_kv5d.kernels import verify_table as vt
    from sglang_kv5d.speculative.verify_tables import build_verify_page_tables_torch, verify_table_width

    gen = torch.Generator().manual_seed(page + (builder == "triton"))
    n, hq, hkv, kvd = 4, 4, 1, FN
    ctx_len = 3 * page
    prefixes = [ctx_len - n, ctx_len - n - 2, 5]
    r2t, pool_pages = _paged_requests(page, prefixes, n, ctx_len, gen)
    req_rows = torch.tensor([1, 3, 2], dtype=torch.int64)
    prefix_of = {1: prefixes[0], 3: prefixes[1], 2: prefixes[2]}
    seq_lens = torch.tensor([prefix_of[int(r)] for r in req_rows], dtype=torch.int64)
    width = verify_table_width(ctx_len, n, page)
    assert width == -(-(ctx_len + n) // page)
    base = torch.full((len(req_rows) + 2, width + 3), -7, dtype=torch.int32)
    out = base[:, :width]
    if builder == "torch":
        table, _ = build_verify_page_tables_torch(r2t, req_rows, seq_lens, n, page, out)
    else:
        table, _ = vt.verify_page_tables(r2t, req_rows, seq_lens, n, page, out)
    assert (base[len(req_rows):] == -7).all() and (base[:, width:] == -7).all(), "wrote outside the rows"
    for i, r in enumerate(req_rows.tolist()):  # each row: its request's pages for prefix + drafts, then zeros
        used = -(-(int(seq_lens[i]) + n) // page)
        want = (r2t[r, torch.arange(used) * page].long() // page).tolist()
        assert table[i, :used].tolist() == want and (table[i, used:] == 0).all(), (i, table[i])

    scale = 0.05
    k5, v5 = T5.make_cache(pool_pages, page, hkv, D, kvd, gen=gen, scale=scale)
    T5.poison_tail(k5, v5, table, (seq_lens + n).tolist(), page)  # NaN past each request's drafts
    rows = [p + t + 1 for p in seq_lens.tolist() for t in range(n)]
    q = torch.randn(len(rows), hq, D, generator=gen).to(BF16)
    out_attn = torch.full_like(q, float("nan"))
    sm = 1.0 / math.sqrt(D)
    A.decode_attention_5d(q, k5, v5, table, torch.tensor(rows, dtype=torch.int32), sm_scale=sm, k_scale=scale,
                          v_scale=scale, num_splits=2, out=out_attn, queries_per_seq=n)
    # the reference: every token by its slot in req_to_token, read from the 5D layout element by element
    kf, vf = k5.to(torch.float64) * scale, v5.to(torch.float64) * scale
    x = k5.shape[-1]
    for i, r in enumerate(req_rows.tolist()):
        total = int(seq_lens[i]) + n
        slots = r2t[r, :total].long()
        blk, off = slots // page, slots % page
        kk = kf[blk, :, :, off, :].reshape(total, hkv, D)
        vv = vf[blk, :, off // x, :, off % x]
        qi = q[i * n:(i + 1) * n].double()
        ref = attention_ref(qi, kk, vv, torch.arange(int(seq_lens[i]), total), sm_scale=sm)
        T5.check(out_attn[i * n:(i + 1) * n], ref, kvd, f"verify through the {builder} table, page {page}, row {i}")
