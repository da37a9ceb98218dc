"""The surface table: every SGLang object the overlay touches, in one place.

Each row names a target as ``"dotted.module:Qual.name"``. Rows with several
targets list the places a moved symbol has lived, newest first; the first one
that resolves wins (probing, never version strings). ``action`` says what the
overlay does with it:

    wrap      wrapped in place (wrapt FunctionWrapper); the original is kept
              and restored by deactivate()
    replace   replaced by a function with the same parameters; from-import
              copies listed in ``copies`` are rebound too
    read      only read or called (probes, kernels we call, registration APIs)

``params`` lists the parameter-name prefixes accepted for the target (one tuple
per known signature). Before patching, ``inspect.signature`` of the live object
must start with one of them, or the patch fails with expected versus found.
The contract test (tests/test_surface_contract.py) checks every row against
the source of several SGLang wheels without importing them, and checks that
every row is used by a patch manifest in patches/ or marked as a probe.

SGLang's names that are not objects (module paths, environment variables,
literals such as the plugin entry-point group) are constants of
``surface_names`` re-exported here, each listed in ``NAMES`` with its kind and
the release it appeared in; the contract test checks those too, and fails on
any SGLang module path or variable written in the package outside the table.
Code reaches a row's live object with ``find_loaded`` (already imported),
``import_object`` (the selftest) or ``attr_name`` (an attribute to getattr).

Standard library only: the bootstrap and the doctor read this table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

WRAP = "wrap"
REPLACE = "replace"
READ = "read"


@dataclass(frozen=True)
class Surface:
    id: str
    targets: Tuple[str, ...]
    action: str
    params: Optional[Tuple[Tuple[str, ...], ...]]
    why: str
    upstream: str
    removal: str
    copies: Tuple[str, ...] = ()
    # What SGLang computes when the module is imported and a later activation
    # cannot change (reported by activate() when the module was already loaded).
    frozen_at_import: str = ""
    # Versions (inclusive, as text) where the target is known to exist; outside
    # them the contract test expects it to be absent or moved.
    since: str = "0.5.13.post1"

    @property
    def modules(self) -> Tuple[str, ...]:
        return tuple(t.split(":", 1)[0] for t in self.targets)


# SGLang's names that are not objects (module paths, variables, literals).
from .surface_names import (  # noqa: E402,F401  (re-exported: the table's names)
    MODULE,
    ENV,
    TEXT,
    PACKAGE,
    VERSION_MODULE,
    VERSION_MODULE_OLD,
    AITER_BACKEND,
    AITER_UTILS,
    MEMORY_POOL,
    SWA_MEMORY_POOL,
    KV_CACHE_CONFIGURATOR,
    SERVER_ARGS,
    RESOLUTION_HOOKS,
    RESOLUTION_HOOK_STEP,
    LAUNCH_SERVER,
    PLUGIN_GROUP,
    MODULE_PREFIX,
    PROCESS_TITLE_PREFIX,
    SERVE_PROG,
    ENV_PREFIX,
    ENV_KV_CACHE_LAYOUT,
    ENV_USE_AITER,
    ENV_USE_HND_KVCACHE,
    ENV_PLUGINS,
)

_AITER_BACKEND = AITER_BACKEND
_AITER_UTILS = AITER_UTILS
_MEMORY_POOL = MEMORY_POOL

_ROWS = (
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
        targets=(f"{_AITER_BACKEND}:AiterAttnBackend.forward_extend",),
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
        id="memory_pool.KVWriteLoc.for_layer",
        targets=(f"{_MEMORY_POOL}:KVWriteLoc.for_layer",),
        action=READ,
        params=None,
        why="The write location of a layer's new tokens, as forward_extend's 5D write builds it (target verify).",
        upstream="n/a (called, not patched)",
        removal="n/a (called, not patched)",
        since="0.5.23",
    ),
    Surface(
        id="aiter_backend.init",
        targets=(f"{_AITER_BACKEND}:AiterAttnBackend.__init__",),
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
        targets=(f"{_AITER_UTILS}:forward_extend_vectorized_5d",),
        action=REPLACE,
        params=(("backend", "q", "k", "v", "layer", "forward_batch", "bs0", "window_size", "sinks"),),
        copies=(_AITER_BACKEND,),
        why=(
            "Resolves sub-pools only through layers_mapping (SWA), reads raw buffers without "
            "the layer-transfer wait, and has no way out when aiter has no kernel (page 64)."
        ),
        upstream="unfixed in 0.5.13.post1 .. 0.5.23",
        removal="when upstream resolves hybrid pools, waits for the layer and has a portable fallback",
    ),
    Surface(
        id="aiter_utils.forward_decode_vectorized_5d",
        targets=(f"{_AITER_UTILS}:forward_decode_vectorized_5d",),
        action=REPLACE,
        params=(("backend", "q", "layer", "forward_batch", "k_cache", "v_cache", "o", "sinks"),),
        copies=(_AITER_BACKEND,),
        why=(
            "Never passes query_scale and calls pa_decode_gluon in a form that raises on aiter "
            "v0.1.10 .. v0.1.13; no portable path when aiter is missing."
        ),
        upstream="unfixed in 0.5.13.post1 .. 0.5.23",
        removal="when upstream calls pa_decode_gluon by keyword with query_scale",
    ),
    Surface(
        id="memory_pool.MHATokenToKVPool.set_kv_buffer",
        targets=(f"{_MEMORY_POOL}:MHATokenToKVPool.set_kv_buffer",),
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
        targets=(f"{_MEMORY_POOL}:MHATokenToKVPool.set_kv_buffer_prefix_valid",),
        action=WRAP,
        params=(("self", "layer", "loc_2d", "commit_lens", "cache_k", "cache_v", "k_scale", "v_scale",
                 "layer_id_override"),),
        why=(
            "DFLASH/DSPARK commit writes have no 5D branch: on CUDA/HIP the tiled kernels copy each "
            "committed row to loc * stride(0), a whole page under vectorized_5d (out of bounds, the slot "
            "never written). The overlay writes the committed rows of a 5D pool 5D-addressed, with the "
            "bytes set_kv_buffer writes; other pools reach the original."
        ),
        upstream="unfixed in 0.5.16 .. 0.5.23 (the method exists from 0.5.16)",
        removal="when set_kv_buffer_prefix_valid addresses SHUFFLE 5D buffers by (block, slot)",
        since="0.5.16",
    ),
    Surface(
        id="memory_pool.MHATokenToKVPool.__init__",
        targets=(f"{_MEMORY_POOL}:MHATokenToKVPool.__init__",),
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
        id="resolution_hooks.register_resolution_hook",
        targets=("sglang.srt.arg_groups.resolution_hooks:register_resolution_hook",),
        action=READ,
        params=(("name",),),
        why="0.5.20+: the same rules also run as a handle_other_validations resolution hook.",
        upstream="API exists from 0.5.20",
        removal="n/a (supported plugin API)",
        since="0.5.20",
    ),
    Surface(
        id="kernels.launch_gather_shuffle_5d_to_linear",
        targets=(
            "sglang.kernels.ops.kvcache.shuffle_5d_cache:launch_gather_shuffle_5d_to_linear",
            "sglang.kernels.ops.attention.utils:launch_gather_shuffle_5d_to_linear",
            "sglang.srt.layers.attention.utils:launch_gather_shuffle_5d_to_linear",
        ),
        action=READ,
        params=(("key_cache", "value_cache", "slot_mapping"),),
        why=(
            "SGLang's own 5D -> linear gather, the definition of the layout the patched extend path reads. "
            "The overlay does not call it (sglang_kv5d.attention.gather_5d_to_linear gathers for the aiter "
            "extend path, on any element type); the tests read caches back with it as an independent reader."
        ),
        upstream="moved in 0.5.16 and again in 0.5.23",
        removal="n/a (called, not patched)",
    ),
    Surface(
        id="kernels.launch_reshape_and_cache_shuffle_5d",
        targets=(
            "sglang.kernels.ops.kvcache.shuffle_5d_cache:launch_reshape_and_cache_shuffle_5d",
            "sglang.kernels.ops.attention.utils:launch_reshape_and_cache_shuffle_5d",
            "sglang.srt.layers.attention.utils:launch_reshape_and_cache_shuffle_5d",
        ),
        action=READ,
        params=(("key", "value", "key_cache", "value_cache", "slot_mapping"),),
        why="SGLang's unscaled 5D writer: the peer in benchmarks and the upstream path the FP8 patch replaces.",
        upstream="moved in 0.5.16 and again in 0.5.23",
        removal="n/a (called, not patched)",
    ),
    Surface(
        id="kernels.launch_reshape_and_cache_flash",
        targets=(
            "sglang.kernels.ops.kvcache.cache_ops:launch_reshape_and_cache_flash",
            "sglang.srt.layers.attention.triton_ops.cache_ops:launch_reshape_and_cache_flash",
        ),
        action=READ,
        params=(("key", "value", "key_cache", "value_cache", "slot_mapping"),),
        why="SGLang's scaled NHD FP8 writer (AiterAttnBackend's NHD path): the NHD peer in `sglang-kv5d bench`.",
        upstream="moved in 0.5.16",
        removal="n/a (benchmark peer, called)",
    ),
    Surface(
        id="kernels.decode_attention_fwd",
        targets=(
            "sglang.kernels.ops.attention.decode_attention:decode_attention_fwd",
            "sglang.srt.layers.attention.triton_ops.decode_attention:decode_attention_fwd",
        ),
        action=READ,
        params=(("q", "k_buffer", "v_buffer", "o", "kv_indptr", "kv_indices", "attn_logits", "attn_lse",
                 "num_kv_splits", "max_kv_splits", "sm_scale", "k_scale", "v_scale"),),
        why="SGLang's Triton decode attention on an NHD cache: the decode peer in `sglang-kv5d bench`.",
        upstream="moved in 0.5.16",
        removal="n/a (benchmark peer, called)",
    ),
    Surface(
        id="kernels.fp8_dtype",
        targets=(
            "sglang.kernels.ops.quantization.fp8_kernel:fp8_dtype",
            "sglang.srt.layers.quantization.fp8_kernel:fp8_dtype",
        ),
        action=READ,
        params=None,
        why="The platform's fp8 dtype (e4m3fnuz on gfx942, e4m3fn elsewhere).",
        upstream="moved in 0.5.16",
        removal="n/a (read)",
    ),
    Surface(
        id="memory_pool.HybridLinearKVPool._wait_for_layer",
        targets=(f"{_MEMORY_POOL}:HybridLinearKVPool._wait_for_layer",),
        action=READ,
        params=(("self", "layer_id"),),
        why="Layer-wise HiCache/LMCache loading: reads through a hybrid pool wait for the layer first.",
        upstream="exists from 0.5.10.post1",
        removal="n/a (called)",
    ),
    # The selftest builds these itself (real pools and a real backend).
    Surface(
        id="memory_pool.MHATokenToKVPool",
        targets=(f"{_MEMORY_POOL}:MHATokenToKVPool",),
        action=READ,
        params=None,
        why="The selftest's SWA pool is built of MHA pools (token_to_kv_pool_class).",
        upstream="stable",
        removal="n/a (read)",
    ),
    Surface(
        id="memory_pool.HybridLinearKVPool",
        targets=(f"{_MEMORY_POOL}:HybridLinearKVPool",),
        action=READ,
        params=None,
        why="The selftest's Qwen3.5-like pool (a 5D fp8 MHA pool inside).",
        upstream="stable",
        removal="n/a (read)",
    ),
    Surface(
        id="memory_pool.KVWriteLoc",
        targets=(f"{_MEMORY_POOL}:KVWriteLoc",),
        action=READ,
        params=None,
        why="0.5.16+: the write location set_kv_buffer takes; the selftest builds them.",
        upstream="exists from 0.5.16",
        removal="n/a (read)",
        since="0.5.16",
    ),
    Surface(
        id="memory_pool._use_aiter",
        targets=(f"{_MEMORY_POOL}:_use_aiter",),
        action=READ,
        params=None,
        why=(
            "Private flag, SGLANG_USE_AITER and is_hip() read once at import, that picks the aiter pool "
            "layout. The selftest (its own process, its own pools) sets it, so the 5D pools exist off ROCm."
        ),
        upstream="private, exists in every supported release",
        removal="n/a (selftest only)",
    ),
    Surface(
        id="aiter_backend.AiterAttnBackend",
        targets=(f"{_AITER_BACKEND}:AiterAttnBackend",),
        action=READ,
        params=None,
        why="The selftest builds a real backend over its pools from a minimal model runner.",
        upstream="stable",
        removal="n/a (read)",
    ),
    Surface(
        id="aiter_backend.AiterAttnBackend._build_verify_unified_metadata",
        targets=(f"{_AITER_BACKEND}:AiterAttnBackend._build_verify_unified_metadata",),
        action=READ,
        params=(("self", "bs", "seq_lens", "req_pool_indices", "draft_num"),),
        why=(
            "SGLang's own target-verify metadata (fixed-width page table over prefix + drafts); the "
            "selftest's verify phase builds it the way init_forward_metadata does for topk 1."
        ),
        upstream="private, exists in every supported release",
        removal="n/a (selftest only)",
    ),
    Surface(
        id="forward_batch_info.ForwardMode",
        targets=("sglang.srt.model_executor.forward_batch_info:ForwardMode",),
        action=READ,
        params=None,
        why="The forward modes; the selftest's verify phase runs the backend in TARGET_VERIFY.",
        upstream="stable",
        removal="n/a (read)",
    ),
    # Runtime-context accessors AiterAttnBackend.__init__ calls; the selftest's backend
    # (no scheduler) replaces aiter_backend's copies while it is built.
    Surface(
        id="runtime_context.get_parallel",
        targets=("sglang.srt.runtime_context:get_parallel",),
        action=READ,
        params=None,
        copies=(_AITER_BACKEND,),
        why="Attention TP/DCP sizes; the selftest answers 1 (one process).",
        upstream="exists from 0.5.16",
        removal="n/a (selftest only)",
        since="0.5.16",
    ),
    Surface(
        id="runtime_context.get_schedule",
        targets=("sglang.srt.runtime_context:get_schedule",),
        action=READ,
        params=None,
        copies=(_AITER_BACKEND,),
        why="The page size; the selftest answers its geometry's.",
        upstream="exists from 0.5.20",
        removal="n/a (selftest only)",
        since="0.5.20",
    ),
    Surface(
        id="runtime_context.get_spec",
        targets=("sglang.srt.runtime_context:get_spec",),
        action=READ,
        params=None,
        copies=(_AITER_BACKEND,),
        why="Speculative settings; the selftest answers none.",
        upstream="exists from 0.5.20",
        removal="n/a (selftest only)",
        since="0.5.20",
    ),
    Surface(
        id="dp_attention.is_dp_attention_enabled",
        targets=("sglang.srt.layers.dp_attention:is_dp_attention_enabled",),
        action=READ,
        params=None,
        copies=(_AITER_BACKEND,),
        why="DP attention; the selftest answers no.",
        upstream="exists from 0.5.20",
        removal="n/a (selftest only)",
        since="0.5.20",
    ),
    Surface(
        id="memory_pool.unwrap_write_loc",
        targets=(f"{_MEMORY_POOL}:unwrap_write_loc",),
        action=READ,
        params=(("loc_info",),),
        why="0.5.16+: set_kv_buffer takes a KVWriteLoc; the fp8 write takes the MHA slots from it this way.",
        upstream="exists from 0.5.16 (0.5.13.post1 passes the slots as `loc`)",
        removal="n/a (called)",
        since="0.5.16",
    ),
    Surface(
        id="memory_pool.KVCache._check_physical_write_loc",
        targets=(f"{_MEMORY_POOL}:KVCache._check_physical_write_loc",),
        action=READ,
        params=(("self", "loc_info", "where"),),
        why="0.5.23: private check set_kv_buffer runs on the write location; the fp8 write runs it too.",
        upstream="private, exists from 0.5.23",
        removal="n/a (called when present)",
        since="0.5.23",
    ),
    Surface(
        id="resolution_hooks._HOOKS",
        targets=(f"{RESOLUTION_HOOKS}:_HOOKS",),
        action=READ,
        params=None,
        why="Private registry of resolution hooks: deactivate() removes the guard's hook from it (no public undo).",
        upstream="private, exists from 0.5.20",
        removal="when SGLang offers unregistering a resolution hook",
        since="0.5.20",
    ),
    Surface(
        id="arg_groups.resolving_view",
        targets=(
            "sglang.srt.arg_groups.model_override_base:resolving_view",
            "sglang.srt.arg_groups.overrides:resolving_view",
        ),
        action=READ,
        params=(("server_args",),),
        why="The launch rules read a ServerArgs' resolved values through it inside SGLang (server-args-guard).",
        upstream="exists from 0.5.19 (in model_override_base from 0.5.20)",
        removal="n/a (read; older releases are read field by field)",
        since="0.5.20",
    ),
    Surface(
        id="swa_memory_pool.SWAKVPool",
        targets=("sglang.srt.mem_cache.swa_memory_pool:SWAKVPool",),
        action=READ,
        params=None,
        why="SWA composite pool (layers_mapping, full_kv_pool, swa_kv_pool) walked by 5D detection.",
        upstream="stable",
        removal="n/a (read)",
    ),
    Surface(
        id="plugins.load_plugins",
        targets=("sglang.srt.plugins:load_plugins",),
        action=READ,
        params=((),),
        why="SGLang's plugin loader calls the 'kv5d' entry point (sglang.srt.plugins group).",
        upstream="exists from 0.5.11",
        removal="n/a (activation route)",
    ),
    Surface(
        id="server_args.ServerArgs.add_cli_args",
        targets=(f"{SERVER_ARGS}:ServerArgs.add_cli_args",),
        action=READ,
        params=(("parser",),),
        why="SGLang's CLI definition: `sglang-kv5d launch/check` parse the SGLang arguments with it before the exec.",
        upstream="stable",
        removal="n/a (called)",
    ),
)

SURFACES: Dict[str, Surface] = {row.id: row for row in _ROWS}


@dataclass(frozen=True)
class Name:
    """One SGLang name that is not an object: a module, a variable, a literal."""

    value: str
    kind: str  # MODULE | ENV | TEXT
    why: str
    since: str = "0.5.13.post1"


_NAMES = (
    Name(PACKAGE, MODULE, "the package: version, location, the import that triggers the bootstrap"),
    Name(VERSION_MODULE, MODULE, "the package's own version, read as text (versions.py)"),
    Name(VERSION_MODULE_OLD, MODULE, "the package's own version, read as text where _version.py has none"),
    Name(AITER_BACKEND, MODULE, "AiterAttnBackend (the selftest builds one)"),
    Name(AITER_UTILS, MODULE, "the 5D extend/decode functions the attention patch replaces"),
    Name(MEMORY_POOL, MODULE, "the MHA and hybrid pools (the selftest builds them)"),
    Name(SWA_MEMORY_POOL, MODULE, "SWAKVPool (the selftest builds one)"),
    Name(SERVER_ARGS, MODULE, "ServerArgs and its parser"),
    Name(RESOLUTION_HOOKS, MODULE, "the resolution hook registry (server-args-guard)", since="0.5.20"),
    Name(RESOLUTION_HOOK_STEP, TEXT, "the resolution step server-args-guard adds its hook to", since="0.5.20"),
    Name(LAUNCH_SERVER, MODULE, "what `sglang-kv5d launch` execs with -m"),
    Name(PLUGIN_GROUP, TEXT, "entry-point group SGLang's load_plugins() reads (the kv5d entry point)"),
    Name(PROCESS_TITLE_PREFIX, TEXT, "SGLang's process titles (the status file's role)"),
    Name(SERVE_PROG, TEXT, "prog of prepare_server_args' parser; `sglang-kv5d check` builds the same parser"),
    Name(ENV_PREFIX, TEXT, "prefix of SGLang's environment variables"),
    Name(ENV_KV_CACHE_LAYOUT, ENV, "selects the KV cache layout (vectorized_5d)"),
    Name(ENV_USE_AITER, ENV, "selects the aiter backend and pool layout (read once at import)"),
    Name(ENV_USE_HND_KVCACHE, ENV, "HND KV layout, incompatible with 5D", since="0.5.16"),
    Name(ENV_PLUGINS, ENV, "allow list of plugins load_plugins() runs"),
)

NAMES: Dict[str, Name] = {n.value: n for n in _NAMES}

# Functions SGLang hands to multiprocessing as process targets. Wrapping one with
# a wrapt proxy breaks pickling under spawn, so the engine refuses to.
PROCESS_TARGET_NAMES = frozenset(
    {
        "run_scheduler_process",
        "run_detokenizer_process",
        "run_data_parallel_controller_process",
        "run_tokenizer_process",
        "run_multi_tokenizer_process",
    }
)


def split_target(target: str) -> Tuple[str, Tuple[str, ...]]:
    """``"pkg.mod:Cls.meth"`` -> ``("pkg.mod", ("Cls", "meth"))``."""
    module, _, qual = target.partition(":")
    if not module or not qual:
        raise ValueError(f"surface target {target!r} must look like 'package.module:Name.attr'")
    return module, tuple(qual.split("."))


def params_match(found: Tuple[str, ...], accepted: Optional[Tuple[Tuple[str, ...], ...]]) -> bool:
    """Does a found parameter list start with one of the accepted prefixes?"""
    if accepted is None:
        return True
    return any(found[: len(prefix)] == prefix for prefix in accepted)


def describe_params(accepted: Optional[Tuple[Tuple[str, ...], ...]]) -> str:
    if accepted is None:
        return "(any)"
    return " or ".join("(" + ", ".join(p) + ", ...)" for p in accepted)



def attr_name(surface_id: str) -> str:
    """The attribute name a row's (first) target ends in, for ``getattr`` on live objects."""
    return split_target(SURFACES[surface_id].targets[0])[1][-1]


def find_loaded(surface_id: str, modules=None):
    """The object of a row from modules already imported (the first target that
    resolves), or None; imports nothing. ``modules`` defaults to sys.modules."""
    import sys

    modules = sys.modules if modules is None else modules
    for target in SURFACES[surface_id].targets:
        module, path = split_target(target)
        obj = modules.get(module)
        for part in path:
            obj = getattr(obj, part, None) if obj is not None else None
        if obj is not None:
            return obj
    return None


def import_object(surface_id: str):
    """Import a row's modules in order and return the first target that resolves.

    For tools that build SGLang objects themselves (the selftest); patches are
    installed by the activation engine instead. Raises LookupError naming every
    target tried."""
    import importlib

    tried = []
    for target in SURFACES[surface_id].targets:
        module, path = split_target(target)
        try:
            obj = importlib.import_module(module)
        except ImportError as exc:
            tried.append(f"{target} ({exc})")
            continue
        for part in path:
            obj = getattr(obj, part, None)
            if obj is None:
                break
        if obj is not None:
            return obj
        tried.append(f"{target} (no such name)")
    raise LookupError(f"{surface_id}: not found in the installed SGLang; tried {'; '.join(tried)}")
