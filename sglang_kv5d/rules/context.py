"""What a rule may look at: :class:`Context` and :func:`make_context`, plus
the environment names and constants the rules share.

Standard library only; SGLang and torch are never imported.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, FrozenSet, Iterable, Mapping, Optional, Sequence, Tuple

from .. import config as _config
from ..platform import PLATFORMS
from .model import guess_hybrid_model

LAYOUT_ENV = _config.LAYOUT
USE_AITER_ENV = _config.USE_AITER
HND_ENV = _config.HND
ALLOW_UNTESTED_ENV = _config.ALLOW_UNTESTED
VALID_LAYOUTS = _config.LAYOUTS
VEC5D = "vectorized_5d"

env_bool = _config.sglang_env_bool  # SGLang's EnvBool parse, from the switch registry


@dataclass
class Context:
    """Everything a rule may look at. Build it with :func:`make_context`.

    ``args``: an ``argparse.Namespace`` from SGLang's own parser, SGLang's
    resolving view of a ``ServerArgs``, or a plain mapping of values. Missing
    names read as the rule's default (older SGLang releases lack some flags).

    ``patch_problems``: ``[(patch_name, reason)]`` for patches that 5D needs and
    that cannot apply on this SGLang; ``None`` means no probe was available
    (KV5D011 then cannot judge and stays silent).

    ``known_env``: names (and ``PREFIX_`` families) of ``SGLANG_*`` variables the
    installed SGLang reads; ``None`` skips KV5D012.

    ``hybrid_model``: True / False when known (linear-attention hybrid such as
    Qwen3.5), None when it cannot be told from the arguments.

    ``env_origins``: for the launcher, the origin (``profile``, ``command
    line``) of each variable it sets; ``replaced``: ``(name, value, origin)``
    of values the launch environment replaced (an exported ``SGLANG_KV5D``
    the launcher overrides). ``known_patches``: patch names, to judge
    ``SGLANG_KV5D_PATCHES``; ``required_patches``: the names of the patches 5D
    needs (``required_for_5d``), to judge a selection that leaves one out
    (KV5D011; None: not judged). ``in_sglang``: the rules run inside SGLang (the
    server-args guard), where activation has already warned about invalid
    sglang-kv5d switches and KV5D013/KV5D014 stay silent.
    """

    env: Mapping[str, str]
    args: Any
    sglang_version: Optional[str]
    platform: str
    patch_problems: Optional[Sequence[Tuple[str, str]]] = None
    known_env: Optional[FrozenSet[str]] = None
    hybrid_model: Optional[bool] = None
    env_origins: Optional[Mapping[str, str]] = None
    replaced: Sequence[Tuple[str, str, str]] = ()
    known_patches: Optional[FrozenSet[str]] = None
    in_sglang: bool = False
    required_patches: Optional[FrozenSet[str]] = None

    def arg(self, name: str, default: Any = None) -> Any:
        return _get(self.args, name, default)

    # Read the environment exactly as SGLang does (environ.EnvStr / EnvBool).
    @property
    def layout(self) -> Optional[str]:
        raw = self.env.get(LAYOUT_ENV)
        return None if raw is None else raw.lower()

    @property
    def wants_5d(self) -> bool:
        return self.layout == VEC5D

    def selected_patches(self) -> Optional[FrozenSet[str]]:
        """The patch names this launch selects: ``SGLANG_KV5D_PATCHES`` when it is
        set (and valid), else every known patch; None when neither is known
        (every patch counts as selected)."""
        chosen = _config.selected_patches(self.env)
        if chosen is not None:
            return frozenset(chosen)
        return self.known_patches


def make_context(
    env: Mapping[str, str],
    args: Any,
    sglang_version: Optional[str],
    platform: str,
    patch_problems: Optional[Sequence[Tuple[str, str]]] = None,
    known_env: Optional[Iterable[str]] = None,
    hybrid_model: Optional[bool] = None,
    *,
    env_origins: Optional[Mapping[str, str]] = None,
    replaced: Sequence[Tuple[str, str, str]] = (),
    known_patches: Optional[Iterable[str]] = None,
    in_sglang: bool = False,
    required_patches: Optional[Iterable[str]] = None,
) -> Context:
    if platform not in PLATFORMS:
        raise ValueError(f"platform must be one of {PLATFORMS}, not {platform!r}")
    if hybrid_model is None:
        hybrid_model = guess_hybrid_model(_get(args, "model_path"))
    return Context(
        env=dict(env),
        args=args,
        sglang_version=sglang_version,
        platform=platform,
        patch_problems=None if patch_problems is None else [tuple(p) for p in patch_problems],
        known_env=None if known_env is None else frozenset(known_env),
        hybrid_model=hybrid_model,
        env_origins=None if env_origins is None else dict(env_origins),
        replaced=[tuple(r) for r in replaced],
        known_patches=None if known_patches is None else frozenset(known_patches),
        in_sglang=in_sglang,
        required_patches=None if required_patches is None else frozenset(required_patches),
    )


def _get(args: Any, name: str, default: Any = None) -> Any:
    if args is None:
        return default
    if isinstance(args, Mapping):
        return args.get(name, default)
    try:
        return getattr(args, name)
    except AttributeError:
        return default
