"""SGLang's names that are not objects, with their kind and first release (see sglang_kv5d.surface)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict

from ..surface_names import (
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
    DECODE_KVCACHE_OFFLOAD_MANAGER,
    DISAGG_UTILS,
    DISAGG_PREFILL,
    DISAGG_DECODE,
    DISAGG_CONN,
    MOONCAKE_CONN,
    NIXL_CONN,
    SERVER_ARGS,
    RESOLUTION_HOOKS,
    RESOLUTION_HOOK_STEP,
    LAUNCH_SERVER,
    PLUGIN_GROUP,
    PROCESS_TITLE_PREFIX,
    SERVE_PROG,
    ENV_PREFIX,
    ENV_KV_CACHE_LAYOUT,
    ENV_USE_AITER,
    ENV_USE_HND_KVCACHE,
    ENV_PLUGINS,
    ENV_DISAGG_STAGING_BUFFER,
)


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
    Name(DECODE_KVCACHE_OFFLOAD_MANAGER, MODULE, "the decode-side KV offload manager (fail-closed-decode-offload)"),
    Name(DISAGG_UTILS, MODULE, "PD helpers: get_pd_kv_layout (pd-layout-handshake), kv_layout_signature"),
    Name(DISAGG_PREFILL, MODULE, "PD prefill queue: holds a from-import copy of get_pd_kv_layout"),
    Name(DISAGG_DECODE, MODULE, "PD decode queue: holds a from-import copy of get_pd_kv_layout"),
    Name(DISAGG_CONN, MODULE, "CommonKVManager: the decode side's check of the prefill's bootstrap report"),
    Name(MOONCAKE_CONN, MODULE, "MooncakeKVManager: the head-sliced send over 5D pages (pd-head-slice-5d)"),
    Name(NIXL_CONN, MODULE, "NixlKVManager: head-sliced and staging paths refused over 5D pages"),
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
    Name(ENV_DISAGG_STAGING_BUFFER, ENV, "PD staging buffers that slice heads per token (refused under 5D: KV5D015)"),
)

NAMES: Dict[str, Name] = {n.value: n for n in _NAMES}
