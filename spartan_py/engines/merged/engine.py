"""The merged-column GPU engine: ``kernels/gc_merged.cu`` driven by CuPy (backend ``gpu-merged``).

Outputs with identical weight columns are computed once (:mod:`spartan_py.engines.shared.column_merge`):
the official RadiX-Net layers need 1/16 to 1/20 of the multiply-adds and rows 1/16 as wide.
Same schedule as the rows kernel (:mod:`spartan_py.engines.rows.engine`): chunks of layers per
launch with the rows kept in shared memory, live-row compaction after each launch, sizes on
the device, one host synchronisation at the end; then the final live rows are expanded back
to ``neurons`` columns on the device (timed). The first launch runs block tiles
(``kernels/gc_merged.cu``); later ones, where the layers fit it, the chain kernel
(``kernels/gc_chain.cu``: a warp carries its rows through the launch's layers alone; see
:mod:`spartan_py.engines.merged.chain`), else block tiles again
(:func:`~spartan_py.engines.merged.plan.later_launch_shape`: a launch's last round in shorter
tiles). Weights that exceed the device memory budget
stream from pinned host memory (:class:`~spartan_py.engines.shared.weight_store.LayerStore`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from spartan_py.costmodel.families import COPY_D2H, COPY_H2D, EXPAND, GC_MERGED, SCATTER_ROWS, SYNC
from spartan_py.engines.merged.chain import (
    chain_block_threads,
    chain_code_steps,
    chain_shared_bytes,
    chain_steps,
    chain_words,
    checked_chain_rows,
    checked_chain_warps,
)
from spartan_py.engines.merged.modules import chain_kernels, merged_kernels
from spartan_py.engines.merged.plan import (
    MERGED_THREADS,
    later_index_dtype,
    later_module_shares_rows,
    merged_block_bytes,
    monitor_masks,
)
from spartan_py.engines.merged.trace import MergedKernelTrace
from spartan_py.engines.merged.variants import kernel_defines, launch_schedule
from spartan_py.engines.shared.column_merge import MergedNetwork, merged_for
from spartan_py.engines.shared.cuda import NULL_POINTER, device_name, import_cupy
from spartan_py.engines.shared.gpu_base import DeviceBatch, GpuEngineBase
from spartan_py.engines.shared.launches import chunk_schedule, gc_monitor_mode, launch_monitored
from spartan_py.engines.shared.weight_store import LayerStore
from spartan_py.errors import InputError
from spartan_py.graph_challenge.network import Network


class MergedEngine(MergedKernelTrace, GpuEngineBase):
    """Merged-column layer kernel with on-device compaction and the fused monitor."""

    name = "gpu-merged"
    cpu_twin = "gpu-merged-twin"
    takes_options = ("monitor", "compact_every", "rows_per_tile", "chain_rows", "chain_warps", "input_counts")
    takes_merged_network = True
    uses_gpu = True
    trace_families = (SCATTER_ROWS, GC_MERGED, EXPAND, COPY_H2D, COPY_D2H, SYNC)

    def __init__(
        self,
        network: Network,
        *,
        monitor: bool | str = True,
        monitor_every: int = 4,
        use_graph: bool = True,
        rows_per_tile: int | None = None,
        chain_rows: int | None = None,
        chain_warps: int | None = None,
        input_counts: bool = True,
        max_batch_rows: int | None = None,
        compact_every: str | int = "doubling",
        weight_budget_bytes: int | None = None,
        merged: MergedNetwork | None = None,
        fused_head: bool = False,
        launch_layers: Sequence[int] | None = None,
        kernel_options: Sequence[str] = (),
    ):
        """``rows_per_tile``: the block-tile kernel's rows (None: the largest that fits, the
        later launches' by :func:`~spartan_py.engines.merged.plan.later_launch_shape`, split);
        ``chain_rows``: rows a team of the chain kernel takes in the launches after the
        first (``kernels/gc_chain.cu``; None: two, 0: every launch runs the block-tile
        kernel); ``chain_warps``: warps a team has there (None: by launch length);
        ``input_counts``: binary inputs enter the first layer as counts
        of lit inputs per merged column where the layer allows it
        (:mod:`~spartan_py.engines.shared.input_counts`), else as bits. ``fused_head``,
        ``launch_layers`` and ``kernel_options``: the variants of
        :mod:`~spartan_py.engines.merged.variants` (the schedule's first launch over the cheap
        layers after it, layers per launch outright, compile-time options by name)."""
        super().__init__(network)
        cp = self.cp = import_cupy()
        self.monitor = gc_monitor_mode(monitor)
        if self.monitor == "software":
            raise InputError("the software monitor runs with the rows kernel (backend 'gpu'), not with gpu-merged")
        self.merged = merged_for(network, merged)
        self.chain_rows = checked_chain_rows(chain_rows)
        self.chain_warps = checked_chain_warps(chain_warps)
        self.monitor_every = max(int(monitor_every), 1)
        self.max_batch_rows = max_batch_rows
        self.chunks = launch_schedule(
            chunk_schedule(network.layers, compact_every),
            self.merged.layers,
            fused_head=fused_head,
            launch_layers=launch_layers,
        )
        self.kernel_options = tuple(kernel_options)
        first_defines, self._chain_defines = kernel_defines(self.kernel_options, network.neurons)
        self.chain_shape_by_start = self.plan_chain_launches()
        self.input_columns = self.plan_input_counts(input_counts)
        props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
        self.sm_count = props["multiProcessorCount"]
        self._sm_shared_bytes = props["sharedMemPerMultiprocessor"]
        self._block_shared_limit = props["sharedMemPerBlockOptin"]
        self._device = device_name(cp)
        self.stride = self.merged.width
        self.plan_launch_shapes(rows_per_tile, self._block_shared_limit)
        device_id = cp.cuda.Device().id
        first_instances = tuple(sorted({(self.first_launch_tile(bits)[0], bits) for bits in (False, True)}))
        kernels, self._scatter, self._expand = merged_kernels(
            device_id, MERGED_THREADS, first_instances, defines=first_defines
        )
        later_starts = [s for s in self.stage_words_by_start if s and s not in self.chain_shape_by_start]
        #: the later block-tile launches (built only when a later launch does not run the chain
        #: kernel): one of all the live rows, or a split launch's head and tail
        #: (:attr:`later_shape`), each (kernel, its grid, its shared bytes by the launch's first
        #: layer, its ``split_part``: 0 all the rows, 1 the head, 2 the tail)
        self.later_parts: list[tuple] = []
        #: the kernel's ``split_round_rows`` and ``split_tail_rows`` (zeros: no split)
        self._split_args = (np.int32(0), np.int32(0))
        if later_starts:
            shape = self.later_shape
            heights = (shape.rows, shape.tail_rows) if shape.tail_rows else (shape.rows,)
            instances = tuple((rows, False) for rows in heights)
            later = later_module_shares_rows(min(heights))
            built = merged_kernels(device_id, shape.threads, instances, later)[0]
            for part, rows in enumerate(heights, start=1 if shape.tail_rows else 0):
                kernel = built[rows, False]
                by_start = {s: self._shared_bytes(rows, 0, self.stage_words_by_start[s]) for s in later_starts}
                most = max(by_start.values())
                kernel.max_dynamic_shared_size_bytes = max(most, kernel.max_dynamic_shared_size_bytes)
                self.later_parts.append((kernel, self._grid(kernel, most, shape.threads), by_start, part))
            if shape.tail_rows:
                head, tail = self.later_grids
                self._split_args = (np.int32(shape.rows * head), np.int32(shape.tail_rows * tail))
        # the first launch: (kernel, rows per tile, shared bytes) for float inputs and binary ones
        self.first_launches = {}
        for bits in (False, True):
            rows, words = self.first_launch_tile(bits)
            self.first_launches[bits] = (
                kernels[rows, bits],
                rows,
                self._shared_bytes(rows, words, self.stage_words_by_start[0]),
            )
        for kernel, _, shared in self.first_launches.values():
            kernel.max_dynamic_shared_size_bytes = max(shared, kernel.max_dynamic_shared_size_bytes)
        self.use_graph = use_graph
        # masks only where a tile's one-byte counts fit every launch's stage, which holds them (else lookups)
        counts_fit = max(self.later_rows, *(rows for _, rows, _ in self.first_launches.values())) * (
            network.neurons // 32
        ) <= 4 * min(self.stage_words_by_start.values())
        masks = [
            monitor_masks(m.groups, m.width) if self.monitor != "off" and counts_fit else None
            for m in self.merged.layers
        ]
        later_index = later_index_dtype(self.later_rows)
        layers = [
            {
                # as the launch reads them (the merge's 16-bit ones: no copy in the later module)
                "index": np.asarray(m.plan.index, dtype=later_index if later else np.int32),
                "weight": None if m.plan.uniform is not None else m.plan.weight,
                "sizes": m.sizes,
                "groups": m.groups,
                "masks": mask,
                "chain": chain_words(m) if self.chain_shape_by_start else None,
            }
            for m, mask, later in zip(self.merged.layers, masks, self.later_block_layers())
        ]
        self.weights = LayerStore(cp, layers, self.chunks, weight_budget_bytes)
        if self.weights.streamed:
            self.use_graph = False  # the copy stream's work is not captured
        self._tables = {
            "uniform": cp.asarray(np.array([m.plan.uniform or 0.0 for m in self.merged.layers], dtype=np.float32)),
            "k": cp.asarray(np.array([m.plan.steps for m in self.merged.layers], dtype=np.int32)),
            "width": cp.asarray(np.array([m.width for m in self.merged.layers], dtype=np.int32)),
            "levels": cp.asarray(np.array([0 if mask is None else mask.shape[0] for mask in masks], dtype=np.int32)),
            "k4": cp.asarray(np.array([chain_steps(m) for m in self.merged.layers], dtype=np.int32)),
            "k8": cp.asarray(np.array([chain_code_steps(m) for m in self.merged.layers], dtype=np.int32)),
        }
        self._chain_launches = self._plan_chain_launches()
        #: whether the chain kernel takes the expanded output (``chain-expand-final``)
        self._chain_expands = "chain-expand-final" in self.kernel_options
        # the first launch's arguments for the counts path (pixel table, counts a row), null
        # and 0 when it takes bits
        self._counts_args = (
            (NULL_POINTER, np.int32(0))
            if self.input_columns is None
            else (cp.asarray(self.input_columns), np.int32(self.first_launch_tile(True)[1]))
        )
        self._last_groups = cp.asarray(self.merged.layers[-1].groups)

    def _plan_chain_launches(self) -> dict:
        """{launch: (kernel, dynamic shared bytes, block threads)} of the launches the chain
        kernel runs (compiled only when there is one)."""
        if not self.chain_shape_by_start:
            return {}
        kernels = chain_kernels(self.cp.cuda.Device().id, self._chain_defines)
        launches, start = {}, 0
        for chunk, length in enumerate(self.chunks):
            if start in self.chain_shape_by_start:
                rows, warps = self.chain_shape_by_start[start]
                layers = self.merged.layers[start : start + length]
                columns = -(-max(layer.width for layer in layers) // (32 * warps))
                kernel = kernels[columns, rows, warps]
                shared = chain_shared_bytes(layers, self.stride, rows, warps)
                kernel.max_dynamic_shared_size_bytes = max(shared, kernel.max_dynamic_shared_size_bytes)
                launches[chunk] = (kernel, shared, chain_block_threads(warps))
            start += length
        return launches

    @property
    def later_grids(self) -> tuple[int, int]:
        """The blocks of a split launch's head and tail (the one launch's twice where none is split)."""
        grids = [part[1] for part in self.later_parts] or [0]
        return (grids[0], grids[-1])

    def _shared_bytes(self, rows: int, input_words: int, stage_words: int) -> int:
        """Dynamic shared memory of a block of ``rows`` rows, ``input_words`` of input tile a
        row (the first launch's; the kernel rounds the tile up to whole 16-byte units) and a
        stage of ``stage_words``."""
        return merged_block_bytes(rows, self.stride, input_words, stage_words)

    def _grid(self, kernel, shared: int, threads: int) -> int:
        """A persistent grid: as many blocks of ``threads`` as fit on every SM at once."""
        regs = max(int(kernel.num_regs), 1)
        by_regs = 65536 // (regs * threads)
        by_smem = self._sm_shared_bytes // (shared + int(kernel.shared_size_bytes) + 1024)
        return self.sm_count * max(1, min(by_regs, by_smem, 2048 // threads))

    def upload(self, inputs: sp.csr_matrix) -> MergedBatch:
        """Put a batch of input rows and its work buffers on the device (not timed)."""
        return MergedBatch(self, sp.csr_matrix(inputs, dtype=np.float32))

    def _launch_layers(self, batch: MergedBatch, events=None) -> None:
        cp = self.cp
        network = self.network
        batch.counts[1:].fill(0)
        batch.nnz_counts[1:].fill(0)
        batch.row_layers.fill(0)
        if events is not None:
            events[0].record()  # the first launch's time includes the scatter below
        if batch.dense is not None:  # float inputs too wide for a shared-memory tile
            batch.dense.fill(0)
            self._scatter(
                (self.sm_count * 8,),
                (256,),
                (
                    batch.csr_ptr,
                    batch.csr_idx,
                    batch.csr_val,
                    np.int32(batch.rows),
                    np.int32(network.neurons),
                    batch.dense,
                ),
            )
        pointers = self.weights.pointers
        for chunk in self.weights.launches(cp.cuda.get_current_stream()):
            if events is not None and chunk:
                events[chunk].record()
            start, length = int(self.weights.chunk_bounds[chunk]), self.chunks[chunk]
            src, dst = batch.buffers[chunk % 2], batch.buffers[(chunk + 1) % 2]
            monitored = launch_monitored(self.monitor, chunk, self.monitor_every)
            if chunk in self._chain_launches:
                self._launch_chain(batch, chunk, start, length, src, dst, monitored)
                continue
            first = start == 0
            if first:
                kernel, _, shared = self.first_launches[batch.input_value != 0.0]
                parts = [(kernel, self._grid(kernel, shared, MERGED_THREADS), shared, 0)]
                threads = MERGED_THREADS
            else:
                threads = self.later_shape.threads
                parts = [(kernel, grid, shared[start], part) for kernel, grid, shared, part in self.later_parts]
            args = (
                *(
                    (batch.csr_ptr, batch.csr_idx, batch.csr_val)
                    if first
                    else (NULL_POINTER, NULL_POINTER, NULL_POINTER)
                ),
                batch.dense if first and batch.dense is not None else NULL_POINTER,
                src.values,
                src.ids,
                dst.values,
                dst.ids,
                pointers["index"],
                pointers["weight"],
                self._tables["uniform"],
                self._tables["k"],
                self._tables["width"],
                *self._shared_args(batch, start, length, monitored),
                np.int32(self.stage_words_by_start[start]),
                np.float32(network.bias),
                np.float32(network.clamp),
                np.float32(batch.input_value),
                *(self._counts_args if first and batch.input_value != 0.0 else (NULL_POINTER, np.int32(0))),
                *self._split_args,
            )
            for kernel, grid, shared, part in parts:  # a split launch: its head, then its tail
                kernel((grid,), (threads,), (*args, np.int32(part)), shared_mem=shared)
        final = batch.buffers[len(self.chunks) % 2]
        if events is not None:
            events[len(self.chunks)].record()
        if not self.expanded_by_chain:
            self._expand(
                (self.sm_count * 8,),
                (256,),
                (
                    final.values,
                    np.int32(self.stride),
                    self._last_groups,
                    np.int32(network.neurons),
                    batch.counts[network.layers :],
                    batch.expanded,
                ),
            )
        if events is not None:
            events[-1].record()

    def _shared_args(self, batch: MergedBatch, start: int, length: int, monitored: bool) -> tuple:
        """The arguments both merged kernels (``gc_merged`` and ``gc_chain``) take in this order
        after their layer tables: column sizes and groups, counters, the launch's layers, the
        monitor's outputs (null when the launch is not monitored) and masks, widths."""
        pointers = self.weights.pointers
        return (
            pointers["sizes"],
            pointers["groups"],
            batch.counts,
            batch.nnz_counts,
            np.int32(start),
            np.int32(length),
            *((batch.tile_nnz, batch.row_nnz) if monitored else (NULL_POINTER, NULL_POINTER)),
            batch.row_layers,
            pointers["masks"],
            self._tables["levels"],
            np.int32(self.network.neurons),
            np.int32(self.stride),
        )

    def _launch_chain(self, batch: MergedBatch, chunk: int, start: int, length: int, src, dst, monitored: bool) -> None:
        """Launch ``chunk`` (layers ``start .. start + length - 1``) on the chain kernel: one
        block per SM."""
        kernel, shared, threads = self._chain_launches[chunk]
        pointers, network = self.weights.pointers, self.network
        args = (
            src.values,
            src.ids,
            dst.values,
            dst.ids,
            pointers["chain"],
            self._tables["k4"],
            self._tables["k8"],
            self._tables["uniform"],
            self._tables["width"],
            *self._shared_args(batch, start, length, monitored),
            np.float32(network.bias),
            np.float32(network.clamp),
        )
        if self._chain_expands:  # the n-wide output in the last launch, else null
            args += (batch.expanded if chunk == len(self.chunks) - 1 else NULL_POINTER,)
        kernel((self.sm_count,), (threads,), args, shared_mem=shared)

    def _event_count(self) -> int:
        """One event before each launch, one before the expansion of the final rows (so the
        last entry of ``batch.layer_seconds`` is the expansion), one at the end."""
        return len(self.chunks) + 2

    def _trace_options(self, batch: MergedBatch) -> dict:
        options = {"streamed": self.weights.streamed, "bit_inputs": batch.input_value != 0.0}
        return options | ({"later_grids": self.later_grids} if self.later_parts else {})

    def _bytes_per_row(self) -> int:
        """Two merged-row buffers with ids, the monitor's counts, the expanded output and, when
        the inputs are too wide for shared memory, their dense copy."""
        n = self.network.neurons
        return 2 * (self.stride * 4 + 4) + n // 32 + 4 + n * 4 + (0 if self.first_from_tile else n * 4)


class MergedBatch(DeviceBatch):
    """A batch of the merged kernel: merged-width row buffers, the expanded n-wide output and,
    when the inputs are too wide for shared memory, their dense copy (see
    :class:`~spartan_py.engines.shared.gpu_base.DeviceBatch`)."""

    def __init__(self, engine: MergedEngine, inputs: sp.csr_matrix):
        super().__init__(engine, inputs, engine.stride)

    def _extra_bytes_per_row(self, engine) -> int:
        n = engine.network.neurons
        return 4 * (n + (0 if self._from_tile(engine) else n))

    def _from_tile(self, engine: MergedEngine) -> bool:
        """Whether the first launch takes the inputs into its tile (bits, or floats that fit)."""
        return self.input_value != 0.0 or engine.first_from_tile

    def _allocate(self, engine, capacity: int) -> None:
        cp, n = engine.cp, engine.network.neurons
        self.dense = None if self._from_tile(engine) else cp.empty(capacity * n, dtype=cp.float32)
        self.expanded = cp.empty(capacity * n, dtype=cp.float32)
        self.expanded.fill(np.nan)

    def _final_values(self, engine):
        return self.expanded
