"""sglang-kv5d: AITER SHUFFLE 5D KV cache support overlaid on an existing SGLang.

Importing this package patches nothing and imports neither SGLang nor torch.

    import sglang_kv5d
    sglang_kv5d.activate()      # patch this process; children inherit SGLANG_KV5D=1
    print(sglang_kv5d.status()) # what applied, what is pending and why
    sglang_kv5d.deactivate()    # restore every original object

Where things live: activation/ (engine), surface/ (every SGLang object we
touch), patches/ (one adapter per patch), pools.py / attention/ (5D core),
speculative/ (speculative decoding over a 5D target),
kernels/ (Triton kernels + float64 references), rules/ (launch rules),
cli/ (the ``sglang-kv5d`` command).
"""

# No ``typing`` / ``__future__`` imports here: the .pth bootstrap imports this
# package in every Python process where SGLANG_KV5D is set, and must load
# nothing the interpreter has not loaded already (annotations are strings).
from ._version import __version__

__all__ = ["activate", "deactivate", "status", "__version__"]


def activate(patches: "Optional[Sequence[str]]" = None, strict: "Optional[bool]" = None) -> "Status":
    """Apply the overlay in this process (idempotent) and return its :class:`Status`.

    Patches whose SGLang modules are not imported yet apply when they are.
    Also sets ``SGLANG_KV5D=1`` (and the given selection / strictness) in
    ``os.environ`` so child processes activate too, and warns, naming them,
    about SGLang modules that were imported earlier with state it cannot fix.
    """
    from .activation import activate as _activate

    return _activate(patches, strict, route="api")


def deactivate() -> "Status":
    """Restore every patched object (from-import copies included). Idempotent."""
    from .activation import deactivate as _deactivate

    return _deactivate()


def status() -> "Status":
    """This process's overlay status: each patch's state and a one-line reason."""
    from .activation import status as _status

    return _status()
