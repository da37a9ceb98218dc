"""Tiny model directories for tests that run SGLang's own server-args parser."""

from __future__ import annotations

import json
import pathlib

# A 2-layer Llama: enough for prepare_server_args / check_server_args (no weights are read).
TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
    "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 1000,
    "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "torch_dtype": "bfloat16", "head_dim": 64,
}


def tiny_llama(parent: pathlib.Path, name: str = "tiny-llama") -> pathlib.Path:
    """Write ``parent/name/config.json`` (TINY_LLAMA) and return the directory."""
    model = pathlib.Path(parent) / name
    model.mkdir()
    (model / "config.json").write_text(json.dumps(TINY_LLAMA))
    return model
