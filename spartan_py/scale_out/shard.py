"""Graph Challenge inference with its input rows split across workers (processes, GPUs, or a
Dask cluster), merged exactly: the result equals one run over all rows.

Rows are independent through every layer, so each shard (a set of rows,
:func:`~spartan_py.scale_out.rows.shard_rows`) runs the whole network on its own; categories are
the shards' categories mapped back to global row numbers, and per-layer counts (live rows,
non-zeros) are sums. Rows are dealt by predicted work by default: a row's survival, and so its
share of the deep layers, depends strongly on the non-zeros of its input, so blocks of rows can
take unequal tails. Workers load the network and inputs themselves from their specs (paths or
``generated:...``), once per process, so nothing large crosses the wire but the results. Where
the backend takes a merged network
(:attr:`~spartan_py.engines.base.Engine.takes_merged_network`) and every worker is on this
host, the network is merged once, here, into a file every worker maps
(:mod:`~spartan_py.engines.shared.merged_store`), instead of once per worker. On GPUs, shard
``i`` runs on GPU ``i`` modulo the GPUs its worker sees, where ``i`` is a local Dask worker's
number (so that it keeps its GPU and prepared engine) or else the shard's index; under
dask-cuda each worker sees only its own GPU.

Example::

    from spartan_py.host.executors import open_executor
    from spartan_py.scale_out.shard import infer_sharded
    with open_executor("local", workers=2) as workers:
        result = infer_sharded("generated:1024", "generated:4000", workers=workers, shards=2,
                               backend="cpu", layers=24)
    print(result.categories.size, result.shard_seconds)
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import gc
import os
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from spartan_py.api import cached_inputs, cached_network, edge_rate, network_neurons, run_summary
from spartan_py.engines import choose_backend, engine_class, make_engine, resolve_backend
from spartan_py.engines.shared.column_merge import merge_network
from spartan_py.engines.shared.merged_store import merged_bytes, read_merged, write_merged
from spartan_py.errors import InputError
from spartan_py.graph_challenge.formats import read_truth
from spartan_py.graph_challenge.generate import generated_family
from spartan_py.host.executors import Workers, gpu_count, run_all
from spartan_py.scale_out.rows import DEFAULT_BALANCE, shard_rows


def _neurons(network: str, layers: int | None) -> int:
    """The network's width, without generating a generated one."""
    if generated_family(network):
        return network_neurons(network)
    return cached_network(network, layers).neurons


@functools.lru_cache(maxsize=4)
def _engine(network: str, layers: int | None, backend: str, device: int | None, options: tuple, prepared: str | None):
    """A prepared engine, kept by the worker for the next shard of the same run; ``prepared``:
    the file of the network merged once for every shard (:func:`shared_preparation`)."""

    merged = {} if prepared is None else {"merged": read_merged(prepared)}
    return make_engine(backend, cached_network(network, layers), **dict(options), **merged)


#: (network spec, layers) -> the file its merged network was written to by this process.
_PREPARED: dict[tuple[str, int | None], Path] = {}


def shared_preparation(network: str, layers: int | None, backend: str) -> str | None:
    """The file of ``network`` merged once on this host for every shard's engine to map, written
    on the first call for the network and kept until :func:`release_prepared` or this process's
    exit: under ``/dev/shm`` where it has room (so that it stays in memory; a container's is often
    small), else in the temporary folder. None where the backend does not take a merged network,
    or where neither folder has room for it (each worker then merges its own)."""

    net = cached_network(network, layers)
    if not engine_class(choose_backend(backend, net)).takes_merged_network:
        return None
    key = (network, layers)
    if key not in _PREPARED or not _PREPARED[key].exists():
        merged = merge_network(net)
        for folder in _roomy_folders(merged_bytes(merged)):
            handle, name = tempfile.mkstemp(prefix="spartan-merged-", suffix=".bin", dir=folder)
            os.close(handle)
            try:
                path = write_merged(merged, name)
            except OSError:  # filled up meanwhile: the next folder
                Path(name).unlink(missing_ok=True)
                continue
            if not _PREPARED:
                atexit.register(release_prepared)
            _PREPARED[key] = path
            break
        else:
            return None
    return str(_PREPARED[key])


def _roomy_folders(size: int) -> list[str]:
    """``/dev/shm`` and the temporary folder, those with room for ``size`` bytes and a margin."""
    found = []
    for folder in ("/dev/shm", tempfile.gettempdir()):
        try:
            stats = os.statvfs(folder)
        except OSError:
            continue
        if os.access(folder, os.W_OK) and stats.f_bavail * stats.f_frsize >= size * 1.05 + (64 << 20):
            found.append(folder)
    return found


def release_prepared() -> None:
    """Delete the files :func:`shared_preparation` wrote (workers that mapped one keep their map)."""
    for path in _PREPARED.values():
        path.unlink(missing_ok=True)
    _PREPARED.clear()


def release_engines() -> None:
    """Drop the engines this process keeps for later shards and give back the GPU memory
    they held on its GPU (run it on every worker between networks:
    ``client.run(release_engines)``)."""

    _engine.cache_clear()
    gc.collect()  # an engine's arrays may sit in reference cycles
    if gpu_count():
        device, gpu = _gpu_device("gpu", 0)  # this worker's GPU, as its shards take it
        with device:
            _release_cached_blocks(gpu)


def run_shard(
    network: str,
    inputs: str,
    row_ids: np.ndarray,
    index: int,
    *,
    layers: int | None,
    rows: int | None,
    backend: str,
    repeats: int,
    keep_values: bool,
    options: dict,
    prepared: str | None = None,
) -> dict:
    """One shard where its worker is (a task for any executor): the rows ``row_ids`` (global
    row numbers, ascending) of the inputs, one checked run, then ``repeats`` timed ones
    (:meth:`Engine.time <spartan_py.engines.base.Engine.time>`: a GPU engine keeps the shard on
    the device and replays it, timed with CUDA events).
    ``prepared``: the network merged once for every shard (:func:`shared_preparation`)."""

    started = time.perf_counter()
    net = cached_network(network, layers)
    x = cached_inputs(inputs, net.neurons, rows)[row_ids]
    device, gpu = _gpu_device(backend, index)
    with device:
        options_key = tuple(sorted(options.items()))
        engine = _engine(network, layers, choose_backend(backend, net), gpu, options_key, prepared)
        setup_seconds = time.perf_counter() - started
        _release_cached_blocks(gpu)
        output = engine.run(x)  # the checked run, which also warms the engine up
        seconds = engine.time(x, repeats=repeats, warmup=2) if repeats > 0 else [output.seconds]
        gpu_name, gpu_bytes = _gpu_footprint(gpu)
    return {
        "index": index,
        "rows": len(row_ids),
        "categories": row_ids[output.live_rows].astype(np.int64),
        "live_rows_by_layer": np.asarray(output.live_rows_by_layer, dtype=np.int64),
        "nonzeros_by_layer": np.asarray(output.nonzeros_by_layer, dtype=np.int64),
        "seconds": seconds,
        "setup_seconds": setup_seconds,
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

    if not engine_class(resolve_backend(backend)).uses_gpu:
        return contextlib.nullcontext(), None
    count = gpu_count()
    if count <= 1:
        return contextlib.nullcontext(), 0
    # optional dependency (extra gpu)
    import cupy

    slot = _worker_slot(index)
    return cupy.cuda.Device(slot % count), slot % count


def _release_cached_blocks(gpu: int | None) -> None:
    """Give back the free blocks CuPy's pool keeps on this GPU (from an earlier shard of
    another size), so that :func:`_gpu_footprint` measures this shard."""
    if gpu is not None:
        # optional dependency (extra gpu)
        import cupy

        cupy.get_default_memory_pool().free_all_blocks()


def _gpu_footprint(gpu: int | None) -> tuple[str | None, int | None]:
    """(which GPU: its index and PCI bus id, bytes CuPy's pool holds there), or (None, None)
    off the GPU. The pool keeps blocks a run freed, so after a shard's runs it holds the
    engine's weights plus the most its runs needed at once (CUDA's context not counted)."""
    if gpu is None:
        return None, None
    # optional dependency (extra gpu)
    import cupy

    return f"{gpu} ({cupy.cuda.Device(gpu).pci_bus_id})", int(cupy.get_default_memory_pool().total_bytes())


def _worker_slot(index: int) -> int:
    """A local Dask worker's number (LocalCluster names them 0, 1, ...), so that a worker
    keeps one GPU and its prepared engine across shards; elsewhere the shard's index."""
    try:
        # optional dependency (extra dask)
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
    #: each shard's wait for its network, inputs and engine (0 where its worker had them from before)
    shard_setup_seconds: list[float] = field(default_factory=list)
    #: each shard's live rows summed over the layers (not its time: a launch's waves set that)
    shard_row_layers: list[int] = field(default_factory=list)
    #: this process's time merging the network for every shard (0 where done before or not shared)
    prepare_seconds: float = 0.0
    shared_preparation: bool = False
    #: how the rows were split (:data:`~spartan_py.scale_out.rows.SHARD_BALANCES`)
    balance: str = DEFAULT_BALANCE

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
            "shard_setup_seconds": self.shard_setup_seconds,
            "shard_row_layers": self.shard_row_layers,
            "prepare_seconds": self.prepare_seconds,
            "shared_preparation": self.shared_preparation,
            "balance": self.balance,
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
    share_preparation: bool = True,
    balance: str = DEFAULT_BALANCE,
    **engine_options,
) -> ShardedResult:
    """Run ``network`` over ``inputs`` (specs: paths or ``generated:...``) in ``shards`` row
    blocks (default: one per worker) on ``workers`` (inline when it has no executor), and
    merge. ``truth``: 1-based categories or a truth file to check against. ``keep_values``
    brings every shard's final activations back and stacks them (memory!).
    ``share_preparation``: merge the network once here for shards on this host
    (:func:`shared_preparation`) where the backend allows it; else each worker (each GPU, inline)
    merges its own. ``balance``: how the rows are split
    (:func:`~spartan_py.scale_out.rows.shard_rows`: ``work``, by predicted work, or ``count``,
    contiguous blocks)."""

    if not isinstance(network, str) or not isinstance(inputs, str):
        raise InputError(
            "infer_sharded takes the network and inputs as specs (paths or generated:...), "
            "so that each worker loads its own copy"
        )
    x = cached_inputs(inputs, _neurons(network, layers), rows)  # a bad spec fails here, before any task
    total = x.shape[0]
    parts_rows = shard_rows(x, shards or workers.workers, balance)
    started = time.perf_counter()
    prepared = None
    # one shard uses the file too where an earlier run wrote it, so that it finds its engine kept
    if share_preparation and workers.on_this_host and (len(parts_rows) > 1 or (network, layers) in _PREPARED):
        prepared = shared_preparation(network, layers, backend)
    prepare_seconds = time.perf_counter() - started
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
        prepared=prepared,
    )
    started = time.perf_counter()
    if workers.executor is None:
        parts = [task(ids, i) for i, ids in enumerate(parts_rows)]
    else:
        parts = _fan_out(workers, task, parts_rows, retries)
    wall = time.perf_counter() - started
    parts.sort(key=lambda p: p["index"])
    categories = np.sort(np.concatenate([p["categories"] for p in parts])).astype(np.int64) + 1
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
        shard_rows=[p["rows"] for p in parts],
        shard_seconds=[statistics.median(p["seconds"]) for p in parts],
        wall_seconds=wall,
        executor=workers.description,
        shard_repeat_seconds=[p["seconds"] for p in parts],
        shard_gpus=[p["gpu"] for p in parts],
        shard_gpu_bytes=[p["gpu_bytes"] for p in parts],
        shard_setup_seconds=[p["setup_seconds"] for p in parts],
        shard_row_layers=[int(p["live_rows_by_layer"].sum()) for p in parts],
        prepare_seconds=prepare_seconds if prepared is not None else 0.0,
        shared_preparation=prepared is not None,
        values=_in_row_order([p["values"] for p in parts], parts_rows) if keep_values else None,
        balance=balance,
    )
    if truth is not None:
        expected = truth if isinstance(truth, np.ndarray) else read_truth(truth)
        result.passed = bool(np.array_equal(categories, np.asarray(expected, dtype=np.int64)))
    return result


def _in_row_order(values: list[sp.csr_matrix], row_ids: list[np.ndarray]) -> sp.csr_matrix:
    """The shards' final activations stacked in global row order."""
    stacked = sp.vstack(values, format="csr")
    order = np.empty(stacked.shape[0], dtype=np.int64)
    order[np.concatenate(row_ids)] = np.arange(stacked.shape[0])
    return stacked[order]


def _fan_out(workers: Workers, task, parts_rows: list[np.ndarray], retries: int) -> list[dict]:
    """Every shard's result; a shard whose worker was lost is retried, then the run fails."""
    jobs = {i: (ids, i) for i, ids in enumerate(parts_rows)}
    parts: list[dict] = []
    for _, part, error in run_all(workers, task, jobs, retries=retries):
        if error is not None:
            raise error
        parts.append(part)
    return parts
