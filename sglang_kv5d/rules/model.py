"""Model sniffing: is the model a linear-attention hybrid (Qwen3.5, Qwen3-Next)?

Reads ``<model_path>/config.json`` when the path is a local directory, else
judges by the name. Standard library only.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, Mapping, Optional

_HYBRID_ARCHS = (
    "Qwen3NextForCausalLM",
    "Qwen3_5ForCausalLM",
    "Qwen3_5MoeForCausalLM",
    "Qwen3_5ForConditionalGeneration",
    "Qwen3_5MoeForConditionalGeneration",
)
_HYBRID_MODEL_TYPES = ("qwen3_next", "qwen3_5", "qwen3_5_moe", "qwen3_5_text", "qwen3_5_moe_text")
_HYBRID_NAME_RE = re.compile(r"qwen3[._-]?5|qwen3[._-]?next", re.IGNORECASE)


def _config_is_hybrid(cfg: Mapping[str, Any]) -> Optional[bool]:
    configs = [cfg]
    for sub in ("text_config", "language_config"):
        if isinstance(cfg.get(sub), Mapping):
            configs.append(cfg[sub])
    for c in configs:
        if any(a in _HYBRID_ARCHS for a in (c.get("architectures") or ())):
            return True
        if c.get("model_type") in _HYBRID_MODEL_TYPES:
            return True
        if "linear_attention" in (c.get("layer_types") or ()):
            return True
        if c.get("full_attention_interval") or c.get("linear_num_value_heads"):
            return True
    return False


def guess_hybrid_model(model_path: Optional[str]) -> Optional[bool]:
    """Is the model a linear-attention hybrid (Qwen3.5, Qwen3-Next)?

    Reads ``<model_path>/config.json`` when the path is a local directory;
    otherwise judges by the name. None when it cannot tell.
    """
    if not model_path:
        return None
    cfg_path = os.path.join(str(model_path), "config.json")
    if os.path.isfile(cfg_path):
        try:
            with open(cfg_path, encoding="utf-8") as fh:
                cfg = json.load(fh)
            if isinstance(cfg, Mapping):
                return _config_is_hybrid(cfg)
        except (OSError, ValueError):
            pass
    if _HYBRID_NAME_RE.search(os.path.basename(str(model_path).rstrip("/")) or str(model_path)):
        return True
    return None
