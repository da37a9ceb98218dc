"""Rows of the SGLang objects the overlay only reads or calls (see sglang_kv5d.surface):
probes, SGLang's kernels used as references and benchmark peers, the classes and
private flags the selftest uses, registration APIs."""

from __future__ import annotations

from ..surface_names import AITER_BACKEND, MEMORY_POOL, RESOLUTION_HOOKS, SERVER_ARGS
from ..surface_names import DISAGG_UTILS
from .table import READ, Surface

ROWS = (
    # The write location of a layer's new tokens, as forward_extend's 5D write builds it (target verify).
    Surface(
        id="memory_pool.KVWriteLoc.for_layer",
        targets=(f"{MEMORY_POOL}:KVWriteLoc.for_layer",),
        action=READ,
        params=None,
        since="0.5.23",
    ),
    # The same rules also run as a handle_other_validations resolution hook. API exists from 0.5.20.
    Surface(
        id="resolution_hooks.register_resolution_hook",
        targets=("sglang.srt.arg_groups.resolution_hooks:register_resolution_hook",),
        action=READ,
        params=(("name",),),
        since="0.5.20",
    ),
    # SGLang's own 5D -> linear gather, the definition of the layout the patched extend path reads. The
    # overlay does not call it (sglang_kv5d.attention.gather_5d_to_linear gathers for the aiter extend path,
    # on any element type); the tests read caches back with it as an independent reader. Moved in 0.5.16, and
    # again from 0.5.23 on.
    Surface(
        id="kernels.launch_gather_shuffle_5d_to_linear",
        targets=(
            "sglang.kernels.ops.kvcache.shuffle_5d_cache:launch_gather_shuffle_5d_to_linear",
            "sglang.kernels.ops.attention.utils:launch_gather_shuffle_5d_to_linear",
            "sglang.srt.layers.attention.utils:launch_gather_shuffle_5d_to_linear",
        ),
        action=READ,
        params=(("key_cache", "value_cache", "slot_mapping"),),
    ),
    # SGLang's unscaled 5D writer: the peer in benchmarks and the upstream path the FP8 patch replaces. Moved
    # in 0.5.16, and again from 0.5.23 on.
    Surface(
        id="kernels.launch_reshape_and_cache_shuffle_5d",
        targets=(
            "sglang.kernels.ops.kvcache.shuffle_5d_cache:launch_reshape_and_cache_shuffle_5d",
            "sglang.kernels.ops.attention.utils:launch_reshape_and_cache_shuffle_5d",
            "sglang.srt.layers.attention.utils:launch_reshape_and_cache_shuffle_5d",
        ),
        action=READ,
        params=(("key", "value", "key_cache", "value_cache", "slot_mapping"),),
    ),
    # SGLang's scaled NHD FP8 writer (AiterAttnBackend's NHD path): the NHD peer in `sglang-kv5d bench`. Moved
    # in 0.5.16.
    Surface(
        id="kernels.launch_reshape_and_cache_flash",
        targets=(
            "sglang.kernels.ops.kvcache.cache_ops:launch_reshape_and_cache_flash",
            "sglang.srt.layers.attention.triton_ops.cache_ops:launch_reshape_and_cache_flash",
        ),
        action=READ,
        params=(("key", "value", "key_cache", "value_cache", "slot_mapping"),),
    ),
    # SGLang's Triton decode attention on an NHD cache: the decode peer in `sglang-kv5d bench`. Moved in
    # 0.5.16.
    Surface(
        id="kernels.decode_attention_fwd",
        targets=(
            "sglang.kernels.ops.attention.decode_attention:decode_attention_fwd",
            "sglang.srt.layers.attention.triton_ops.decode_attention:decode_attention_fwd",
        ),
        action=READ,
        params=(("q", "k_buffer", "v_buffer", "o", "kv_indptr", "kv_indices", "attn_logits", "attn_lse",
                 "num_kv_splits", "max_kv_splits", "sm_scale", "k_scale", "v_scale"),),
    ),
    # The platform's fp8 dtype (e4m3fnuz on gfx942, e4m3fn elsewhere). Moved in 0.5.16.
    Surface(
        id="kernels.fp8_dtype",
        targets=(
            "sglang.kernels.ops.quantization.fp8_kernel:fp8_dtype",
            "sglang.srt.layers.quantization.fp8_kernel:fp8_dtype",
        ),
        action=READ,
        params=None,
    ),
    # Layer-wise HiCache/LMCache loading: reads through a hybrid pool wait for the layer first. Exists from
    # 0.5.10.post1.
    Surface(
        id="memory_pool.HybridLinearKVPool._wait_for_layer",
        targets=(f"{MEMORY_POOL}:HybridLinearKVPool._wait_for_layer",),
        action=READ,
        params=(("self", "layer_id"),),
    ),
    # The selftest's SWA pool is built of MHA pools (token_to_kv_pool_class).
    Surface(
        id="memory_pool.MHATokenToKVPool",
        targets=(f"{MEMORY_POOL}:MHATokenToKVPool",),
        action=READ,
        params=None,
    ),
    # The selftest's Qwen3.5-like pool (a 5D fp8 MHA pool inside); one of the two composite pool classes
    # checked under 5D (the fail-closed backend guard refuses any other, subclasses included).
    Surface(
        id="memory_pool.HybridLinearKVPool",
        targets=(f"{MEMORY_POOL}:HybridLinearKVPool",),
        action=READ,
        params=None,
    ),
    # sglang#29009 (an open pull request) adds this property; where the loaded class has it and
    # AiterAttnBackend reads it, pool-layout-detection stands down (sglang_kv5d.upstream probes the class,
    # never the version). In no tested release: since is one past the newest, so a newer wheel without it
    # fails the contract test on purpose, and someone checks whether the pull request landed.
    Surface(
        id="memory_pool.HybridLinearKVPool.kv_cache_layout",
        targets=(f"{MEMORY_POOL}:HybridLinearKVPool.kv_cache_layout",),
        action=READ,
        params=None,
        since="0.5.24",
    ),
    # The write location set_kv_buffer takes; the selftest builds them. Exists from 0.5.16.
    Surface(
        id="memory_pool.KVWriteLoc",
        targets=(f"{MEMORY_POOL}:KVWriteLoc",),
        action=READ,
        params=None,
        since="0.5.16",
    ),
    # Private flag, SGLANG_USE_AITER and is_hip() read once at import, that picks the aiter pool layout. The
    # selftest (its own process, its own pools) sets it, so the 5D pools exist off ROCm. Private, exists in
    # every supported release.
    Surface(
        id="memory_pool._use_aiter",
        targets=(f"{MEMORY_POOL}:_use_aiter",),
        action=READ,
        params=None,
    ),
    # The selftest builds a real backend over its pools from a minimal model runner.
    Surface(
        id="aiter_backend.AiterAttnBackend",
        targets=(f"{AITER_BACKEND}:AiterAttnBackend",),
        action=READ,
        params=None,
    ),
    # SGLang's own target-verify metadata (fixed-width page table over prefix + drafts); the selftest's verify
    # phase builds it the way init_forward_metadata does for topk 1. Private, exists in every supported
    # release.
    Surface(
        id="aiter_backend.AiterAttnBackend._build_verify_unified_metadata",
        targets=(f"{AITER_BACKEND}:AiterAttnBackend._build_verify_unified_metadata",),
        action=READ,
        params=(("self", "bs", "seq_lens", "req_pool_indices", "draft_num"),),
    ),
    # The forward modes; the selftest's verify phase runs the backend in TARGET_VERIFY.
    Surface(
        id="forward_batch_info.ForwardMode",
        targets=("sglang.srt.model_executor.forward_batch_info:ForwardMode",),
        action=READ,
        params=None,
    ),
    # Attention TP/DCP sizes; the selftest answers 1 (one process). Exists from 0.5.16.
    Surface(
        id="runtime_context.get_parallel",
        targets=("sglang.srt.runtime_context:get_parallel",),
        action=READ,
        params=None,
        copies=(AITER_BACKEND,),
        since="0.5.16",
    ),
    # The page size; the selftest answers its geometry's. Exists from 0.5.20.
    Surface(
        id="runtime_context.get_schedule",
        targets=("sglang.srt.runtime_context:get_schedule",),
        action=READ,
        params=None,
        copies=(AITER_BACKEND,),
        since="0.5.20",
    ),
    # Speculative settings; the selftest answers none. Exists from 0.5.20.
    Surface(
        id="runtime_context.get_spec",
        targets=("sglang.srt.runtime_context:get_spec",),
        action=READ,
        params=None,
        copies=(AITER_BACKEND,),
        since="0.5.20",
    ),
    # DP attention; the selftest answers no. Exists from 0.5.20.
    Surface(
        id="dp_attention.is_dp_attention_enabled",
        targets=("sglang.srt.layers.dp_attention:is_dp_attention_enabled",),
        action=READ,
        params=None,
        copies=(AITER_BACKEND,),
        since="0.5.20",
    ),
    # set_kv_buffer takes a KVWriteLoc; the fp8 write takes the MHA slots from it this way. Exists from 0.5.16
    # (0.5.13.post1 passes the slots as `loc`).
    Surface(
        id="memory_pool.unwrap_write_loc",
        targets=(f"{MEMORY_POOL}:unwrap_write_loc",),
        action=READ,
        params=(("loc_info",),),
        since="0.5.16",
    ),
    # Private check set_kv_buffer runs on the write location; the fp8 write runs it too. Private.
    Surface(
        id="memory_pool.KVCache._check_physical_write_loc",
        targets=(f"{MEMORY_POOL}:KVCache._check_physical_write_loc",),
        action=READ,
        params=(("self", "loc_info", "where"),),
        since="0.5.23",
    ),
    # Private registry of resolution hooks: deactivate() removes the guard's hook from it (no public undo).
    # Private. Goes when SGLang offers unregistering a resolution hook.
    Surface(
        id="resolution_hooks._HOOKS",
        targets=(f"{RESOLUTION_HOOKS}:_HOOKS",),
        action=READ,
        params=None,
        since="0.5.20",
    ),
    # The launch rules read a ServerArgs' resolved values through it inside SGLang (server-args-guard). Exists
    # from 0.5.19 (in model_override_base from 0.5.20).
    Surface(
        id="arg_groups.resolving_view",
        targets=(
            "sglang.srt.arg_groups.model_override_base:resolving_view",
            "sglang.srt.arg_groups.overrides:resolving_view",
        ),
        action=READ,
        params=(("server_args",),),
        since="0.5.20",
    ),
    # SWA composite pool (layers_mapping, full_kv_pool, swa_kv_pool) walked by 5D detection; one of the two
    # composite pool classes checked under 5D.
    Surface(
        id="swa_memory_pool.SWAKVPool",
        targets=("sglang.srt.mem_cache.swa_memory_pool:SWAKVPool",),
        action=READ,
        params=None,
    ),
    # SGLang's plugin loader calls the 'kv5d' entry point (sglang.srt.plugins group). Exists from 0.5.11.
    Surface(
        id="plugins.load_plugins",
        targets=("sglang.srt.plugins:load_plugins",),
        action=READ,
        params=((),),
    ),
    # SGLang's CLI definition: `sglang-kv5d launch/check` parse the SGLang arguments with it before the exec.
    Surface(
        id="server_args.ServerArgs.add_cli_args",
        targets=(f"{SERVER_ARGS}:ServerArgs.add_cli_args",),
        action=READ,
        params=(("parser",),),
    ),
    # How mooncake pairs prefill and decode KV entries by layer id (pd-head-slice-5d pairs 5D regions the same
    # way).
    Surface(
        id="disagg_utils.build_transfer_entry_pairs",
        targets=(f"{DISAGG_UTILS}:build_transfer_entry_pairs",),
        action=READ,
        params=(("src_layer_ids", "dst_layer_ids", "n_src", "n_dst"),),
        since="0.5.20",
    ),
)
