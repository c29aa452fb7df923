"""Timing of short pieces of work, after Triton's ``do_bench``: warm-up, then the median and
percentiles of many repeats. On the GPU an L2 flush precedes every repeat and CUDA events
bracket the work alone; on the CPU ``time.perf_counter`` brackets it.

Small differences between variants of the same work (a monitor's extra microsecond on a
30-microsecond kernel) are measured with :func:`time_interleaved` and
:func:`paired_difference`: the variants take turns, round after round, so that clock and
thermal drift hit them alike, and the difference is taken within each round."""

from __future__ import annotations

import functools
import time

import numpy as np

from spartan_py.errors import InputError
from spartan_py.resources import kernel_source


def _stats(values_us: list[float], repeats: int) -> dict:
    values = np.array(values_us)
    return {
        "median_us": float(np.median(values)),
        "p10_us": float(np.percentile(values, 10)),
        "p90_us": float(np.percentile(values, 90)),
        "repeats": repeats,
    }


def time_cpu(work, *, repeats: int = 5, warmup: int = 1) -> dict:
    """{'median_us', 'p10_us', 'p90_us', 'repeats'} of ``work()`` on the host clock."""
    for _ in range(warmup):
        work()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        times.append((time.perf_counter() - start) * 1e6)
    return _stats(times, repeats)


@functools.cache
def _hold_kernel(device_id: int):
    """kernels/hold_stream.cu compiled once per device."""
    # optional dependency (extra gpu)
    import cupy

    return cupy.RawKernel(kernel_source("hold_stream.cu"), "hold_stream")


def hold_stream(seconds: float = 0.005, stream=None) -> None:
    """Keep ``stream`` (CuPy; default: the current one) busy for ``seconds`` with a one-thread
    kernel, so that the host queues the launches that follow before the GPU reaches them.

    Events recorded between eager launches then time the GPU's work alone: without the hold,
    a GPU that has caught up waits for the host to issue each launch, and the interval after
    the first event holds that wait (on the proxy's first ``gpu-merged`` launch, 261 us by
    events against 99 us of kernel).
    """
    if seconds <= 0:
        raise InputError(f"hold_stream needs a positive time in seconds, got {seconds}")
    # optional dependency (extra gpu)
    import cupy

    if stream is None:
        stream = cupy.cuda.get_current_stream()
    with stream:
        _hold_kernel(cupy.cuda.Device().id)((1,), (1,), (np.uint64(round(seconds * 1e9)),))


FLUSH_BYTES = 256 << 20
"""Scratch rewritten before a timed call so that no operand stays in L2 (H100 and H200: 50 MiB)."""


class GpuTimer:
    """Times callables on the current stream; ``flush_bytes`` of scratch are rewritten
    before each repeat so that no operand stays in L2 (H100 L2: 50 MiB)."""

    def __init__(self, flush_bytes: int = FLUSH_BYTES, *, min_warmup_ms: float = 0.0):
        # optional dependency (extra gpu)
        import cupy

        self.cupy = cupy
        self.scratch = cupy.empty(flush_bytes // 4, dtype=cupy.int32)
        self.min_warmup_ms = min_warmup_ms

    def __call__(self, work, *, repeats: int = 20, warmup: int = 3, flush: bool = True) -> dict:
        """{'median_us', 'p10_us', 'p90_us', 'repeats'} of ``work()``. Warm-up runs ``warmup``
        times and, with ``min_warmup_ms``, goes on until that much time has passed, so that
        a GPU that idled (while the host prepared the next case) is back at full clock."""
        cupy = self.cupy
        started = time.perf_counter()
        for _ in range(warmup):
            work()
        while (time.perf_counter() - started) * 1e3 < self.min_warmup_ms:
            work()
            cupy.cuda.get_current_stream().synchronize()
        times = []
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        for _ in range(repeats):
            if flush:
                self.scratch.fill(0)
            start.record()
            work()
            stop.record()
            stop.synchronize()
            times.append(cupy.cuda.get_elapsed_time(start, stop) * 1e3)
        return _stats(times, repeats)


def turn_order(names: list[str], rounds: int) -> list[tuple[int, str]]:
    """(round, name) in the order cases take turns: every name once a round, the order reversed
    every other round, so that a slow stretch does not always land on the same case."""
    return [(r, name) for r in range(rounds) for name in (names if r % 2 == 0 else names[::-1])]


def time_interleaved(
    cases: dict, *, rounds: int = 20, calls: int = 8, warmup: int = 2, flush_bytes: int = 0
) -> dict[str, list[float]]:
    """Per-call microseconds of each GPU case, one value per round: ``{name: [us, ...]}``.

    ``cases`` maps a name to ``work(i)``, which queues its ``i``-th call on the current
    stream (cycle through buffers larger than L2 in ``i`` so that no call finds its operands
    there). Each round times ``calls`` back-to-back calls of every case between two CUDA
    events, the cases in turn, their order reversed every other round. Work that waits for
    the host (a software monitor) is timed with its waits, as a run would see it.
    ``flush_bytes`` > 0 rewrites that much scratch memory before each timed batch (outside
    the events), so that no case finds the previous one's operands in L2.
    """
    # optional dependency (extra gpu)
    import cupy

    scratch = cupy.empty(flush_bytes // 4, dtype=cupy.int32) if flush_bytes > 0 else None

    def once(work) -> float:
        if scratch is not None:
            scratch.fill(0)
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        for i in range(calls):
            work(i)
        stop.record()
        stop.synchronize()
        return cupy.cuda.get_elapsed_time(start, stop) * 1e3 / calls

    names = list(cases)
    for name in names:
        for _ in range(warmup):
            once(cases[name])
    times: dict[str, list[float]] = {name: [] for name in names}
    for _, name in turn_order(names, rounds):
        times[name].append(once(cases[name]))
    return times


def difference_by_turns_us(
    work, baseline, *, rounds: int = 10, warmup_ms: float = 0.0, flush_bytes: int = FLUSH_BYTES
) -> float:
    """Median over ``rounds`` of ``work()``'s time minus ``baseline()``'s, the two timed by turns
    (:func:`time_interleaved`, one call each a round, L2 flushed before each): a stretch of slow
    clocks or a host stall lands in both of a round's times, where two medians taken one after
    the other would charge it to one. Warm-up runs ``work`` until ``warmup_ms`` have passed."""
    # optional dependency (extra gpu)
    import cupy

    started = time.perf_counter()
    while (time.perf_counter() - started) * 1e3 < warmup_ms:
        work()
        cupy.cuda.get_current_stream().synchronize()
    times = time_interleaved(
        {"work": lambda i: work(), "baseline": lambda i: baseline()}, rounds=rounds, calls=1, flush_bytes=flush_bytes
    )
    return paired_difference(times["work"], times["baseline"])["median"]


def time_interleaved_cpu(cases: dict, *, rounds: int = 5, calls: int = 1, warmup: int = 1) -> dict[str, list[float]]:
    """:func:`time_interleaved` on the host clock (NumPy work): per-call microseconds of each
    case, one value per round, the cases in turn and their order reversed every other round."""
    names = list(cases)
    for name in names:
        for _ in range(warmup):
            cases[name](0)
    times: dict[str, list[float]] = {name: [] for name in names}
    for _, name in turn_order(names, rounds):
        start = time.perf_counter()
        for i in range(calls):
            cases[name](i)
        times[name].append((time.perf_counter() - start) * 1e6 / calls)
    return times


def difference_by_turns_cpu_us(work, baseline, *, rounds: int = 5) -> float:
    """:func:`difference_by_turns_us` on the host clock (NumPy work): the median of per-round differences."""
    times = time_interleaved_cpu({"work": lambda i: work(), "baseline": lambda i: baseline()}, rounds=rounds)
    return paired_difference(times["work"], times["baseline"])["median"]


def paired_difference(values: list[float], baseline: list[float]) -> dict:
    """{'median', 'p10', 'p90'} of ``values[i] - baseline[i]`` (same units): the difference
    round by round, so that drift common to both cancels."""
    diff = np.asarray(values, dtype=float) - np.asarray(baseline, dtype=float)
    return {
        "median": float(np.median(diff)),
        "p10": float(np.percentile(diff, 10)),
        "p90": float(np.percentile(diff, 90)),
    }


def copy_bandwidth(nbytes: int = 2**28, repeats: int = 10) -> float:
    """Measured device-to-device copy rate of the current GPU, read + write bytes per second:
    ``repeats`` back-to-back copies of ``nbytes`` between CUDA events, after three warm-ups."""
    # optional dependency (extra gpu)
    import cupy

    source = cupy.empty(nbytes, dtype=cupy.uint8)
    target = cupy.empty_like(source)
    for _ in range(3):
        target[...] = source
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    start.record()
    for _ in range(repeats):
        target[...] = source
    stop.record()
    stop.synchronize()
    return 2 * nbytes * repeats / (cupy.cuda.get_elapsed_time(start, stop) / 1e3)
