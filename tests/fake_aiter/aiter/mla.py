"""aiter.mla (fake): placeholders imported by SGLang's aiter_backend."""

from aiter._fake import unimplemented

mla_decode_fwd = unimplemented("mla.mla_decode_fwd")
mla_prefill_fwd = unimplemented("mla.mla_prefill_fwd")
