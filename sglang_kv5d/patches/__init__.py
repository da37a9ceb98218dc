"""Patch definitions: each module here binds core functions to SGLang surfaces.

A patch is all-or-nothing: the engine (sglang_kv5d.activation) resolves and
checks every binding first, builds every replacement, and only then installs
them; if any step fails, nothing of that patch is left installed.

    pool_layout_detection.py   pool-layout-detection   (AiterAttnBackend.__init__)
    attention_dispatch.py      attention-dispatch-5d   (aiter_utils.forward_*_vectorized_5d)
    fp8_kv_write.py            fp8-kv-write            (MHATokenToKVPool.set_kv_buffer)
    draft_pool_nhd.py          draft-pool-nhd          (KVCacheConfigurator.configure, MHATokenToKVPool.__init__)
    target_verify.py           target-verify-5d        (AiterAttnBackend.__init__, .forward_extend)
    prefix_valid_write.py      prefix-valid-write-5d   (MHATokenToKVPool.set_kv_buffer_prefix_valid)
    cpu_copy_5d.py             cpu-copy-5d             (MHATokenToKVPool.get_cpu_copy, .load_cpu_copy)
                               fail-closed-decode-offload (DecodeKVCacheOffloadManager.__init__; internal)
    server_args_guard.py       server-args-guard       (ServerArgs.check_server_args)
    pd_layout_handshake.py     pd-layout-handshake     (disaggregation get_pd_kv_layout, CommonKVManager.try_ensure_parallel_info)
    pd_head_slice_5d.py        pd-head-slice-5d        (MooncakeKVManager.send_kvcache_slice, .set_kv_buffer_tensors)
                               pd-buffer-layouts (MHATokenToKVPool.get_contiguous_buf_infos; internal)
                               fail-closed-pd-head-slice-nixl (NIXL head slicing, staging; internal)
    fail_closed.py             fail-closed-pool, fail-closed-backend (internal, always on)

Every patch has a human-readable manifest in the top-level ``patches/``
folder (shipped as ``sglang_kv5d/_manifests``), generated from its
:class:`Patch` together with its README row by
``python -m sglang_kv5d.manifests --write``; a test keeps them equal.

Third-party (site-specific) patches can be added through the entry-point group
``sglang_kv5d.patches``: each entry point loads to a :class:`Patch`.

The patch type and the built-in table live with the engine
(sglang_kv5d.activation.patch_type, which loads these modules by name) and
are re-exported here: ``from sglang_kv5d.patches import Binding, Patch``.
"""

from ..activation.patch_type import (  # noqa: F401 - the public spelling for patch authors
    BUILTIN_PATCH_MODULES,
    ENTRY_POINT_GROUP,
    Binding,
    MakeReplacement,
    Patch,
    ProvidedUpstream,
    StillNeeded,
    load_builtin,
)

__all__ = ["BUILTIN_PATCH_MODULES", "ENTRY_POINT_GROUP", "Binding", "MakeReplacement", "Patch", "ProvidedUpstream",
           "StillNeeded", "load_builtin"]
