"""Speculative decoding on a SHUFFLE 5D target: the pure cores the patches bind.

    draft_scope.py   which KV pools belong to a draft worker; the layout they get (NHD)
    verify.py        TARGET_VERIFY attention over the target's 5D cache (graph-safe)

The patch adapters are sglang_kv5d/patches/draft_pool_nhd.py and
sglang_kv5d/patches/target_verify.py; which algorithms are supported under 5D
is decided by rule KV5D005 (sglang_kv5d.rules).
"""
