"""Where independent pieces of work run: this process, a local process pool, or a Dask cluster.

Everything that fans work out (a sweep's points, an inference's row shards) is written
against :class:`concurrent.futures.Executor`; :func:`open_executor` picks one:

``cluster=None, workers=1``  this process, one piece at a time (``None`` is returned; the
                              caller runs inline, so caches and debuggers work as usual)
``cluster=None, workers=N``  a ``ProcessPoolExecutor`` of N processes (spawn start method:
                              CUDA cannot survive a fork)
``cluster="local"``           a Dask ``LocalCluster`` of N single-threaded worker processes
``cluster="local-cuda"``      one Dask worker per GPU of this machine: dask-cuda's
                              ``LocalCUDACluster`` if installed (each worker sees its own
                              GPU), else a ``LocalCluster`` of as many single-threaded
                              workers (the work picks its GPU: a shard ``i`` takes GPU ``i``
                              modulo those it sees, see :mod:`spartan_py.scale_out.shard`)
``cluster="tcp://host:8786"`` an existing Dask scheduler

Dask is the optional extra ``dask``; without it, only the first two exist.
"""

from __future__ import annotations

import contextlib
import multiprocessing
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any

from spartan_py.errors import BackendUnavailableError, InputError, OptionalDependencyError

LOCAL_CLUSTERS = ("local", "local-cuda")


def _distributed():
    try:
        # optional dependency (extra dask)
        import distributed
    except ImportError as exc:
        raise OptionalDependencyError(
            "running on a Dask cluster needs the `dask` extra: pip install -e '.[dask]' "
            "(dask and distributed; dask-cuda too for LocalCUDACluster)"
        ) from exc
    return distributed


def gpu_count() -> int:
    """GPUs CuPy sees here (0 without CuPy or a driver)."""
    try:
        # optional dependency (extra gpu)
        import cupy

        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:  # no CuPy, no driver, no device: all mean none to use
        return 0


@dataclass
class Workers:
    """An open executor (``None``: run inline) with what it is, for logs and result files.

    ``renew()`` replaces a process pool that lost a worker (a pool breaks as a whole); Dask
    reschedules a lost worker's tasks by itself.
    """

    executor: Any  # a concurrent.futures.Executor, or None to run in this process
    description: str
    workers: int
    _make_pool: Any = field(default=None, repr=False)
    client: Any = field(default=None, repr=False)  # the distributed.Client, on Dask
    #: Whether every worker runs on this host (and so sees its files): False for a cluster at an address.
    on_this_host: bool = True

    def renew(self) -> None:
        """A fresh process pool in place of a broken one."""
        if self._make_pool is None:
            return
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.executor = self._make_pool()


def lost_worker_errors() -> tuple[type[BaseException], ...]:
    """Errors that mean the worker died (the piece of work should be retried elsewhere)."""
    errors: list[type[BaseException]] = [BrokenProcessPool]
    try:
        # optional dependency (extra dask)
        from distributed import KilledWorker

        # optional dependency (extra dask)
        from distributed.comm.core import CommClosedError

        errors += [KilledWorker, CommClosedError]
    except ImportError:
        pass
    return tuple(errors)


@contextlib.contextmanager
def open_executor(cluster: str | None = None, workers: int = 1, *, connect_timeout_s: float = 30) -> Iterator[Workers]:
    """Open the executor ``cluster``/``workers`` describe (see the module doc); closed on exit.
    ``connect_timeout_s``: how long to wait for a scheduler at an address."""
    if workers < 1:
        raise InputError(f"workers must be >= 1, got {workers}")
    if cluster is None:
        if workers == 1:
            yield Workers(None, "this process", 1)
            return

        def make_pool():
            return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))

        pool = Workers(make_pool(), f"a pool of {workers} local processes", workers, make_pool)
        try:
            yield pool
        finally:
            pool.executor.shutdown(wait=True, cancel_futures=True)
        return
    distributed = _distributed()
    if cluster in LOCAL_CLUSTERS:
        local, description = _local_cluster(distributed, cluster, workers)
        with local, distributed.Client(local) as client:
            yield Workers(client.get_executor(pure=False), description, len(local.workers), client=client)
        return
    if "://" not in cluster:
        raise InputError(
            f"cluster {cluster!r}: expected a scheduler address (tcp://host:8786) or one of {', '.join(LOCAL_CLUSTERS)}"
        )
    try:
        client = distributed.Client(cluster, timeout=f"{connect_timeout_s}s")
    except OSError as exc:  # refused, unreachable, timed out
        raise BackendUnavailableError(f"cannot reach the Dask scheduler at {cluster}: {exc}") from None
    with client:
        count = len(client.scheduler_info().get("workers", {}))
        yield Workers(
            client.get_executor(pure=False),
            f"the Dask cluster at {cluster} ({count} workers)",
            max(count, 1),
            client=client,
            on_this_host=False,
        )


# No per-worker memory limit on local clusters: a task holds its own memory (a network, a
# prepared engine) that Dask cannot spill, and Dask's default (the machine's memory / workers,
# read once at start) would pause or kill a worker doing legitimate work, all the more on a
# VM whose memory grows as it is used.
_LOCAL_MEMORY_LIMIT = 0


def _process_cluster(distributed, workers: int):
    """A Dask ``LocalCluster`` of ``workers`` single-threaded processes, no dashboard."""
    return distributed.LocalCluster(
        n_workers=workers,
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
        memory_limit=_LOCAL_MEMORY_LIMIT,
    )


def _local_cluster(distributed, cluster: str, workers: int):
    if cluster == "local":
        return _process_cluster(distributed, workers), f"a local Dask cluster of {workers} processes"
    gpus = gpu_count()
    if gpus == 0:
        raise InputError("cluster local-cuda needs at least one GPU visible to CuPy")
    try:
        # optional dependency (extra dask)
        from dask_cuda import LocalCUDACluster
    except ImportError:
        return _process_cluster(distributed, gpus), f"a local Dask cluster of {gpus} workers for {gpus} GPUs"
    return (
        LocalCUDACluster(dashboard_address=None, memory_limit=_LOCAL_MEMORY_LIMIT),
        f"a LocalCUDACluster of {gpus} GPUs",
    )


def run_all(workers: Workers, task, jobs: dict, *, retries: int = 3) -> Iterator[tuple[Any, Any, BaseException | None]]:
    """Run ``task(*args)`` for every ``key: args`` of ``jobs`` on ``workers``; yield ``(key,
    result, None)`` as each finishes. A job whose worker was lost is resubmitted, up to
    ``retries`` times, then yielded as ``(key, None, error)``. Exceptions the task itself
    raises propagate: a task should return its failures. A process pool that breaks loses
    everything it held; that is all resubmitted on a new pool (not counted as the jobs' tries).
    """
    lost = lost_worker_errors()
    attempts = dict.fromkeys(jobs, 0)
    futures = {workers.executor.submit(task, *args): key for key, args in jobs.items()}
    while futures:
        done, _ = wait(futures, return_when=FIRST_COMPLETED)
        again, pool_broken = [], False
        for future in done:
            key = futures.pop(future)
            try:
                result = future.result()
            except lost as exc:
                pool_broken |= isinstance(exc, BrokenProcessPool)
                attempts[key] += 1
                if attempts[key] <= retries:
                    again.append(key)
                else:
                    yield key, None, exc
                continue
            yield key, result, None
        if pool_broken:
            again += futures.values()
            futures.clear()
            workers.renew()
        for key in again:
            futures[workers.executor.submit(task, *jobs[key])] = key
