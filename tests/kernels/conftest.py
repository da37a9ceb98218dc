"""Kernel tests run the Triton kernels under the CPU interpreter.

TRITON_INTERPRET must be set before a kernel module is imported (``triton.jit``
checks it when decorating), so it is set here, at collection of this folder.
Test modules that import kernels must do so only after this file is loaded
(i.e. from inside tests/kernels, or lazily).
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")
