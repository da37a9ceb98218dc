"""A serving simulation on SGLang's own bookkeeping, over a SHUFFLE 5D hybrid pool.

``ServingSim`` drives SGLang 0.5.23's real request-side machinery on the CPU
the way the scheduler does, one step at a time:

* requests are real ``Req`` objects, batches real ``ScheduleBatch`` objects
  (``init_new``, ``prepare_for_extend``, ``prepare_for_decode``,
  ``merge_batch``, ``filter_batch``, ``retract_decode``,
  ``prepare_for_prebuilt``);
* memory is a real ``ReqToTokenPool`` (rows ``context_len +
  get_req_to_token_extra_context_len()`` wide, as the server sizes them), a
  real ``PagedTokenToKVPoolAllocator`` and a real ``RadixCache`` (EAGLE bigram
  keys, as a speculative server builds it) over a real ``HybridLinearKVPool``
  whose full-attention layers are SHUFFLE 5D fp8;
* prefix reuse, chunked-prefill checkpoints, finishing and retraction go
  through SGLang's helpers: ``Req.init_next_round_input`` (match_kv_cache),
  ``checkpoint_kv_cache`` (cache_unfinished_req), ``release_kv_cache``
  (cache_finished_req), ``ScheduleBatch.retract_decode`` -> ``release_req`` ->
  ``backup_kv_cache`` -> ``Req.offload_kv_cache`` (allocator and pool
  ``get_cpu_copy``), the decode server's resume: ``alloc_for_decode_prealloc``
  and ``restore_kv_cache`` -> ``Req.load_kv_cache`` (``load_cpu_copy``);
* speculative steps: ``eagle_prepare_for_decode`` (``alloc_for_spec_decode``:
  the spec-v2 over-allocation), ``eagle_prepare_for_verify`` (``out_cache_loc``
  from ``req_to_token``, the ``ForwardBatch``), the commit of accepted tokens
  as the batch result processor does it (``kv_committed_len += accept_len``;
  rejected drafts stay in the request's over-allocation and
  ``release_kv_cache`` frees them);
* every forward is a real ``ForwardBatch`` (``ForwardBatch.init_new`` with a
  minimal runner carrying SGLang's own ``KVIndexTranslator``), metadata from
  the backend's own ``init_forward_metadata``, attention and KV writes through
  a real ``AiterAttnBackend`` (``forward_extend`` / ``forward_decode``, the
  overlay's patches active, portable kernels).

What the "model" produces is a deterministic function of the token prefix:
the K/V of position ``p`` of layer ``l`` is drawn from a generator seeded by a
hash of tokens ``0..p`` (so requests sharing a prefix share its K/V, as a real
model would), ``q`` is random per forward. Every K/V the simulation hands to
SGLang is recorded, dequantised as the fp8 pool stores it (``written``: the
shadow). :meth:`ServingSim.check` then holds, after every step:

* every live request's committed K/V, read back from the pool's 5D buffers in
  (block, slot) coordinates, against the shadow, bit for bit;
* every radix-tree node's K/V (cached prefixes, evictable or locked) the same way;
* the allocator's pages: free pages, tree pages and live requests' pages
  partition the pool (no leak, no page free while in use, no page owned by
  two requests);
* every attention output of the step against float64 attention
  (``sglang_kv5d.kernels.attention_reference.attention_ref``) over the shadow.

Use :meth:`ServingSim.step` as a context manager around each step: it names
the step, turns any exception into :class:`SimulationMismatch` naming the
step, and runs :meth:`check` at the end.
"""

from __future__ import annotations

import contextlib
import importlib
import time
import traceback
import types
from array import array
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import torch

from sglang_kv5d.selftest.geometry import Geometry
from sglang_kv5d.selftest.report import PhaseResult
from sglang_kv5d.selftest.workload import PoolCase, logical
from tests.helpers.backend import make_aiter_backend
from tests.helpers.pools import make_hybrid_pool, read_tokens, ref_attention

NS = types.SimpleNamespace
FP8 = torch.float8_e4m3fn
_MASK = (1 << 61) - 1


class SimulationMismatch(AssertionError):
    """A step of the simulation failed: a check mismatched, or SGLang raised."""

    def __init__(self, step: str, problems: Sequence[str], cause: Optional[BaseException] = None):
        self.step = step
        self.problems = list(problems)
        self.cause = cause
        shown = "\n  ".join(self.problems[:12])
        more = f"\n  ... {len(self.problems) - 12} more" if len(self.problems) > 12 else ""
        super().__init__(f"step {step!r}:\n  {shown}{more}")


@dataclass(frozen=True)
class SimConfig:
    page: int
    context_len: int  # a multiple of the page, so seq_len + drafts at the limit crosses a page
    pool_pages: int  # KV pool size in pages (page 0 is SGLang's padding page, on top)
    draft_tokens: int = 4  # tokens per request in a verify (the last verified token + N - 1 drafts)
    hq: int = 2
    hkv: int = 1
    head_dim: int = 64
    num_layers: int = 4
    full_layers: Tuple[int, ...] = (1, 3)  # the hybrid model's full-attention layers (the rest are linear)
    max_running: int = 8  # ReqToTokenPool rows
    k_scale: float = 0.5
    v_scale: float = 2.0
    seed: int = 1234


def server_args_overrides(cfg: SimConfig) -> dict:
    """The ServerArgs fields of the simulated server (SGLang's override_server_args publishes them).

    A PD decode server (retraction offloads KV to host tensors) with EAGLE
    (topk 1) over the aiter backend."""
    return dict(
        page_size=cfg.page, device="cpu", attention_backend="aiter", context_length=cfg.context_len,
        disaggregation_mode="decode", disaggregation_decode_retraction_backup="cpu_tensor",
        speculative_algorithm="EAGLE", speculative_num_draft_tokens=cfg.draft_tokens,
        speculative_eagle_topk=1, speculative_num_steps=cfg.draft_tokens - 1,
    )


@contextlib.contextmanager
def sglang_runtime(cfg: SimConfig):
    """Publish the simulated server's config through SGLang's runtime context; restore it after.

    Also gives aiter_backend the ``reset_verify_attn_plan_cache`` it calls in
    ``init_forward_metadata`` but imports on HIP only (a no-op here: no aiter
    verify plans exist off ROCm), for the duration."""
    from sglang.srt.runtime_context import get_context

    ab = importlib.import_module("sglang.srt.layers.attention.aiter_backend")
    shim = not hasattr(ab, "reset_verify_attn_plan_cache")
    if shim:
        ab.reset_verify_attn_plan_cache = lambda: None
    override = get_context().override_server_args(**server_args_overrides(cfg))
    override.install()
    try:
        yield
    finally:
        override.restore()
        if shim:
            del ab.reset_verify_attn_plan_cache


def _chain(h: int, token: int) -> int:
    return (h * 1000003 + int(token) + 1) & _MASK


def prefix_hashes(tokens: Iterable[int], h: int = 0) -> List[int]:
    out = []
    for t in tokens:
        h = _chain(h, t)
        out.append(h)
    return out


class ServingSim:
    """SGLang's scheduler-side bookkeeping, driven step by step (see the module docstring)."""

    def __init__(self, cfg: SimConfig):
        from sglang.srt.managers.schedule_batch import ScheduleBatch
        from sglang.srt.mem_cache.allocation_sizing import get_req_to_token_extra_context_len
        from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
        from sglang.srt.mem_cache.cache_init_params import CacheInitParams
        from sglang.srt.mem_cache.kv_index_translator import KVIndexTranslator
        from sglang.srt.mem_cache.radix_cache import RadixCache
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        mp = importlib.import_module("sglang.srt.mem_cache.memory_pool")
        self.cfg = cfg
        self.page = P = cfg.page
        size = cfg.pool_pages * P
        self.pool = make_hybrid_pool(full_attention_layer_ids=list(cfg.full_layers), num_layers=cfg.num_layers,
                                     size=size, page_size=P, dtype=FP8, head_num=cfg.hkv, head_dim=cfg.head_dim)
        self.leaf = self.pool.full_kv_pool
        if self.leaf.k_buffer[0].dim() != 5:
            raise RuntimeError(f"the full-attention pool is not SHUFFLE 5D: {tuple(self.leaf.k_buffer[0].shape)}")
        self.allocator = PagedTokenToKVPoolAllocator(size, P, FP8, "cpu", self.pool, need_sort=True)
        self.req_to_token_pool = mp.ReqToTokenPool(
            size=cfg.max_running, max_context_len=cfg.context_len + get_req_to_token_extra_context_len(),
            device="cpu", enable_memory_saver=False)
        self.tree = RadixCache(CacheInitParams(disable=False, req_to_token_pool=self.req_to_token_pool,
                                               token_to_kv_pool_allocator=self.allocator, page_size=P,
                                               is_eagle=True))
        self.model_config = NS(vocab_size=32000, is_encoder_decoder=False, is_matryoshka=False, model_is_mrope=False,
                               hf_text_config=NS(), requires_mm_token_modalities=False)
        translator = KVIndexTranslator(req_to_token=self.req_to_token_pool.req_to_token,
                                       token_to_kv_pool_allocator=self.allocator, token_to_kv_pool=self.pool,
                                       page_size=P, device="cpu")
        self.spec = SpeculativeAlgorithm.EAGLE
        self.no_spec = SpeculativeAlgorithm.NONE
        rows = self.req_to_token_pool.req_to_token.shape[0]
        self.backend = make_aiter_backend(self.pool, num_q_heads=cfg.hq, num_kv_heads=cfg.hkv,
                                          head_dim=cfg.head_dim, page_size=P, context_len=cfg.context_len,
                                          max_bs=rows, spec_algorithm=self.spec,
                                          num_draft_tokens=cfg.draft_tokens)
        self._bind_backend_to_pools()
        self.runner = NS(is_draft_worker=False, device="cpu", model_config=self.model_config,
                         kv_index_translator=translator, prefill_attention_backend_str="aiter",
                         ngram_embedding_manager=NS(enabled=False), lora_manager=None, spec_algorithm=self.spec,
                         decode_cuda_graph_runner=None, attn_backend=self.backend)
        self.schedule_batch_cls = ScheduleBatch

        geo = Geometry(name="sim", hq=cfg.hq, hkv=cfg.hkv, head_dim=cfg.head_dim, page=P,
                       k_scale=cfg.k_scale, v_scale=cfg.v_scale)
        case = PoolCase("sim", self.pool, list(cfg.full_layers), FP8, {})
        case.make_layers(geo, "cpu")
        self.layers = case.layer_objs  # RadixAttention-like layer objects, fp8 scales
        self.local_layer = dict(self.pool.full_attention_layer_id_mapping)

        self.gen = torch.Generator().manual_seed(cfg.seed)
        self.written: Dict[Tuple[int, int], Tuple[torch.Tensor, torch.Tensor]] = {}  # the shadow
        self.reqs: Dict[str, object] = {}
        self.running = None  # the decode ScheduleBatch
        self.chunked = None  # the request whose prefill is chunked, between its chunks
        self.retracted: List[object] = []
        self.current_step = "setup"
        self.results: List[PhaseResult] = []
        self.events: List[Tuple[str, str, object]] = []  # (step, what, detail)
        self.step_seconds: Dict[str, float] = {}
        self._graph_state = False

    # ------------------------------------------------------------------ setup

    def _bind_backend_to_pools(self) -> None:
        """The backend reads the server's request table (a runner hands it its ReqToTokenPool)."""
        table = self.req_to_token_pool.req_to_token
        self.backend.req_to_token = table
        self.backend.indices_updater_prefill.req_to_token = table
        self.backend.kv_cache_dtype = FP8  # a runner's kv_cache_dtype for an fp8 cache

    # --------------------------------------------------------------- requests

    def random_tokens(self, n: int) -> List[int]:
        return torch.randint(10, 30000, (n,), generator=self.gen).tolist()

    def add_request(self, name: str, prompt: Sequence[int], max_new_tokens: int):
        from sglang.srt.managers.schedule_batch import Req
        from sglang.srt.sampling.sampling_params import SamplingParams

        params = SamplingParams(max_new_tokens=max_new_tokens)
        params.normalize(None)  # what the tokenizer manager does before the scheduler sees a request
        params.verify(self.model_config.vocab_size)
        req = Req(name, "", array("q", prompt), params)
        self.reqs[name] = req
        return req

    def live_requests(self) -> List[object]:
        return [r for r in self.reqs.values() if r.kv.holds_kv]

    # ------------------------------------------------------------------ model

    def _kv_at(self, lid: int, h: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """The bf16 K/V (H_kv, D) of the position whose prefix hashes to ``h``; records the shadow."""
        g = torch.Generator().manual_seed((h * 131 + lid * 7919) & ((1 << 62) - 1))
        kv = (torch.randn(2, self.cfg.hkv, self.cfg.head_dim, generator=g) * 2.0).to(torch.bfloat16)
        layer = self.layers[lid]
        self.written[(lid, h)] = (logical(kv[0:1], FP8, layer.k_scale_float)[0],
                                  logical(kv[1:2], FP8, layer.v_scale_float)[0])
        return kv[0], kv[1]

    def _kv_for(self, lid: int, hashes: Sequence[int]):
        ks, vs = zip(*(self._kv_at(lid, h) for h in hashes)) if hashes else ((), ())
        return torch.stack(ks), torch.stack(vs)

    def _expected(self, lid: int, hashes: Sequence[int], what: str, problems: List[str]):
        """The shadow K/V of these positions, float64 (T, H, D); a position never written is a problem."""
        ks, vs = [], []
        for p, h in enumerate(hashes):
            got = self.written.get((lid, h))
            if got is None:
                problems.append(f"{what}: position {p} of layer {lid} was never written by the simulation")
                return None, None
            ks.append(got[0])
            vs.append(got[1])
        return torch.stack(ks), torch.stack(vs)

    def _q(self, k: torch.Tensor) -> torch.Tensor:
        """Queries for new tokens whose keys are ``k`` (T, H_kv, D): even query heads are
        random; odd heads lean on their own token's key (``0.25 k + noise``), so their
        output is dominated by the newest K/V: a key read from the wrong place there
        (a dropped page, a wrong slot) moves the output far, not by one key's share."""
        cfg = self.cfg
        n, group = k.shape[0], cfg.hq // cfg.hkv
        q = torch.randn(n, cfg.hq, cfg.head_dim, generator=self.gen) * 1.5
        own = k.float().repeat_interleave(group, dim=1) * 0.25 + torch.randn(q.shape, generator=self.gen) * 0.5
        q[:, 1::2] = own[:, 1::2]
        return q.reshape(n, -1).to(torch.bfloat16)

    def _result(self, kind: str) -> PhaseResult:
        res = PhaseResult(kind, self.current_step)
        self.results.append(res)
        return res

    # ------------------------------------------------------------------ steps

    @contextlib.contextmanager
    def step(self, name: str):
        """One step: failures inside it (a check, or SGLang raising) become SimulationMismatch; then check()."""
        self.current_step = name
        first_result = len(self.results)
        t0 = time.perf_counter()
        try:
            yield self
        except SimulationMismatch:
            raise
        except Exception as exc:  # SGLang (or the overlay) raised during the step
            where = traceback.extract_tb(exc.__traceback__)[-1]
            raise SimulationMismatch(name, [f"{type(exc).__name__}: {exc} (at {where.filename}:{where.lineno})"],
                                     cause=exc) from exc
        finally:
            self.step_seconds[name] = time.perf_counter() - t0
        self.events.append((name, "pages", dict(free=self.allocator.available_size() // self.page,
                                                 evictable=self.tree.evictable_size() // self.page,
                                                 protected=self.tree.protected_size() // self.page)))
        problems = [f for res in self.results[first_result:] for f in res.failures]
        problems += self.check_state()
        if problems:
            raise SimulationMismatch(name, problems)

    def _forward_batch(self, batch):
        from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch

        return ForwardBatch.init_new(batch, self.runner, capture_hidden_mode=CaptureHiddenMode.NULL,
                                     return_hidden_states_before_norm=False)

    def _new_batch(self, reqs, spec=None, chunked_req=None):
        return self.schedule_batch_cls.init_new(reqs, self.req_to_token_pool, self.allocator, self.tree,
                                                self.model_config, False, spec or self.no_spec,
                                                chunked_req=chunked_req)

    def _hashes(self, req, end: int) -> List[int]:
        return prefix_hashes(list(req.origin_input_ids + req.output_ids)[:end])

    def _sample(self) -> int:
        return int(torch.randint(10, 30000, (1,), generator=self.gen))

    def prefill(self, plan: Sequence[Tuple[object, Optional[int]]]) -> None:
        """One extend batch, as Scheduler.get_new_batch_prefill builds it and
        process_batch_result_prefill settles it.

        ``plan``: (request, tokens to extend this round; None: the rest). The
        chunked request of the previous round is first checkpointed
        (``stash_chunked_request``); a new request matches the radix tree
        (``init_next_round_input``) and locks its match; a non-final chunk is
        page-aligned (as PrefillAdder truncates it)."""
        from sglang.srt.mem_cache.common import checkpoint_kv_cache, release_kv_cache

        P = self.page
        if self.chunked is not None:
            checkpoint_kv_cache(self.chunked, self.tree)  # Scheduler.stash_chunked_request
            self.chunked.init_next_round_input()
        reqs, new_chunked = [], None
        for req, n in plan:
            if req is self.chunked:
                self.chunked = None
            else:
                req.init_next_round_input(self.tree)  # match_kv_cache
                req.lock = self.tree.lock(req.last_node)
                self.events.append((self.current_step, "prefix", (req.rid, req.prefix_len)))
            total = len(req.full_untruncated_fill_ids)
            end = total if n is None else min(total, req.prefix_len + n)
            if end < total:
                end = end // P * P
                if new_chunked is not None:
                    raise ValueError("SGLang chunks at most one request at a time")
                new_chunked = req
            req.extend_end = end
            reqs.append(req)

        tree_pages_before = self.tree_pages()
        free_before = set(self.allocator.get_all_free_pages().tolist())
        batch = self._new_batch(reqs, chunked_req=new_chunked)
        batch.prepare_for_extend()  # alloc_for_extend: evicts, allocates, writes req_to_token
        self._note_allocation(batch.out_cache_loc, tree_pages_before, free_before)
        fb = self._forward_batch(batch)
        self.backend.init_forward_metadata(fb)

        spans = [(r, r.prefix_len, r.extend_end) for r in reqs]
        res = self._result("extend")
        for lid, layer in self.layers.items():
            ks, vs, hashes = [], [], {}
            for r, start, end in spans:
                hashes[r.rid] = self._hashes(r, end)
                k, v = self._kv_for(lid, hashes[r.rid][start:end])
                ks.append(k)
                vs.append(v)
            k_all, v_all = torch.cat(ks), torch.cat(vs)
            q = self._q(k_all)
            out = self.backend.forward_extend(q, k_all, v_all, layer, fb)
            row = 0
            for r, start, end in spans:
                problems: List[str] = []
                keys, vals = self._expected(lid, hashes[r.rid], f"{r.rid} extend", problems)
                res.failures += problems
                n = end - start
                if keys is not None:
                    ref = ref_attention(q[row:row + n].double().view(n, self.cfg.hq, -1), keys, vals,
                                        torch.arange(start, end), sm_scale=layer.scaling)
                    res.compare(out[row:row + n], ref, f"layer {lid} {r.rid} extend {start}..{end - 1}")
                row += n

        # process_batch_result_prefill
        next_ids = []
        for r in reqs:
            if r is new_chunked:
                self.chunked = r
                next_ids.append(0)
                continue
            r.output_ids.append(self._sample())
            r.update_finish_state()
            if r.finished():
                release_kv_cache(r, self.tree, checkpoint=True)
            else:
                checkpoint_kv_cache(r, self.tree)
            next_ids.append(r.output_ids[-1])
        batch.input_ids = torch.tensor(next_ids, dtype=torch.int64)
        batch.filter_batch(reqs_to_exclude=new_chunked)  # finished requests and the chunk leave
        self._join_running(batch)

    def _join_running(self, batch) -> None:
        if batch.is_empty():
            return
        if self.running is None or self.running.is_empty():
            self.running = batch
        else:
            self.running.merge_batch(batch)

    def decode(self) -> None:
        """One decode step of the running batch (ScheduleBatch.prepare_for_decode: alloc_for_decode)."""
        from sglang.srt.mem_cache.common import release_kv_cache

        batch = self.running
        tree_pages_before = self.tree_pages()
        free_before = set(self.allocator.get_all_free_pages().tolist())
        batch.prepare_for_decode()
        self._note_allocation(batch.out_cache_loc, tree_pages_before, free_before)
        fb = self._forward_batch(batch)
        self.backend.init_forward_metadata(fb)
        reqs = list(batch.reqs)
        seq = batch.seq_lens_cpu.tolist()  # after the step's +1
        res = self._result("decode")
        for lid, layer in self.layers.items():
            hashes = [self._hashes(r, s) for r, s in zip(reqs, seq)]
            k, v = self._kv_for(lid, [h[-1] for h in hashes])
            q = self._q(k)
            out = self.backend.forward_decode(q, k, v, layer, fb)
            for i, (r, s) in enumerate(zip(reqs, seq)):
                problems: List[str] = []
                keys, vals = self._expected(lid, hashes[i], f"{r.rid} decode", problems)
                res.failures += problems
                if keys is not None:
                    ref = ref_attention(q[i:i + 1].double().view(1, self.cfg.hq, -1), keys, vals, [s - 1],
                                        sm_scale=layer.scaling)
                    res.compare(out[i], ref, f"layer {lid} {r.rid} decode position {s - 1}")
        for r in reqs:  # process_batch_result_decode
            r.output_ids.append(self._sample())
            r.update_finish_state()
            if r.finished():
                release_kv_cache(r, self.tree, checkpoint=True)
        batch.filter_batch()
        batch.input_ids = torch.tensor([r.output_ids[-1] for r in batch.reqs], dtype=torch.int64)

    def retract(self) -> List[str]:
        """ScheduleBatch.retract_decode: SGLang picks the victims; on a PD decode
        server release_req offloads their KV (Req.offload_kv_cache)."""
        retracted, _ratio, aborted = self.running.retract_decode()
        if aborted:
            raise RuntimeError(f"retract_decode aborted {[r.rid for r in aborted]}")
        for r in retracted:
            if r.kv.retraction_backup is None:
                raise RuntimeError(f"{r.rid} was retracted without a KV backup")
        self.retracted += retracted
        self.running.input_ids = torch.tensor([r.output_ids[-1] for r in self.running.reqs], dtype=torch.int64)
        self.events.append((self.current_step, "retracted", [r.rid for r in retracted]))
        return [r.rid for r in retracted]

    def resume(self, req) -> None:
        """DecodePreallocQueue.resume_retracted_reqs + _pre_alloc for one request
        (alloc_for_decode_prealloc, the row write, restore_kv_cache ->
        Req.load_kv_cache), then the PREBUILT batch it rejoins decoding by
        (prepare_for_prebuilt; process_prebuilt's checkpoint_kv_cache)."""
        from sglang.srt.disaggregation.decode import alloc_for_decode_prealloc
        from sglang.srt.mem_cache.base_prefix_cache import EvictParams
        from sglang.srt.mem_cache.common import checkpoint_kv_cache, restore_kv_cache
        from sglang.srt.runtime_context import get_disagg
        from sglang.srt.utils import get_num_new_pages

        self.retracted.remove(req)
        req.is_retracted = False
        assert self.req_to_token_pool.alloc([req]) is not None
        fill_len = len(req.origin_input_ids) + max(len(req.output_ids) - 1, 0)
        req.kv.kv_committed_len = fill_len
        required = get_num_new_pages(seq_lens=torch.tensor([fill_len]), prefix_lens=torch.tensor([0]),
                                     page_size=self.page) * self.page
        available = self.allocator.available_size()
        if available < required:  # _pre_alloc evicts what the tree can give
            self.tree.evict_for_alloc(EvictParams(num_tokens=required - available))
            self.events.append((self.current_step, "evicted-for-resume", required - available))
        tree_pages_before = self.tree_pages()
        free_before = set(self.allocator.get_all_free_pages().tolist())
        kv_loc = alloc_for_decode_prealloc(self.allocator, req=req, fill_len=fill_len, delta_len=fill_len,
                                           prefix_len=0, total_prefix_len=0, prefix_indices=None,
                                           uses_swa_tail=False, swa_tail_len=0,
                                           req_to_token_pool=self.req_to_token_pool)
        if kv_loc is None:
            raise RuntimeError(f"no KV pages to resume {req.rid}")
        self._note_allocation(kv_loc, tree_pages_before, free_before)
        self.req_to_token_pool.write((req.kv.req_pool_idx, slice(0, len(kv_loc))), kv_loc)
        req.full_untruncated_fill_ids = req.origin_input_ids + req.output_ids
        req.prefix_len = 0
        req.extend_end = req.kv.kv_committed_len
        restore_kv_cache(req, self.tree, self.req_to_token_pool, self.allocator,
                         get_disagg().disaggregation_decode_retraction_backup)
        batch = self._new_batch([req])
        batch.prepare_for_prebuilt()
        for r in batch.reqs:  # ScheduleBatch.process_prebuilt
            checkpoint_kv_cache(r, self.tree)
        batch.input_ids = torch.tensor([r.output_ids[-1] for r in batch.reqs], dtype=torch.int64)
        self._join_running(batch)

    def verify(self, accept: Dict[str, int], *, graph: bool = False) -> None:
        """One speculative step of the running batch, EAGLE topk 1 (spec v2).

        eagle_prepare_for_decode allocates (alloc_for_spec_decode),
        eagle_prepare_for_verify takes the N slots after each request's
        committed length from req_to_token and builds the TARGET_VERIFY
        ForwardBatch; the backend's init_forward_metadata builds the verify
        page table (target-verify-5d's builder); forward_extend writes the N
        tokens' K/V and attends. Then ``accept[rid]`` (1..N: the verified
        token and accept-1 drafts) is committed the way the batch result
        processor does it.

        ``graph``: the metadata as a CUDA-graph replay builds it
        (``init_cuda_graph_state`` once, then ``init_forward_metadata_out_graph``:
        the persistent tables) instead of the eager ``init_forward_metadata``."""
        from sglang.srt.mem_cache.common import release_kv_cache
        from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
        from sglang.srt.speculative.eagle_info import EagleVerifyInput
        from sglang.srt.speculative.eagle_utils import eagle_prepare_for_decode, eagle_prepare_for_verify

        N = self.cfg.draft_tokens
        batch = self.running
        batch.spec_algorithm = self.spec
        reqs = list(batch.reqs)
        bs = len(reqs)
        tree_pages_before = self.tree_pages()
        free_before = set(self.allocator.get_all_free_pages().tolist())
        alloc_before = [r.kv.kv_allocated_len for r in reqs]
        eagle_prepare_for_decode(batch)
        for r, before in zip(reqs, alloc_before):
            row = self.req_to_token_pool.req_to_token[r.kv.req_pool_idx]
            if r.kv.kv_allocated_len > before:
                self._note_allocation(row[before:r.kv.kv_allocated_len], tree_pages_before, free_before)
        seq = batch.seq_lens_cpu.tolist()
        drafts = {r.rid: [r.output_ids[-1]] + self.random_tokens(N - 1) for r in reqs}
        tokens = torch.tensor([t for r in reqs for t in drafts[r.rid]], dtype=torch.int64)
        positions = torch.tensor([s + j for s in seq for j in range(N)], dtype=torch.int64)
        dummy = torch.zeros(bs, N, dtype=torch.int64)
        batch.spec_info = EagleVerifyInput(
            draft_token=tokens, custom_mask=None, positions=positions, retrieve_index=dummy,
            retrieve_next_token=dummy, retrieve_next_sibling=dummy, retrieve_cum_len=None, spec_steps=N - 1,
            topk=1, draft_token_num=N, capture_hidden_mode=CaptureHiddenMode.FULL,
            seq_lens_sum=int(sum(seq)), seq_lens_cpu=batch.seq_lens_cpu)
        batch.spec_info.prepared_out_cache_loc = self._verify_out_cache_loc(batch, N)
        target_worker = NS(model_runner=self.runner)
        fb, _graph = eagle_prepare_for_verify(batch.spec_info, self.req_to_token_pool, batch, target_worker)
        if graph:
            if not self._graph_state:
                rows = self.req_to_token_pool.req_to_token.shape[0]
                self.backend.init_cuda_graph_state(rows, rows * N)
                self._graph_state = True
            self.backend.init_forward_metadata_out_graph(fb, in_capture=False)  # what a graph replay loads
        else:
            self.backend.init_forward_metadata(fb)
        self.events.append((self.current_step, "verify-table", tuple(self.backend.forward_metadata.kv_indices.shape)))

        res = self._result("verify")
        for lid, layer in self.layers.items():
            hashes = {}
            for r, s in zip(reqs, seq):  # position s holds the last verified token, then the drafts
                base = self._hashes(r, s + 1)
                hashes[r.rid] = base + prefix_hashes(drafts[r.rid][1:], base[-1])
            k, v = self._kv_for(lid, [h for r, s in zip(reqs, seq) for h in hashes[r.rid][s:s + N]])
            q = self._q(k)
            out = self.backend.forward_extend(q, k, v, layer, fb)
            for i, (r, s) in enumerate(zip(reqs, seq)):
                problems: List[str] = []
                keys, vals = self._expected(lid, hashes[r.rid], f"{r.rid} verify", problems)
                res.failures += problems
                if keys is not None:
                    rows = slice(i * N, (i + 1) * N)
                    ref = ref_attention(q[rows].double().view(N, self.cfg.hq, -1), keys, vals,
                                        torch.arange(s, s + N), sm_scale=layer.scaling)
                    res.compare(out[rows], ref, f"layer {lid} {r.rid} verify positions {s}..{s + N - 1}")

        # the batch result processor's commit (spec v2): accepted tokens join the output
        accept_lens = []
        for r in reqs:
            a = int(accept.get(r.rid, 1))
            if not 1 <= a <= N:
                raise ValueError(f"accept length {a} for {r.rid} outside 1..{N}")
            accept_lens.append(a)
            r.output_ids.extend(drafts[r.rid][1:a] + [self._sample()])
            r.kv.kv_committed_len += a
            r.update_finish_state(a)
        batch.seq_lens = batch.seq_lens + torch.tensor(accept_lens, dtype=batch.seq_lens.dtype)
        batch.seq_lens_cpu = batch.seq_lens_cpu + torch.tensor(accept_lens, dtype=batch.seq_lens_cpu.dtype)
        batch.seq_lens_sum = None
        for r in reqs:
            if r.finished():
                release_kv_cache(r, self.tree, checkpoint=True)
        batch.spec_info = None
        batch.filter_batch()
        batch.input_ids = torch.tensor([r.output_ids[-1] for r in batch.reqs], dtype=torch.int64)

    def _verify_out_cache_loc(self, batch, n: int):
        """None (eagle_prepare_for_verify assigns the slots itself), except where SGLang's
        assign_extend_cache_locs_uniform_func has no branch for this platform (a CPU
        without SGLang's CPU engine returns None): then the Triton kernel its CUDA/HIP
        branch launches, under the interpreter, as the verify window the draft planned."""
        cache_locs = importlib.import_module("sglang.kernels.ops.speculative.cache_locs")
        if any(getattr(cache_locs, f, False) for f in ("_is_cuda", "_is_hip", "_is_musa", "_is_xpu", "_is_npu",
                                                       "_is_cpu")):
            return None
        bs = len(batch.reqs)
        table = self.req_to_token_pool.req_to_token
        out = torch.empty(bs * n, dtype=torch.int64)
        cache_locs.assign_extend_cache_locs_uniform[(bs,)](batch.req_pool_indices, table, batch.seq_lens, out,
                                                            table.shape[1], n)
        return out

    def finish_all(self) -> None:
        """Every running request ends (an abort-free finish: released into the tree)."""
        from sglang.srt.managers.schedule_batch import FINISH_LENGTH
        from sglang.srt.mem_cache.common import release_kv_cache

        for r in list(self.running.reqs if self.running is not None else []):
            r.finished_reason = FINISH_LENGTH(length=len(r.output_ids))
            release_kv_cache(r, self.tree, checkpoint=True)
        if self.running is not None:
            self.running.filter_batch()

    # ----------------------------------------------------------------- checks

    def _note_allocation(self, slots: Optional[torch.Tensor], tree_pages_before: set, free_before: set) -> None:
        """Record pages a step handed out that were cached in the tree (evicted) or are being reused."""
        if slots is None or slots.numel() == 0:
            return
        pages = set((slots.long() // self.page).tolist())
        evicted = tree_pages_before - self.tree_pages()
        if evicted and (self.current_step, "evicted-pages", sorted(evicted)) not in self.events:
            self.events.append((self.current_step, "evicted-pages", sorted(evicted)))
        reused = pages & evicted
        if reused:
            self.events.append((self.current_step, "reallocated-evicted-pages", sorted(reused)))
        self.events.append((self.current_step, "allocated-pages", sorted(pages)))

    def tree_nodes(self):
        """(node, raw token ids of the path to it, the node's first position) for every cached node."""
        out = []
        stack = [(child, [], 0) for child in self.tree.root_node.children.values()]
        while stack:
            node, raw, start = stack.pop()
            if node.evicted:
                continue
            tids = list(node.key.token_ids)
            path = raw + (tids if not node.key.is_bigram or not raw else tids[1:])
            out.append((node, path, start))
            for child in node.children.values():
                stack.append((child, path, start + len(node.value)))
        return out

    def tree_pages(self) -> set:
        pages = set()
        for node, _, _ in self.tree_nodes():
            pages |= set((node.value.long() // self.page).tolist())
        return pages

    def check_state(self) -> List[str]:
        """Pool contents, radix tree contents and page ownership (see the module docstring)."""
        problems: List[str] = []
        table = self.req_to_token_pool.req_to_token
        for r in self.live_requests():
            n = r.kv.kv_committed_len
            slots = table[r.kv.req_pool_idx, :n].long()
            self._check_slots(slots, self._hashes(r, n), f"request {r.rid} (row {r.kv.req_pool_idx})", problems)
        for node, path, start in self.tree_nodes():
            hashes = prefix_hashes(path)[: start + len(node.value)]
            self._check_slots(node.value.long(), hashes[start:], f"tree node {node.id} (positions {start}..)",
                              problems, first=start)
        for r in self.retracted:
            self._check_host_copy(r, problems)
        problems += self._check_pages()
        return problems

    def _check_host_copy(self, r, problems: List[str]) -> None:
        """A retracted request's host copy (Req.offload_kv_cache: HybridLinearKVPool.get_cpu_copy
        -> (the full pool's per-layer chunks of (slots, H, D) K/V, mamba)) against the shadow."""
        backup = r.kv.retraction_backup
        what = f"retracted {r.rid}'s host copy"
        if backup is None or backup.cpu_tensors is None:
            problems.append(f"{what}: missing")
            return
        kv_cpu = backup.cpu_tensors[0]
        n = len(r.origin_input_ids) + len(r.output_ids) - 1  # offload_kv_cache saves seqlen - 1 tokens
        hashes = self._hashes(r, n)
        for lid, local in self.local_layer.items():
            want_k, want_v = self._expected(lid, hashes, what, problems)
            if want_k is None:
                return
            scale = {"K": self.cfg.k_scale, "V": self.cfg.v_scale}
            for j, (name, want) in enumerate((("K", want_k), ("V", want_v))):
                got = torch.cat([chunk[j] for chunk in kv_cpu[local]])
                if got.dtype != FP8:
                    got = got.view(FP8)
                got = got.reshape(want.shape).to(torch.float64) * scale[name]
                bad = (got != want).flatten(1).any(1).nonzero().flatten()
                if bad.numel():
                    problems.append(f"{what}: layer {lid} {name} differs at {bad.numel()} position(s), "
                                    f"first position {int(bad[0])}")

    def _check_slots(self, slots, hashes, what, problems, first: int = 0) -> None:
        if len(hashes) != slots.numel():
            problems.append(f"{what}: {slots.numel()} slots for {len(hashes)} positions")
            return
        if slots.numel() == 0:
            return
        for lid in self.layers:
            want_k, want_v = self._expected(lid, hashes, what, problems)
            if want_k is None:
                return
            got_k, got_v = read_tokens(self.leaf, self.local_layer[lid], slots, self.cfg.k_scale, self.cfg.v_scale)
            for name, got, want in (("K", got_k, want_k), ("V", got_v, want_v)):
                bad = (got != want).flatten(1).any(1).nonzero().flatten()
                if bad.numel():
                    p = int(bad[0])
                    problems.append(f"{what}: layer {lid} {name} differs from what was written at {bad.numel()} "
                                    f"position(s), first position {first + p} (slot {int(slots[p])})")

    def _check_pages(self) -> List[str]:
        problems = []
        P = self.page
        all_pages = set(range(1, self.allocator.num_pages + 1))
        free_list = self.allocator.get_all_free_pages().tolist()
        free = set(free_list)
        if len(free) != len(free_list):
            problems.append("a page is on the allocator's free list twice")
        tree = self.tree_pages()
        owned: Dict[int, str] = {}
        live = set()
        table = self.req_to_token_pool.req_to_token
        for r in self.live_requests():
            row = table[r.kv.req_pool_idx].long()
            pages = set((row[: r.kv.kv_allocated_len] // P).tolist())
            live |= pages
            own = set((row[r.kv.cache_protected_len: r.kv.kv_allocated_len] // P).tolist())
            for pg in own:
                if pg in tree:
                    problems.append(f"page {pg} is {r.rid}'s own and also in the radix tree")
                if pg in owned:
                    problems.append(f"page {pg} is owned by both {owned[pg]} and {r.rid}")
                owned[pg] = r.rid
        used = tree | live
        if free & used:
            problems.append(f"pages free while in use: {sorted(free & used)[:8]}")
        if 0 in used:
            problems.append("the padding page 0 is in use")
        leaked = all_pages - free - used
        if leaked:
            problems.append(f"pages neither free nor in use (leaked): {sorted(leaked)[:8]}")
        return problems

    def events_of(self, what: str, step: Optional[str] = None):
        return [d for s, w, d in self.events if w == what and (step is None or s == step)]
