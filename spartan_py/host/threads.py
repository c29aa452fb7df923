"""Run a compiled kernel over a range of items, one contiguous part per host thread; map a
function over a long sequence of independent items (a network's layers) on threads.

The host's kernels are compiled serially (``numba.njit(nogil=True)``) and spread over the
cores here, on threads, rather than with Numba's ``parallel=True``: compiling a ``prange``
loop costs two to three times as much as compiling the same loop serially (the cpu engine's
three kernels: 10.8 s against 4.9 s on the 2-core CI machine), and that compilation is on a
fresh machine's first run. Items must be independent: each part writes only its own outputs.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

import numba
import numpy as np

T = TypeVar("T")
R = TypeVar("R")

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_pool_pid = 0  # the process that made the pool: a forked child has none of its threads


def host_threads() -> int:
    """Threads a kernel's range is split over: Numba's thread count (``NUMBA_NUM_THREADS``,
    by default the cores this process may run on)."""
    return max(1, int(numba.config.NUMBA_NUM_THREADS))  # type: ignore[attr-defined]


def _shared_pool() -> ThreadPoolExecutor:
    global _pool, _pool_pid
    with _lock:
        if _pool is None or _pool_pid != os.getpid():
            _pool = ThreadPoolExecutor(max_workers=host_threads(), thread_name_prefix="spartan-kernel")
            _pool_pid = os.getpid()
        return _pool


def split_range(count: int, parts: int) -> list[tuple[int, int]]:
    """``range(count)`` as at most ``parts`` contiguous ``(start, stop)`` pieces of equal size
    (the first ones one longer), none empty."""
    parts = max(1, min(parts, count))
    size, extra = divmod(count, parts)
    bounds, start = [], 0
    for part in range(parts):
        stop = start + size + (part < extra)
        bounds.append((start, stop))
        start = stop
    return bounds if count > 0 else []


def run_split(kernel: Callable[..., Any], count: int, *args: Any, parts: int | None = None) -> None:
    """Call ``kernel(start, stop, *args)`` for contiguous parts of ``range(count)``, the parts at
    once on the shared threads (the calling thread runs the first); returns when all are done.

    ``kernel`` must release the GIL (``nogil=True``) for the parts to run at once. An exception
    in any part is raised here, after every part has finished.
    """
    bounds = split_range(count, parts or host_threads())
    if not bounds:
        return
    futures = [_shared_pool().submit(kernel, start, stop, *args) for start, stop in bounds[1:]]
    try:
        kernel(*bounds[0], *args)
    finally:
        for future in futures:
            future.exception()  # wait for every part before anything is raised or returned
    for future in futures:
        future.result()


def csr_by_parts(kernel: Callable[..., Any], count: int, rows: int, *args: Any, with_data: bool = True) -> tuple:
    """``(indptr, indices[, data])`` of a ``rows``-row CSR matrix that ``kernel`` writes in two
    passes over the parts of ``range(count)`` (:func:`run_split`): called as ``kernel(start,
    stop, *args, indptr, indices[, data])``, first with ``indices`` empty, to write each row's
    count of entries at ``indptr[row + 1]``, then, after the running sum, to list them
    (int32 indices, float32 data)."""
    indptr = np.zeros(rows + 1, dtype=np.int64)
    listed = (np.empty(0, np.int32), np.empty(0, np.float32))[: 1 + with_data]
    run_split(kernel, count, *args, indptr, *listed)
    np.cumsum(indptr, out=indptr)
    listed = (np.empty(indptr[-1], np.int32), np.empty(indptr[-1], np.float32))[: 1 + with_data]
    if indptr[-1]:
        run_split(kernel, count, *args, indptr, *listed)
    return (indptr, *listed)


def ordered_map(function: Callable[[T], R], items: Iterable[T], *, workers: int | None = None) -> Iterator[R]:
    """``function`` of each of ``items`` on ``workers`` threads (default :func:`host_threads`),
    the results in the items' order. Items are read lazily, at most twice ``workers`` ahead of
    the result last taken, so that a network built layer by layer is never held whole. A pool
    of its own, not the kernels' shared one: a function may itself call :func:`run_split`.

    The work releases the GIL where it matters (Numba ``nogil`` kernels, NumPy sorts);
    ``function`` must not depend on the order in which items run.
    """
    workers = max(1, workers or host_threads())
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="spartan-map") as pool:
        pending: deque[Future[R]] = deque()
        for item in items:
            pending.append(pool.submit(function, item))
            if len(pending) >= 2 * workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
