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
        since="0.5.16",
    ),
    Surface(
        id="aiter_backend.forward_extend",
        targets=(f"{AITER_BACKEND}:AiterAttnBackend.forward_extend",),
        action=WRAP,
        params=(("self", "q", "k", "v", "layer", "forward_batch", "save_kv_cache", "sinks"),),
    ),
    Surface(
        id="aiter_backend._build_verify_unified_metadata",
        targets=(f"{AITER_BACKEND}:AiterAttnBackend._build_verify_unified_metadata",),
        action=WRAP,
        params=(("self", "bs", "seq_lens", "req_pool_indices", "draft_num", "page_table_dest",
                 "swa_page_table_dest"),),
    ),
    Surface(
        id="aiter_backend.init_cuda_graph_state",
        targets=(f"{AITER_BACKEND}:AiterAttnBackend.init_cuda_graph_state",),
        action=WRAP,
        params=(("self", "max_bs", "max_num_tokens", "kv_indices_buf"),),
    ),
    Surface(
        id="aiter_backend.init",
        targets=(f"{AITER_BACKEND}:AiterAttnBackend.__init__",),
        action=WRAP,
        params=(("self", "model_runner", "skip_prefill", "kv_indptr_buf", "topk"),),
    ),
    Surface(
        id="aiter_utils.forward_extend_vectorized_5d",
        targets=(f"{AITER_UTILS}:forward_extend_vectorized_5d",),
        action=REPLACE,
        params=(("backend", "q", "k", "v", "layer", "forward_batch", "bs0", "window_size", "sinks"),),
        copies=(AITER_BACKEND,),
    ),
    Surface(
        id="aiter_utils.forward_decode_vectorized_5d",
        targets=(f"{AITER_UTILS}:forward_decode_vectorized_5d",),
        action=REPLACE,
        params=(("backend", "q", "layer", "forward_batch", "k_cache", "v_cache", "o", "sinks"),),
        copies=(AITER_BACKEND,),
    ),
    Surface(
        id="memory_pool.MHATokenToKVPool.set_kv_buffer",
        targets=(f"{MEMORY_POOL}:MHATokenToKVPool.set_kv_buffer",),
        action=WRAP,
        params=(
            ("self", "layer", "loc_info", "cache_k", "cache_v", "k_scale", "v_scale"),
            ("self", "layer", "loc", "cache_k", "cache_v", "k_scale", "v_scale"),
        ),
        frozen_at_import="memory_pool._use_aiter (SGLANG_USE_AITER is read once, at import)",
    ),
    Surface(
        id="memory_pool.MHATokenToKVPool.set_kv_buffer_prefix_valid",
        targets=(f"{MEMORY_POOL}:MHATokenToKVPool.set_kv_buffer_prefix_valid",),
        action=WRAP,
        params=(("self", "layer", "loc_2d", "commit_lens", "cache_k", "cache_v", "k_scale", "v_scale",
                 "layer_id_override"),),
        since="0.5.16",
    ),
    Surface(
        id="memory_pool.MHATokenToKVPool.__init__",
        targets=(f"{MEMORY_POOL}:MHATokenToKVPool.__init__",),
        action=WRAP,
        params=None,
    ),
    Surface(
        id="server_args.ServerArgs.check_server_args",
        targets=("sglang.srt.server_args:ServerArgs.check_server_args",),
        action=WRAP,
        params=(("self",),),
    ),
    Surface(
        id="memory_pool.MHATokenToKVPool.get_cpu_copy",
        targets=(f"{MEMORY_POOL}:MHATokenToKVPool.get_cpu_copy",),
        action=WRAP,
        params=(("self", "indices", "mamba_indices"),),
    ),
    Surface(
        id="memory_pool.MHATokenToKVPool.load_cpu_copy",
        targets=(f"{MEMORY_POOL}:MHATokenToKVPool.load_cpu_copy",),
        action=WRAP,
        params=(("self", "kv_cache_cpu", "indices", "mamba_indices"),),
    ),
    Surface(
        id="decode_kvcache_offload_manager.DecodeKVCacheOffloadManager.init",
        targets=(f"{DECODE_KVCACHE_OFFLOAD_MANAGER}:DecodeKVCacheOffloadManager.__init__",),
        action=WRAP,
        params=(("self", "req_to_token_pool", "token_to_kv_pool_allocator", "tp_group", "tree_cache"),),
    ),
    Surface(
        id="disagg_utils.get_pd_kv_layout",
        targets=(f"{DISAGG_UTILS}:get_pd_kv_layout",),
        action=REPLACE,
        params=(("token_to_kv_pool",),),
        copies=(DISAGG_PREFILL, DISAGG_DECODE),
        since="0.5.23",
    ),
    Surface(
        id="disagg_conn.CommonKVManager.try_ensure_parallel_info",
        targets=(f"{DISAGG_CONN}:CommonKVManager.try_ensure_parallel_info",),
        action=WRAP,
        params=(("self", "bootstrap_addr"),),
    ),
    Surface(
        id="memory_pool.MHATokenToKVPool.get_contiguous_buf_infos",
        targets=(f"{MEMORY_POOL}:MHATokenToKVPool.get_contiguous_buf_infos",),
        action=WRAP,
        params=(("self",),),
    ),
    Surface(
        id="mooncake_conn.MooncakeKVManager.send_kvcache_slice",
        targets=(f"{MOONCAKE_CONN}:MooncakeKVManager.send_kvcache_slice",),
        action=WRAP,
        params=(("self", "mooncake_session_id", "prefill_kv_indices", "dst_kv_ptrs", "dst_kv_indices",
                 "dst_tp_rank", "dst_attn_tp_size", "dst_kv_item_len", "executor"),),
    ),
    Surface(
        id="mooncake_conn.MooncakeKVManager.set_kv_buffer_tensors",
        targets=(f"{MOONCAKE_CONN}:MooncakeKVManager.set_kv_buffer_tensors",),
        action=WRAP,
        params=(("self", "k_buffers", "v_buffers", "page_size"),),
    ),
    Surface(
        id="nixl_conn.NixlKVManager._init_hetero_tp_prep_handle",
        targets=(f"{NIXL_CONN}:NixlKVManager._init_hetero_tp_prep_handle",),
        action=WRAP,
        params=(("self", "peer_name", "decode_kv_args"),),
    ),
    Surface(
        id="nixl_conn.NixlKVManager.set_kv_buffer_tensors",
        targets=(f"{NIXL_CONN}:NixlKVManager.set_kv_buffer_tensors",),
        action=WRAP,
        params=(("self", "k_buffers", "v_buffers", "page_size"),),
    ),
)
