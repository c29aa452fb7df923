"""The base of the CuPy-driven Graph Challenge engines (``gpu``, ``gpu-merged``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from spartan_py.engines.base import Engine, EngineOutput, live_rows_matrix
from spartan_py.engines.shared.cuda import Buffers, cupy_unavailable_reason, download_rows, upload_pinned
from spartan_py.engines.shared.input_counts import input_bit_value
from spartan_py.engines.shared.transfers import transfer_records
from spartan_py.errors import DeviceMemoryError
from spartan_py.timing import hold_stream
from spartan_py.trace import TraceRecord


class GpuEngineBase(Engine):
    """What the CuPy-driven Graph Challenge engines share: timing a batch's launches with
    CUDA events (or a CUDA graph replay) and running inputs batch by batch. A subclass
    provides ``upload``, ``_launch_layers(batch, events)``, ``_event_count``, ``launch_trace``,
    ``_bytes_per_row``, the attributes ``cp``, ``_device``, ``chunks``, ``rows_per_tile`` and
    ``max_batch_rows``, and the batch's ``final_rows``."""

    cp: Any = None  # the cupy module, once the engine is made
    use_graph = True
    _device: str
    chunks: list[int]
    rows_per_tile: int
    max_batch_rows: int | None

    def upload(self, inputs: sp.csr_matrix) -> Any:
        """A batch of input rows on the device with its work buffers."""
        raise NotImplementedError

    def _launch_layers(self, batch: Any, events: list | None = None) -> None:
        """Queue every launch of a batch (with an event before each and one at the end)."""
        raise NotImplementedError

    def launch_trace(self, counts, nnz, input_nnz: int, **measured) -> list[TraceRecord]:
        """One batch's launch records (a kernel's trace class provides it)."""
        raise NotImplementedError

    def _trace_options(self, batch: Any) -> dict:
        """What the kernel's trace needs of the engine and of the batch it ran, beyond the
        batch's counters."""
        return {}

    @classmethod
    def unavailable_reason(cls) -> str | None:
        return cupy_unavailable_reason()

    @property
    def device(self) -> str:
        return self._device

    def _bytes_per_row(self) -> int:
        """Device bytes a batch's buffers take per input row."""
        raise NotImplementedError

    def batch_rows(self, rows: int) -> int:
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
        does not use graphs). Such eager launches start behind a short hold of the stream
        (:func:`~spartan_py.timing.hold_stream`), so that the events time the GPU's work: an
        idle GPU would otherwise wait for the host to issue the first launch, and the first
        interval would hold that wait (about 0.1 ms on an H100 host).
        """
        cp = self.cp
        stream = batch.stream
        if per_layer_times or not self.use_graph:
            events = [cp.cuda.Event() for _ in range(self._event_count())]
            hold_stream(stream=stream)
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

    def batch_trace(
        self,
        batch,
        counts: np.ndarray,
        nnz: np.ndarray,
        input_nnz: int,
        *,
        run_id: str = "",
        launch_seconds: list[float] | None = None,
    ) -> list:
        """The trace records of the launches of ``batch``'s last run (``counts`` and ``nnz``: its
        per-layer counters, as downloaded), with the per-launch times that run measured (or
        ``launch_seconds``, e.g. medians over several runs)."""
        return self.launch_trace(
            counts,
            nnz,
            input_nnz,
            run_id=run_id,
            **batch.layer_work(),
            launch_seconds=batch.layer_seconds if launch_seconds is None else launch_seconds,
            **self._trace_options(batch),
        )

    def time(self, inputs, *, repeats: int = 20, warmup: int = 2) -> list[float]:
        """Inference seconds of ``repeats`` runs after ``warmup`` (CUDA events around the
        launches). ``inputs``: rows (uploaded once when they fit one batch, the runs replaying
        on the device; otherwise whole :meth:`run` calls) or a batch from :meth:`upload`, kept
        for the caller's checks afterwards."""
        if not isinstance(inputs, DeviceBatch):
            if self.batch_rows(inputs.shape[0]) < inputs.shape[0]:
                return super().time(inputs, repeats=repeats, warmup=warmup)
            inputs = self.upload(sp.csr_matrix(inputs, dtype=np.float32))
        for _ in range(warmup):
            self.run_device(inputs)
        return [self.run_device(inputs) for _ in range(repeats)]

    def run(self, inputs: sp.csr_matrix, *, run_id: str = "") -> EngineOutput:
        network = self.network
        inputs = sp.csr_matrix(inputs, dtype=np.float32)
        rows = inputs.shape[0]
        batch_rows = self.batch_rows(rows)
        live_total = np.zeros(network.layers, dtype=np.int64)
        nnz_total = np.zeros(network.layers, dtype=np.int64)
        trace: list[TraceRecord] = []
        live_parts, value_parts = [], []
        seconds = 0.0
        for first in range(0, rows, batch_rows):
            part = inputs if batch_rows >= rows else inputs[first : first + batch_rows]  # a slice copies
            batch = self.upload(part)
            seconds += self.run_device(batch, per_layer_times=True)
            counts = batch.counts.get()
            nnz = batch.nnz_counts.get()
            ids, values, download_seconds = batch.final_rows(self)
            live_total += counts[1:]
            nnz_total += nnz[1:].astype(np.int64)
            live_parts.append(ids + first)
            value_parts.append(values)
            trace += self.batch_trace(batch, counts, nnz, part.nnz, run_id=run_id)
            trace += transfer_records(
                part.shape[0],
                part.nnz,
                ids.size,
                network.neurons,
                network.layers,
                device=self.device,
                run_id=run_id,
                seconds=(batch.upload_seconds, download_seconds),
            )
            del batch
        live_rows = np.concatenate(live_parts) if live_parts else np.zeros(0, np.int64)
        values = np.concatenate(value_parts) if value_parts else np.zeros((0, network.neurons), np.float32)
        final = live_rows_matrix(live_rows, values, rows)
        return EngineOutput(live_rows, final, live_total.tolist(), nnz_total.tolist(), seconds, self.device, trace)


class DeviceBatch:
    """A batch of input rows on the device with its work buffers and counters: the input CSR,
    two buffers of ``width``-wide rows with their ids (one launch reads one, writes the other),
    the per-layer live-row and non-zero counters, the monitor's counts and a stream.

    Buffers are poisoned with NaN (ids with -1) so that an element a kernel should have
    written but did not shows up in the checks. A subclass adds its own arrays in
    ``_allocate`` (and their size a row in ``_extra_bytes_per_row``, for the out-of-memory
    message).
    """

    def __init__(self, engine: GpuEngineBase, inputs: sp.csr_matrix, width: int):
        cp = engine.cp
        #: the value of every stored input entry, or 0.0 (see :func:`input_bit_value`)
        self.input_value = input_bit_value(inputs)
        n = engine.network.neurons
        layers = engine.network.layers
        self.rows = rows = inputs.shape[0]
        capacity = max(rows, 1)
        try:
            host = [(inputs.indptr, np.int32), (inputs.indices, np.int32), (inputs.data, np.float32)]
            (self.csr_ptr, self.csr_idx, self.csr_val), self.upload_seconds = upload_pinned(cp, host)
            self.buffers = [
                Buffers(cp.empty(capacity * width, dtype=cp.float32), cp.empty(capacity, dtype=cp.int32))
                for _ in range(2)
            ]
            self.counts = cp.zeros(layers + 1, dtype=cp.int32)
            self.nnz_counts = cp.zeros(layers + 1, dtype=cp.uint64)
            self.tile_nnz = cp.empty(capacity * (n // 32), dtype=cp.uint8)
            self.row_nnz = cp.zeros(capacity, dtype=cp.int32)
            self.row_layers = cp.zeros(layers, dtype=cp.int32)
            self.tile_layers = cp.zeros(layers, dtype=cp.int32)  # counted by the rows kernel only
            self._allocate(engine, capacity)
        except cp.cuda.memory.OutOfMemoryError:
            need = capacity * (2 * width * 4 + self._extra_bytes_per_row(engine))
            raise DeviceMemoryError(
                f"a batch of {rows} rows x {n} neurons ({need / 2**30:.2f} GiB) does not fit the GPU"
            ) from None
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

    def layer_work(self) -> dict[str, np.ndarray]:
        """The kernels' work counters of the last run, as the trace takes them: per layer the
        rows computed (``row_layers``) and the tiles that computed them (``tile_layers``,
        which only the rows kernel counts)."""
        return {"row_layers": self.row_layers.get(), "tile_layers": self.tile_layers.get()}

    def _allocate(self, engine: GpuEngineBase, capacity: int) -> None:
        """A subclass's own device arrays (allocated, and poisoned, before the sync)."""

    def _extra_bytes_per_row(self, engine: GpuEngineBase) -> int:
        """Device bytes a row of ``_allocate``'s arrays takes."""
        return 0

    def _final_values(self, engine: GpuEngineBase):
        """The device array holding the final rows' n-wide values, in the final buffer's order."""
        return self.buffers[len(engine.chunks) % 2].values

    def final_rows(self, engine: GpuEngineBase) -> tuple[np.ndarray, np.ndarray, float]:
        """(batch-local ids of the rows live after the last layer, their n-wide values,
        seconds), sorted by id. The rows come back into pinned host memory; ``seconds`` times
        those copies alone (CUDA events)."""
        alive = int(self.counts[engine.network.layers].get())
        final = self.buffers[len(engine.chunks) % 2]
        return download_rows(engine.cp, final.ids, self._final_values(engine), alive, engine.network.neurons)
