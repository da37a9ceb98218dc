"""aiter.ops.triton.attention.unified_attention (fake placeholder)."""

from aiter._fake import unimplemented

unified_attention = unimplemented("unified_attention")
