"""The base of the CPU twins of the GPU kernels (``gpu-twin``, ``gpu-merged-twin``)."""

from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp

from spartan_py.engines.base import Engine, EngineOutput, live_rows_matrix
from spartan_py.engines.shared.launches import MAX_LAUNCH_LAYERS, chunk_schedule
from spartan_py.engines.shared.transfers import transfer_records
from spartan_py.graph_challenge.network import Network
from spartan_py.trace import TraceRecord


class TwinEngine(Engine):
    """What the CPU twins of the GPU kernels share: the launch schedule, the batch loop and the
    layer loop with compaction (rows kept in input order). A subclass provides
    ``_compute_layer``, ``_tile_rows``, ``_final_values`` and ``launch_trace``."""

    def __init__(
        self,
        network: Network,
        *,
        monitor: str,
        monitor_every: int,
        max_batch_rows: int | None,
        compact_every: str | int,
        device: str,
        max_launch_layers: int = MAX_LAUNCH_LAYERS,
        head_layers: int = 1,
    ):
        super().__init__(network)
        self.monitor = monitor
        self.monitor_every = max(int(monitor_every), 1)
        self.max_batch_rows = max_batch_rows
        self.chunks = chunk_schedule(network.layers, compact_every, max_launch_layers, head_layers)
        self._device = device

    @property
    def device(self) -> str:
        return self._device

    def _compute_layer(self, layer: int, rows: np.ndarray, bias, clamp, row_nnz: np.ndarray) -> np.ndarray:
        """Layer ``layer``'s outputs of ``rows`` (each row's non-zeros into ``row_nnz``)."""
        raise NotImplementedError

    def _tile_rows(self, launch_start: int, inputs: sp.csr_matrix, rows: int) -> int:
        """Rows per tile of the launch that starts at layer ``launch_start`` (``inputs``: the
        batch's input rows; ``rows``: the live rows entering it)."""
        raise NotImplementedError

    def _tile_heights(self, launch_start: int, inputs: sp.csr_matrix, rows: int) -> np.ndarray:
        """The rows of each tile of the launch that starts at layer ``launch_start``, in the
        order the tiles take the ``rows`` live rows entering it: all :meth:`_tile_rows` high
        unless the kernel says otherwise."""
        tile = self._tile_rows(launch_start, inputs, rows)
        return np.full(-(-rows // tile), tile, np.int64)

    def _rows_computed(self, live_per_tile: np.ndarray, heights: np.ndarray, *, launch_start: bool) -> int:
        """Rows the kernel's tiles compute at a layer (``live_per_tile``: each tile's live rows
        entering it; ``heights``: each tile's rows): every tile that still has a live row
        computes all its rows."""
        return int(heights[: live_per_tile.size][live_per_tile > 0].sum())

    def _final_values(self, rows: np.ndarray) -> np.ndarray:
        """The last layer's live rows as n-wide activations."""
        return rows

    def launch_trace(
        self, counts, nnz, input_nnz: int, *, run_id: str, row_layers, tile_layers, **options
    ) -> list[TraceRecord]:
        """One batch's launch records (a kernel's trace mixin provides it)."""
        raise NotImplementedError

    def _trace_options(self, inputs: sp.csr_matrix) -> dict:
        """What the kernel's trace needs of the batch's input rows ``inputs`` beyond its
        counters (as the GPU engine's)."""
        return {}

    def kernel_inputs(self, inputs: sp.csr_matrix) -> sp.csr_matrix:
        """Input rows as the kernel reads them (its own order of the input neurons, if any)."""
        return inputs

    def _run_batch(self, inputs: sp.csr_matrix):
        network = self.network
        rows = np.ascontiguousarray(self.kernel_inputs(inputs).toarray(), dtype=np.float32)
        ids = np.arange(rows.shape[0])
        counts = np.zeros(network.layers + 1, np.int64)
        nnz = np.zeros(network.layers + 1, np.int64)
        counts[0], nnz[0] = rows.shape[0], inputs.nnz
        bias, clamp = np.float32(network.bias), np.float32(network.clamp)
        row_layers = np.zeros(network.layers, np.int64)
        tile_layers = np.zeros(network.layers, np.int64)
        starts = set(np.cumsum([0] + self.chunks[:-1]).tolist())
        entering, heights, ends = ids, np.ones(0, np.int64), np.ones(0, np.int64)
        for layer in range(network.layers):
            if layer in starts:  # the GPU compacts here; the twin keeps rows in input order
                entering, heights = ids, self._tile_heights(layer, inputs, ids.size)
                ends = np.cumsum(heights)
            live_per_tile = np.bincount(np.searchsorted(ends, np.searchsorted(entering, ids), side="right"))
            row_layers[layer] = self._rows_computed(live_per_tile, heights, launch_start=layer in starts)
            tile_layers[layer] = np.count_nonzero(live_per_tile)
            row_nnz = np.zeros(rows.shape[0], np.int64)
            rows = self._compute_layer(layer, rows, bias, clamp, row_nnz)
            live = row_nnz > 0
            counts[layer + 1], nnz[layer + 1] = int(live.sum()), int(row_nnz.sum())
            rows, ids = (
                np.ascontiguousarray(rows[live]),
                ids[live],
            )  # dead rows stay zero: dropping them changes no count
        return ids, self._final_values(rows), counts, nnz, row_layers, tile_layers

    def run(self, inputs: sp.csr_matrix, *, run_id: str = "") -> EngineOutput:
        network = self.network
        inputs = sp.csr_matrix(inputs, dtype=np.float32)
        total = inputs.shape[0]
        batch_rows = min(total, self.max_batch_rows or total) or 1
        live_total = np.zeros(network.layers, np.int64)
        nnz_total = np.zeros(network.layers, np.int64)
        trace: list[TraceRecord] = []
        live_parts, value_parts = [], []
        start = time.perf_counter()
        for first in range(0, total, batch_rows):
            part = inputs[first : first + batch_rows]
            ids, values, counts, nnz, row_layers, tile_layers = self._run_batch(part)
            live_total += counts[1:]
            nnz_total += nnz[1:]
            live_parts.append(ids + first)
            value_parts.append(values)
            trace += self.launch_trace(
                counts,
                nnz,
                part.nnz,
                run_id=run_id,
                row_layers=row_layers,
                tile_layers=tile_layers,
                **self._trace_options(part),
            )
            trace += transfer_records(
                part.shape[0], part.nnz, ids.size, network.neurons, network.layers, device=self.device, run_id=run_id
            )
        seconds = time.perf_counter() - start
        live_rows = np.concatenate(live_parts) if live_parts else np.zeros(0, np.int64)
        values = np.concatenate(value_parts) if value_parts else np.zeros((0, network.neurons), np.float32)
        return EngineOutput(
            live_rows,
            live_rows_matrix(live_rows, values, total),
            live_total.tolist(),
            nnz_total.tolist(),
            seconds,
            self.device,
            trace,
            simulated=True,
        )
