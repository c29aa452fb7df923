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


class GpuTwinEngine(Engine):
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
        super().__init__(network)
        if network.neurons not in ROWS_PER_TILE:
            sizes = ", ".join(str(n) for n in ROWS_PER_TILE)
            raise BackendUnavailableError(f"the gpu kernel (and its twin) handles {sizes} neurons, not {network.neurons}")
        if threads not in THREAD_CHOICES:
            raise BackendUnavailableError(f"threads must be one of {THREAD_CHOICES}, not {threads}")
        self.cols_per_thread = network.neurons // threads
        self.rows_per_tile = rows_per_tile or ROWS_PER_TILE[network.neurons]
        self.monitor = gc_monitor_mode(monitor)
        self.monitor_every = max(int(monitor_every), 1)
        if self.monitor == "software":
            compact_every = 1  # as on the GPU: the pass needs every layer's output in memory
        self.max_batch_rows = max_batch_rows
        self.chunks = chunk_schedule(network.layers, compact_every)
        self.plans = [plan_layer(w) for w in network.weights]
        self._device = f"cpu twin of gpu.gc_layer ({device_name})"

    @property
    def device(self) -> str:
        return self._device

    def _run_batch(self, inputs: sp.csr_matrix):
        network = self.network
        rows = np.ascontiguousarray(inputs.toarray(), dtype=np.float32)
        ids = np.arange(rows.shape[0])
        counts = np.zeros(network.layers + 1, np.int64)
        nnz = np.zeros(network.layers + 1, np.int64)
        counts[0], nnz[0] = rows.shape[0], inputs.nnz
        bias, clamp = np.float32(network.bias), np.float32(network.clamp)
        tile_layers = np.zeros(network.layers, np.int64)
        chunk_starts = set(np.cumsum([0] + self.chunks[:-1]).tolist())
        entering = ids
        for layer, plan in enumerate(self.plans):
            if layer in chunk_starts:
                entering = ids  # the GPU compacts here; the twin keeps rows in input order
            tile_layers[layer] = np.unique(np.searchsorted(entering, ids) // self.rows_per_tile).size
            row_nnz = np.zeros(rows.shape[0], np.int64)
            uniform = np.float32(plan.uniform if plan.uniform is not None else 0.0)
            twin_layer(rows, plan.index, plan.weight, uniform, plan.uniform is not None, bias, clamp, row_nnz)
            live = row_nnz > 0
            counts[layer + 1], nnz[layer + 1] = int(live.sum()), int(row_nnz.sum())
            rows, ids = np.ascontiguousarray(rows[live]), ids[live]  # dead rows stay zero: dropping them changes no count
        return ids, rows, counts, nnz, tile_layers

    def run(self, inputs: sp.csr_matrix, *, run_id: str = "") -> EngineOutput:
        def launches(counts, nnz, input_nnz, tile_layers):
            return launch_records(
                self.plans, self.chunks, self.rows_per_tile, self.cols_per_thread, counts, nnz, input_nnz,
                monitor=self.monitor, monitor_every=self.monitor_every, device=self.device, run_id=run_id,
                tile_layers=tile_layers,
            )  # fmt: skip

        return run_twin_batches(self, inputs, run_id, launches)


def run_twin_batches(engine, inputs: sp.spmatrix, run_id: str, launches) -> EngineOutput:
    """Run a twin engine over ``inputs`` in batches of ``engine.max_batch_rows``:
    ``engine._run_batch(part)`` gives (ids, values, counts, nnz, tile_layers) and
    ``launches(counts, nnz, input_nnz, tile_layers)`` the batch's launch records."""
    network = engine.network
    inputs = sp.csr_matrix(inputs, dtype=np.float32)
    total = inputs.shape[0]
    batch_rows = min(total, engine.max_batch_rows or total) or 1
    live_total = np.zeros(network.layers, np.int64)
    nnz_total = np.zeros(network.layers, np.int64)
    trace: list[TraceRecord] = []
    live_parts, value_parts = [], []
    start = time.perf_counter()
    for first in range(0, total, batch_rows):
        part = inputs[first : first + batch_rows]
        ids, values, counts, nnz, tile_layers = engine._run_batch(part)
        live_total += counts[1:]
        nnz_total += nnz[1:]
        live_parts.append(ids + first)
        value_parts.append(values)
        trace += launches(counts, nnz, part.nnz, tile_layers)
        trace += transfer_records(
            part.shape[0], part.nnz, ids.size, network.neurons, network.layers, device=engine.device, run_id=run_id
        )
    seconds = time.perf_counter() - start
    live_rows = np.concatenate(live_parts) if live_parts else np.zeros(0, np.int64)
    values = np.concatenate(value_parts) if value_parts else np.zeros((0, network.neurons), np.float32)
    return EngineOutput(
        live_rows, live_rows_matrix(live_rows, values, total), live_total.tolist(), nnz_total.tolist(),
        seconds, engine.device, trace, simulated=True,
    )  # fmt: skip
