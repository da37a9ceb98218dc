"""CUDA-graph and CUDA-event timings, the leaf every benchmark (and
:mod:`sglang_kv5d.bench.bandwidth`) times with. Needs torch and a GPU (CUDA or ROCm).

Every timing is a median over CUDA-graph replays: the callable is captured once
into a graph holding ``inner`` back-to-back calls, the graph is replayed
``reps`` times between CUDA events, and the per-call time is the median replay
time divided by ``inner``. This removes Python and launch overhead the same way
for every contender, so ratios between them are fair.

    graph_replay_median_us(fn, *, inner, reps, warmup, stream)   us per call
    eager_median_us(fn, *, reps, warmup)                          us per eager call
    adaptive_median_us(fn, est_us)                                graph replay sized from an estimate
"""

from __future__ import annotations

import statistics
from typing import Callable

__all__ = ["graph_replay_median_us", "eager_median_us", "adaptive_median_us"]


def _torch():
    import torch

    return torch


def graph_replay_median_us(
    fn: Callable[[], object],
    *,
    inner: int = 10,
    reps: int = 20,
    warmup: int = 3,
    stream=None,
) -> float:
    """Median microseconds per call of ``fn`` under CUDA-graph replay.

    ``fn`` must be capturable (no host syncs, no allocations that change size).
    Falls back to plain CUDA-event timing of eager calls when capture fails
    (and says so through the returned value being measured eagerly; callers
    that need to know use :func:`eager_median_us` explicitly).
    """
    torch = _torch()
    s = stream or torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=s):
        for _ in range(inner):
            fn()
    torch.cuda.synchronize()
    graph.replay()  # warm the graph
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0 / inner)
    del graph
    return statistics.median(times)


def eager_median_us(fn: Callable[[], object], *, reps: int = 20, warmup: int = 3) -> float:
    """Median microseconds per eager call, timed with CUDA events."""
    torch = _torch()
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0)
    return statistics.median(times)


def adaptive_median_us(fn: Callable[[], object], est_us: float) -> float:
    """:func:`graph_replay_median_us` with as many calls per graph as fit in
    about 3 ms (1 to 20, from the estimate ``est_us``) and fewer replays when a
    replay takes over 20 ms, so that short and long calls cost similar time."""
    inner = int(min(20, max(1, 3000.0 / max(est_us, 1.0))))
    reps = 10 if est_us * inner > 20000 else 20
    return graph_replay_median_us(fn, inner=inner, reps=reps, warmup=2)
