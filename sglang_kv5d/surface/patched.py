"""Rows of the SGLang objects the overlay wraps or replaces (see sglang_kv5d.surface)."""

from __future__ import annotations

from ..surface_names import AITER_BACKEND, AITER_UTILS, DECODE_KVCACHE_OFFLOAD_MANAGER, KV_CACHE_CONFIGURATOR, MEMORY_POOL
from ..surface_names import DISAGG_CONN, DISAGG_DECODE, DISAGG_PREFILL, DISAGG_UTILS
from ..surface_names import MOONCAKE_CONN, NIXL_CONN
from .table import REPLACE, WRAP, Surface

ROWS = (
    Surface(
        id="kv_cache_configurator.KVCacheConfigurator.configure",
        targets=(f"{KV_CACHE_CONFIGURATOR}:KVCacheConfigurator.configure",),
        action=WRAP,
        params=(("self", "pre_model_load_memory"),),
        why=(
            "Every KV pool of a model runner is built inside configure(); a speculative draft worker's "
            "configurator has is_draft_worker=True. The overlay marks that call as a draft scope so the "
            "draft's pools are built NHD (the process-wide layout variable would make them 5D, which the "
            "draft's triton / AITER NHD paths cannot read)."
        ),
        upstream="unfixed in 0.5.16 .. 0.5.23 (draft pools follow SGLANG_AITER_KV_CACHE_LAYOUT)",
        removal="when draft pools take their layout from the draft backend rather than the process",
        since="0.5.16",
    ),
    Surface(
        id="aiter_backend.forward_extend",
        targets=(f"{AITER_BACKEND}:AiterAttnBackend.forward_extend",),
        action=WRAP,
        params=(("self", "q", "k", "v", "layer", "forward_batch", "save_kv_cache", "sinks"),),
        why=(
            "The target_verify branch runs before the 5D dispatch and views the 5D cache as NHD "
            "(unified_attention on k_cache.view(-1, page, H, D)): silently wrong attention. For 5D, "
            "non-MLA, topk-1 backends the overlay writes the drafts 5D and runs its own extend kernel "
            "over SGLang's fixed-width verify page table; every other call reaches the original."
        ),
        upstream="unfixed in 0.5.13.post1 .. 0.5.23",
        removal="when AiterAttnBackend's target_verify branch dispatches 5D caches to a 5D kernel",
    ),
    Surface(
        id="aiter_backend._build_verify_unified_metadata",
        targets=(f"{AITER_BACKEND}:AiterAttnBackend._build_verify_unified_metadata",),
        action=WRAP,
        params=(("self", "bs", "seq_lens", "req_pool_indices", "draft_num", "page_table_dest",
                 "swa_page_table_dest"),),
        why=(
            "Sizes each verify row cdiv(max_context_len, page) but its Triton builder writes "
            "cdiv(seq_len + N, page) block ids with no clamp: a request at the context limit with N >= 2 "
            "drafts writes into the next request's row (past the tensor on the last row), eagerly and into "
            "the CUDA-graph buffers. For a backend target-verify-5d serves, the overlay builds rows "
            "cdiv(max_context_len + N, page) wide, every write clamped to its row."
        ),
        upstream="unfixed in 0.5.13.post1 .. 0.5.23 (NHD unified verify overflows the same way)",
        removal="when the unified-verify tables are sized for the drafts and the builder clamps to its row",
    ),
    Surface(
        id="aiter_backend.init_cuda_graph_state",
        targets=(f"{AITER_BACKEND}:AiterAttnBackend.init_cuda_graph_state",),
        action=WRAP,
        params=(("self", "max_bs", "max_num_tokens", "kv_indices_buf"),),
        why=(
            "Allocates the CUDA-graph page tables cdiv(max_context_len, page) wide, too narrow for a verify "
            "row at the context limit. After it, on a backend target-verify-5d serves, the overlay "
            "allocates its own persistent (max_bs, cdiv(max_context_len + num_draft_tokens, page)) verify "
            "tables, which capture and replay both fill."
        ),
        upstream="unfixed in 0.5.13.post1 .. 0.5.23",
        removal="when the CUDA-graph verify tables are sized for the drafts",
    ),
    Surface(
        id="aiter_backend.init",
        targets=(f"{AITER_BACKEND}:AiterAttnBackend.__init__",),
        action=WRAP,
        params=(("self", "model_runner", "skip_prefill", "kv_indptr_buf", "topk"),),
        why=(
            "The 5D check is a closure inside __init__ that only looks into SWAKVPool: a "
            "HybridLinearKVPool (Qwen3.5) holding 5D buffers is reported as NHD. After __init__ "
            "the overlay recomputes kv_cache_is_vectorized_5d from the physical buffers and the "
            "decode page-table flag (decode_uses_page_table on 0.5.23, use_triton_unified_attention "
            "before). The fail-closed guard also runs here."
        ),
        upstream="unfixed in 0.5.13.post1 .. 0.5.23",
        removal="when AiterAttnBackend detects 5D through composite pools (HybridLinearKVPool, nested)",
    ),
    Surface(
        id="aiter_utils.forward_extend_vectorized_5d",
        targets=(f"{AITER_UTILS}:forward_extend_vectorized_5d",),
        action=REPLACE,
        params=(("backend", "q", "k", "v", "layer", "forward_batch", "bs0", "window_size", "sinks"),),
        copies=(AITER_BACKEND,),
        why=(
            "Resolves sub-pools only through layers_mapping (SWA), reads raw buffers without "
            "the layer-transfer wait, and has no way out when aiter has no kernel (page 64)."
        ),
        upstream="unfixed in 0.5.13.post1 .. 0.5.23",
        removal="when upstream resolves hybrid pools, waits for the layer and has a portable fallback",
    ),
    Surface(
        id="aiter_utils.forward_decode_vectorized_5d",
        targets=(f"{AITER_UTILS}:forward_decode_vectorized_5d",),
        action=REPLACE,
        params=(("backend", "q", "layer", "forward_batch", "k_cache", "v_cache", "o", "sinks"),),
        copies=(AITER_BACKEND,),
        why=(
            "Never passes query_scale and calls pa_decode_gluon in a form that raises on aiter "
            "v0.1.10 .. v0.1.13; no portable path when aiter is missing."
        ),
        upstream="unfixed in 0.5.13.post1 .. 0.5.23",
        removal="when upstream calls pa_decode_gluon by keyword with query_scale",
    ),
    Surface(
        id="memory_pool.MHATokenToKVPool.set_kv_buffer",
        targets=(f"{MEMORY_POOL}:MHATokenToKVPool.set_kv_buffer",),
        action=WRAP,
        params=(
            ("self", "layer", "loc_info", "cache_k", "cache_v", "k_scale", "v_scale"),
            ("self", "layer", "loc", "cache_k", "cache_v", "k_scale", "v_scale"),
        ),
        why=(
            "The FP8 path divides the caller's k/v in place (corrupting the fresh-prompt extend "
            "that attends over them afterwards), turns out-of-range values into NaN on "
            "e4m3fnuz, and takes 3-5 kernels; the overlay writes NHD and 5D FP8 in one kernel."
        ),
        upstream="unfixed in 0.5.13.post1 .. 0.5.23",
        removal="when upstream quantizes out of place with saturation in one kernel",
        frozen_at_import="memory_pool._use_aiter (SGLANG_USE_AITER is read once, at import)",
    ),
    Surface(
        id="memory_pool.MHATokenToKVPool.set_kv_buffer_prefix_valid",
        targets=(f"{MEMORY_POOL}:MHATokenToKVPool.set_kv_buffer_prefix_valid",),
        action=WRAP,
        params=(("self", "layer", "loc_2d", "commit_lens", "cache_k", "cache_v", "k_scale", "v_scale",
                 "layer_id_override"),),
        why=(
            "DFLASH/DSPARK commit writes have no 5D branch: on CUDA/HIP the tiled kernels copy each "
            "committed row to loc * stride(0), a whole page under vectorized_5d (out of bounds, the slot "
            "never written). The overlay writes the committed rows of a 5D pool 5D-addressed, with the "
            "bytes set_kv_buffer writes; other pools reach the original. Defensive: every caller writes a "
            "draft runner's pool, which draft-pool-nhd builds NHD (a safety net for a pool labelled 5D)."
        ),
        upstream="unfixed in 0.5.16 .. 0.5.23 (the method exists from 0.5.16)",
        removal="when set_kv_buffer_prefix_valid addresses SHUFFLE 5D buffers by (block, slot)",
        since="0.5.16",
    ),
    Surface(
        id="memory_pool.MHATokenToKVPool.__init__",
        targets=(f"{MEMORY_POOL}:MHATokenToKVPool.__init__",),
        action=WRAP,
        params=None,
        why=(
            "Fail-closed guard: when 5D is requested and a patch that 5D needs is not applied, "
            "building the first MHA pool raises an error naming the patch (SGLang swallows "
            "plugin exceptions, so activation alone cannot stop startup)."
        ),
        upstream="n/a (overlay policy)",
        removal="never while the overlay patches correctness",
    ),
    Surface(
        id="server_args.ServerArgs.check_server_args",
        targets=("sglang.srt.server_args:ServerArgs.check_server_args",),
        action=WRAP,
        params=(("self",),),
        why=(
            "Runs the launch rules (unified memory, speculative decoding, HiCache/LMCache, HND, "
            "page size, backend) inside SGLang, so launch_server and sgl.Engine scripts get them."
        ),
        upstream="SGLang has no 5D compatibility checks in any version",
        removal="when SGLang validates these combinations itself",
    ),
    Surface(
        id="memory_pool.MHATokenToKVPool.get_cpu_copy",
        targets=(f"{MEMORY_POOL}:MHATokenToKVPool.get_cpu_copy",),
        action=WRAP,
        params=(("self", "indices", "mamba_indices"),),
        why=(
            "Retraction's host copy (Req.offload_kv_cache; HybridLinearKVPool and SWAKVPool delegate to their "
            "MHA pools) takes k_buffer[layer][slots]: on a SHUFFLE 5D buffer that picks whole blocks by slot id "
            "(out of range past the block count). For 5D buffers the overlay gathers exactly the slots' K/V in "
            "5D coordinates into SGLang's per-token offload format; other pools reach the original."
        ),
        upstream="unfixed in 0.5.13.post1 .. 0.5.23",
        removal="when get_cpu_copy addresses SHUFFLE 5D buffers by (block, slot)",
    ),
    Surface(
        id="memory_pool.MHATokenToKVPool.load_cpu_copy",
        targets=(f"{MEMORY_POOL}:MHATokenToKVPool.load_cpu_copy",),
        action=WRAP,
        params=(("self", "kv_cache_cpu", "indices", "mamba_indices"),),
        why=(
            "Retraction's reload (Req.load_kv_cache) assigns k_buffer[layer][slots] = rows: on a SHUFFLE 5D "
            "buffer whole blocks chosen by slot id are overwritten (other requests' tokens) and the slots "
            "themselves are not written. For 5D buffers the overlay scatters each token to (s // page, "
            "s % page); other pools reach the original."
        ),
        upstream="unfixed in 0.5.13.post1 .. 0.5.23",
        removal="when load_cpu_copy addresses SHUFFLE 5D buffers by (block, slot)",
    ),
    Surface(
        id="decode_kvcache_offload_manager.DecodeKVCacheOffloadManager.init",
        targets=(f"{DECODE_KVCACHE_OFFLOAD_MANAGER}:DecodeKVCacheOffloadManager.__init__",),
        action=WRAP,
        params=(("self", "req_to_token_pool", "token_to_kv_pool_allocator", "tp_group", "tree_cache"),),
        why=(
            "--disaggregation-decode-enable-offload-kvcache builds this manager, whose HiCache host pool and "
            "transfers index the device KV by token slot (NHD). Under vectorized_5d with a 5D pool the "
            "overlay refuses before it is built (fail closed, naming the flag)."
        ),
        upstream="unfixed in 0.5.13.post1 .. 0.5.23",
        removal="when the decode offload manager's host copies address SHUFFLE 5D buffers",
    ),
    Surface(
        id="disagg_utils.get_pd_kv_layout",
        targets=(f"{DISAGG_UTILS}:get_pd_kv_layout",),
        action=REPLACE,
        params=(("token_to_kv_pool",),),
        copies=(DISAGG_PREFILL, DISAGG_DECODE),
        why=(
            "What each PD role reports as kv_layout in the bootstrap handshake (and hashes into the KV "
            "checksum signature): a string only for DeepSeekV4 pools, None for every MHA pool, so a 5D prefill "
            "and an NHD decode (or fp8 e4m3fnuz against e4m3fn, both 'fp8_e4m3') pair silently. With the "
            "overlay active an MHA / SWA / hybrid pool reports the overlay's descriptor (layout, X, torch dtype, "
            "page, head dims, heads per rank per attention sub-pool); upstream's non-None answers are kept."
        ),
        upstream="the handshake field exists from 0.5.23 (DeepSeekV4 only); absent before",
        removal="when get_pd_kv_layout describes MHA pools' physical layout and dtype",
        since="0.5.23",
    ),
    Surface(
        id="disagg_conn.CommonKVManager.try_ensure_parallel_info",
        targets=(f"{DISAGG_CONN}:CommonKVManager.try_ensure_parallel_info",),
        action=WRAP,
        params=(("self", "bootstrap_addr"),),
        why=(
            "The decode side's one look at the prefill's bootstrap report (PrefillServerInfo: attn_tp_size, "
            "page_size, kv_cache_dtype, kv_layout). Upstream compares kv_layout only when both are set and by "
            "string equality. With the overlay's descriptor on this side, the overlay judges the pair instead: "
            "layout / dtype / page / head dims must match, a peer without a descriptor is refused under strict "
            "mode, and an attention-TP mismatch over 5D is refused unless pd-head-slice-5d is applied."
        ),
        upstream="kv_layout is compared from 0.5.23 (None on either side skips it); nothing before",
        removal="when SGLang compares a layout descriptor of MHA pools and refuses a peer without one",
    ),
    Surface(
        id="memory_pool.MHATokenToKVPool.get_contiguous_buf_infos",
        targets=(f"{MEMORY_POOL}:MHATokenToKVPool.get_contiguous_buf_infos",),
        action=WRAP,
        params=(("self",),),
        why=(
            "The (addresses, lengths, page item lengths) prefill.py / decode.py build PD kv_args from; composite "
            "pools delegate to it. Item lengths are equal for NHD and SHUFFLE 5D pages, so nothing downstream "
            "knows a region's layout. With 5D requested the overlay records each address's physical layout "
            "and geometry after the call (pd-buffer-layouts); the result is unchanged."
        ),
        upstream="n/a (SGLang does not describe a region's layout) in 0.5.13.post1 .. 0.5.23",
        removal="when the transfer manager knows its regions' layout",
    ),
    Surface(
        id="mooncake_conn.MooncakeKVManager.send_kvcache_slice",
        targets=(f"{MOONCAKE_CONN}:MooncakeKVManager.send_kvcache_slice",),
        action=WRAP,
        params=(("self", "mooncake_session_id", "prefill_kv_indices", "dst_kv_ptrs", "dst_kv_indices",
                 "dst_tp_rank", "dst_attn_tp_size", "dst_kv_item_len", "executor"),),
        why=(
            "Prefill and decode at different attention-TP: moves a decode rank's heads with one descriptor per "
            "token at NHD offsets, wrong bytes on SHUFFLE 5D pages (head axis outermost). For a manager with 5D "
            "regions the overlay issues one descriptor per page and side (sglang_kv5d.disagg.head_slice) "
            "through the same engine.batch_transfer_sync; NHD managers reach the original."
        ),
        upstream="unfixed in 0.5.13.post1 .. 0.5.23",
        removal="when the head-sliced send addresses SHUFFLE 5D pages",
    ),
    Surface(
        id="mooncake_conn.MooncakeKVManager.set_kv_buffer_tensors",
        targets=(f"{MOONCAKE_CONN}:MooncakeKVManager.set_kv_buffer_tensors",),
        action=WRAP,
        params=(("self", "k_buffers", "v_buffers", "page_size"),),
        why=(
            "SGLANG_DISAGG_STAGING_BUFFER hands the pool's K/V tensors to the manager, whose staging path "
            "gathers and scatters NHD [page, heads, head_dim] pages for a different attention-TP. With 5D "
            "requested and 5D tensors the overlay refuses (Kv5dNotReadyError naming the flag and the fix)."
        ),
        upstream="unfixed in 0.5.13.post1 .. 0.5.23",
        removal="when the staging gather/scatter address SHUFFLE 5D pages",
    ),
    Surface(
        id="nixl_conn.NixlKVManager._init_hetero_tp_prep_handle",
        targets=(f"{NIXL_CONN}:NixlKVManager._init_hetero_tp_prep_handle",),
        action=WRAP,
        params=(("self", "peer_name", "decode_kv_args"),),
        why=(
            "Builds NIXL's descriptor lists for a decode peer with another attention-TP: per-token head runs of "
            "NHD rows. Over SHUFFLE 5D regions the overlay refuses (fail-closed-pd-head-slice-nixl)."
        ),
        upstream="unfixed in 0.5.13.post1 .. 0.5.23",
        removal="when NIXL's heterogeneous-TP lists address SHUFFLE 5D pages",
    ),
    Surface(
        id="nixl_conn.NixlKVManager.set_kv_buffer_tensors",
        targets=(f"{NIXL_CONN}:NixlKVManager.set_kv_buffer_tensors",),
        action=WRAP,
        params=(("self", "k_buffers", "v_buffers", "page_size"),),
        why=(
            "NIXL's staging path (SGLANG_DISAGG_STAGING_BUFFER) gathers the pool's tensors as NHD pages. With 5D "
            "requested and 5D tensors the overlay refuses (fail-closed-pd-head-slice-nixl)."
        ),
        upstream="unfixed in 0.5.13.post1 .. 0.5.23",
        removal="when NIXL's staging gather addresses SHUFFLE 5D pages",
    ),
)
