"""What two PD-disaggregation roles (prefill, decode) must agree on under SHUFFLE 5D.

Pure: no SGLang, no torch, no environment. Rule KV5D015
(sglang_kv5d/rules/disaggregation.py) and its documentation read these
constants; the handshake check inside SGLang is built elsewhere in this package.

``VERIFIED_TRANSFER_BACKENDS`` are the ``--disaggregation-transfer-backend``
values whose page copies the overlay has verified for 5D pages: at equal
attention-TP they copy whole pages at ``base + page_id * item_len``, a byte copy
that is layout-blind, so a 5D page arrives as the same 5D page. Every other
backend is refused under 5D until it is verified.

``TRANSFER_BACKEND_ALIASES`` maps a value SGLang rewrites before the roles start
to the backend that actually runs (0.5.23 ``arg_groups/pd_disaggregation_hook.py``
turns ``mooncake_tcp`` into ``mooncake`` with the TCP transport forced), so the
launch check and the in-process guard judge the same backend.
"""

from __future__ import annotations

from typing import Optional, Tuple

ROLES: Tuple[str, ...] = ("prefill", "decode")

VERIFIED_TRANSFER_BACKENDS: Tuple[str, ...] = ("mooncake", "nixl")

TRANSFER_BACKEND_ALIASES = {"mooncake_tcp": "mooncake"}

# What both roles must have in common: a mismatch in any of them moves bytes the
# other side reads as something else. SGLang's own handshake compares the page
# size and the --kv-cache-dtype string; the dtype string is the same on MI300
# (torch.float8_e4m3fnuz) and MI355 (torch.float8_e4m3fn), so the torch fp8 format
# must be compared separately.
MUST_AGREE: Tuple[str, ...] = (
    "both roles run the overlay (SGLANG_KV5D=1, the same sglang-kv5d)",
    "the KV layout of every attention sub-pool (vectorized_5d with the same X on both)",
    "--page-size",
    "--kv-cache-dtype and the torch fp8 format it becomes (MI300 float8_e4m3fnuz, MI355 float8_e4m3fn)",
    "head_dim (the same model)",
)


def canonical_transfer_backend(name: Optional[str]) -> Optional[str]:
    """The backend that runs for ``--disaggregation-transfer-backend name``
    (lower-cased, aliases resolved); None when ``name`` is None or empty."""
    if name is None:
        return None
    value = str(getattr(name, "value", name)).strip().lower()
    if not value:
        return None
    return TRANSFER_BACKEND_ALIASES.get(value, value)


def transfer_backend_verified(name: Optional[str]) -> bool:
    """True when ``name`` (or the backend it is an alias of) is verified for 5D pages."""
    return canonical_transfer_backend(name) in VERIFIED_TRANSFER_BACKENDS
