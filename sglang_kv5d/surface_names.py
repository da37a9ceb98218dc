"""SGLang's names that are not objects: module paths the overlay imports or
probes, environment variables SGLang reads, literals SGLang uses.

Part of the surface table (sglang_kv5d.surface re-exports every name and
lists each in ``surface.NAMES``, which the contract test checks against every
wheel). A module of its own, importing nothing, because the ``.pth``
bootstrap needs the package name in every interpreter's start-up, where
importing the table (dataclasses, typing) would cost every Python program.
Code outside the table uses these constants; tests/test_surface_contract.py
scans the package for SGLang names written anywhere else.
"""

MODULE = "module"  # an importable module (or package)
ENV = "env"  # an environment variable SGLang's own source reads
TEXT = "text"  # a literal SGLang's source uses (entry-point group, title prefix)

PACKAGE = "sglang"  # import package and distribution name
VERSION_MODULE = "sglang._version"  # generated at build time: __version__ = "..." (read as text)
VERSION_MODULE_OLD = "sglang.version"  # the older place of __version__ (read as text)
AITER_BACKEND = "sglang.srt.layers.attention.aiter_backend"
AITER_UTILS = "sglang.srt.layers.attention.aiter_utils"
MEMORY_POOL = "sglang.srt.mem_cache.memory_pool"
SWA_MEMORY_POOL = "sglang.srt.mem_cache.swa_memory_pool"
KV_CACHE_CONFIGURATOR = "sglang.srt.mem_cache.kv_cache_configurator"
DECODE_KVCACHE_OFFLOAD_MANAGER = "sglang.srt.disaggregation.decode_kvcache_offload_manager"
DISAGG_UTILS = "sglang.srt.disaggregation.utils"  # get_pd_kv_layout, kv_layout_signature
DISAGG_PREFILL = "sglang.srt.disaggregation.prefill"  # from-import copy of get_pd_kv_layout (from 0.5.23)
DISAGG_DECODE = "sglang.srt.disaggregation.decode"  # from-import copy of get_pd_kv_layout (from 0.5.23)
DISAGG_CONN = "sglang.srt.disaggregation.common.conn"  # CommonKVManager: the decode-side handshake check
MOONCAKE_CONN = "sglang.srt.disaggregation.mooncake.conn"  # MooncakeKVManager: head-sliced send (pd-head-slice-5d)
NIXL_CONN = "sglang.srt.disaggregation.nixl.conn"  # NixlKVManager: head-sliced prep lists (refused under 5D)
SERVER_ARGS = "sglang.srt.server_args"
RESOLUTION_HOOKS = "sglang.srt.arg_groups.resolution_hooks"
RESOLUTION_HOOK_STEP = "handle_other_validations"  # the resolution step server-args-guard hooks
LAUNCH_SERVER = "sglang.launch_server"
PLUGIN_GROUP = "sglang.srt.plugins"  # entry-point group of load_plugins()
MODULE_PREFIX = PACKAGE + "."  # every SGLang module name starts with it
PROCESS_TITLE_PREFIX = "sglang::"  # setproctitle prefix of SGLang's processes
SERVE_PROG = "sglang serve"  # prog of the parser prepare_server_args builds

ENV_PREFIX = "SGLANG_"  # SGLang's variables (the overlay's own are SGLANG_KV5D*)
ENV_KV_CACHE_LAYOUT = "SGLANG_AITER_KV_CACHE_LAYOUT"
ENV_USE_AITER = "SGLANG_USE_AITER"
ENV_USE_HND_KVCACHE = "SGLANG_USE_HND_KVCACHE"
ENV_PLUGINS = "SGLANG_PLUGINS"
ENV_DISAGG_STAGING_BUFFER = "SGLANG_DISAGG_STAGING_BUFFER"  # PD head-sliced staging (NHD gathers)
