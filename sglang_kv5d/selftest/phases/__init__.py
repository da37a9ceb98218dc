"""The selftest's phases, run in this order on the same requests.

A phase is a module with ``NAME`` (the report's phase column) and
``run(run: workload.Run) -> None``: it drives the patched SGLang for every pool
case of ``run``, holds each attention output against the float64 reference
(``run.result(NAME, case.name).compare(...)``) and advances the requests
(``Request.done``). A new phase is a new module here and one line below.
"""

from __future__ import annotations

from . import decode, extend, verify

PHASES = (
    extend,  # chunked prefill, shared prefix reused
    decode,  # decode steps for every request
    verify,  # speculative target verify of draft tokens (causal, and block-parallel), not accepted
)
