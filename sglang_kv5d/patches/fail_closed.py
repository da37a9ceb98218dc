"""fail-closed-pool / fail-closed-backend (internal): refuse to build 5D state without the needed patches.

This guard runs before ``MHATokenToKVPool.__init__`` and
``AiterAttnBackend.__init__``: when ``SGLANG_AITER_KV_CACHE_LAYOUT`` asks for
``vectorized_5d`` and a 5D-required patch is failed, skipped or disabled, it
raises :class:`sglang_kv5d.activation.Kv5dNotReadyError` naming the patch, the
reason and the fix (a warning instead with ``SGLANG_KV5D_STRICT=0``).
The check is one environment lookup when 5D is not requested. Why: the
Patches' ``why`` below, the one place for the reason (patches/*.toml are
generated from it).

After the constructor returns (5D requested), the same guards check the
overlay's kernels before any traffic and before CUDA-graph capture
(sglang_kv5d.kernel_check): a new MHATokenToKVPool (not a subclass, whose own
constructor is not done yet) runs the fused FP8 write for its shapes, the
AITER backend runs it for the model's dtype on every leaf pool and decides
the 5D attention path; a kernel that cannot compile or run is logged with the
fallback taken, and when no attention path works the backend refuses to start
(Kv5dNotReadyError, under the same strict policy). An unexpected error of the
check itself is logged and does not stop the server. Under 5D the backend
guard also refuses, before the constructor, a composite pool the overlay has
not checked (sglang_kv5d.composites), and re-checks SGLang's own 5D flags
where pool-layout-detection stood down (sglang_kv5d.upstream).
"""

from __future__ import annotations

import logging

from .. import config
from ..versions import TESTED
from . import Binding, Patch

logger = logging.getLogger("sglang_kv5d")


def _own_init(instance, patch_name: str) -> bool:
    """Is the guarded constructor the instance's own (no subclass __init__ around it)?"""
    from ..activation import patch_marker

    for cls in type(instance).__mro__:
        if "__init__" in cls.__dict__:
            return patch_marker(cls.__dict__["__init__"]) == patch_name
    return False


def _check_pool(instance, args, kwargs) -> None:
    from .startup_checks import check_pool

    if _own_init(instance, "fail-closed-pool"):
        check_pool(instance)


def _check_backend(instance, args, kwargs) -> None:
    from .startup_checks import check_backend

    model_runner = args[0] if args else kwargs.get("model_runner")
    if model_runner is not None:
        _check_upstream_layout(instance, model_runner)
        _check_speculative(instance, model_runner)  # first: a refused configuration compiles nothing
        check_backend(instance, model_runner)


def _refuse_unchecked_pools(instance, args, kwargs) -> None:
    """Before the backend is built: no composite pool the overlay has not checked (sglang_kv5d.composites)."""
    from ..activation import fail_closed
    from ..composites import unchecked_5d_composite

    model_runner = args[0] if args else kwargs.get("model_runner")
    problem = unchecked_5d_composite(getattr(model_runner, "token_to_kv_pool", None))
    if problem:
        fail_closed(problem)


def _check_upstream_layout(backend, model_runner) -> None:
    """pool-layout-detection stood down (provided upstream): SGLang's own 5D flags must match the buffers."""
    from ..activation import fail_closed, status
    from ..state import UPSTREAM
    from ..upstream import layout_disagreement

    try:
        if status().patch("pool-layout-detection").state != UPSTREAM:
            return
    except KeyError:
        return
    problem = layout_disagreement(backend, getattr(model_runner, "token_to_kv_pool", None))
    if problem:
        fail_closed(f"sglang-kv5d: pool-layout-detection stood down because this SGLang detects 5D itself "
                    f"(sglang_kv5d.upstream), but {problem}. Fix: use the nhd layout and report it: the "
                    "overlay's probe took this SGLang's detection for complete")


def _check_speculative(backend, model_runner) -> None:
    """Speculative decoding over a 5D target, or a 5D draft pool: inside the support matrix
    (sglang_kv5d.speculative.support, judged by readiness from the runner's own algorithm
    and server arguments), with the patches it needs applied."""
    from ..activation import fail_closed, status
    from ..pools import is_vectorized_5d
    from ..rules.guard import resolved_view
    from ..speculative.readiness import runner_algorithm, speculative_problem
    from ..versions import installed_sglang_version

    pool = getattr(model_runner, "token_to_kv_pool", None)
    if pool is None or runner_algorithm(model_runner) is None:
        return
    st = status()

    def state(name):
        try:
            return st.patch(name).state
        except KeyError:  # Status.patch: no patch of that name in this process
            return "not registered"

    # The runner's own server arguments, resolved as SGLang resolved them (its
    # resolving view; the record itself where there is none): the matrix reads
    # topk, draft count and options from them, the algorithm from the runner.
    server_args = getattr(model_runner, "server_args", None)
    spec_args = None if server_args is None else resolved_view(server_args)
    problem = speculative_problem(model_runner, backend, pool_is_5d=is_vectorized_5d(pool), patch_state=state,
                                  spec_args=spec_args, sglang_version=installed_sglang_version())
    if problem:
        fail_closed(f"sglang-kv5d: {problem.message}. Fix: {problem.fix} (`sglang-kv5d check --explain KV5D005` "
                    "shows the support matrix)")


def _guard(where: str, after, before=None):
    def make(original):
        def wrapper(wrapped, instance, args, kwargs):
            if not config.wants_5d():
                return wrapped(*args, **kwargs)
            from ..activation import Kv5dNotReadyError, enforce_5d_ready

            enforce_5d_ready(f"{where} ({type(instance).__name__})")
            if before is not None:
                before(instance, args, kwargs)
            result = wrapped(*args, **kwargs)
            try:
                after(instance, args, kwargs)
            except Kv5dNotReadyError:
                raise
            except Exception as exc:  # the check is advice: never the reason a server does not start
                logger.warning("sglang-kv5d: the kernel check after building %s could not run (%s: %s); "
                               "kernel failures will show at first use (and fall back there)",
                               where, type(exc).__name__, exc)
            return result

        return wrapper

    return make


POOL_GUARD = Patch(
    name="fail-closed-pool",
    summary="Refuse to build a 5D KV pool when a patch 5D needs is not applied.",
    bindings=(
        Binding("memory_pool.MHATokenToKVPool.__init__", _guard("a KV pool", _check_pool), check_signature=False),
    ),
    internal=True,
    why=(
        "SGLang logs and swallows plugin exceptions, so a patch that cannot apply would leave a server "
        f"running with silently wrong 5D attention. When {config.LAYOUT}=vectorized_5d and a "
        "5D-required patch is failed, skipped or disabled, building an MHA pool raises an error naming the "
        f"patch, the reason and the fix (a warning with {config.STRICT}=0). After the constructor, a 5D "
        "pool's fused FP8 write is compiled and run on scratch tensors for its shapes "
        "(sglang_kv5d.kernel_check), so a kernel that cannot compile is logged with its fallback at "
        "startup, not at the first request."
    ),
    upstream="n/a (overlay policy)",
    removal="never, while the overlay patches correctness",
    sglang=f"{TESTED} (also installed on refused versions, to refuse)",
)

BACKEND_GUARD = Patch(
    name="fail-closed-backend",
    summary="Refuse to build the AITER attention backend for 5D when a patch 5D needs is not applied.",
    bindings=(
        Binding("aiter_backend.init", _guard("the AITER attention backend", _check_backend, _refuse_unchecked_pools),
                check_signature=False),
    ),
    internal=True,
    why=(
        "The same guard at AiterAttnBackend.__init__, by which time every 5D patch's module is imported and "
        "its state is final. After the constructor it checks the FP8 write in the model's dtype and, where "
        "they are the main 5D attention path, the portable attention kernels; with neither aiter nor a "
        "working portable kernel the backend refuses to start (Kv5dNotReadyError). Before the constructor it "
        "refuses a pool tree holding 5D buffers behind a composite pool class the overlay has not checked "
        "(anything but HybridLinearKVPool and SWAKVPool, subclasses such as QSATokenToKVPool included), "
        "naming the class; where pool-layout-detection stood down (provided upstream) it re-checks the "
        "backend's own 5D flags against the physical buffers after the constructor."
    ),
    reads=("memory_pool.HybridLinearKVPool", "swa_memory_pool.SWAKVPool"),
    upstream="n/a (overlay policy)",
    removal="never, while the overlay patches correctness",
    sglang=f"{TESTED} (also installed on refused versions, to refuse)",
)
