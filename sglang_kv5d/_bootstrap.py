"""Env-gated start-up bootstrap, run by ``sglang_kv5d.pth`` when SGLANG_KV5D=1.

Standard library only, and cheap: it installs a tiny ``sys.meta_path`` finder
that waits for the first ``import sglang`` (or ``sglang.*``) and only then
activates the overlay (which imports wrapt and registers post-import hooks on
the exact SGLang submodules). Processes that never import SGLang pay for one
finder lookup per import and nothing else. It never imports torch,
multiprocessing or SGLang, and never raises into interpreter start-up.
"""

from __future__ import annotations

import sys


class _ActivateOnSGLangImport:
    """Meta-path finder that triggers activation on the first SGLang import."""

    def __init__(self) -> None:
        self.fired = False

    def find_spec(self, fullname, path=None, target=None):
        if self.fired or not (fullname == "sglang" or fullname.startswith("sglang.")):
            return None
        self.fired = True
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        try:
            from sglang_kv5d.activation import activate

            activate(route="pth")
        except Exception as exc:  # never break the user's import
            try:
                sys.stderr.write(f"sglang-kv5d: activation at import of {fullname} failed: {exc!r}\n")
            except Exception:
                pass
        return None  # let the normal finders import the module

    def find_module(self, fullname, path=None):  # pragma: no cover - legacy protocol
        return None


def run() -> None:
    """Called from the .pth line. Must never raise."""
    try:
        from sglang_kv5d import config

        if not config.gate_on():
            return
        if any(isinstance(f, _ActivateOnSGLangImport) for f in sys.meta_path):
            return
        if "sglang" in sys.modules:
            from sglang_kv5d.activation import activate

            activate(route="pth")
            return
        sys.meta_path.insert(0, _ActivateOnSGLangImport())
    except Exception as exc:
        try:
            sys.stderr.write(f"sglang-kv5d: bootstrap skipped: {exc!r}\n")
        except Exception:
            pass
