"""Speculative decoding on a SHUFFLE 5D target: the pure cores the patches bind.

    support.py       THE support matrix: which speculative configurations (algorithm,
                     topk, draft tokens, window, MLA, SGLang's other speculative
                     options, release, patches) may run on a 5D target; read by rule
                     KV5D005 (launch and, through server-args-guard, inside SGLang)
                     and by readiness.py
    readiness.py     fail closed at backend build: the runner's own algorithm and
                     resolved server arguments through the matrix, the patches'
                     states, a 5D draft pool
    draft_scope.py   which KV pools belong to a draft worker; the layout they get (NHD)
    verify.py        TARGET_VERIFY attention over the target's 5D cache (graph-safe)
    verify_tables.py the verify page tables (rows cdiv(max_context_len + N, page) wide)

The patch adapters are sglang_kv5d/patches/draft_pool_nhd.py,
sglang_kv5d/patches/target_verify.py and (readiness) sglang_kv5d/patches/fail_closed.py.
"""
