"""Graph Challenge inference with its input rows split across workers (processes, GPUs, or a
Dask cluster), merged exactly: the result equals one run over all rows.

Rows are independent through every layer, so each shard (a contiguous block of rows) runs
the whole network on its own; categories are the shards' categories shifted to global row
numbers, and per-layer counts (live rows, non-zeros) are sums. Workers load the network
and inputs themselves from their specs (paths or ``generated:...``), once per process, so
nothing large crosses the wire but the results. On GPUs, shard ``i`` runs on GPU ``i``
modulo the GPUs its worker sees, where ``i`` is a local Dask worker's number (so that it
keeps its GPU and prepared engine) or else the shard's index; under dask-cuda each worker
sees only its own GPU.

Example::

    from spartan_py.executors import open_executor
    from spartan_py.shard import infer_sharded
    with open_executor("local", workers=2) as workers:
        result = infer_sharded("generated:1024", "generated:4000", workers=workers, shards=2,
                               backend="cpu", layers=24)
    print(result.categories.size, result.shard_seconds)
"""

from __future__ import annotations

import functools
import statistics
import time
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from spartan_py.api import cached_inputs, cached_network, edge_rate, network_neurons, run_summary
from spartan_py.errors import InputError
from spartan_py.executors import Workers, gpu_count, run_all
from spartan_py.graph_challenge.generate import generated_family


def shard_bounds(rows: int, shards: int) -> list[tuple[int, int]]:
    """``shards`` contiguous ``[start, stop)`` row ranges covering ``rows``, sizes within one."""
    if shards < 1:
        raise InputError(f"shards must be >= 1, got {shards}")
    edges = np.linspace(0, rows, shards + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]


def _neurons(network: str, layers: int | None) -> int:
    """The network's width, without generating a generated one."""
    if generated_family(network):
        return network_neurons(network)
    return cached_network(network, layers).neurons


@functools.lru_cache(maxsize=4)
def _engine(network: str, layers: int | None, backend: str, device: int | None, options: tuple):
    """A prepared engine, kept by the worker for the next shard of the same run."""
    from spartan_py.engines import make_engine

    return make_engine(backend, cached_network(network, layers), **dict(options))


def release_engines() -> None:
    """Drop the engines this process keeps for later shards and give back the GPU memory
    they held on its GPU (run it on every worker between networks:
    ``client.run(release_engines)``)."""
    import gc

    _engine.cache_clear()
    gc.collect()  # an engine's arrays may sit in reference cycles
    if gpu_count():
        device, gpu = _gpu_device("gpu", 0)  # this worker's GPU, as its shards take it
        with device:
            _release_cached_blocks(gpu)


def run_shard(
    network: str,
    inputs: str,
    start: int,
    stop: int,
    index: int,
    *,
    layers: int | None,
    rows: int | None,
    backend: str,
    repeats: int,
    keep_values: bool,
    options: dict,
) -> dict:
    """One shard where its worker is (a task for any executor): one checked run, then
    ``repeats`` timed ones (:meth:`Engine.time <spartan_py.engines.base.Engine.time>`: a GPU
    engine keeps the shard on the device and replays it, timed with CUDA events)."""
    from spartan_py.engines import choose_backend

    net = cached_network(network, layers)
    x = cached_inputs(inputs, net.neurons, rows)[start:stop]
    device, gpu = _gpu_device(backend, index)
    with device:
        engine = _engine(network, layers, choose_backend(backend, net), gpu, tuple(sorted(options.items())))
        _release_cached_blocks(gpu)
        output = engine.run(x)  # the checked run, which also warms the engine up
        seconds = engine.time(x, repeats=repeats, warmup=2) if repeats > 0 else [output.seconds]
        gpu_name, gpu_bytes = _gpu_footprint(gpu)
    return {
        "index": index,
        "start": start,
        "stop": stop,
        "categories": output.live_rows.astype(np.int64) + start,
        "live_rows_by_layer": np.asarray(output.live_rows_by_layer, dtype=np.int64),
        "nonzeros_by_layer": np.asarray(output.nonzeros_by_layer, dtype=np.int64),
        "seconds": seconds,
        "device": output.device,
        "gpu": gpu_name,
        "gpu_bytes": gpu_bytes,
        "backend": engine.name,
        "neurons": net.neurons,
        "layers": net.layers,
        "edges": net.edges,
        "values": output.values if keep_values else None,
    }


def _gpu_device(backend: str, index: int):
    """(context, GPU index or None): the GPU this shard runs on, modulo the GPUs its worker
    sees (a local Dask worker's number, else the shard's ``index``); a no-op context off the GPU."""
    import contextlib

    from spartan_py.engines import engine_class, resolve_backend

    if not engine_class(resolve_backend(backend)).uses_gpu:
        return contextlib.nullcontext(), None
    count = gpu_count()
    if count <= 1:
        return contextlib.nullcontext(), 0
    import cupy

    slot = _worker_slot(index)
    return cupy.cuda.Device(slot % count), slot % count


def _release_cached_blocks(gpu: int | None) -> None:
    """Give back the free blocks CuPy's pool keeps on this GPU (from an earlier shard of
    another size), so that :func:`_gpu_footprint` measures this shard."""
    if gpu is not None:
        import cupy

        cupy.get_default_memory_pool().free_all_blocks()


def _gpu_footprint(gpu: int | None) -> tuple[str | None, int | None]:
    """(which GPU: its index and PCI bus id, bytes CuPy's pool holds there), or (None, None)
    off the GPU. The pool keeps blocks a run freed, so after a shard's runs it holds the
    engine's weights plus the most its runs needed at once (CUDA's context not counted)."""
    if gpu is None:
        return None, None
    import cupy

    return f"{gpu} ({cupy.cuda.Device(gpu).pci_bus_id})", int(cupy.get_default_memory_pool().total_bytes())


def _worker_slot(index: int) -> int:
    """A local Dask worker's number (LocalCluster names them 0, 1, ...), so that a worker
    keeps one GPU and its prepared engine across shards; elsewhere the shard's index."""
    try:
        from distributed import get_worker

        return int(get_worker().name)
    except (ImportError, ValueError, TypeError):
        return index


@dataclass
class ShardedResult:
    """A sharded run merged: the same categories and per-layer counts as one run.

    ``seconds`` is the slowest shard's median inference time (the shards run at once, each
    timed by its own engine); ``wall_seconds`` is the whole fan-out as the caller saw it
    (submission, the shards, results coming back), worker start-up and loading included.
    """

    backend: str
    devices: list[str]
    neurons: int
    layers: int
    rows: int
    edges: int
    categories: np.ndarray  # 1-based, as InferenceResult
    live_rows_by_layer: list[int]
    nonzeros_by_layer: list[int]
    shard_rows: list[int]
    shard_seconds: list[float]
    wall_seconds: float
    executor: str
    passed: bool | None = None
    values: sp.csr_matrix | None = None
    shard_repeat_seconds: list[list[float]] = field(default_factory=list)
    shard_gpus: list[str | None] = field(default_factory=list)  # index and PCI bus id, None off the GPU
    shard_gpu_bytes: list[int | None] = field(default_factory=list)  # CuPy pool bytes after the shard's runs

    @property
    def seconds(self) -> float:
        """The slowest shard's median seconds (what the sharded inference takes)."""
        return max(self.shard_seconds)

    @property
    def edges_per_second(self) -> float:
        """Challenge rate over all rows: rows x edges / :attr:`seconds`."""
        return edge_rate(self.rows, self.edges, self.seconds)

    def summary(self) -> dict:
        """JSON-ready fields (no arrays but the per-layer counts and per-shard figures)."""
        return {
            "devices": self.devices,
            **run_summary(self),
            "wall_seconds": self.wall_seconds,
            "shards": len(self.shard_rows),
            "shard_rows": self.shard_rows,
            "shard_seconds": self.shard_seconds,
            "shard_gpus": self.shard_gpus,
            "shard_gpu_bytes": self.shard_gpu_bytes,
            "executor": self.executor,
        }


def infer_sharded(
    network: str,
    inputs: str,
    *,
    workers: Workers,
    shards: int | None = None,
    backend: str = "auto",
    layers: int | None = None,
    rows: int | None = None,
    truth=None,
    repeats: int = 1,
    keep_values: bool = False,
    retries: int = 3,
    **engine_options,
) -> ShardedResult:
    """Run ``network`` over ``inputs`` (specs: paths or ``generated:...``) in ``shards`` row
    blocks (default: one per worker) on ``workers`` (inline when it has no executor), and
    merge. ``truth``: 1-based categories or a truth file to check against. ``keep_values``
    brings every shard's final activations back and stacks them (memory!)."""
    from spartan_py.graph_challenge.formats import read_truth

    if not isinstance(network, str) or not isinstance(inputs, str):
        raise InputError(
            "infer_sharded takes the network and inputs as specs (paths or generated:...), "
            "so that each worker loads its own copy"
        )
    total = cached_inputs(inputs, _neurons(network, layers), rows).shape[0]  # a bad spec fails here, before any task
    bounds = shard_bounds(total, shards or workers.workers)
    task = functools.partial(
        run_shard,
        network,
        inputs,
        layers=layers,
        rows=rows,
        backend=backend,
        repeats=repeats,
        keep_values=keep_values,
        options=engine_options,
    )
    started = time.perf_counter()
    if workers.executor is None:
        parts = [task(a, b, i) for i, (a, b) in enumerate(bounds)]
    else:
        parts = _fan_out(workers, task, bounds, retries)
    wall = time.perf_counter() - started
    parts.sort(key=lambda p: p["index"])
    categories = np.concatenate([p["categories"] for p in parts]).astype(np.int64) + 1
    first = parts[0]
    result = ShardedResult(
        backend=first["backend"],
        devices=[p["device"] for p in parts],
        neurons=first["neurons"],
        layers=first["layers"],
        rows=total,
        edges=first["edges"],
        categories=categories,
        live_rows_by_layer=[int(v) for v in np.sum([p["live_rows_by_layer"] for p in parts], axis=0)],
        nonzeros_by_layer=[int(v) for v in np.sum([p["nonzeros_by_layer"] for p in parts], axis=0)],
        shard_rows=[p["stop"] - p["start"] for p in parts],
        shard_seconds=[statistics.median(p["seconds"]) for p in parts],
        wall_seconds=wall,
        executor=workers.description,
        shard_repeat_seconds=[p["seconds"] for p in parts],
        shard_gpus=[p["gpu"] for p in parts],
        shard_gpu_bytes=[p["gpu_bytes"] for p in parts],
        values=sp.vstack([p["values"] for p in parts], format="csr") if keep_values else None,
    )
    if truth is not None:
        expected = truth if isinstance(truth, np.ndarray) else read_truth(truth)
        result.passed = bool(np.array_equal(categories, np.asarray(expected, dtype=np.int64)))
    return result


def _fan_out(workers: Workers, task, bounds, retries: int) -> list[dict]:
    """Every shard's result; a shard whose worker was lost is retried, then the run fails."""
    jobs = {i: (a, b, i) for i, (a, b) in enumerate(bounds)}
    parts: list[dict] = []
    for _, part, error in run_all(workers, task, jobs, retries=retries):
        if error is not None:
            raise error
        parts.append(part)
    return parts
