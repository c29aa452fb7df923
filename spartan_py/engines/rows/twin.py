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

import numba
import numpy as np

from spartan_py.engines.rows.engine import RowsEngine
from spartan_py.engines.rows.plan import (
    DEFAULT_THREADS,
    ROWS_HEAD_LAYERS,
    ROWS_PER_TILE,
    THREAD_CHOICES,
    TWIN_GRID_BLOCKS,
    gc_tile_rows,
    launch_layer_cap,
    rows_computed,
)
from spartan_py.engines.rows.trace import RowsKernelTrace
from spartan_py.engines.shared.input_counts import input_bit_value
from spartan_py.engines.shared.launches import gc_monitor_mode
from spartan_py.engines.shared.twin_base import TwinEngine
from spartan_py.errors import BackendUnavailableError
from spartan_py.graph_challenge.network import Network
from spartan_py.host.threads import run_split

LANES = 64  # rows computed together (across SIMD lanes); does not change any result


@numba.njit(fastmath={"contract"}, cache=True, nogil=True)
def twin_layer(
    first_tile, stop_tile, rows, index, weight, uniform, use_uniform, bias, clamp, row_nnz
):  # pragma: no cover - compiled
    """Replace each row of ``rows`` (live x n, float32) in the tiles of LANES rows
    ``first_tile:stop_tile`` by its layer output, in place."""
    count, n = rows.shape
    steps = index.shape[0]
    zero = np.float32(0.0)
    tile = np.empty((n + 32, LANES), np.float32)  # lane-major, 32 zero padding columns
    for t in range(first_tile, stop_tile):
        first = t * LANES
        lanes = min(LANES, count - first)
        tile[:] = zero
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


class RowsTwinEngine(RowsKernelTrace, TwinEngine):
    """The GPU kernel's arithmetic and trace records, computed on the CPU with Numba."""

    name = "gpu-twin"
    cpu_twin = "gpu-twin"
    takes_options = RowsEngine.takes_options
    trace_families = RowsEngine.trace_families
    supported_neurons = RowsEngine.supported_neurons

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
        input_counts: bool = True,
        renumber_neurons: bool = True,
        compact_tiles: bool = True,
        grid_blocks: int = TWIN_GRID_BLOCKS,
    ):
        """Options as :class:`~spartan_py.engines.rows.engine.RowsEngine`'s; ``grid_blocks``: the GPU
        grid whose tiles the trace describes (they shrink for launches of few rows:
        :func:`~spartan_py.engines.rows.plan.gc_tile_rows`)."""
        if network.neurons not in ROWS_PER_TILE:
            sizes = ", ".join(str(n) for n in ROWS_PER_TILE)
            raise BackendUnavailableError(
                f"the gpu kernel (and its twin) handles {sizes} neurons, not {network.neurons}"
            )
        if threads not in THREAD_CHOICES:
            raise BackendUnavailableError(f"threads must be one of {THREAD_CHOICES}, not {threads}")
        monitor = gc_monitor_mode(monitor)
        if monitor == "software":
            compact_every = 1  # as on the GPU: the pass needs every layer's output in memory
        self.cols_per_thread = network.neurons // threads
        self.rows_per_tile = rows_per_tile or ROWS_PER_TILE[network.neurons]
        self.network = network
        self.plan_layers(renumber_neurons and monitor != "software")
        self.grid_blocks = grid_blocks
        self.compact_tiles = compact_tiles
        super().__init__(
            network,
            monitor=monitor,
            monitor_every=monitor_every,
            max_batch_rows=max_batch_rows,
            compact_every=compact_every,
            device=f"cpu twin of gpu.gc_layer ({device_name})",
            max_launch_layers=launch_layer_cap(self.plans, self.rows_per_tile),
            head_layers=ROWS_HEAD_LAYERS,
        )
        self.input_columns = self.plan_input_counts(input_counts)
        self.plan_pixel_table()

    def _compute_layer(self, layer, rows, bias, clamp, row_nnz):
        plan = self.plans[layer]
        uniform = np.float32(plan.uniform if plan.uniform is not None else 0.0)
        tiles = -(-rows.shape[0] // LANES)
        run_split(
            twin_layer, tiles, rows, plan.index, plan.weight, uniform, plan.uniform is not None, bias, clamp, row_nnz
        )
        return rows  # computed in place

    def _rows_computed(self, live_per_tile, heights, *, launch_start):
        tile = int(heights[0]) if heights.size else 1  # the rows kernel's tiles of a launch are one height
        return rows_computed(live_per_tile, tile, self.compact_tiles and not launch_start)

    def _tile_rows(self, launch_start, inputs, rows):
        return gc_tile_rows(rows, self.rows_per_tile, self.grid_blocks)

    def _trace_options(self, inputs):
        # the GPU engine's first launch counts binary inputs where the layer allows it; the
        # sums are the same floats either way (input_counts), so only the trace tells
        return {"bit_inputs": input_bit_value(inputs) != 0.0, "grid_blocks": self.grid_blocks}
