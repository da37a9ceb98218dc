"""Pages 16 and 32 through SGLang's real objects and aiter's real Python wrappers.

SGLang's SHUFFLE 5D pool accepts any page that X divides (16 for fp8, 8 for
bf16). What serves each page:

* decode: aiter's ``pa_decode_gluon`` for pages 16, 64 and 1024 (the pages
  it is written for); any other page (32, 48, 128, ...) goes to the portable
  kernel before any call, the reason remembered (``attention.routing``:
  aiter v0.1.10 .. v0.1.13.post1 assert the block size; later releases test
  no other page and their kernels spill at page 32);
* extend: aiter's ``mha_batch_prefill_func`` at every page: the overlay
  gathers the 5D pages to the linear (page 1) layout before the call, so
  CK's page-size instances ({1, 16, 1024}) do not limit it;
* verify and the rest: the portable kernels at every page.

Here: the fake aiter rejects a page exactly where each real release's wrapper
does (loaded from ../shared/aiter-src); a real ``AiterAttnBackend`` over real
hybrid and SWA pools (the selftest's phases: extend, decode, target verify)
at pages 16 and 32 with a fake aiter that asserts the block size as v0.1.10
does, which would fail the run if the overlay handed it page 32; and
retraction's CPU copy round trip at Qwen3.5's head geometry at pages 16 and 32.
"""

from __future__ import annotations

import pytest
import torch

import sglang_kv5d
from sglang_kv5d import kernel_check
from sglang_kv5d.attention import routing
from tests import test_aiter_contract as AC  # its helpers (the real wrappers); its tests run there
from tests import test_cpu_copy_5d as CC
from tests.helpers.fake_aiter import fake_aiter_on_path
from tests.helpers.pools import enable_5d, make_hybrid_pool
from tests.helpers.subproc import ROOT, run_py, sglang_version
from sglang_kv5d.versions import parse_version

FN = torch.float8_e4m3fn
BF16 = torch.bfloat16


# --------------------------------------------------------------------------- routing


def test_decode_pages_aiter_serves():
    for page in (16, 64, 1024):
        assert routing.decode_page_unsupported(page) is None
    for page in (8, 32, 48, 128, 256):
        why = routing.decode_page_unsupported(page)
        assert why and f"not {page}" in why and "[16, 64, 1024]" in why and "v0.1.10" in why, why


# --------------------------------------------------------------------------- the fake against the real wrappers


def _pa_kwargs(page: int) -> dict:
    """A decode call as the overlay builds it (4/1 heads, D=256, fp8 cache of ``page``-token blocks)."""
    g = torch.Generator().manual_seed(page)
    bs, hq, hkv, d, x, nb = 2, 4, 1, 256, 16, 4
    return dict(
        output=torch.empty(bs, hq, d, dtype=BF16),
        query=torch.randn(bs, hq, d, generator=g).to(BF16),
        key_cache=(torch.randn(nb, hkv, d // x, page, x, generator=g) * 0.1).to(FN),
        value_cache=(torch.randn(nb, hkv, page // x, d, x, generator=g) * 0.1).to(FN),
        context_lengths=torch.tensor([page + 1, 3], dtype=torch.int32),
        block_tables=torch.tensor([[2, 0], [1, 3]], dtype=torch.int32),
        softmax_scale=1 / 16, query_length=1, max_context_partition_num=1,
        context_partition_size=routing.CONTEXT_PARTITION_SIZE, compute_type=BF16, query_scale=None,
        key_scale=torch.ones(1), value_scale=torch.ones(1),
        exp_sums=torch.empty(bs, hkv, 1, hq, dtype=torch.float32),
        max_logits=torch.empty(bs, hkv, 1, hq, dtype=torch.float32),
        temporary_output=torch.empty(bs, hkv, 1, hq, d, dtype=BF16),
        alibi_slopes=None, sinks=None, sliding_window=0, ps=True,
    )


@pytest.mark.sglang_independent
@pytest.mark.skipif(not AC.AITER_SRC.is_dir(), reason=f"aiter source not found at {AC.AITER_SRC}")
@pytest.mark.parametrize("version", AC.VERSIONS)
def test_fake_pa_decode_rejects_the_pages_each_release_rejects(version):
    """v0.1.10 .. v0.1.13.post1 assert ``kv_block_size in [16, 64, 1024]``; later
    releases accept any block size. The fake, set for the release
    (``aiter._fake.PA_DECODE_BLOCK_SIZES``), raises the same exception type on
    the same call, or accepts it too."""
    old = AC._vkey(version) < (0, 1, 14)
    for page in (16, 32, 48, 64):
        kw = _pa_kwargs(page)
        with AC.real_aiter(version) as real:
            want = AC._outcome(real.pa.pa_decode_gluon, kw)
        assert want is ((AssertionError if page in (32, 48) else None) if old else None), (version, page, want)
        with fake_aiter_on_path() as aiter:
            aiter._fake.PA_DECODE_BLOCK_SIZES = (16, 64, 1024) if old else None
            from aiter.ops.triton.gluon.pa_decode_gluon import pa_decode_gluon

            got = AC._outcome(pa_decode_gluon, kw)
        assert got is want, f"aiter {version}, page {page}: real {want}, fake {got}"


# --------------------------------------------------------------------------- the real backend, pages 16 and 32

_DISPATCH = """
import contextlib, json, sys
sys.path.insert(0, {root!r})
from tests.helpers.fake_aiter import fake_aiter_on_path
out = {{}}
with contextlib.redirect_stdout(sys.stderr), fake_aiter_on_path(strict=True) as aiter:
    aiter._fake.PA_DECODE_BLOCK_SIZES = (16, 64, 1024)  # as aiter v0.1.10 .. v0.1.13.post1: page 32 asserts
    from sglang_kv5d.selftest import Geometry, run_selftest
    from sglang_kv5d.selftest import run as st_run
    st_run.attention_paths = lambda device, both=None: (["aiter"], "the aiter path (test)")
    for page in (16, 32):
        aiter._fake.reset()
        geo = Geometry(name=f"page-{{page}}", page=page, prefix=page, own_lengths=(5, page + 3), chunk=page,
                       decode_steps=1, swa_window=16, verify_tokens=2)
        rep = run_selftest(geo, "cpu")
        prefill = aiter._fake.calls("mha_batch_prefill_func")
        out[page] = dict(
            ok=rep["ok"], failures=rep["failures"], error=rep.get("error"),
            served=rep["attention_paths"]["aiter"],
            phases=sorted((p["phase"], p["pool"], p["calls"]) for p in rep["phases"] if not p.get("skipped")),
            decode_calls=len(aiter._fake.calls("pa_decode_gluon")), prefill_calls=len(prefill),
            prefill_kv=sorted({{(c.kwargs["k"].dim(), c.kwargs["v"].dim()) for c in prefill}}),
            prefill_pages_linear=all(
                c.kwargs["kv_page_indices"][: c.kwargs["k"].shape[0]].tolist() == list(range(c.kwargs["k"].shape[0]))
                for c in prefill))
print(json.dumps(out))
"""


def test_real_backend_routes_each_page():
    """A real AiterAttnBackend over real hybrid (fp8) and SWA (bf16) pools, the
    selftest's requests (chunked prefill over a shared prefix, decode, target
    verify), SGLANG_KV5D_ATTN_IMPL=aiter, a fake aiter that asserts the block
    size as v0.1.10 .. v0.1.13.post1 do. Page 16: decode and extend on aiter.
    Page 32: extend on aiter (linear K/V), decode on the portable kernel with
    the reason remembered per configuration, no pa_decode_gluon call at all.
    Every output against float64 (target verify from SGLang 0.5.23, where
    target-verify-5d applies)."""
    verify = parse_version(sglang_version()) >= parse_version("0.5.23")
    res = run_py(_DISPATCH.format(root=ROOT), timeout=900)
    assert res.returncode == 0 and res.data, res
    for page in ("16", "32"):
        r = res.data[page]
        assert r["ok"] and not r["failures"] and not r["error"], (page, r)
        ran = {"extend", "decode"} | ({"verify", "verify-nc"} if verify else set())
        assert {ph for ph, _, n in r["phases"] if n > 0} == ran, r["phases"]
        decode = sum(n for ph, _, n in r["phases"] if ph == "decode")
        extend = sum(n for ph, _, n in r["phases"] if ph == "extend")
        assert decode > 0 and r["prefill_calls"] == extend > 0
        # batch prefill gets 3-D (token-major) K/V and page ids 0..T-1: page 1 for CK, whatever the 5D page
        assert r["prefill_kv"] == [[3, 3]] and r["prefill_pages_linear"], r
    p16, p32 = res.data["16"], res.data["32"]
    assert p16["decode_calls"] == sum(n for ph, _, n in p16["phases"] if ph == "decode")
    assert p16["served"]["fallbacks"] == {}
    assert p32["decode_calls"] == 0
    fallbacks = p32["served"]["fallbacks"]
    assert fallbacks and all(k.startswith("pa_decode_gluon [") and "page 32" in k for k in fallbacks), fallbacks
    assert all(why == routing.decode_page_unsupported(32) for why in fallbacks.values())
    assert {"kv float8_e4m3fn", "kv bfloat16"} <= {part for k in fallbacks for part in k.strip("]").split(", ")}


# --------------------------------------------------------------------------- retraction's CPU copy


@pytest.fixture
def cpu_copy_overlay():
    sglang_kv5d.deactivate()
    kernel_check.reset()
    st = sglang_kv5d.activate(patches=["cpu-copy-5d"], strict=False)
    assert st.patch("cpu-copy-5d").state in ("applied", "pending"), st
    yield
    sglang_kv5d.deactivate()
    kernel_check.reset()


COPY_CASES = [(d, p) for p in (16, 32) for d in CC.DTYPES] + [(FN, 64)]


@pytest.mark.parametrize("dtype,page", COPY_CASES, ids=[f"{str(d)[6:]}-p{p}" for d, p in COPY_CASES])
def test_cpu_copy_round_trip(monkeypatch, cpu_copy_overlay, dtype, page):
    """Retraction with KV offload on a hybrid pool through SGLang's paged
    allocator at Qwen3.5's TP8 head geometry (1 KV head, D=256): random bytes,
    offload, poison, reload at other slots; whole buffers compared byte for
    byte against an independent NHD view (tests/test_cpu_copy_5d.py)."""
    enable_5d(monkeypatch)
    size = 6 * page
    pool = make_hybrid_pool(size=size, page_size=page, dtype=dtype, head_num=1, head_dim=256)
    full = pool.full_kv_pool
    assert full.k_buffer[0].dim() == 5 and full.k_buffer[0].shape[3] == page
    full.cpu_offloading_chunk_size = 5
    CC._fill(pool, page)
    old, new = CC.slot_sets(page)
    _, before, poisoned = CC._retract(CC.paged_allocator(pool, size, page, dtype), full, old, new)
    CC.assert_moved(full, before, poisoned, old, new, f"hybrid {dtype} page {page}")
