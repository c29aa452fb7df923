"""The CPU twin of the GPU kernel (backend ``gpu-twin``).

It computes what ``kernels/gc_layer.cu`` computes, in the same order: every output is
summed over the layer plan's steps one fused multiply-add at a time (padding steps read
zero), then bias on non-zeros, ReLU, clamp. So its float32 results, its live rows and non-zeros
per layer, and its trace records (the GPU's launch records, from the same chunk schedule and
batches) equal the GPU kernel's; only ``measured_us`` and ``device`` differ, and
``executed_macs`` of launches that fuse several layers: a tile stops computing once all
its rows are dead, so that count depends on which rows share a tile, i.e. on the order in
which the GPU's atomics compacted them; the twin keeps rows in input order. It is how the
GPU kernel runs where there is no GPU (simulated mode), and what GPU tests compare with.
"""

from __future__ import annotations

import time

import numba
import numpy as np
import scipy.sparse as sp
from numba import prange

from spartan_py.engines.base import Engine, EngineOutput, live_rows_matrix
from spartan_py.engines.gpu_plan import (
    DEFAULT_THREADS,
    ROWS_PER_TILE,
    THREAD_CHOICES,
    chunk_schedule,
    gc_monitor_mode,
    launch_records,
    plan_layer,
    transfer_records,
)
from spartan_py.errors import BackendUnavailableError
from spartan_py.graph_challenge.network import Network
from spartan_py.trace import TraceRecord

LANES = 64  # rows computed together (across SIMD lanes); does not change any result


@numba.njit(parallel=True, fastmath={"contract"}, cache=True)
def twin_layer(rows, index, weight, uniform, use_uniform, bias, clamp, row_nnz):  # pragma: no cover - compiled
    """Replace each row of ``rows`` (live x n, float32) by its layer output, in place."""
    count, n = rows.shape
    steps = index.shape[0]
    zero = np.float32(0.0)
    for t in prange((count + LANES - 1) // LANES):
        first = t * LANES
        lanes = min(LANES, count - first)
        tile = np.zeros((n + 32, LANES), np.float32)  # lane-major, 32 zero padding columns
        for b in range(lanes):
            for i in range(n):
                tile[i, b] = rows[first + b, i]
        acc = np.empty(LANES, np.float32)
        lit = np.zeros(LANES, np.int64)
        for j in range(n):
            acc[:] = zero
            for s in range(steps):
                source = tile[index[s, j]]
                w = uniform if use_uniform else weight[s, j]
                for b in range(LANES):
                    acc[b] = acc[b] + w * source[b]  # contracted to an FMA, as fmaf on the GPU
            for b in range(lanes):
                z = acc[b]
                y = min(max(z + bias, zero), clamp) if z != zero else zero
                rows[first + b, j] = y
                lit[b] += 1 if y != zero else 0
        for b in range(lanes):
            row_nnz[first + b] = lit[b]


class TwinEngine(Engine):
    """What the CPU twins of the GPU kernels share: the launch schedule, the batch loop and the
    layer loop with compaction (rows kept in input order). A subclass provides
    ``_compute_layer``, ``_tile_rows``, ``_final_values`` and ``_launch_records``."""

    def __init__(self, network: Network, *, monitor: str, monitor_every: int, max_batch_rows: int | None,
                 compact_every: str | int, device: str):  # fmt: skip
        super().__init__(network)
        self.monitor = monitor
        self.monitor_every = max(int(monitor_every), 1)
        self.max_batch_rows = max_batch_rows
        self.chunks = chunk_schedule(network.layers, compact_every)
        self._device = device

    @property
    def device(self) -> str:
        return self._device

    def _compute_layer(self, layer: int, rows: np.ndarray, bias, clamp, row_nnz: np.ndarray) -> np.ndarray:
        """Layer ``layer``'s outputs of ``rows`` (each row's non-zeros into ``row_nnz``)."""
        raise NotImplementedError

    def _tile_rows(self, launch_start: int) -> int:
        """Rows per tile of the launch that starts at layer ``launch_start``."""
        raise NotImplementedError

    def _final_values(self, rows: np.ndarray) -> np.ndarray:
        """The last layer's live rows as n-wide activations."""
        return rows

    def _launch_records(self, counts, nnz, input_nnz, tile_layers, run_id) -> list[TraceRecord]:
        """One batch's launch records."""
        raise NotImplementedError

    def _run_batch(self, inputs: sp.csr_matrix):
        network = self.network
        rows = np.ascontiguousarray(inputs.toarray(), dtype=np.float32)
        ids = np.arange(rows.shape[0])
        counts = np.zeros(network.layers + 1, np.int64)
        nnz = np.zeros(network.layers + 1, np.int64)
        counts[0], nnz[0] = rows.shape[0], inputs.nnz
        bias, clamp = np.float32(network.bias), np.float32(network.clamp)
        tile_layers = np.zeros(network.layers, np.int64)
        starts = set(np.cumsum([0] + self.chunks[:-1]).tolist())
        entering, tile = ids, 1
        for layer in range(network.layers):
            if layer in starts:  # the GPU compacts here; the twin keeps rows in input order
                entering, tile = ids, self._tile_rows(layer)
            tile_layers[layer] = np.unique(np.searchsorted(entering, ids) // tile).size
            row_nnz = np.zeros(rows.shape[0], np.int64)
            rows = self._compute_layer(layer, rows, bias, clamp, row_nnz)
            live = row_nnz > 0
            counts[layer + 1], nnz[layer + 1] = int(live.sum()), int(row_nnz.sum())
            rows, ids = np.ascontiguousarray(rows[live]), ids[live]  # dead rows stay zero: dropping them changes no count
        return ids, self._final_values(rows), counts, nnz, tile_layers

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
            ids, values, counts, nnz, tile_layers = self._run_batch(part)
            live_total += counts[1:]
            nnz_total += nnz[1:]
            live_parts.append(ids + first)
            value_parts.append(values)
            trace += self._launch_records(counts, nnz, part.nnz, tile_layers, run_id)
            trace += transfer_records(
                part.shape[0], part.nnz, ids.size, network.neurons, network.layers, device=self.device, run_id=run_id
            )
        seconds = time.perf_counter() - start
        live_rows = np.concatenate(live_parts) if live_parts else np.zeros(0, np.int64)
        values = np.concatenate(value_parts) if value_parts else np.zeros((0, network.neurons), np.float32)
        return EngineOutput(
            live_rows, live_rows_matrix(live_rows, values, total), live_total.tolist(), nnz_total.tolist(),
            seconds, self.device, trace, simulated=True,
        )  # fmt: skip


class GpuTwinEngine(TwinEngine):
    """The GPU kernel's arithmetic and trace records, computed on the CPU with Numba."""

    name = "gpu-twin"

    def __init__(
        self,
        network: Network,
        *,
        monitor: bool | str = True,
        monitor_every: int = 4,
        rows_per_tile: int | None = None,
        max_batch_rows: int | None = None,
        compact_every: str | int = "doubling",
        threads: int = DEFAULT_THREADS,
        device_name: str = "simulated",
    ):
        if network.neurons not in ROWS_PER_TILE:
            sizes = ", ".join(str(n) for n in ROWS_PER_TILE)
            raise BackendUnavailableError(f"the gpu kernel (and its twin) handles {sizes} neurons, not {network.neurons}")
        if threads not in THREAD_CHOICES:
            raise BackendUnavailableError(f"threads must be one of {THREAD_CHOICES}, not {threads}")
        monitor = gc_monitor_mode(monitor)
        if monitor == "software":
            compact_every = 1  # as on the GPU: the pass needs every layer's output in memory
        super().__init__(network, monitor=monitor, monitor_every=monitor_every, max_batch_rows=max_batch_rows,
                         compact_every=compact_every, device=f"cpu twin of gpu.gc_layer ({device_name})")  # fmt: skip
        self.cols_per_thread = network.neurons // threads
        self.rows_per_tile = rows_per_tile or ROWS_PER_TILE[network.neurons]
        self.plans = [plan_layer(w) for w in network.weights]

    def _compute_layer(self, layer, rows, bias, clamp, row_nnz):
        plan = self.plans[layer]
        uniform = np.float32(plan.uniform if plan.uniform is not None else 0.0)
        twin_layer(rows, plan.index, plan.weight, uniform, plan.uniform is not None, bias, clamp, row_nnz)
        return rows  # computed in place

    def _tile_rows(self, launch_start):
        return self.rows_per_tile

    def _launch_records(self, counts, nnz, input_nnz, tile_layers, run_id):
        return launch_records(
            self.plans, self.chunks, self.rows_per_tile, self.cols_per_thread, counts, nnz, input_nnz,
            monitor=self.monitor, monitor_every=self.monitor_every, device=self.device, run_id=run_id,
            tile_layers=tile_layers,
        )  # fmt: skip
