"""Is this attention backend ready for speculative decoding over its pool? (fail closed)

Checked when an ``AiterAttnBackend`` is built for a runner with a speculative
algorithm and 5D requested (the fail-closed-backend guard). Rule KV5D005
refuses unsupported combinations at launch; this catches what only the
process knows: a needed patch that did not apply, a draft pool that is still
5D (an explicit label), a 5D target the verify path cannot serve.
"""

from __future__ import annotations

from typing import Callable, Optional


def verify_problem(backend, pool_is_5d: bool) -> Optional[str]:
    """Why the 5D target-verify path cannot serve ``backend`` (None: it can, or the pool is not 5D)."""
    if not pool_is_5d:
        return None
    if getattr(backend, "use_mla", False):
        return "the target is MLA (the 5D verify path is for MHA pools)"
    if getattr(backend, "topk", 1) not in (None, 1):
        return f"speculative topk is {backend.topk} (the 5D verify path is for topk 1 chains)"
    if not (hasattr(backend, "decode_uses_page_table") and hasattr(backend, "_use_unified_verify")):
        return "this SGLang's AiterAttnBackend has no decode_uses_page_table (SGLang 0.5.23 or later is needed)"
    return None


def speculative_problem(model_runner, backend, *, pool_is_5d: bool,
                        patch_state: Callable[[str], Optional[str]]) -> Optional[str]:
    """The problem with ``backend`` serving speculative decoding over its pool, or None.

    ``patch_state(name)`` gives a patch's state in this process ("applied", ...).
    A runner without a speculative algorithm has none.
    """
    spec = getattr(model_runner, "spec_algorithm", None)
    if spec is None or (callable(getattr(spec, "is_none", None)) and spec.is_none()):
        return None
    if getattr(model_runner, "is_draft_worker", False):
        if pool_is_5d:
            state = patch_state("draft-pool-nhd")
            why = "its pool was built with an explicit 5D label" if state == "applied" else f"draft-pool-nhd is {state}"
            return (f"the speculative draft worker's KV pool is SHUFFLE 5D ({why}); the draft attention "
                    "paths read NHD pools only")
        return None
    if not pool_is_5d:
        return None
    state = patch_state("target-verify-5d")
    if state != "applied":
        return f"speculative decoding over a 5D target needs target-verify-5d, which is {state}"
    return verify_problem(backend, pool_is_5d)
