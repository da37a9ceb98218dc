"""Triton kernels and their float64 torch references.

Nothing in this package imports SGLang. Importing ``sglang_kv5d.kernels``
itself is cheap: torch and triton are imported only when a kernel is first
used (attribute access below).

    write_kv_fp8          fused FP8 KV write into NHD or SHUFFLE 5D caches
                          (fp8_write/: kernel, config, host; reference in fp8_reference.py)
    decode_attention_5d   paged decode attention reading the 5D layout
    extend_attention_5d   chunked-prefill attention reading the 5D layout
                          (attention_5d/: kernels, config, host, launchers;
                          reference in attention_reference.py)
    verify_page_tables    speculative-verify page tables clamped to their rows
                          (verify_table.py; reference: the torch builder in
                          sglang_kv5d.speculative.verify_tables; the argument
                          check both share: verify_table_args.py)
"""

from __future__ import annotations

import importlib

_LAZY = {
    "write_kv_fp8": "sglang_kv5d.kernels.fp8_write",
    "decode_attention_5d": "sglang_kv5d.kernels.attention_5d",
    "extend_attention_5d": "sglang_kv5d.kernels.attention_5d",
    "verify_page_tables": "sglang_kv5d.kernels.verify_table",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
