"""Start-up bootstrap, run by ``sglang_kv5d.pth`` unless SGLANG_KV5D is unset or off.

Cheap by construction: this module and the package ``__init__`` import only
modules every interpreter has already loaded when ``site`` processes ``.pth``
files (``sys``, ``os``) and the table's SGLang names (``surface_names``, which
imports nothing), so an unrelated program pays for three small module loads
and one ``sys.meta_path`` lookup per import. The finder waits for the
first ``import sglang`` (or ``sglang.*``) and only then reads the gate through
the switch registry (sglang_kv5d.config): a true value activates the overlay
(which imports wrapt and registers post-import hooks on the exact SGLang
submodules); an invalid one prints one warning naming the variable and saying
that the overlay stays off. It never imports torch, multiprocessing or SGLang
itself, and never raises into interpreter start-up or the user's import.
"""

import sys

from sglang_kv5d.surface_names import MODULE_PREFIX, PACKAGE


def _say(text):
    try:
        sys.stderr.write(text + "\n")
    except Exception:  # stderr may be None, closed or any replacement object: the .pth path must never raise
        pass


def _activate_or_warn(where):
    from sglang_kv5d import config

    on, problem = config.gate_value()
    if problem is not None:
        msg = "sglang-kv5d: warning: " + problem.activation_warning()
        if config.wants_5d():
            msg += (f"; {config.LAYOUT}=vectorized_5d is requested, so SGLang's own 5D code runs unpatched "
                    "in this process")
        _say(msg)
        return
    if on:
        from sglang_kv5d.activation import activate

        activate(route="pth")


class _ActivateOnSGLangImport:
    """Meta-path finder that triggers activation on the first SGLang import."""

    def __init__(self):
        self.fired = False

    def find_spec(self, fullname, path=None, target=None):
        if self.fired or not (fullname == PACKAGE or fullname.startswith(MODULE_PREFIX)):
            return None
        self.fired = True
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        try:
            _activate_or_warn(fullname)
        except Exception as exc:  # activation runs patch and SGLang code: never break the user's import
            _say(f"sglang-kv5d: activation at import of {fullname} failed: {exc!r}")
        return None  # let the normal finders import the module

    def find_module(self, fullname, path=None):  # pragma: no cover - legacy protocol
        return None


def run():
    """Called from the .pth line. Must never raise."""
    try:
        if any(isinstance(f, _ActivateOnSGLangImport) for f in sys.meta_path):
            return
        if PACKAGE in sys.modules:
            _activate_or_warn(PACKAGE)
            return
        sys.meta_path.insert(0, _ActivateOnSGLangImport())
    except Exception as exc:  # runs from a .pth line in every interpreter: must never raise
        _say(f"sglang-kv5d: bootstrap skipped: {exc!r}")
