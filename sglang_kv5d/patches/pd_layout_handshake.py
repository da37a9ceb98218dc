"""pd-layout-handshake: PD roles report their KV byte layout; the decode side refuses a mismatch.

From 0.5.23 SGLang carries one string per prefill rank through the bootstrap
server, ``kv_layout`` (``get_pd_kv_layout(pool)`` at ``_init_kv_manager`` of
both roles, copied into ``kv_args.kv_layout`` and ``CommonKVManager.kv_layout``;
the prefill's ``register_to_bootstrap`` sends it; the decode's
``try_ensure_parallel_info`` fetches it as ``PrefillServerInfo.kv_layout``).
It is None for every MHA pool, so the decode side's check (``info.kv_layout !=
self.kv_layout`` when both are set) never runs for them, and
``kv_layout_signature`` hashes None on both sides.

Two bindings:

* ``get_pd_kv_layout`` (REPLACE; copies in prefill.py and decode.py rebound):
  upstream's answer when it has one (DeepSeekV4), else the overlay's
  descriptor of the pool (sglang_kv5d.disagg.layout): layout, X, torch dtype,
  page, head dims and heads per rank of every attention sub-pool. The checksum
  signature then differs for 5D vs NHD. Reported whether or not this node asks
  for 5D: an NHD node running the overlay must say ``nhd`` for the pair to be
  refused on either side (only the refusal of a silent peer depends on 5D).
* ``CommonKVManager.try_ensure_parallel_info`` (WRAP), the decode side's one
  look at the prefill's report. When this side reports an overlay descriptor,
  the overlay judges the pair (``layout.compare``) instead of SGLang's string
  equality, which would also refuse the head-sliced pairings SGLang supports
  (different attention TP: heads per rank differ). SGLang's method runs with
  this manager's ``kv_layout`` cleared (under a per-manager lock, restored
  after), then the report it cached is judged; a refusal removes it from
  ``prefill_info_table`` and raises :class:`PdLayoutMismatchError` (a
  RuntimeError, like SGLang's own mismatch errors) before any transfer. A
  prefill that reports no layout is refused when this node is 5D and strict
  (``SGLANG_KV5D_STRICT``), else warned about once per address.

What each side sees (from 0.5.23): the decode side sees the prefill's whole
registration (page size, kv_cache_dtype, kv_layout, attn_tp_size) and can
detect every mismatch here. The prefill side sees only the decode's
registration message (backend-specific frames: pointers, dst_tp_rank,
dst_attn_tp_size, item lengths), with no layout, dtype or page size: it can
tell a TP mismatch and an item-length mismatch, never 5D vs NHD or e4m3fn vs
e4m3fnuz (same byte counts). The decode refusal comes first (the decode
registers with the prefill only after this check), so no bytes move.

Before 0.5.23 (0.5.16 .. 0.5.22) SGLang has no ``get_pd_kv_layout`` and no
``kv_layout`` in the bootstrap report: nothing can carry the layout, and the
engine skips this patch there as "not applicable" (the surface row's
``since`` says where it starts).
"""

from __future__ import annotations

import inspect
import logging
import threading
import weakref

from .. import config
from ..disagg import layout as _layout
from ..versions import tested_from
from . import Binding, Patch

logger = logging.getLogger("sglang_kv5d")

HEAD_SLICE_PATCH = "pd-head-slice-5d"  # another patch's name: the 5D head-sliced transfer

_locks: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_locks_guard = threading.Lock()
_warned = set()


class PdLayoutMismatchError(RuntimeError):
    """The PD peers' KV byte layouts differ (or the peer's is unknown under strict mode)."""


def head_slice_5d_installed() -> bool:
    """Is pd-head-slice-5d (the overlay's 5D head-sliced PD transfer) applied in this process?"""
    from ..activation import patch_state
    from ..state import APPLIED

    return patch_state(HEAD_SLICE_PATCH) == APPLIED


def _strict() -> bool:
    from ..activation import strict_mode

    return strict_mode()


def judge(local: str, peer, *, local_tp=None, peer_tp=None, where: str = "") -> None:
    """Raise :class:`PdLayoutMismatchError` when a decode node reporting ``local``
    must not take pages from a prefill reporting ``peer``; warn when it may but
    nothing guarantees the layout. Used by the handshake wrapper; public for tests."""
    if peer is None:
        msg = _layout.missing_peer_message(local) + (f" (prefill at {where})" if where else "")
        if _layout.parse(local).is_5d and _strict():
            raise PdLayoutMismatchError(msg)
        if (local, where) not in _warned:
            _warned.add((local, where))
            logger.warning("%s (continuing: not strict, or this node is not 5D)", msg)
        return
    refusal = _layout.compare(local, peer, local_tp=local_tp, peer_tp=peer_tp,
                              head_slice_5d=head_slice_5d_installed())
    if refusal is not None:
        raise PdLayoutMismatchError(refusal + (f" (prefill at {where})" if where else ""))


def _make_report(original):
    def get_pd_kv_layout(token_to_kv_pool):
        upstream = original(token_to_kv_pool)
        if upstream is not None:
            return upstream
        return _layout.descriptor_for(token_to_kv_pool)

    get_pd_kv_layout.__doc__ = original.__doc__
    return get_pd_kv_layout


def _lock_for(mgr) -> threading.Lock:
    with _locks_guard:
        lock = _locks.get(mgr)
        if lock is None:
            lock = _locks[mgr] = threading.Lock()
        return lock


def _make_check(original):
    sig = inspect.signature(original)

    def try_ensure_parallel_info(wrapped, mgr, args, kwargs):
        local = getattr(mgr, "kv_layout", None)
        table = getattr(mgr, "prefill_info_table", None)
        if not _layout.is_overlay_descriptor(local) or not isinstance(table, dict):
            return wrapped(*args, **kwargs)
        addr = sig.bind(mgr, *args, **kwargs).arguments["bootstrap_addr"]
        if addr in table:
            return wrapped(*args, **kwargs)  # judged when it was fetched
        with _lock_for(mgr):
            mgr.kv_layout = None  # SGLang's string equality is replaced by the judgement below
            try:
                ready = wrapped(*args, **kwargs)
            finally:
                mgr.kv_layout = local
            info = table.get(addr) if ready else None
            if info is None:
                return ready
            try:
                judge(local, getattr(info, "kv_layout", None), local_tp=getattr(mgr, "attn_tp_size", None),
                      peer_tp=getattr(info, "attn_tp_size", None), where=str(addr))
            except PdLayoutMismatchError:
                table.pop(addr, None)
                raise
        return ready

    return try_ensure_parallel_info


PATCH = Patch(
    name="pd-layout-handshake",
    summary="PD roles report their KV byte layout in the bootstrap handshake; the decode side refuses a mismatch.",
    bindings=(
        Binding("disagg_utils.get_pd_kv_layout", _make_report),
        Binding("disagg_conn.CommonKVManager.try_ensure_parallel_info", _make_check),
    ),
    problem=(
        "PD disaggregation reports no KV layout for MHA pools (`get_pd_kv_layout` is None), so a 5D prefill "
        "pairs with an NHD decode (or fp8 e4m3fnuz with e4m3fn) and the decode reads the pages in the wrong "
        "byte layout; the KV checksum signature is equal too"
    ),
    why=(
        "From 0.5.23 SGLang's bootstrap handshake carries kv_layout from get_pd_kv_layout(pool), which answers only "
        "for DeepSeekV4 pools; the decode side (CommonKVManager.try_ensure_parallel_info, reading the prefill's "
        "PrefillServerInfo) compares it only when both sides report one, by string equality, and kv_layout_signature "
        "hashes it with the page size and SGLang's dtype string, which is fp8_e4m3 on MI300 (float8_e4m3fnuz) and "
        "on MI355 (float8_e4m3fn) alike. A SHUFFLE 5D page and an NHD page of the same geometry have the same "
        "bytes count, so the transfer moves 5D bytes that the decode node reads as NHD, and the checksum agrees. "
        "The patch makes get_pd_kv_layout report, for MHA / SWA / hybrid pools, a descriptor of every attention "
        "sub-pool's physical layout, X, torch dtype, page size, head dims and heads per rank (upstream's own "
        "answers kept), so the signatures differ; and the decode side's try_ensure_parallel_info judges the "
        "prefill's descriptor: any layout, dtype, page or head-dim difference is refused with both values and "
        "the fix, an attention-TP mismatch over 5D is refused unless pd-head-slice-5d is applied, and a prefill "
        f"reporting nothing is refused when this node is 5D and {config.STRICT} is on (warned otherwise). "
        "The refusal removes the prefill's cached report, so no transfer starts."
    ),
    upstream="no MHA layout in the handshake in any tested release; no handshake field at all before 0.5.23",
    removal="when SGLang reports and compares the physical KV layout and torch dtype of MHA pools in PD",
    sglang=tested_from("0.5.23") + " (the handshake field kv_layout does not exist before)",
    core=("sglang_kv5d.disagg.layout",),
)
