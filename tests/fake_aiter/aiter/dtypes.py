"""aiter.dtypes (fake): the arch-dependent fp8 type and short aliases.

Real aiter picks float8_e4m3fnuz on gfx942 and float8_e4m3fn on gfx950. The fake
defaults to float8_e4m3fn (what SGLang's ``fp8_dtype`` is off ROCm); set
FAKE_AITER_FP8=e4m3fnuz, or assign ``aiter.dtypes.fp8``, to model gfx942.
"""

import os

import torch

fp8 = torch.float8_e4m3fnuz if os.environ.get("FAKE_AITER_FP8") == "e4m3fnuz" else torch.float8_e4m3fn
fp8_e8m0 = getattr(torch, "float8_e8m0fnu", torch.uint8)
bf16 = torch.bfloat16
fp16 = torch.float16
fp32 = torch.float32
i8 = torch.int8
u8 = torch.uint8
i32 = torch.int32
i64 = torch.int64
