"""Prefill/decode disaggregation over a SHUFFLE 5D KV cache.

Pure functions over SGLang's transfer arithmetic (what a node reports in the
bootstrap handshake, how a 5D page is sliced by heads for a peer with another
attention-TP); the patches in ``sglang_kv5d.patches`` install them.

    layout.py   the handshake descriptor (kv5d.v1|full=...): built from a pool's
                physical buffers, parsed from a peer (hostile input), two
                descriptors and attention-TP sizes judged (pd-layout-handshake)
"""
