"""Importing SGLang without its import-time chatter reaching our output.

SGLang prints while its modules are imported (platform UserWarnings, "aiter is
AMD specific kernel library...", quantization notices). That must not reach
our stdout, which may carry JSON, nor read as a verdict on the operator's
arguments: :func:`quiet_sglang_imports` drops Python warnings and collects
what SGLang prints, and :func:`import_noise_note` explains it in one note.
"""

from __future__ import annotations

import contextlib
import io
import sys
import warnings
from typing import List, Optional, Sequence


@contextlib.contextmanager
def quiet_sglang_imports(sink: Optional[List[str]] = None):
    """Python warnings are dropped; what is printed (to stdout or stderr) is
    collected in ``sink``, one entry per line. Lines of our own bootstrap
    (``sglang-kv5d...``) go to stderr as they are."""
    buf = io.StringIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            try:
                yield
            finally:
                for ln in buf.getvalue().splitlines():
                    if ln.startswith("sglang-kv5d"):
                        sys.stderr.write(ln + "\n")
                    elif ln.strip() and sink is not None:
                        sink.append(ln.rstrip())


def import_noise_note(lines: Sequence[str]) -> Optional[str]:
    """One note explaining what SGLang printed while being imported, or None."""
    if not lines:
        return None
    distinct = list(dict.fromkeys(lines))
    shown = "; ".join(repr(ln[:160]) for ln in distinct[:3]) + (f"; and {len(distinct) - 3} more" if len(distinct) > 3 else "")
    return (f"SGLang printed {len(lines)} line(s) while its modules were imported for this check; these are "
            f"SGLang's import-time notices about optional kernels and libraries on this machine (for example "
            f"aiter off ROCm), not sglang-kv5d findings: {shown}")
