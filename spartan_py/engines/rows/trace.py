"""The rows kernel's trace (family ``gpu.gc_layer``), written alike by the engine and its twin."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import scipy.sparse as sp

from spartan_py.costmodel.families import COPY_D2H, GC_LAYER, MONITOR_PASS, SYNC
from spartan_py.engines.rows.neuron_order import neuron_orders, renumbered
from spartan_py.engines.rows.plan import PIXEL_TABLE_SHARED_LIMIT, TWIN_GRID_BLOCKS, gc_tile_rows
from spartan_py.engines.shared.input_counts import NO_COLUMN, pixel_outputs
from spartan_py.engines.shared.kernel_trace import LaunchCost, LayerKernelTrace, executed_macs, weight_loads
from spartan_py.engines.shared.layer_plan import LayerPlan, plan_layer
from spartan_py.host.threads import ordered_map
from spartan_py.trace import TraceRecord


class RowsKernelTrace(LayerKernelTrace):
    """The trace of the rows kernel (``gpu.gc_layer``); after each launch, in the software
    monitor mode, the counting pass, the copy of its counts and the host syncs it costs."""

    kernel_family = GC_LAYER
    plans: list[LayerPlan]
    rows_per_tile: int
    cols_per_thread: int
    #: the first layer's pixel table for the counts path, or None
    #: (:func:`~spartan_py.engines.shared.input_counts.pixel_outputs`)
    input_columns: np.ndarray | None
    #: the input neuron at each position of the first layer's input, or None where the
    #: kernel keeps neurons in their natural order (:func:`plan_layers`)
    input_order: np.ndarray | None
    #: per layer: the neuron of each output position (the last layer's: the identity), or None
    output_orders: list[np.ndarray] | None
    _first_layer: sp.csr_matrix | None = None
    #: bytes of the pixel table the first launch holds in shared memory after its tile, 0 where
    #: the counts path reads it from device memory (:meth:`plan_pixel_table`)
    staged_table_bytes: int = 0

    def plan_layers(self, renumber: bool) -> None:
        """:attr:`plans` of the network's layers as the kernel runs them: with ``renumber``,
        their neurons renumbered so that every warp reads each bank equally often
        (:func:`~spartan_py.engines.rows.neuron_order.neuron_orders`; the same results in
        fewer steps), else in natural order. Layers are planned on every host thread
        (:func:`~spartan_py.host.threads.ordered_map`; one thread's plans)."""
        weights = self.network.weights
        self._first_layer = None
        if not renumber or not len(weights):
            self.input_order = self.output_orders = None
            self.plans = list(ordered_map(plan_layer, weights))
            return
        orders = neuron_orders(weights)
        first_order = self.input_order = next(orders)
        output_orders: list[np.ndarray] = []
        self.output_orders = output_orders

        def jobs() -> Iterator[tuple[sp.spmatrix, np.ndarray, np.ndarray]]:
            previous = first_order
            for layer, order in zip(weights, orders):
                output_orders.append(order.astype(np.uint16 if order.size <= 2**16 else np.int32))
                yield layer, previous, order
                previous = order

        def plan(job: tuple[sp.spmatrix, np.ndarray, np.ndarray]) -> tuple[sp.csr_matrix, LayerPlan]:
            kernel_layer = renumbered(*job)
            return kernel_layer, plan_layer(kernel_layer)

        self.plans = []
        for kernel_layer, layer_plan in ordered_map(plan, jobs()):
            if self._first_layer is None:
                self._first_layer = kernel_layer
            self.plans.append(layer_plan)

    def kernel_inputs(self, inputs: sp.csr_matrix) -> sp.csr_matrix:
        """Input rows with their columns at the kernel's positions (:attr:`input_order`)."""
        if self.input_order is None:
            return inputs
        position = np.empty_like(self.input_order)
        position[self.input_order] = np.arange(self.input_order.size)
        return sp.csr_matrix((inputs.data, position[inputs.indices], inputs.indptr), shape=inputs.shape)

    def plan_input_counts(self, enabled: bool) -> np.ndarray | None:
        """:attr:`input_columns` for the engine option ``input_counts`` (None when off or when
        the first layer does not allow the counts path)."""
        if not enabled or not self.plans:
            return None
        first = self.network.weights[0] if self._first_layer is None else self._first_layer
        return pixel_outputs(first, self.plans[0])

    @property
    def tile_shared_bytes(self) -> int:
        """Shared memory a block's tile takes: :attr:`rows_per_tile` rows of the neurons and
        the 32 always-zero padding entries (``PAD`` in ``kernels/gc_layer.cu``)."""
        return self.rows_per_tile * (self.network.neurons + 32) * 4

    def plan_pixel_table(self, limit_bytes: int = PIXEL_TABLE_SHARED_LIMIT) -> None:
        """:attr:`staged_table_bytes`: the counts path's pixel table (:attr:`input_columns`),
        where it fits ``limit_bytes`` of shared memory beside a tile (1024 neurons: 64 KiB
        beside a 16-row tile; the GPU engine passes less where its device allows less)."""
        table = 0 if self.input_columns is None else int(self.input_columns.nbytes)
        fits = self.tile_shared_bytes + table <= limit_bytes
        self.staged_table_bytes = table if 0 < table and fits else 0

    def launch_cost(
        self,
        start,
        stop,
        rows_in,
        entering,
        input_nnz,
        row_layers,
        tile_layers,
        resident_blocks_per_sm=1,
        bit_inputs=False,
        grid_blocks=TWIN_GRID_BLOCKS,
    ):
        """``resident_blocks_per_sm``: the GPU engine's grid / SMs (one for every shipped
        kernel instance on the H100: 1024 threads and their registers fill an SM; a GPU test
        checks it); ``grid_blocks``: the grid, which sets the rows per tile of a launch with
        few rows (:func:`gc_tile_rows`; the variant names them). ``bit_inputs``: the inputs
        are binary, so a first launch whose layer allows it counts them (``input_columns``;
        its own instance, "P": an increment per lit input and output it feeds, a lookup per
        output, in place of the first layer's multiply-adds). ``useful_macs``: one
        multiply-add per non-zero input activation and outgoing edge. ``weight_loads``: every
        tile that computes a layer loads all its indices (a compacted tile as many as a whole
        one: :func:`weight_loads`); at the counts path's layer, n sums a tile."""
        n = self.network.neurons
        rows_per_tile = gc_tile_rows(rows_in, self.rows_per_tile, grid_blocks)
        layers = self.plans[start:stop]
        tiles = -(-rows_in // rows_per_tile)
        read = (input_nnz * 8 + (rows_in + 1) * 4) if start == 0 else rows_in * (n * 4 + 4)
        uniform = all(layer.uniform is not None for layer in layers)
        executed = executed_macs(layers, start, tiles, rows_per_tile, [n] * len(layers), row_layers)
        kind = "R"
        if start == 0 and bit_inputs and self.input_columns is not None:
            kind = "P"
            read = input_nnz * 4 + (rows_in + 1) * 4 + self.input_columns.nbytes  # indices only, the table
            first = executed_macs(layers[:1], 0, tiles, rows_per_tile, [n], row_layers)
            outputs = int(np.count_nonzero(self.input_columns != NO_COLUMN))
            executed += input_nnz * outputs // max(n, 1) + first // layers[0].steps - first
        loads = 0
        if tile_layers is not None:
            counted = kind == "P"  # the counts path: each tile reads its n sums once, no indices
            loads = weight_loads(self.plans, range(start + counted, stop), tile_layers, n)
            loads += int(tile_layers[start]) * n * counted
        return LaunchCost(
            variant=f"{kind}{rows_per_tile}xC{self.cols_per_thread}-layers{start + 1}-{stop}"
            + ("-uniform" if uniform else ""),
            tile_rows=rows_per_tile,
            tiles=tiles,
            bytes_read=read + sum(layer.device_bytes for layer in layers),
            row_bytes_written=n * 4 + 4,
            useful_macs=sum(count * layer.nnz // max(n, 1) for count, layer in zip(entering, layers)),
            executed_macs=executed,
            block_threads=n // self.cols_per_thread if self.cols_per_thread else 0,
            # the block's tile, whatever rows it holds; not the pixel table the first launch
            # stages where room allows (the kernel reads it from device memory where a GPU
            # allows less, so a what-if replay on such a GPU runs it as the tile needs)
            block_shared_bytes=self.tile_shared_bytes,
            resident_blocks_per_sm=resident_blocks_per_sm,
            weight_loads=loads,
        )

    def records_after_launch(self, mode, layer, rows_out, count_bytes, run_id):
        if mode != "software":
            return []
        n, device = self.network.neurons, self.device
        software_sync = {"monitor_mode": "software", "device": device}
        software = software_sync | {"monitor_bytes": count_bytes}
        return [
            TraceRecord(
                run=run_id,
                layer=layer,
                kernel=MONITOR_PASS,
                variant="count-1x32",
                rows_in=rows_out,
                cols=n,
                tile_rows=1,
                tile_cols=32,
                bytes_read=rows_out * n * 4,
                bytes_written=count_bytes,
                **software,
            ),
            TraceRecord(
                run=run_id,
                layer=layer,
                kernel=COPY_D2H,
                variant="monitor-counts",
                rows_in=rows_out,
                bytes_read=count_bytes,
                bytes_written=count_bytes,
                **software,
            ),
            TraceRecord(
                run=run_id,
                layer=layer,
                kernel=SYNC,
                variant="monitor",
                host_syncs=2,
                monitor_mode="software",
                device=device,
            ),
        ]
