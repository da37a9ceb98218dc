"""Benchmarks behind ``sglang-kv5d bench``.

    common.py        timing (CUDA-graph replay medians) and the copy ceiling
    fp8_write.py     the fused FP8 KV write against its peers
    attention.py     5D decode attention against SGLang's Triton decode kernel
"""
