"""A serving simulation on SGLang 0.5.23's own bookkeeping over a SHUFFLE 5D hybrid pool (issue 24, item 8).

The scenario (tests.helpers.serving_sim drives SGLang's real ReqToTokenPool,
paged allocator, RadixCache, Req / ScheduleBatch and AiterAttnBackend, the
overlay active, portable kernels under the Triton interpreter), pages 16, 32
and 64, context 4 pages, 4 tokens per verify:

 1. A (3 pages + 5 tokens; the first 2 pages + 1 token shared with B)
    prefills in three page-aligned chunks; before each next chunk SGLang
    checkpoints it into the radix tree (stash_chunked_request ->
    checkpoint_kv_cache, i.e. cache_unfinished_req); C prefills whole next to
    A's second chunk; after its last chunk A is checkpointed too.
 2. A and C decode; B hits A's 2 shared pages in the tree (match_kv_cache;
    EAGLE's bigram keys) and prefills the rest; A finishes and is cached
    (release_kv_cache with checkpoint, i.e. cache_finished_req).
 3. D (context - 2 tokens) finds too few free pages: alloc_for_extend evicts
    A's cached tail page and hands it to D (B's shared pages stay, locked).
    D decodes to seq_len = context - 1.
 4. retract_decode picks D (SGLang's own order); release_req on a PD decode
    server offloads D's KV (Req.offload_kv_cache -> get_cpu_copy) and frees
    its pages; D's cached prefix stays in the tree, evictable. E (context -
    4) prefills into D's freed and evicted pages; B and C decode to their
    ends, E to context - 3.
 5. D resumes as the decode server does it (evict, alloc_for_decode_prealloc,
    restore_kv_cache -> Req.load_kv_cache -> load_cpu_copy, a PREBUILT batch
    checkpointed into the tree). F (short) prefills.
 6. Two EAGLE steps (eagle_prepare_for_decode's over-allocation,
    eagle_prepare_for_verify, TARGET_VERIFY of 4 tokens through the backend):
    batch [E, D, F], E at seq_len context - 3 and D at context - 1, each
    followed by another request's row in the verify page table; accepted 1, 2
    and 4 tokens; D finishes over its token budget (its over-accepted and
    rejected slots freed by release_kv_cache). Then [E, F], E at context - 2,
    with the metadata built the CUDA-graph way (init_cuda_graph_state,
    init_forward_metadata_out_graph). E finishes, F ends; every page is then
    free or cached.

After every step (ServingSim.step -> check_state): each live request's K/V,
each radix-tree node's K/V and each retracted request's host copy equal what
the simulation wrote (fp8 as stored, read back from the 5D buffers in (block,
slot) coordinates), the pages partition the pool, and every attention output
of the step equals float64 attention.

Mutation tests revert one fix (the class attribute back to the wrapt
wrapper's __wrapped__) and assert the simulation stops at the step that needs it.
"""

from __future__ import annotations

import importlib
import inspect
import traceback

import pytest
import torch

import sglang_kv5d
from sglang_kv5d.versions import parse_version
from tests.helpers.pools import enable_5d
from tests.helpers.serving_sim import ServingSim, SimConfig, SimulationMismatch, sglang_runtime
from tests.helpers.subproc import sglang_version

pytestmark = pytest.mark.skipif(parse_version(sglang_version()) != parse_version("0.5.23"),
                                reason="drives SGLang 0.5.23's scheduler-side API (checkpoint_kv_cache, spec v2)")

PAGES = {16: 11, 32: 11, 64: 11}  # pool size in pages: tight enough that D evicts and D's resume evicts


def config(page: int) -> SimConfig:
    return SimConfig(page=page, context_len=4 * page, pool_pages=PAGES[page])


@pytest.fixture
def overlay(monkeypatch):
    enable_5d(monkeypatch)
    monkeypatch.setenv("SGLANG_KV5D_ATTN_IMPL", "triton")
    for module in ("sglang.srt.mem_cache.kv_cache_configurator", "sglang.srt.layers.attention.aiter_backend"):
        importlib.import_module(module)
    from sglang_kv5d import attention

    attention.reset_state()
    before = {(cls, name): inspect.getattr_static(cls, name) for cls, name in _watched_methods()}
    st = sglang_kv5d.activate()
    yield st
    sglang_kv5d.deactivate()
    attention.reset_state()
    for (cls, name), fn in before.items():  # nothing of the overlay (or of a mutation) is left behind
        assert inspect.getattr_static(cls, name) is fn, f"{cls.__name__}.{name} is not what it was before the test"


def _watched_methods():
    ab = importlib.import_module("sglang.srt.layers.attention.aiter_backend")
    mp = importlib.import_module("sglang.srt.mem_cache.memory_pool")
    return [(ab.AiterAttnBackend, "_build_verify_unified_metadata"), (ab.AiterAttnBackend, "init_cuda_graph_state"),
            (mp.MHATokenToKVPool, "get_cpu_copy"), (mp.MHATokenToKVPool, "load_cpu_copy")]


def run_scenario(sim: ServingSim, stop_after: str = None, verify_graph=(False, True)) -> None:
    """The scenario of the module docstring; ``sim.step`` checks after every step.

    ``stop_after``: the name of the last step to run (the mutation tests stop where the fix
    matters); ``verify_graph``: per verify step, whether its metadata is built the CUDA-graph
    way (init_cuda_graph_state's persistent tables, init_forward_metadata_out_graph) or eagerly."""
    P, ctx = sim.page, sim.cfg.context_len
    # EAGLE's radix keys are bigrams: a 2-page hit needs 2 pages + 1 shared tokens
    shared = sim.random_tokens(2 * P + 1)
    A = sim.add_request("A", shared + sim.random_tokens(P + 4), max_new_tokens=3)
    C = sim.add_request("C", sim.random_tokens(2 * P + P // 2), max_new_tokens=5)
    B = sim.add_request("B", shared + sim.random_tokens(P // 2 + 2), max_new_tokens=4)
    D = sim.add_request("D", sim.random_tokens(ctx - 2), max_new_tokens=3)
    E = sim.add_request("E", sim.random_tokens(ctx - 4), max_new_tokens=5)
    F = sim.add_request("F", sim.random_tokens(P // 4 + 1), max_new_tokens=64)

    def verify_rows(*at_limit):
        order = [r.rid for r in sim.running.reqs]
        for rid in at_limit:  # the request's verify-table row is followed by another request's
            assert rid in order and order.index(rid) + 1 < len(order), order
        return order

    def prefill_a_1():
        sim.prefill([(A, P)])
        assert sim.chunked is A and A.kv.kv_committed_len == P

    def prefill_a_2():
        sim.prefill([(A, P), (C, None)])
        assert sim.chunked is A and A.prefix_len == P  # chunk 1 was checkpointed before chunk 2

    def prefill_a_3():
        sim.prefill([(A, None)])
        assert sim.chunked is None and len(A.output_ids) == 1

    def prefill_b():
        sim.prefill([(B, None)])
        assert ("B", 2 * P) in sim.events_of("prefix"), sim.events_of("prefix")

    def decode_a_done():
        sim.decode()
        assert A.finished() and not A.kv.holds_kv

    def prefill_d():
        sim.prefill([(D, None)])
        assert sim.events_of("reallocated-evicted-pages", "prefill D (evicts)"), sim.events_of("pages")

    def decode_d_limit():
        sim.decode()
        assert D.kv.kv_committed_len == ctx - 1

    def retract():
        assert sim.retract() == ["D"]
        assert not D.kv.holds_kv and D.kv.retraction_backup is not None

    def prefill_e():
        sim.prefill([(E, None)])
        d_pages = set(sim.events_of("allocated-pages", "prefill D (evicts)")[0])
        e_pages = set(sim.events_of("allocated-pages", "prefill E (D's freed pages)")[0])
        assert d_pages & e_pages, (d_pages, e_pages)

    def decode_bc_done():
        sim.decode()
        assert E.kv.kv_committed_len == ctx - 3 and B.finished() and C.finished()

    def resume_d():
        sim.resume(D)
        assert D.kv.kv_committed_len == ctx - 1 and sim.events_of("evicted-for-resume", "resume D")

    def verify_1():
        verify_rows("E", "D")
        sim.verify({"E": 1, "D": 2, "F": 4}, graph=verify_graph[0])
        assert D.finished() and not D.kv.holds_kv

    def verify_2():
        verify_rows("E")
        sim.verify({"E": 3, "F": 2}, graph=verify_graph[1])
        assert E.finished()

    def finish():
        sim.finish_all()
        assert not sim.live_requests()

    steps = [
        ("prefill A chunk 1", prefill_a_1),
        ("prefill A chunk 2 + C", prefill_a_2),
        ("prefill A last chunk", prefill_a_3),
        ("decode 1", sim.decode),
        ("prefill B (prefix hit)", prefill_b),
        ("decode 2 (A finishes)", decode_a_done),
        ("prefill D (evicts)", prefill_d),
        ("decode 3 (D at the limit)", decode_d_limit),
        ("retract", retract),
        ("prefill E (D's freed pages)", prefill_e),
        ("decode 4 (B, C finish)", decode_bc_done),
        ("resume D", resume_d),
        ("prefill F", lambda: sim.prefill([(F, None)])),
        ("verify 1 (at the limit)", verify_1),
        ("verify 2 (near the limit)", verify_2),
        ("finish", finish),
    ]
    for name, fn in steps:
        with sim.step(name):
            fn()
        if name == stop_after:
            return


@pytest.mark.parametrize("page", [16, 32, 64])
def test_serving_simulation(overlay, page):
    cfg = config(page)
    with sglang_runtime(cfg):
        sim = ServingSim(cfg)
        run_scenario(sim)
    # every step ran its checks and none failed (sim.step raises otherwise); what was compared:
    kinds = {}
    for r in sim.results:
        kinds.setdefault(r.phase, []).append(r)
    assert {k: len(v) for k, v in kinds.items()} == {"extend": 7, "decode": 4, "verify": 2}
    assert all(r.max_ref > 1.0 for rs in kinds.values() for r in rs)
    # the overlay's verify tables (eager, then the CUDA-graph way) have room for the drafts
    width = -(-(cfg.context_len + cfg.draft_tokens) // page)
    assert [shape[1] for shape in sim.events_of("verify-table")] == [width, width]
    assert sim.step_seconds and not sim.retracted


# ---------------------------------------------------------------------------
# mutation tests: with a fix reverted, the simulation must stop where it matters


def _revert(mp, cls, name):
    """Put upstream's function back on ``cls`` (the overlay's wrapt wrapper keeps it as __wrapped__).

    The innermost ``__wrapped__``: a wrapper an earlier test in the session left on the
    class (a test-level monkeypatch of a wrapped method, undone after deactivate(),
    reinstalls the wrapper) is not upstream. ``mp`` is a
    ``monkeypatch.context()``, undone while the overlay is still active: the test-level
    monkeypatch is undone after the overlay fixture deactivates, and would put the
    overlay's wrapper back on a class the overlay no longer patches."""
    fn = inspect.getattr_static(cls, name)
    while hasattr(fn, "__wrapped__"):
        fn = fn.__wrapped__
    mp.setattr(cls, name, fn)


def _require_wrapped(cls, names, patch):
    missing = [n for n in names if not hasattr(inspect.getattr_static(cls, n), "__wrapped__")]
    assert not missing, f"{patch} is not installed: {cls.__name__}.{', '.join(missing)} not wrapped"


def _run_expecting_failure(cfg, stop_after, **kw):
    with sglang_runtime(cfg):
        sim = ServingSim(cfg)
        with pytest.raises(SimulationMismatch) as info:
            run_scenario(sim, stop_after=stop_after, **kw)
    return sim, info.value


@pytest.mark.parametrize("page,graph", [(16, False), (64, False), (64, True)], ids=["p16-eager", "p64-eager",
                                                                                    "p64-graph"])
def test_simulation_detects_verify_tables_reverted(overlay, monkeypatch, page, graph):
    """fix 1 (target-verify-5d's table builder) reverted: upstream's cdiv(context_len, page)-wide
    verify table (eager, or the CUDA-graph buffers) has no column for the drafts past the
    last page of D (at the limit) and E (near it): the verify kernel reads that column out of
    the next request's row, and their attention is wrong."""
    ab = importlib.import_module("sglang.srt.layers.attention.aiter_backend")
    names = ("_build_verify_unified_metadata", "init_cuda_graph_state")
    _require_wrapped(ab.AiterAttnBackend, names, "target-verify-5d (fix 1)")
    cfg = config(page)
    with monkeypatch.context() as mp:
        for name in names:
            _revert(mp, ab.AiterAttnBackend, name)
        sim, err = _run_expecting_failure(cfg, stop_after="verify 1 (at the limit)", verify_graph=(graph, graph))
    assert err.step == "verify 1 (at the limit)", err
    assert sim.events_of("verify-table") == [(3, cfg.context_len // page)]  # upstream's width: no room for drafts
    wrong = {p.split()[2] for p in err.problems if "verify positions" in p}
    assert {"D", "E"} <= wrong, err.problems  # both requests whose drafts cross the table's last page


@pytest.mark.parametrize("reverted", [("get_cpu_copy", "load_cpu_copy"), ("get_cpu_copy",), ("load_cpu_copy",)],
                         ids=["both", "get", "load"])
def test_simulation_detects_cpu_copy_reverted(overlay, monkeypatch, reverted):
    """fix 5 (cpu-copy-5d) reverted: retraction offloads / reloads a 5D pool by token slot."""
    mp = importlib.import_module("sglang.srt.mem_cache.memory_pool")
    _require_wrapped(mp.MHATokenToKVPool, ("get_cpu_copy", "load_cpu_copy"), "cpu-copy-5d (fix 5)")
    with monkeypatch.context() as m:
        for name in reverted:
            _revert(m, mp.MHATokenToKVPool, name)
        sim, err = _run_expecting_failure(config(16), stop_after="resume D")
    # reverted get: SGLang's get_cpu_copy indexes the 5D buffer's blocks by token slot (out of range here;
    # a device assert on a GPU); reverted load: its load_cpu_copy writes slot-indexed rows into 5D blocks
    expected_step, function = ("retract", "get_cpu_copy") if "get_cpu_copy" in reverted else ("resume D",
                                                                                              "load_cpu_copy")
    assert err.step == expected_step, err
    frames = [f.name for f in traceback.extract_tb(err.cause.__traceback__)] if err.cause else []
    assert function in frames, (frames, err)


def test_checks_catch_corruption(overlay):
    """The checks can fail: a flipped byte in B's own page, in the prefix B shares with A (and the tree), a page
    freed under a live request, each is reported."""
    cfg = config(16)
    with sglang_runtime(cfg):
        sim = ServingSim(cfg)
        run_scenario(sim, stop_after="prefill B (prefix hit)")
        B = sim.reqs["B"]
        assert sim.check_state() == []
        row = sim.req_to_token_pool.req_to_token[B.kv.req_pool_idx]
        k = sim.leaf.k_buffer[sim.local_layer[3]]
        for pos, who in ((2 * cfg.page + 1, {"request B"}), (3, {"request A", "request B", "tree node"})):
            slot = int(row[pos])
            blk, off = divmod(slot, cfg.page)
            saved = k[blk, 0, 1, off, 5].clone()
            k[blk, 0, 1, off, 5] ^= 0x40  # one fp8 byte of K, head 0, dim 1 * X + 5
            problems = sim.check_state()
            k[blk, 0, 1, off, 5] = saved
            assert problems and all("layer 3 K differs" in p and f"position {pos} " in p for p in problems), problems
            assert {"tree node" if p.startswith("tree node") else p.split(" (")[0] for p in problems} == who, problems
        assert sim.check_state() == []
        own_page = int(row[2 * cfg.page]) // cfg.page
        sim.allocator.free(row[2 * cfg.page: 2 * cfg.page + 1].to(torch.int64))
        assert any(f"pages free while in use: [{own_page}]" in p for p in sim.check_state()), sim.check_state()
