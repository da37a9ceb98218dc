"""What the launch rules need to know about the patches here (KV5D005, KV5D011, KV5D013).

:func:`probe_patch_problems` is looked up on this module at each plan
(``tests/helpers/cli.py`` substitutes it to judge a launch as a server whose
patches cannot apply would).
"""

from __future__ import annotations

from typing import List, Optional, Tuple



def known_patch_names() -> Optional[List[str]]:
    """sglang_kv5d.activation.registry.known_patch_names (imported when called)."""
    from ..activation.registry import known_patch_names as names

    return names()


def required_patch_names() -> Optional[List[str]]:
    """sglang_kv5d.activation.registry.required_patch_names (imported when called)."""
    from ..activation.registry import required_patch_names as names

    return names()


def probe_patch_problems() -> Tuple[Optional[List[Tuple[str, str]]], Optional[str]]:
    """``([(patch, reason)] for 5D-required patches that cannot apply, note)``.

    The list is None when no probe is available (the note says why). Imports SGLang.
    """
    try:
        from ..activation import probe_patches  # type: ignore[attr-defined]
    except ImportError as exc:
        return None, f"KV5D011 not checked: no patch probe available (sglang_kv5d.activation.probe_patches: {exc})"
    try:
        probes = probe_patches()
    except Exception as exc:  # probes run patches' own code (third-party ones too): reported, not fatal
        return None, f"KV5D011 not checked: the patch probe failed ({type(exc).__name__}: {exc})"
    problems = [
        (str(p.name), str(p.reason))
        for p in probes
        if getattr(p, "required_for_5d", False) and not getattr(p, "ok", True)
    ]
    return problems, None


