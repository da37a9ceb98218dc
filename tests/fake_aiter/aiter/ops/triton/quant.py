"""aiter.ops.triton.quant (fake placeholder; SGLang's quark utils import it, guarded)."""

from aiter._fake import unimplemented

dynamic_mxfp4_quant = unimplemented("dynamic_mxfp4_quant")
