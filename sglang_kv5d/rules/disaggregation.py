"""Prefill/decode disaggregation under the 5D layout: rule KV5D015.

The contract both roles must keep (sglang_kv5d/disagg/contract.py: the
verified transfer backends, what must agree) is stated in the rule's doc; the
rule refuses what one role's own arguments and environment can show is not
5D-safe. What only the pair can show (the other role's layout, TP, dtype) is
checked at the bootstrap handshake inside SGLang. Pure: no SGLang import.
"""

from __future__ import annotations

from typing import Any, List, Optional

from ..disagg import contract as _contract
from ..surface import ENV_DISAGG_STAGING_BUFFER
from .context import Context, env_bool
from .registry import ERROR, Rule, rule as _rule

MODE_FLAG = "--disaggregation-mode"
BACKEND_FLAG = "--disaggregation-transfer-backend"
OFFLOAD_FLAG = "--disaggregation-decode-enable-offload-kvcache"
BACKUP_FLAG = "--disaggregation-decode-retraction-backup"
HOST_RECEIVE_FLAG = "--disaggregation-decode-host-receive-threshold"
ROLE_SWITCH_FLAG = "--enable-pd-role-switch"
# Retraction backups of a decode role and whether they are 5D-safe.
SAFE_BACKUPS = ("cpu_tensor", "none")  # cpu-copy-5d addresses 5D; "none" copies nothing
HOST_POOL_BACKUP = "host_pool"  # a HiCache host pool: token-indexed transfers (as KV5D006)

_VERIFIED = ", ".join(_contract.VERIFIED_TRANSFER_BACKENDS)
_AGREE = "\n".join(f"    - {item}" for item in _contract.MUST_AGREE)


def disaggregation_role(ctx: Context) -> Optional[str]:
    """``prefill`` / ``decode`` for a PD role, None otherwise (unset, ``null``)."""
    mode = ctx.arg("disaggregation_mode")
    if mode is None:
        return None
    value = str(getattr(mode, "value", mode)).strip().lower()
    return value if value in _contract.ROLES else None


def _threshold(value: Any) -> Optional[float]:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


@_rule(
    "KV5D015",
    ERROR,
    "vectorized_5d with prefill/decode disaggregation outside the verified contract",
    f"""
    With `{MODE_FLAG} prefill|decode` a prefill role computes the KV cache and a
    transfer engine copies its pages into a decode role's pool. Under SHUFFLE 5D
    both roles must agree on everything that decides what a page's bytes mean:

{_AGREE}

    At equal attention-TP the verified transfer engines copy whole pages at
    `base + page_id * item_len` (one page of bytes for NHD and for 5D alike), so
    a 5D page arrives as the same 5D page. One role's arguments cannot show the
    other role's: the layout, page size, KV dtype and torch fp8 format, head_dim
    and a different attention-TP (SGLang's head-sliced path slices heads per
    token, right for NHD pages only) are compared at the bootstrap handshake
    inside SGLang, which refuses a mismatch with both values named. SGLang's own
    handshake compares only the page size and the `--kv-cache-dtype` string (the
    same string on MI300 and MI355), and `--disaggregation-enable-kv-checksum`
    passes a 5D/NHD pair because the bytes match.

    What this rule refuses, from one role's own configuration:

    - `{BACKEND_FLAG}` other than {_VERIFIED} (`mooncake_tcp` is mooncake: SGLang
      rewrites it before start-up): mori, ascend and fake are not verified for 5D
      pages.
    - On a decode role, `{OFFLOAD_FLAG}`: the decode-side offload manager copies
      through a HiCache host pool whose transfers index the device buffers by
      token slot; `fail-closed-decode-offload` refuses it inside SGLang too.
    - On a decode role, `{BACKUP_FLAG} host_pool`, and `{HOST_RECEIVE_FLAG}`
      below 1 (SGLang then forces `host_pool`): the backup pool is a HiCache host
      pool with token-indexed transfers (the reason of KV5D006). `cpu_tensor` is
      accepted: retraction's CPU copies (`get_cpu_copy` / `load_cpu_copy`) are
      5D-addressed by the `cpu-copy-5d` patch, which 5D requires. `none` copies
      nothing (a retracted request is aborted and retried). Unset is accepted: on
      ROCm SGLang 0.5.23 resolves it to `cpu_tensor` (`kv_cache_builder.py` keeps
      `host_pool` opt-in on HIP).
    - `{ENV_DISAGG_STAGING_BUFFER}=1`: the staging buffers exist for a different
      attention-TP and gather head slices per token, assuming NHD pages.
    - With `{ROLE_SWITCH_FLAG}` a prefill role can become a decode role at run
      time (the KV pool is kept), so the decode-role refusals apply to it too.

    Accepted and why: `--disaggregation-decode-enable-radix-cache` (the decode
    radix cache matches whole pages, so the prefill sends whole pages from a page
    boundary; with `--enable-hierarchical-cache` it is decode HiCache, which
    KV5D006 refuses), `--disaggregation-enable-kv-checksum` (an Adler-32 over the
    page bytes: harmless, though blind to the layout), the decode allocation
    policy, extra slots, polling, bootstrap port and InfiniBand devices
    (scheduling and transport, not the page format). `--enable-hisparse` is
    refused by KV5D006 in every mode. Decode context parallel (`--dcp-size`)
    relayouts only MLA pools in SGLang's transfer code and is not judged here.

    Fires when 5D is requested, `{MODE_FLAG}` is prefill or decode, and one of
    the refusals above applies; the message names the role, the flag and the
    value. Without a PD role, or under the nhd layout, it never fires.
    """,
    fix=f"use {BACKEND_FLAG} {' or '.join(_contract.VERIFIED_TRANSFER_BACKENDS)}; on the decode role drop "
        f"{OFFLOAD_FLAG}, {BACKUP_FLAG} host_pool and {HOST_RECEIVE_FLAG} below 1; unset "
        f"{ENV_DISAGG_STAGING_BUFFER}; keep both roles on the same layout, page size, KV dtype, GPU family and "
        "model; or use the nhd layout on both roles.",
)
def _kv5d015(ctx: Context, rule: Rule):
    if not ctx.wants_5d:
        return
    role = disaggregation_role(ctx)
    if role is None:
        return
    where = f"vectorized_5d with {MODE_FLAG} {role}"
    for message, fix in _problems(ctx, role):
        yield rule.finding(f"{where}: {message}", fix)


def _problems(ctx: Context, role: str) -> List[tuple]:
    out = []
    backend = ctx.arg("disaggregation_transfer_backend")
    if backend is not None and not _contract.transfer_backend_verified(backend):
        shown = str(getattr(backend, "value", backend))
        out.append((
            f"{BACKEND_FLAG} {shown} is not verified for 5D pages (verified: {_VERIFIED})",
            f"use {BACKEND_FLAG} {' or '.join(_contract.VERIFIED_TRANSFER_BACKENDS)}, or the nhd layout on both roles",
        ))
    if env_bool(ctx.env.get(ENV_DISAGG_STAGING_BUFFER)):
        out.append((
            f"{ENV_DISAGG_STAGING_BUFFER}={ctx.env.get(ENV_DISAGG_STAGING_BUFFER)} enables the staging buffers, which "
            "gather head slices per token (NHD pages) for a different attention-TP between the roles",
            f"unset {ENV_DISAGG_STAGING_BUFFER} and give both roles the same attention-TP",
        ))
    switch = bool(ctx.arg("enable_pd_role_switch", False))
    if role != "decode" and not switch:
        return out
    as_decode = "" if role == "decode" else f" (with {ROLE_SWITCH_FLAG} this role can become a decode role)"
    if ctx.arg("disaggregation_decode_enable_offload_kvcache", False):
        out.append((
            f"{OFFLOAD_FLAG}: the decode-side offload manager's HiCache host pool indexes the device buffers by "
            f"token slot, not 5D blocks{as_decode}",
            f"drop {OFFLOAD_FLAG} (retraction's CPU copies are 5D-safe through cpu-copy-5d)",
        ))
    backup = ctx.arg("disaggregation_decode_retraction_backup")
    backup = None if backup is None else str(getattr(backup, "value", backup)).strip().lower()
    threshold = _threshold(ctx.arg("disaggregation_decode_host_receive_threshold", 1.0))
    if backup == HOST_POOL_BACKUP:
        out.append((
            f"{BACKUP_FLAG} {HOST_POOL_BACKUP} backs retracted requests up in a HiCache host pool whose transfers "
            f"index the KV cache by token{as_decode}",
            f"use {BACKUP_FLAG} cpu_tensor (5D-safe through cpu-copy-5d) or leave it unset",
        ))
    elif threshold is not None and threshold < 1:
        out.append((
            f"{HOST_RECEIVE_FLAG} {threshold:g} makes SGLang receive KV into the {HOST_POOL_BACKUP} retraction "
            f"pool, a HiCache host pool with token-indexed transfers{as_decode}",
            f"leave {HOST_RECEIVE_FLAG} at 1 (its default)",
        ))
    elif backup is not None and backup not in SAFE_BACKUPS:
        out.append((
            f"{BACKUP_FLAG} {backup} is not a retraction backup sglang-kv5d knows to be 5D-safe "
            f"(known: {', '.join(SAFE_BACKUPS)}){as_decode}",
            f"use {BACKUP_FLAG} cpu_tensor, or leave it unset",
        ))
    return out
