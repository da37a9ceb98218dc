"""The attention-backend rule (KV5D009): only aiter reads the 5D layout."""

from __future__ import annotations

from .context import Context
from .registry import ERROR, Rule, rule as _rule


@_rule(
    "KV5D009",
    ERROR,
    "vectorized_5d with an attention backend other than aiter",
    """
    Only the aiter attention backend reads the 5D layout; triton, torch_native,
    wave and the others index the cache as NHD. The prefill and decode backend
    overrides count separately.

    Fires when 5D is requested and `--attention-backend`,
    `--prefill-attention-backend` or `--decode-attention-backend` resolves to
    something other than `aiter` (an override falls back to
    `--attention-backend`). Unset backends are left to SGLang, whose ROCm
    default for MHA models (Qwen3.5, Llama) is aiter; pass
    `--attention-backend aiter` explicitly for MLA models.
    """,
    fix='pass --attention-backend aiter and drop --prefill-attention-backend / --decode-attention-backend (or set them to aiter).',
)
def _kv5d009(ctx: Context, rule: Rule):
    if not ctx.wants_5d:
        return
    parts = []
    for flag, dest in (
        ("--attention-backend", "attention_backend"),
        ("--prefill-attention-backend", "prefill_attention_backend"),
        ("--decode-attention-backend", "decode_attention_backend"),
    ):
        value = ctx.arg(dest)
        if value is not None and value != "aiter":
            parts.append(f"{flag} {value}")
    if not parts:
        return
    yield rule.finding(
        f"vectorized_5d needs the aiter attention backend, but {', '.join(parts)} "
        "would read the cache as NHD",
        "use --attention-backend aiter and drop (or set to aiter) --prefill-attention-backend / "
        "--decode-attention-backend",
    )
