"""aiter.ops.triton.utils.types (fake): SGLang evaluates torch.finfo(e4m3_dtype) at import."""

from aiter import dtypes

e4m3_dtype = dtypes.fp8
