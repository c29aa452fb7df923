"""The GPU engine: our fused CUDA layer kernel (``kernels/gc_layer.cu``) driven by CuPy.

Each launch runs a chunk of layers (:func:`chunk_schedule`) with every tile of live rows
kept in shared memory, then compacts the live rows. Sizes stay on the device: a launch
reads its live-row count from ``counts[l]`` and adds survivors to ``counts[l + 1]`` after
every layer, so the host synchronises once, at the end. Weights and inputs are uploaded
before timing; ``seconds`` is measured with CUDA events around the launches only
(:meth:`RowsEngine.run_device` can also replay them as one CUDA graph).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from spartan_py.costmodel.families import COPY_D2H, COPY_H2D, GC_LAYER, MONITOR_PASS, SYNC
from spartan_py.engines.rows.plan import (
    DEFAULT_THREADS,
    PIXEL_TABLE_SHARED_LIMIT,
    ROWS_HEAD_LAYERS,
    ROWS_PER_TILE,
    THREAD_CHOICES,
    kernel_shapes,
    launch_layer_cap,
)
from spartan_py.engines.rows.trace import RowsKernelTrace
from spartan_py.engines.shared.cuda import NULL_POINTER, Buffers, device_name, import_cupy
from spartan_py.engines.shared.gpu_base import DeviceBatch, GpuEngineBase
from spartan_py.engines.shared.launches import chunk_schedule, gc_monitor_mode, launch_monitored
from spartan_py.engines.shared.layer_plan import LayerPlan
from spartan_py.errors import BackendUnavailableError, DeviceMemoryError
from spartan_py.graph_challenge.network import Network
from spartan_py.resources import kernel_source
from spartan_py.sparsity.monitor import software_pass
from spartan_py.sparsity.tiles import TileShape


@functools.cache
def _layer_kernels(device_id: int, threads: int):
    """Compile kernels/gc_layer.cu once per device and block size; {(R, CPT): RawKernel}."""
    # optional dependency (extra gpu)
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
    index: Any  # cupy uint16 [steps / 4][n][4] (LayerPlan.grouped)
    weight: Any | None  # cupy float32, as index, or None when the layer's weights are uniform


class RowsEngine(RowsKernelTrace, GpuEngineBase):
    """Fused layer kernel with on-device compaction and a fused per-tile sparsity monitor."""

    name = "gpu"
    cpu_twin = "gpu-twin"
    takes_options = ("monitor", "compact_every", "rows_per_tile", "input_counts")
    uses_gpu = True
    trace_families = (GC_LAYER, MONITOR_PASS, COPY_H2D, COPY_D2H, SYNC)
    supported_neurons = tuple(ROWS_PER_TILE)  # an activation row tile must fit shared memory

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
        input_counts: bool = True,
        renumber_neurons: bool = True,
        compact_tiles: bool = True,
    ):
        """``input_counts``: binary inputs enter the first layer as counts of lit inputs per
        output where the layer allows it (:mod:`~spartan_py.engines.shared.input_counts`),
        else as floats. ``renumber_neurons``: the kernel keeps each layer's neurons in the
        order that lets every warp read each shared-memory bank equally often
        (:mod:`~spartan_py.engines.rows.neuron_order`; not with the software monitor,
        whose pass counts natural 32-column tiles in memory). ``compact_tiles``: a tile of 8
        to 16 rows moves its live rows to its front between the layers of a launch and
        computes only those, rounded up to 4 (:func:`~spartan_py.engines.rows.plan.compacts_tile`)."""
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
            raise BackendUnavailableError(
                f"no kernel with {shape[0]} rows per tile for {network.neurons} neurons; have {choices}"
            )
        self.rows_per_tile, self.cols_per_thread = shape
        self.kernel = kernels[shape]
        self.shared_bytes = self.tile_shared_bytes
        self.monitor = gc_monitor_mode(monitor)
        self.monitor_every = max(int(monitor_every), 1)
        if self.monitor == "software":  # the pass must see every layer's output in memory, with the host in between
            compact_every, use_graph = 1, False
        self.use_graph = use_graph
        self.compact_tiles = compact_tiles
        self.max_batch_rows = max_batch_rows
        props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
        self.sm_count = props["multiProcessorCount"]
        self._sm_registers = props["regsPerMultiprocessor"]
        self._sm_shared_bytes = props["sharedMemPerMultiprocessor"]
        self._sm_threads = props["maxThreadsPerMultiProcessor"]
        self._device = device_name(cp)
        self.plan_layers(renumber_neurons and self.monitor != "software")
        self.input_columns = self.plan_input_counts(input_counts)
        self.layers = [self._upload_layer(plan) for plan in self.plans]
        # the first launch's arguments for the counts path (pixel table, its width), null and
        # 0 for float inputs
        self._counts_args = (
            (NULL_POINTER, np.int32(0))
            if self.input_columns is None
            else (cp.asarray(self.input_columns.ravel()), np.int32(self.input_columns.shape[1]))
        )
        # the first launch's shared memory: the pixel table after the tile where it fits (the
        # kernel reads the size it is given and copies the table there)
        opt_in = props["sharedMemPerBlockOptin"] - int(self.kernel.shared_size_bytes)
        self.plan_pixel_table(min(PIXEL_TABLE_SHARED_LIMIT, opt_in))
        self._first_shared_bytes = self.shared_bytes + self.staged_table_bytes
        self.kernel.max_dynamic_shared_size_bytes = self._first_shared_bytes
        self.chunks = chunk_schedule(
            network.layers, compact_every, launch_layer_cap(self.plans, self.rows_per_tile), ROWS_HEAD_LAYERS
        )
        self._last_tiles = self._monitor_tiles()
        self._layer_pointers = {
            "index": cp.asarray(np.array([layer.index.data.ptr for layer in self.layers], dtype=np.uint64)),
            "weight": cp.asarray(
                np.array(
                    [0 if layer.weight is None else layer.weight.data.ptr for layer in self.layers], dtype=np.uint64
                )
            ),
            "uniform": cp.asarray(np.array([p.uniform or 0.0 for p in self.plans], dtype=np.float32)),
            "k": cp.asarray(np.array([p.steps for p in self.plans], dtype=np.int32)),
        }

    def _upload_layer(self, plan: LayerPlan) -> _DeviceLayer:
        cp = self.cp
        try:
            index = cp.asarray(plan.grouped(plan.index).ravel())
            weight = None if plan.uniform is not None else cp.asarray(plan.grouped(plan.weight).ravel())
        except cp.cuda.memory.OutOfMemoryError:
            raise DeviceMemoryError(f"layer weights ({plan.device_bytes} bytes) do not fit the GPU") from None
        return _DeviceLayer(index, weight)

    # -- device state for one batch of rows -------------------------------------------------
    def upload(self, inputs: sp.csr_matrix) -> DeviceBatch:
        """Put a batch of input rows and its work buffers on the device (not timed)."""
        return DeviceBatch(self, self.kernel_inputs(sp.csr_matrix(inputs, dtype=np.float32)), self.network.neurons)

    def grid_blocks(self) -> int:
        """A persistent grid: as many blocks as fit on every SM at once."""
        regs = max(int(self.kernel.num_regs), 1)
        by_regs = self._sm_registers // (regs * self.threads)
        static = int(self.kernel.shared_size_bytes) + 1024  # + the runtime's per-block reserve
        by_smem = self._sm_shared_bytes // (self.shared_bytes + static)
        by_threads = self._sm_threads // self.threads
        return self.sm_count * max(1, min(by_regs, by_smem, by_threads))

    def _launch_layers(self, batch: DeviceBatch, events=None) -> None:
        grid = self.grid_blocks()
        batch.counts[1:].fill(0)
        batch.nnz_counts[1:].fill(0)
        batch.row_layers.fill(0)
        batch.tile_layers.fill(0)
        network = self.network
        pointers = self._layer_pointers
        start = 0
        for chunk, length in enumerate(self.chunks):
            if events is not None:
                events[chunk].record()
            src, dst = batch.buffers[chunk % 2], batch.buffers[(chunk + 1) % 2]
            first = start == 0
            counts_input = first and batch.input_value != 0.0
            args = (
                src.values,
                src.ids,
                batch.csr_ptr if first else NULL_POINTER,
                batch.csr_idx if first else NULL_POINTER,
                batch.csr_val if first else NULL_POINTER,
                dst.values,
                dst.ids,
                pointers["index"],
                pointers["weight"],
                pointers["uniform"],
                pointers["k"],
                batch.counts,
                batch.nnz_counts,
                np.int32(start),
                np.int32(length),
                *(
                    (batch.tile_nnz, batch.row_nnz, self._last_tiles.get(start + length - 1, NULL_POINTER))
                    if launch_monitored(self.monitor, chunk, self.monitor_every)
                    else (NULL_POINTER, NULL_POINTER, NULL_POINTER)
                ),
                batch.row_layers,
                batch.tile_layers,
                np.float32(network.bias),
                np.float32(network.clamp),
                *(self._counts_args if counts_input else (NULL_POINTER, np.int32(0))),
                np.float32(batch.input_value if counts_input else 0.0),
                np.int32(self.compact_tiles),
            )
            shared = self._first_shared_bytes if counts_input else self.shared_bytes
            self.kernel((grid,), (self.threads,), args, shared_mem=shared)
            start += length
            if self.monitor == "software":
                self._monitor_pass(batch, dst, start)
        if events is not None:
            events[-1].record()

    def _monitor_tiles(self) -> dict[int, Any]:
        """For the monitor, at the last layer of each launch whose output positions are not the
        neurons' numbers: the natural 32-column tile of the neuron at each position, on the
        device (uploaded before any launch, which a CUDA graph may capture)."""
        if self.output_orders is None:
            return {}
        ends = (int(end) for end in np.cumsum(self.chunks) - 1)
        orders = {end: self.output_orders[end] for end in ends}
        return {
            end: self.cp.asarray((order // 32).astype(np.uint16))
            for end, order in orders.items()
            if not np.array_equal(order, np.arange(order.size))
        }

    def _monitor_pass(self, batch: DeviceBatch, dst: Buffers, layer: int) -> None:
        """The software monitor after a launch: read the live-row count, count the layer's
        output per 32-column tile in a separate pass, copy the counts to the host."""

        n = self.network.neurons
        alive = int(batch.counts[layer].get())
        if alive:
            software_pass(dst.values[: alive * n].reshape(alive, n), TileShape(1, 32), timed=False)

    def _bytes_per_row(self) -> int:
        """Two activation buffers with ids, the monitor's counts."""
        return 2 * (self.network.neurons * 4 + 8) + self.network.neurons // 32 + 4

    def _trace_options(self, batch: DeviceBatch) -> dict:
        grid = self.grid_blocks()
        return {
            "resident_blocks_per_sm": grid // self.sm_count,
            "grid_blocks": grid,
            "bit_inputs": batch.input_value != 0.0,
        }
