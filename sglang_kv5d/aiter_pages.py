"""Which SHUFFLE 5D page sizes aiter's ``pa_decode_gluon`` is handed (a fact
about aiter, read by the attention routing, the launch rules and the bench).

A leaf module: no imports beyond the standard library, so the rules layer can
read it without loading the attention package.
"""

from __future__ import annotations

from typing import Optional

__all__ = ["PA_DECODE_PAGES", "decode_page_unsupported"]

#: The pages (``kv_block_size``) ``pa_decode_gluon`` is written and tested for:
#: its docstring lists them at every release from v0.1.10 to main e4048607, and
#: v0.1.10 .. v0.1.13.post1 assert them in the wrapper (AssertionError). Later
#: releases assert nothing, but aiter's tests cover no other page, and its PS
#: decode kernel compiled for page 32 spills (main e4048607, D=256, heads 4/1
#: and, with 3.7.0, 16/2; gfx942 and gfx950, fp8 and bf16; its own wrapper on a CPU:
#: ``python -m tests.amd.aiter_peer --page N``): with Triton 3.6.0 and 3.7.0
#: (aiter's pin) 208-484 bytes of scratch at page 32 in 10 of 12 compiles (the
#: other two, gfx950 fp8 on 3.7.0, spill 16-28 VGPRs into AGPRs) and none at
#: pages 16 and 64; with 3.8.0 and 3.9.0 1540-2168 bytes at page 32 against
#: 48-352 at pages 16 and 64 (1 wave per SIMD at every page there). A SHUFFLE 5D page outside
#: this list (32, 48, 128, ...) therefore decodes on the portable kernels,
#: decided before any call and remembered with this reason. Batch prefill is
#: not limited by the page: the overlay hands it K/V gathered to the linear
#: (page 1) layout.
PA_DECODE_PAGES = (16, 64, 1024)


def decode_page_unsupported(page: int) -> Optional[str]:
    """Why ``pa_decode_gluon`` is not handed a 5D cache of this page size, or None."""
    if int(page) in PA_DECODE_PAGES:
        return None
    return (
        f"pa_decode_gluon is written for pages {list(PA_DECODE_PAGES)}, not {int(page)} (aiter v0.1.10 .. "
        f"v0.1.13.post1 assert kv_block_size in that list; later releases test no other page, and their "
        f"decode kernel compiled for page 32 spills registers to scratch on gfx942 and gfx950)"
    )
