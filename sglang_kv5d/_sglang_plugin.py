"""SGLang plugin entry point (group ``sglang.srt.plugins``, name ``kv5d``).

SGLang's ``load_plugins()`` calls :func:`register` in the processes that load
plugins. It does nothing unless ``SGLANG_KV5D=1``, and never raises: SGLang
would only log the exception, so failures are recorded in the status and
enforced by the fail-closed guard instead.
"""

from __future__ import annotations

import logging


def register() -> None:
    from . import config

    if not config.gate_on():
        return
    try:
        from .activation import activate

        activate(route="plugin")
    except Exception:  # pragma: no cover - SGLang's loader would swallow it: log any error with its traceback;
        # the fail-closed guard refuses a 5D pool later
        logging.getLogger("sglang_kv5d").exception("sglang-kv5d: activation through the SGLang plugin failed")
