"""The ``SGLANG_KV5D*`` environment switches. Standard library only.

    SGLANG_KV5D                 gate: 1/true/yes/on turns the overlay on in every
                                process that inherits it; anything else: off
    SGLANG_KV5D_PATCHES         comma-separated allow list of patch names
                                (unset or empty: all patches)
    SGLANG_KV5D_STRICT          default on; 0/false/no/off: a 5D-required patch
                                that cannot apply only warns instead of failing
    SGLANG_KV5D_ALLOW_UNTESTED  1: patch an SGLang newer than the tested range
    SGLANG_KV5D_STATUS_DIR      each process writes <dir>/<pid>.json with its status
    SGLANG_KV5D_ATTN_IMPL       auto | aiter | triton (5D attention implementation)

SGLang's own switch that decides whether 5D is requested at all:

    SGLANG_AITER_KV_CACHE_LAYOUT   nhd (default) | vectorized_5d (case-insensitive)
"""

from __future__ import annotations

import os
from typing import Mapping, Optional, Tuple

GATE = "SGLANG_KV5D"
PATCHES = "SGLANG_KV5D_PATCHES"
STRICT = "SGLANG_KV5D_STRICT"
ALLOW_UNTESTED = "SGLANG_KV5D_ALLOW_UNTESTED"
STATUS_DIR = "SGLANG_KV5D_STATUS_DIR"
ATTN_IMPL = "SGLANG_KV5D_ATTN_IMPL"
LAYOUT = "SGLANG_AITER_KV_CACHE_LAYOUT"

ALL_SWITCHES = (GATE, PATCHES, STRICT, ALLOW_UNTESTED, STATUS_DIR, ATTN_IMPL)

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _env(environ: Optional[Mapping[str, str]]) -> Mapping[str, str]:
    return os.environ if environ is None else environ


def parse_bool(value: Optional[str], default: bool) -> bool:
    """'1/true/yes/on' -> True, '0/false/no/off' -> False, unset/empty -> default.

    Anything else raises ValueError naming the accepted spellings.
    """
    if value is None or value.strip() == "":
        return default
    v = value.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise ValueError(f"{value!r} is not a boolean; use 1/true/yes/on or 0/false/no/off")


def gate_on(environ: Optional[Mapping[str, str]] = None) -> bool:
    """Is the overlay switched on? Never raises: a malformed gate counts as off."""
    v = _env(environ).get(GATE, "")
    return v.strip().lower() in _TRUE


def selected_patches(environ: Optional[Mapping[str, str]] = None) -> Optional[Tuple[str, ...]]:
    """Names from SGLANG_KV5D_PATCHES, or None when every patch is selected."""
    raw = _env(environ).get(PATCHES, "")
    names = tuple(n.strip() for n in raw.split(",") if n.strip())
    return names or None


def strict(environ: Optional[Mapping[str, str]] = None) -> bool:
    """SGLANG_KV5D_STRICT, default on. A malformed value keeps strict mode on."""
    try:
        return parse_bool(_env(environ).get(STRICT), True)
    except ValueError:
        return True


def allow_untested(environ: Optional[Mapping[str, str]] = None) -> bool:
    try:
        return parse_bool(_env(environ).get(ALLOW_UNTESTED), False)
    except ValueError:
        return False


def status_dir(environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    v = _env(environ).get(STATUS_DIR, "").strip()
    return v or None


def requested_layout(environ: Optional[Mapping[str, str]] = None) -> str:
    """SGLANG_AITER_KV_CACHE_LAYOUT as SGLang reads it (lower-cased, default nhd)."""
    return _env(environ).get(LAYOUT, "nhd").strip().lower() or "nhd"


def wants_5d(environ: Optional[Mapping[str, str]] = None) -> bool:
    return requested_layout(environ) == "vectorized_5d"
