"""Is this attention backend ready for speculative decoding over its pool? (fail closed)

Checked when an ``AiterAttnBackend`` is built for a runner with a speculative
algorithm and 5D requested (the fail-closed-backend guard,
sglang_kv5d/patches/fail_closed.py). The configuration is judged by the one
support matrix (sglang_kv5d.speculative.support.decide), from what the process
itself acts on, not from what a launch rule saw:

    algorithm        the model runner's ``spec_algorithm`` (the member SGLang's
                     workers dispatch on; NEXTN is EAGLE there, a Gemma4
                     assistant draft FROZEN_KV_MTP)
    topk, draft count, options
                     the runner's own server arguments, resolved (the adapter
                     passes SGLang's resolved view of ``runner.server_args``);
                     not ``backend.topk``, which SGLang builds as 1 for every
                     target backend
    MLA              the backend's ``use_mla``
    patches          their states in this process

so an algorithm the matrix refuses stops the server here even when
``server-args-guard`` did not run. It also catches what only the process
knows: a needed patch that did not apply, a draft pool that is still 5D (an
explicit label), a backend without the page-table flag the 5D verify needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from . import support

# Patch states (sglang_kv5d.state) as the matrix words them. A needed patch is
# usable when it is installed, or when the installed SGLang provides its fix.
_APPLIED = "applied"
_USABLE = (_APPLIED, "upstream")
_DISABLED = "disabled"


@dataclass(frozen=True)
class Problem:
    message: str
    fix: str

    def __str__(self) -> str:
        return self.message


def verify_problem(backend, pool_is_5d: bool) -> Optional[str]:
    """Why the 5D target-verify path cannot serve ``backend`` (None: it can, or the pool is not 5D).

    A property of the backend object (target-verify-5d's hook asks it too); the
    algorithm and its topk are the matrix's business (:func:`speculative_problem`).
    ``backend.topk`` is 1 for every target backend SGLang builds; a draft-side
    backend built with a wider topk over a 5D pool is refused here.
    """
    if not pool_is_5d:
        return None
    if getattr(backend, "use_mla", False):
        return "the target is MLA (the 5D verify path is for MHA pools)"
    if getattr(backend, "topk", 1) not in (None, 1):
        return f"speculative topk is {backend.topk} (the 5D verify path is for topk 1 chains)"
    if not (hasattr(backend, "decode_uses_page_table") and hasattr(backend, "_use_unified_verify")):
        return "this SGLang's AiterAttnBackend has no decode_uses_page_table (SGLang 0.5.23 or later is needed)"
    return None


def runner_algorithm(model_runner, spec_args: Any = None) -> Optional[Any]:
    """The speculative algorithm ``model_runner`` acts on, or None for none.

    SGLang's ModelRunner keeps it as ``spec_algorithm`` (a SpeculativeAlgorithm
    member, or a plugin's object with a ``name``); without it the server
    arguments' ``speculative_algorithm`` is used."""
    spec = getattr(model_runner, "spec_algorithm", None)
    if spec is None:
        spec = getattr(spec_args if spec_args is not None else getattr(model_runner, "server_args", None),
                       "speculative_algorithm", None)
    if spec is None:
        return None
    is_none = getattr(spec, "is_none", None)
    if callable(is_none) and is_none():
        return None
    if not str(getattr(spec, "name", spec)).strip() or support.normalize_algorithm(spec) == "NONE":
        return None
    return spec


def _gaps(needed, patch_state: Callable[[str], Optional[str]]):
    gaps = {}
    for name in needed:
        state = patch_state(name)
        if state in _USABLE:
            continue
        gaps[name] = support.NOT_SELECTED if state == _DISABLED else (state or "not registered")
    return gaps


def speculative_problem(model_runner, backend, *, pool_is_5d: bool,
                        patch_state: Callable[[str], Optional[str]], spec_args: Any = None,
                        sglang_version: Optional[str] = None) -> Optional[Problem]:
    """The problem with ``backend`` serving speculative decoding over its pool, or None.

    ``patch_state(name)`` gives a patch's state in this process ("applied", ...);
    ``spec_args`` the runner's resolved server arguments (default
    ``model_runner.server_args``); ``sglang_version`` the installed SGLang. A
    runner without a speculative algorithm has none.
    """
    if spec_args is None:
        spec_args = getattr(model_runner, "server_args", None)
    algorithm = runner_algorithm(model_runner, spec_args)
    if algorithm is None:
        return None
    name = support.normalize_algorithm(algorithm)
    if getattr(model_runner, "is_draft_worker", False):
        if pool_is_5d:
            state = patch_state(support.DRAFT_POOL_NHD)
            why = ("its pool was built with an explicit 5D label" if state == _APPLIED
                   else f"{support.DRAFT_POOL_NHD} is {state}")
            return Problem(f"the {name} draft worker's KV pool is SHUFFLE 5D ({why}); the draft attention paths "
                           "read NHD pools only",
                           f"select {support.DRAFT_POOL_NHD} (SGLANG_KV5D_PATCHES) and build draft pools without "
                           "a 5D label; or use the nhd layout")
        return None
    if not pool_is_5d:
        return None
    cfg = support.spec_config(spec_args, algorithm=algorithm, mla=bool(getattr(backend, "use_mla", False)))
    s = support.decide(cfg, sglang_version, _gaps(support.NEEDED_PATCHES.get(name, ()), patch_state))
    if not s.allowed:
        return Problem(f"--speculative-algorithm {name} over a SHUFFLE 5D target is outside the support matrix: "
                       f"{s.reason}", s.fix)
    why = verify_problem(backend, pool_is_5d)
    if why:
        return Problem(f"--speculative-algorithm {name}: {why}", f"install SGLang {support.SPEC_SGLANG}, or use nhd")
    return None
