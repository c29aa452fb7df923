"""The GPU engine: our fused CUDA layer kernel (``kernels/gc_layer.cu``) driven by CuPy.

Each launch runs a chunk of layers (:func:`chunk_schedule`) with every tile of live rows
kept in shared memory, then compacts the live rows. Sizes stay on the device: a launch
reads its live-row count from ``counts[l]`` and adds survivors to ``counts[l + 1]`` after
every layer, so the host synchronises once, at the end. Weights and inputs are uploaded
before timing; ``seconds`` is measured with CUDA events around the launches only
(:meth:`GpuEngine.run_device` can also replay them as one CUDA graph).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from spartan_py.engines.base import Engine, EngineOutput, live_rows_matrix
from spartan_py.engines.gpu_plan import (
    DEFAULT_THREADS,
    ROWS_PER_TILE,
    THREAD_CHOICES,
    LayerPlan,
    chunk_schedule,
    gc_monitor_mode,
    kernel_shapes,
    launch_monitored,
    launch_records,
    plan_layer,
    transfer_records,
)
from spartan_py.errors import BackendUnavailableError, DeviceMemoryError
from spartan_py.graph_challenge.network import Network
from spartan_py.resources import kernel_source
from spartan_py.trace import TraceRecord

def import_cupy():
    """CuPy, whichever wheel provides it; BackendUnavailableError when absent or GPU-less."""
    try:
        import cupy
    except ImportError as exc:
        raise BackendUnavailableError(f"CuPy is not installed ({exc}); install spartan-py[gpu] or [gpu-cuda13]") from None
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            raise BackendUnavailableError("no CUDA device is visible")
    except cupy.cuda.runtime.CUDARuntimeError as exc:
        raise BackendUnavailableError(f"no usable CUDA device: {exc}") from None
    return cupy


def cupy_unavailable_reason() -> str | None:
    """Why CuPy cannot drive a GPU here, or None when it can."""
    try:
        import_cupy()
    except BackendUnavailableError as exc:
        return str(exc)
    return None


def device_name(cupy) -> str:
    """Name of the current CUDA device, e.g. 'NVIDIA H100 80GB HBM3'."""
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    name = props["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


@functools.lru_cache(maxsize=None)
def _layer_kernels(device_id: int, threads: int):
    """Compile kernels/gc_layer.cu once per device and block size; {(R, CPT): RawKernel}."""
    import cupy

    names = {shape: f"gc_layer<{shape[0]}, {shape[1]}>" for shape in kernel_shapes(threads)}
    module = cupy.RawModule(
        code=kernel_source("gc_layer.cu"),
        options=("-std=c++17", f"-DGC_THREADS={threads}", "-DGC_NO_EXPLICIT_INSTANCES"),
        name_expressions=list(names.values()),
    )
    return {shape: module.get_function(name) for shape, name in names.items()}


@dataclass
class _DeviceLayer:
    index: object  # cupy uint16 [steps * n], k-major
    weight: object | None  # cupy float32 [steps * n], or None when the layer's weights are uniform


class LaunchedEngine(Engine):
    """What the CuPy-driven Graph Challenge engines share: timing a batch's launches with
    CUDA events (or a CUDA graph replay) and running inputs batch by batch. A subclass
    provides ``upload``, ``_launch_layers(batch, events)``, ``_event_count``, ``_records``,
    ``_bytes_per_row``, the attributes ``cp``, ``_device``, ``chunks``, ``rows_per_tile`` and
    ``max_batch_rows``, and the batch's ``final_rows``."""

    cp = None
    use_graph = True

    @classmethod
    def unavailable_reason(cls) -> str | None:
        return cupy_unavailable_reason()

    @property
    def device(self) -> str:
        return self._device

    def _bytes_per_row(self) -> int:
        """Device bytes a batch's buffers take per input row."""
        raise NotImplementedError

    def _batch_rows(self, rows: int) -> int:
        """Rows per batch: what the batch's buffers can hold in half the free memory."""
        free, _ = self.cp.cuda.runtime.memGetInfo()
        fit = max(self.rows_per_tile, int(0.5 * free) // self._bytes_per_row())
        if self.max_batch_rows:
            fit = min(fit, self.max_batch_rows)
        return min(rows, fit) if rows else 1

    def _event_count(self) -> int:
        """CUDA events ``_launch_layers`` records: one before each launch and one at the end."""
        return len(self.chunks) + 1

    def run_device(self, batch, *, per_layer_times: bool = False) -> float:
        """Run all layers on an uploaded batch; return the seconds measured by CUDA events.

        ``per_layer_times`` records an event between launches (times stored on the batch)
        instead of replaying the whole inference as one CUDA graph (or when the engine
        does not use graphs).
        """
        cp = self.cp
        stream = batch.stream
        if per_layer_times or not self.use_graph:
            events = [cp.cuda.Event() for _ in range(self._event_count())]
            with stream:
                self._launch_layers(batch, events)
            events[-1].synchronize()
            batch.layer_seconds = [cp.cuda.get_elapsed_time(a, b) / 1e3 for a, b in zip(events, events[1:])]
            return cp.cuda.get_elapsed_time(events[0], events[-1]) / 1e3
        if batch.graph is None:
            with stream:
                stream.begin_capture()
                self._launch_layers(batch)
                batch.graph = stream.end_capture()
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record(stream)
        batch.graph.launch(stream)
        stop.record(stream)
        stop.synchronize()
        return cp.cuda.get_elapsed_time(start, stop) / 1e3

    def run(self, inputs: sp.csr_matrix, *, run_id: str = "") -> EngineOutput:
        network = self.network
        inputs = sp.csr_matrix(inputs, dtype=np.float32)
        rows = inputs.shape[0]
        batch_rows = self._batch_rows(rows)
        live_total = np.zeros(network.layers, dtype=np.int64)
        nnz_total = np.zeros(network.layers, dtype=np.int64)
        trace: list[TraceRecord] = []
        live_parts, value_parts = [], []
        seconds = 0.0
        for first in range(0, rows, batch_rows):
            part = inputs[first : first + batch_rows]
            batch = self.upload(part)
            seconds += self.run_device(batch, per_layer_times=True)
            counts = batch.counts.get()
            nnz = batch.nnz_counts.get()
            ids, values, download_seconds = batch.final_rows(self)
            live_total += counts[1:]
            nnz_total += nnz[1:].astype(np.int64)
            live_parts.append(ids + first)
            value_parts.append(values)
            trace += self._records(batch, counts, nnz, part.nnz, run_id)
            trace += transfer_records(
                part.shape[0], part.nnz, ids.size, network.neurons, network.layers,
                device=self.device, run_id=run_id, seconds=(batch.upload_seconds, download_seconds),
            )  # fmt: skip
            del batch
        live_rows = np.concatenate(live_parts) if live_parts else np.zeros(0, np.int64)
        values = np.concatenate(value_parts) if value_parts else np.zeros((0, network.neurons), np.float32)
        final = live_rows_matrix(live_rows, values, rows)
        return EngineOutput(live_rows, final, live_total.tolist(), nnz_total.tolist(), seconds, self.device, trace)


class GpuEngine(LaunchedEngine):
    """Fused layer kernel with on-device compaction and a fused per-tile sparsity monitor."""

    name = "gpu"

    def __init__(
        self,
        network: Network,
        *,
        monitor: bool | str = True,
        monitor_every: int = 4,
        use_graph: bool = True,
        rows_per_tile: int | None = None,
        max_batch_rows: int | None = None,
        compact_every: str | int = "doubling",
        threads: int = DEFAULT_THREADS,
    ):
        super().__init__(network)
        cp = self.cp = import_cupy()
        if network.neurons not in ROWS_PER_TILE:
            sizes = ", ".join(str(n) for n in ROWS_PER_TILE)
            raise BackendUnavailableError(f"the gpu engine handles {sizes} neurons, not {network.neurons}")
        if threads not in THREAD_CHOICES:
            raise BackendUnavailableError(f"threads must be one of {THREAD_CHOICES}, not {threads}")
        self.threads = threads
        shape = (rows_per_tile or ROWS_PER_TILE[network.neurons], network.neurons // threads)
        kernels = _layer_kernels(cp.cuda.Device().id, threads)
        if shape not in kernels:
            choices = sorted(r for r, c in kernels if c == shape[1])
            raise BackendUnavailableError(f"no kernel with {shape[0]} rows per tile for {network.neurons} neurons; have {choices}")
        self.rows_per_tile, self.cols_per_thread = shape
        self.kernel = kernels[shape]
        self.shared_bytes = self.rows_per_tile * (network.neurons + 32) * 4
        self.kernel.max_dynamic_shared_size_bytes = self.shared_bytes
        self.monitor = gc_monitor_mode(monitor)
        self.monitor_every = max(int(monitor_every), 1)
        if self.monitor == "software":  # the pass must see every layer's output in memory, with the host in between
            compact_every, use_graph = 1, False
        self.use_graph = use_graph
        self.max_batch_rows = max_batch_rows
        props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
        self.sm_count = props["multiProcessorCount"]
        self._sm_registers = props["regsPerMultiprocessor"]
        self._sm_shared_bytes = props["sharedMemPerMultiprocessor"]
        self._sm_threads = props["maxThreadsPerMultiProcessor"]
        self._device = device_name(cp)
        self.plans = [plan_layer(w) for w in network.weights]
        self.layers = [self._upload_layer(plan) for plan in self.plans]
        self.chunks = chunk_schedule(network.layers, compact_every)
        self._layer_pointers = {
            "index": cp.asarray(np.array([layer.index.data.ptr for layer in self.layers], dtype=np.uint64)),
            "weight": cp.asarray(np.array([0 if l.weight is None else l.weight.data.ptr for l in self.layers], dtype=np.uint64)),
            "uniform": cp.asarray(np.array([p.uniform or 0.0 for p in self.plans], dtype=np.float32)),
            "k": cp.asarray(np.array([p.steps for p in self.plans], dtype=np.int32)),
        }

    def _upload_layer(self, plan: LayerPlan) -> _DeviceLayer:
        cp = self.cp
        try:
            index = cp.asarray(plan.index.ravel())
            weight = None if plan.uniform is not None else cp.asarray(plan.weight.ravel())
        except cp.cuda.memory.OutOfMemoryError:
            raise DeviceMemoryError(f"layer weights ({plan.device_bytes} bytes) do not fit the GPU") from None
        return _DeviceLayer(index, weight)

    # -- device state for one batch of rows -------------------------------------------------
    def upload(self, inputs: sp.csr_matrix) -> "DeviceBatch":
        """Put a batch of input rows and its work buffers on the device (not timed)."""
        return DeviceBatch(self, sp.csr_matrix(inputs, dtype=np.float32))

    def _grid(self) -> int:
        """A persistent grid: as many blocks as fit on every SM at once."""
        regs = max(int(self.kernel.num_regs), 1)
        by_regs = self._sm_registers // (regs * self.threads)
        static = int(self.kernel.shared_size_bytes) + 1024  # + the runtime's per-block reserve
        by_smem = self._sm_shared_bytes // (self.shared_bytes + static)
        by_threads = self._sm_threads // self.threads
        return self.sm_count * max(1, min(by_regs, by_smem, by_threads))

    def _launch_layers(self, batch: "DeviceBatch", events=None) -> None:
        grid = self._grid()
        batch.counts[1:].fill(0)
        batch.nnz_counts[1:].fill(0)
        batch.tile_layers.fill(0)
        network = self.network
        pointers = self._layer_pointers
        start = 0
        for chunk, length in enumerate(self.chunks):
            if events is not None:
                events[chunk].record()
            src, dst = batch.buffers[chunk % 2], batch.buffers[(chunk + 1) % 2]
            first = start == 0
            args = (
                src.values, src.ids,
                batch.csr_ptr if first else _NULL, batch.csr_idx if first else _NULL, batch.csr_val if first else _NULL,
                dst.values, dst.ids,
                pointers["index"], pointers["weight"], pointers["uniform"], pointers["k"],
                batch.counts, batch.nnz_counts, np.int32(start), np.int32(length),
                *((batch.tile_nnz, batch.row_nnz) if launch_monitored(self.monitor, chunk, self.monitor_every) else (_NULL, _NULL)),
                batch.tile_layers,
                np.float32(network.bias), np.float32(network.clamp),
            )  # fmt: skip
            self.kernel((grid,), (self.threads,), args, shared_mem=self.shared_bytes)
            start += length
            if self.monitor == "software":
                self._monitor_pass(batch, dst, start)
        if events is not None:
            events[-1].record()

    def _monitor_pass(self, batch: "DeviceBatch", dst: "_Buffers", layer: int) -> None:
        """The software monitor after a launch: read the live-row count, count the layer's
        output per 32-column tile in a separate pass, copy the counts to the host."""
        from spartan_py.sparsity.monitor import software_pass
        from spartan_py.sparsity.tiles import TileShape

        n = self.network.neurons
        alive = int(batch.counts[layer].get())
        if alive:
            software_pass(dst.values[: alive * n].reshape(alive, n), TileShape(1, 32), timed=False)

    def _bytes_per_row(self) -> int:
        """Two activation buffers with ids, the monitor's counts."""
        return 2 * (self.network.neurons * 4 + 8) + self.network.neurons // 32 + 4

    def _records(self, batch, counts, nnz, input_nnz, run_id) -> list[TraceRecord]:
        """The trace of one batch: one record per launch (see :func:`launch_records`)."""
        return launch_records(
            self.plans, self.chunks, self.rows_per_tile, self.cols_per_thread, counts, nnz, input_nnz,
            monitor=self.monitor, monitor_every=self.monitor_every, device=self.device, run_id=run_id,
            launch_seconds=batch.layer_seconds,
            tile_layers=batch.tile_layers.get(), resident_blocks_per_sm=self._grid() // self.sm_count,
        )


_NULL = np.uint64(0)  # a null device pointer for optional kernel arguments


class _EventTimer:
    """CUDA events around the copies in a ``with`` block on the current stream; ``seconds``
    after it. Copies from or to pageable host memory return when done, so the block's end
    event follows them."""

    def __init__(self, cupy):
        self._start, self._stop = cupy.cuda.Event(), cupy.cuda.Event()
        self._cupy = cupy
        self.seconds = float("nan")

    def __enter__(self) -> "_EventTimer":
        self._start.record()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.record()
        self._stop.synchronize()
        self.seconds = self._cupy.cuda.get_elapsed_time(self._start, self._stop) / 1e3


@dataclass
class _Buffers:
    values: object
    ids: object


class DeviceBatch:
    """A batch of input rows on the device with its work buffers and counters.

    Buffers are poisoned with NaN (ids with -1) so that an element a kernel should have
    written but did not shows up in the checks.
    """

    def __init__(self, engine: GpuEngine, inputs: sp.csr_matrix):
        cp = engine.cp
        n = engine.network.neurons
        self.rows = rows = inputs.shape[0]
        capacity = max(rows, 1)
        try:
            host = (inputs.indptr.astype(np.int32), inputs.indices.astype(np.int32), inputs.data.astype(np.float32))
            with _EventTimer(cp) as upload:
                self.csr_ptr, self.csr_idx, self.csr_val = (cp.asarray(array) for array in host)
            self.upload_seconds = upload.seconds
            self.buffers = [
                _Buffers(cp.empty(capacity * n, dtype=cp.float32), cp.empty(capacity, dtype=cp.int32)) for _ in range(2)
            ]
            self.counts = cp.zeros(engine.network.layers + 1, dtype=cp.int32)
            self.nnz_counts = cp.zeros(engine.network.layers + 1, dtype=cp.uint64)
            self.tile_nnz = cp.empty(capacity * (n // 32), dtype=cp.uint8)
            self.row_nnz = cp.zeros(capacity, dtype=cp.int32)
            self.tile_layers = cp.zeros(engine.network.layers, dtype=cp.int32)
        except cp.cuda.memory.OutOfMemoryError:
            need = 2 * capacity * n * 4
            raise DeviceMemoryError(f"a batch of {rows} rows x {n} neurons ({need / 2**30:.2f} GiB) does not fit the GPU") from None
        for buffer in self.buffers:
            buffer.values.fill(np.nan)
            buffer.ids.fill(-1)
        self.counts[0] = rows
        self.nnz_counts[0] = inputs.nnz
        # The uploads and fills above ran on the default stream; the layers run on a
        # non-blocking stream that does not wait for it.
        cp.cuda.Device().synchronize()
        self.stream = cp.cuda.Stream(non_blocking=True)
        self.graph = None
        self.layer_seconds: list[float] = []

    def final_rows(self, engine: GpuEngine) -> tuple[np.ndarray, np.ndarray, float]:
        """(batch-local ids of the rows live after the last layer, their values (live x n),
        seconds), sorted by id. The rows come back into pinned host memory; ``seconds`` times
        those copies alone (CUDA events)."""
        alive = int(self.counts[engine.network.layers].get())
        final = self.buffers[len(engine.chunks) % 2]
        return download_rows(engine.cp, final.ids, final.values, alive, engine.network.neurons)


def download_rows(cp, ids, values, alive: int, n: int) -> tuple[np.ndarray, np.ndarray, float]:
    """The first ``alive`` ids and n-wide value rows into pinned host memory, sorted by id,
    with the seconds of the copies alone (CUDA events)."""
    import cupyx

    host_ids = cupyx.empty_pinned((alive,), dtype=np.int32)
    host_values = cupyx.empty_pinned((alive, n), dtype=np.float32)
    with _EventTimer(cp) as timer:
        ids[:alive].get(out=host_ids)
        values[: alive * n].reshape(alive, n).get(out=host_values)
    order = np.argsort(host_ids, kind="stable")
    return host_ids[order], host_values[order], timer.seconds
