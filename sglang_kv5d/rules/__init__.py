"""Launch rules: which SGLang configurations cannot serve a SHUFFLE 5D KV cache.

Each rule is a pure function over a :class:`Context` (the launch environment,
the parsed SGLang arguments, the SGLang version, the platform, the patch
probes) and returns zero or more :class:`Finding` objects. Rules have stable
IDs (KV5D001 ..), a severity, a message that says what is wrong, and a fix.

    registry.py     Finding, Rule, RULES, evaluate()
    context.py      Context, make_context(), the environment names rules read
    model.py        is the model a linear-attention hybrid? (config.json, name)
    scan.py         the SGLANG_* names the installed SGLang reads (KV5D012)
    layout.py       KV5D001 layout value, 002 SGLANG_USE_AITER, 003 platform, 007 HND
    memory.py       KV5D004 unified memory, 006 HiCache/LMCache/HiSparse, 008 page size, 016 KV dtype
    speculative.py  KV5D005 over sglang_kv5d/speculative/support.py (the one support matrix)
    backend.py      KV5D009 attention backend
    release.py      KV5D010 SGLang version, 011 patches that cannot apply
    environment.py  KV5D012 unknown SGLANG_* names, 013 switch values, 014 code-loading variables
    disaggregation.py  KV5D015 prefill/decode disaggregation (contract: sglang_kv5d/disagg/contract.py)
    guard.py        guard_server_args(): the rules inside SGLang
    docs.py         --explain, docs/rules.md, the README's generated blocks

The same rules run in three places:

* ``sglang-kv5d check`` / ``sglang-kv5d launch`` before anything starts
  (the launcher builds the context from argv and a profile);
* inside SGLang, through :func:`guard_server_args`, which the
  ``server-args-guard`` patch calls from ``ServerArgs.check_server_args`` and
  (0.5.20+) a resolution hook, so ``python -m sglang.launch_server`` and
  ``sgl.Engine(...)`` scripts get them too;
* ``python -m sglang_kv5d.rules --markdown`` renders docs/rules.md.

Importing this package imports neither SGLang nor torch.
"""

from __future__ import annotations

from .context import (
    ALLOW_UNTESTED_ENV,
    HND_ENV,
    LAYOUT_ENV,
    PLATFORMS,
    USE_AITER_ENV,
    VALID_LAYOUTS,
    VEC5D,
    Context,
    env_bool,
    make_context,
)
from .registry import ERROR, RULES, WARNING, Finding, Rule, errors, evaluate
from .model import guess_hybrid_model
from .scan import sglang_env_names

# The rule groups register their rules on import.
from . import layout, memory, speculative, backend, release, environment, disaggregation  # noqa: E402,F401  (isort: skip)
from .memory import DEFAULT_5D_PAGE_SIZE, kv_vector_x
from .speculative import Support, speculative_algorithm, speculative_support
from .environment import CODE_LOADING_ENV
from .guard import Kv5dConfigError, guard_server_args
from .docs import (
    README_RULES_BEGIN,
    README_RULES_END,
    README_SPEC_BEGIN,
    README_SPEC_END,
    explain,
    render_markdown,
    render_readme,
    render_readme_table,
    suggest_rule,
)

__all__ = [
    "ALLOW_UNTESTED_ENV", "CODE_LOADING_ENV", "DEFAULT_5D_PAGE_SIZE", "ERROR", "HND_ENV", "LAYOUT_ENV",
    "PLATFORMS", "README_RULES_BEGIN", "README_RULES_END", "README_SPEC_BEGIN", "README_SPEC_END", "RULES",
    "USE_AITER_ENV", "VALID_LAYOUTS", "VEC5D", "WARNING", "Context", "Finding", "Kv5dConfigError", "Rule",
    "Support", "env_bool", "errors", "evaluate", "explain", "guard_server_args", "guess_hybrid_model",
    "kv_vector_x", "make_context", "render_markdown", "render_readme", "render_readme_table",
    "sglang_env_names", "speculative_algorithm", "speculative_support", "suggest_rule",
]
