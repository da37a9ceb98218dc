"""The overlay's exception types, a leaf every layer may raise.

:class:`Kv5dNotReadyError` is raised by the engine's fail-closed guard
(sglang_kv5d.activation.guard) and by the 5D attention path when no kernel
can serve a call (sglang_kv5d.attention.routing); both import it from here,
and ``sglang_kv5d.activation`` re-exports it.
"""


class Kv5dError(RuntimeError):
    """Base class of the overlay's errors."""


class Kv5dNotReadyError(Kv5dError):
    """5D was requested but a patch it needs is not applied (fail closed)."""
