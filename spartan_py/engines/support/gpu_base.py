"""The base of the CuPy-driven Graph Challenge engines (``gpu``, ``gpu-merged``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from spartan_py.engines.base import Engine, EngineOutput, live_rows_matrix
from spartan_py.engines.support.cuda import cupy_unavailable_reason
from spartan_py.engines.support.layer_plan import transfer_records
from spartan_py.trace import TraceRecord


class GpuEngineBase(Engine):
    """What the CuPy-driven Graph Challenge engines share: timing a batch's launches with
    CUDA events (or a CUDA graph replay) and running inputs batch by batch. A subclass
    provides ``upload``, ``_launch_layers(batch, events)``, ``_event_count``, ``_records``,
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

    def _records(self, batch: Any, counts, nnz, input_nnz: int, run_id: str) -> list[TraceRecord]:
        """The trace records of one batch's launches."""
        raise NotImplementedError

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
