"""Benchmarks behind ``sglang-kv5d bench``.

    timing.py            CUDA-graph replay and eager medians (a leaf: bandwidth.py times with it)
    common.py            the timings re-exported, the memory rates, the device's description, --device
    bandwidth.py         read / write / copy kernels on the compute units: the byte floors
    sglang_peers.py      SGLang's kernels as peers, through the surface table; SGLANG_KV5D_PEER_PATH
    aiter_peers.py       aiter's kernels as peers (ROCm)
    store_floor.py       the FP8 write's store floor per layout
    fp8_write.py         the fused FP8 KV write against its peers (fp8_write_cases.py: rows, slots;
                         fp8_write_report.py: targets, table)
    attention.py         5D decode attention against SGLang's Triton decode kernel (attention_cases.py,
                         attention_peer.py, attention_extend.py, attention_report.py)
    verify.py            speculative target verify over 5D against the extend kernel and one decode step
    layout.py            "5D or NHD?": one layer's whole KV path (write + attention) per layout, for
                         the operator's geometry (layout_cases.py: geometry, config.json, caches;
                         layout_calls.py: the contenders per layout and phase; layout_report.py:
                         totals, verdict lines, tables)
"""
