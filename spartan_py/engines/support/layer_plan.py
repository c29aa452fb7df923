"""What the GPU kernel will do, worked out on the host (no CuPy needed).

Shared by the GPU engine, which uploads and launches it, and by its CPU twin
(:mod:`spartan_py.engines.gpu_twin`), which computes the same thing in the same order and
writes the same trace records: the layer plan (each output's inputs in bank-conflict-free
order), the chunk schedule (layers per launch), and the record of each launch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from spartan_py.costmodel.families import COPY_D2H, COPY_H2D, GC_LAYER, MONITOR_PASS, SYNC
from spartan_py.engines.support.bank_schedule import conflict_free_ell
from spartan_py.engines.support.input_counts import NO_COLUMN, pixel_outputs
from spartan_py.engines.support.neuron_order import neuron_orders, renumbered
from spartan_py.errors import InputError
from spartan_py.graph_challenge.network import Network
from spartan_py.trace import TraceRecord, pass_through

#: Threads per block (one kernel build each); output columns per thread = neurons / threads.
THREAD_CHOICES = (1024, 512)
#: The default: one block of 32 warps per SM (measured faster than 512; docs/performance-notes.md).
DEFAULT_THREADS = 1024
#: neurons -> default rows per tile (the tile, R x (neurons + 32) floats, is ~64 KiB).
ROWS_PER_TILE: dict[int, int] = {1024: 16, 4096: 4, 16384: 1}
#: Other tile heights built for 1024 neurons (``rows_per_tile=``).
EXTRA_ROWS_1024 = (12, 8, 4, 2)
#: Most layers one launch runs (the ``"doubling"`` schedule's last size).
MAX_LAUNCH_LAYERS = 32
#: Layers at the start of a network that the ``"doubling"`` schedule runs in launches of the
#: kernel's own size (``head_layers``) before doubling from 2.
HEAD_LAYERS = 4
#: The rows kernel's head launch: all four head layers at once. Most rows die there, but at
#: 1024 neurons computing a dead row costs less than writing a live one out and reading it
#: back: on the proxy (H100, by turns) launches of 4 then 2, 4, 8, ... took 2.664 ms against
#: 2.984 for 1, 1, 1, 1, 2, 4, ... (docs/performance-notes.md).
ROWS_HEAD_LAYERS = 4
#: Layer bytes one launch of the rows kernel may span when its tile is a single row. Such a
#: tile reads every weight of every layer from L2 once per row; the blocks drift apart across
#: a launch's layers, and once those pass about 8 MB each multiply-add costs up to 1.6x
#: (H100; docs/performance-notes.md), so these launches take fewer layers.
ONE_ROW_LAUNCH_BYTES = 6 * 2**20


#: Steps of a layer plan the rows kernel loads at once (a layer's steps are padded to a multiple).
STEP_GROUP = 4
#: Blocks of the rows kernel's persistent grid the CPU twin's trace assumes: one on each of
#: an H100's (or H200's) 132 SMs.
TWIN_GRID_BLOCKS = 132


def gc_tile_rows(rows: int, rows_per_tile: int, grid_blocks: int) -> int:
    """Rows per tile the rows kernel (``kernels/gc_layer.cu``, built for ``rows_per_tile``)
    takes for a launch entered by ``rows`` live rows on a grid of ``grid_blocks``: where the
    rows do not give every block a full tile, a quarter, half or three quarters of it, the
    fewest that still give every block one, so that they spread over all the SMs."""
    if rows_per_tile >= 8 and rows_per_tile % 4 == 0:
        for quarters in (1, 2, 3):
            if rows <= grid_blocks * (rows_per_tile * quarters // 4):
                return rows_per_tile * quarters // 4
    return rows_per_tile


def kernel_shapes(threads: int) -> list[tuple[int, int]]:
    """(rows per tile, columns per thread) of every kernel instance built for ``threads``."""
    shapes = [(rows, n // threads) for n, rows in ROWS_PER_TILE.items()]
    return shapes + [(rows, 1024 // threads) for rows in EXTRA_ROWS_1024]


def chunk_schedule(
    layers: int, compact_every: str | int = "doubling", max_layers: int = MAX_LAUNCH_LAYERS, head_layers: int = 1
) -> list[int]:
    """Layers per launch of a layer kernel; live rows are compacted after each launch.

    ``"doubling"``: the first four layers (where most rows of a sparse DNN die) in launches of
    ``head_layers``, then 2, 4, 8, ... layers per launch, at most ``max_layers``. An integer
    gives launches of that many layers.
    """
    if isinstance(compact_every, int):
        if compact_every < 1:
            raise ValueError("compact_every must be at least 1")
        sizes = [compact_every] * (layers // compact_every)
        return sizes + ([layers % compact_every] if layers % compact_every else [])
    if compact_every != "doubling":
        raise ValueError(f"compact_every must be 'doubling' or a positive integer, not {compact_every!r}")
    cap = max(max_layers, 1)
    sizes = []
    while sum(sizes) < min(HEAD_LAYERS, layers):
        sizes.append(min(head_layers, cap, min(HEAD_LAYERS, layers) - sum(sizes)))
    size = 2
    while sum(sizes) < layers:
        sizes.append(min(size, cap, layers - sum(sizes)))
        size = min(size * 2, cap)
    return sizes


def launch_layer_cap(plans: list[LayerPlan], rows_per_tile: int) -> int:
    """Most layers a ``"doubling"`` launch of the rows kernel takes: :data:`MAX_LAUNCH_LAYERS`,
    or, for one-row tiles, as many of the largest layer as fit :data:`ONE_ROW_LAUNCH_BYTES`."""
    if rows_per_tile > 1 or not plans:
        return MAX_LAUNCH_LAYERS
    largest = max(plan.device_bytes for plan in plans)
    return int(min(MAX_LAUNCH_LAYERS, max(1, ONE_ROW_LAUNCH_BYTES // max(largest, 1))))


#: Monitor modes of the gpu kernel: ``fused`` (its epilogue writes per-row, per-32-column
#: counts), ``sampled`` (fused on every k-th launch), ``software`` (monitor off in the kernel,
#: then a separate counting pass, a copy of the counts to the host and a sync after every
#: layer; this needs one layer per launch), ``off``.
GC_MONITOR_MODES = ("off", "fused", "sampled", "software")


def gc_monitor_mode(monitor: bool | str) -> str:
    """The monitor mode from a bool (True: fused) or a name in :data:`GC_MONITOR_MODES`."""
    if isinstance(monitor, bool):
        return "fused" if monitor else "off"
    if monitor not in GC_MONITOR_MODES:
        raise InputError(f"monitor must be one of {', '.join(GC_MONITOR_MODES)} (or a bool), not {monitor!r}")
    return monitor


def launch_monitored(mode: str, launch: int, every: int) -> bool:
    """Whether launch number ``launch`` writes the fused monitor's counts."""
    return mode == "fused" or (mode == "sampled" and launch % every == 0)


@dataclass
class LayerPlan:
    """One layer as the kernel reads it.

    ``index``/``weight`` (steps x n, k-major): output j's input and weight at each step, in
    bank-conflict-free order; a padding step reads one of the zero columns ``n .. n + 31``
    with weight 0. ``uniform`` is the common weight when every weight of the layer is equal
    (the kernel then skips the weight array), else None.
    """

    index: np.ndarray
    weight: np.ndarray
    uniform: float | None
    nnz: int

    @property
    def steps(self) -> int:
        """Inputs summed per output, padding included."""
        return int(self.index.shape[0])

    def grouped(self, array: np.ndarray) -> np.ndarray:
        """``index`` or ``weight`` as the rows kernel reads them: each output's
        :data:`STEP_GROUP` consecutive steps side by side, ``[step / 4][output][step % 4]``,
        so that one load brings four."""
        steps, n = array.shape
        return np.ascontiguousarray(array.reshape(steps // STEP_GROUP, STEP_GROUP, n).transpose(0, 2, 1))

    @property
    def device_bytes(self) -> int:
        """Bytes the layer occupies on the device (uint16 indices, float32 weights unless uniform)."""
        return self.index.size * 2 + (0 if self.uniform is not None else self.weight.size * 4)


def plan_layer(matrix: sp.spmatrix) -> LayerPlan:
    """The kernel's view of one weight matrix (rows = inputs, columns = outputs), its steps
    padded to a multiple of :data:`STEP_GROUP` (output j's padding steps read the zero column
    ``n + j % 32``, a bank no other output of its warp reads then)."""
    csc = sp.csc_matrix(matrix, dtype=np.float32)
    csc.sort_indices()
    index, weight = conflict_free_ell(csc.indptr, csc.indices, csc.data, matrix.shape[0])
    pad = -index.shape[0] % STEP_GROUP
    if pad:
        n = index.shape[1]
        index = np.vstack([index, np.broadcast_to(n + np.arange(n) % 32, (pad, n))])
        weight = np.vstack([weight, np.zeros((pad, n), weight.dtype)])
    values = csc.data
    uniform = float(values[0]) if values.size and np.all(values == values[0]) else None
    return LayerPlan(index.astype(np.uint16), weight, uniform, int(csc.nnz))


@dataclass(frozen=True)
class LaunchCost:
    """What one launch of a layer kernel reads and computes, as the kernel's trace works it out
    (the rest of its record is the same for every layer kernel: see :class:`LayerKernelTrace`).

    ``bytes_read``: activations and weights; ``row_bytes_written``: per live output row, its
    values and id (the monitor's counts are added by the caller); ``weight_loads``: the trace
    field of that name (0 where the kernel's tiles compute whole tiles, whose loads the cost
    model works out from the multiply-adds).
    """

    variant: str
    tile_rows: int
    tiles: int
    bytes_read: int
    row_bytes_written: int
    useful_macs: int
    executed_macs: int
    block_threads: int
    block_shared_bytes: int
    resident_blocks_per_sm: int = 0
    weight_loads: int = 0


class LayerKernelTrace:
    """The trace of a layer kernel's launches over one batch, from attributes the GPU engine and
    its CPU twin both hold, so the twin writes the GPU's trace by construction. A kernel's
    subclass provides ``kernel_family`` and :meth:`launch_cost`, and may add records before
    the launches, after each and after all.

    ``counts[l]``: live rows entering layer l (``counts[0]``: the batch's rows); ``nnz[l]``:
    non-zeros entering layer l. Rows are compacted into memory only at a launch's end; a tile
    computes every layer of the launch until all its rows are dead (the rows kernel's tiles
    computing only their live rows, rounded up to 4, after the launch's first layer:
    :func:`rows_computed`). ``row_layers[l]``: rows computed at layer l, summed over tiles,
    and ``tile_layers[l]``: the tiles that computed it (the GPU counts both; the twin works
    them out for rows kept in order); without them every entering tile's rows are counted
    (an upper bound). ``launch_seconds``: the GPU's
    measured time of each launch (and of what follows the launches). ``monitor``: a mode of
    :data:`GC_MONITOR_MODES`; a monitored launch also writes a byte per 32-column tile and an
    int per row.
    """

    kernel_family: str
    network: Network
    chunks: list[int]
    monitor: str
    monitor_every: int
    device: str

    def launch_trace(
        self,
        counts: np.ndarray,
        nnz: np.ndarray,
        input_nnz: int,
        *,
        run_id: str = "",
        row_layers: np.ndarray | None = None,
        tile_layers: np.ndarray | None = None,
        launch_seconds: list[float] | None = None,
        **options,
    ) -> list[TraceRecord]:
        """One trace record per launch (and the kernel's own records around them);
        ``options``: the kernel's, passed to :meth:`launch_cost`."""
        mode = gc_monitor_mode(self.monitor)
        n = self.network.neurons
        seconds = list(launch_seconds or [])
        records = self.records_before(counts, input_nnz, run_id, **options)
        start = 0
        for launch, length in enumerate(self.chunks):
            stop = start + length
            rows_in, rows_out = int(counts[start]), int(counts[stop])
            entering = [input_nnz if start == 0 else int(nnz[start])] + [int(v) for v in nnz[start + 1 : stop]]
            cost = self.launch_cost(start, stop, rows_in, entering, input_nnz, row_layers, tile_layers, **options)
            monitored = launch_monitored(mode, launch, self.monitor_every)
            count_bytes = rows_out * (n // 32 + 4)  # a byte per 32-column tile, an int per row
            monitor_bytes = count_bytes * monitored
            records.append(
                TraceRecord(
                    run=run_id,
                    layer=start + 1,
                    kernel=self.kernel_family,
                    variant=cost.variant,
                    rows_in=rows_in,
                    rows_out=rows_out,
                    cols=n,
                    nnz_in=entering[0],
                    nnz_out=int(nnz[stop]),
                    tiles_total=rows_out * (n // 32),
                    tile_rows=1,
                    tile_cols=32,
                    bytes_read=cost.bytes_read,
                    bytes_written=rows_out * cost.row_bytes_written + monitor_bytes,
                    useful_macs=cost.useful_macs,
                    executed_macs=cost.executed_macs,
                    monitor_mode=mode if monitored else "off",
                    monitor_bytes=monitor_bytes,
                    blocks=cost.tiles,
                    block_rows=cost.tile_rows,
                    block_threads=cost.block_threads,
                    block_shared_bytes=cost.block_shared_bytes,
                    resident_blocks_per_sm=cost.resident_blocks_per_sm,
                    fused_layers=length,
                    weight_loads=cost.weight_loads,
                    measured_us=seconds[launch] * 1e6 if launch < len(seconds) else float("nan"),
                    device=self.device,
                )
            )
            records += self.records_after_launch(mode, stop, rows_out, count_bytes, run_id)
            start = stop
        return records + self.records_after(counts, seconds, run_id)

    def launch_cost(
        self,
        start: int,
        stop: int,
        rows_in: int,
        entering: list[int],
        input_nnz: int,
        row_layers,
        tile_layers,
        **options,
    ) -> LaunchCost:
        """The launch computing layers ``start .. stop - 1`` of ``rows_in`` live rows
        (``entering``: the non-zeros entering each of those layers; ``row_layers`` and
        ``tile_layers`` as for :meth:`launch_trace`)."""
        raise NotImplementedError

    def records_before(self, counts: np.ndarray, input_nnz: int, run_id: str, **options) -> list[TraceRecord]:
        """Records of the steps before the first launch (none by default; ``options`` as
        for :meth:`launch_cost`)."""
        return []

    def records_after_launch(
        self, mode: str, layer: int, rows_out: int, count_bytes: int, run_id: str
    ) -> list[TraceRecord]:
        """Records of the steps after each launch (none by default)."""
        return []

    def records_after(self, counts: np.ndarray, seconds: list[float], run_id: str) -> list[TraceRecord]:
        """Records of the steps after the last launch (none by default)."""
        return []


def executed_macs(
    layers: list, start: int, tiles: int, tile_rows: int, widths: list[int], row_layers: np.ndarray | None
) -> int:
    """Multiply-adds a launch executes: rows computed at each layer (``row_layers``, counted
    by the kernel; every entering tile's rows when not known) x output width x the layer's
    steps."""
    return sum(
        (tiles * tile_rows if row_layers is None else int(row_layers[start + i])) * width * layer.steps
        for i, (layer, width) in enumerate(zip(layers, widths))
    )


def weight_loads(plans: list, layers: range, tile_layers: np.ndarray, width: int) -> int:
    """Weights (indices) the tiles load over ``layers``: each of ``tile_layers[l]`` tiles all
    of layer l's, ``width`` outputs x the plan's steps, whatever rows it computes."""
    return sum(int(tile_layers[layer]) * width * plans[layer].steps for layer in layers)


#: Most dynamic shared memory a rows-kernel block takes to hold the counts path's pixel table
#: beside its tile (less where the GPU allows less): the smallest opt-in of the GPUs the
#: kernels are built for (sm_80: 163 KiB) less room for the kernel's static shared memory.
PIXEL_TABLE_SHARED_LIMIT = 160 * 1024


def compacts_tile(tile_rows: int) -> bool:
    """Whether the rows kernel compacts a tile of ``tile_rows`` rows between the layers of a
    launch (its live rows to the front, the next layer computed on the fewest multiple of 4
    rows that holds them): tiles of 8, 12 or 16 rows (as ``kernels/gc_layer.cu`` decides)."""
    return tile_rows % 4 == 0 and tile_rows >= 8


def rows_computed(live_per_tile: np.ndarray, tile_rows: int, compacted: bool) -> int:
    """Rows the tiles with live rows compute at a layer (``live_per_tile``: their live rows):
    the whole tile, or where the tile was ``compacted`` (a layer after a launch's first, in a
    tile that :func:`compacts_tile`) its live rows rounded up to 4."""
    live = live_per_tile[live_per_tile > 0]
    if not (compacted and compacts_tile(tile_rows)):
        return int(live.size) * tile_rows
    return int(np.minimum(tile_rows, -(-live // 4) * 4).sum())


class RowKernelTrace(LayerKernelTrace):
    """The trace of the rows kernel (``gpu.gc_layer``); after each launch, in the software
    monitor mode, the counting pass, the copy of its counts and the host syncs it costs."""

    kernel_family = GC_LAYER
    plans: list[LayerPlan]
    rows_per_tile: int
    cols_per_thread: int
    #: the first layer's pixel table for the counts path, or None
    #: (:func:`~spartan_py.engines.support.input_counts.pixel_outputs`)
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
        (:func:`~spartan_py.engines.support.neuron_order.neuron_orders`; the same results in
        fewer steps), else in natural order."""
        weights = self.network.weights
        self._first_layer = None
        if not renumber or not len(weights):
            self.input_order = self.output_orders = None
            self.plans = [plan_layer(w) for w in weights]
            return
        orders = neuron_orders(weights)
        previous = self.input_order = next(orders)
        self.output_orders, self.plans = [], []
        for layer, order in zip(weights, orders):
            kernel_layer = renumbered(layer, previous, order)
            if self._first_layer is None:
                self._first_layer = kernel_layer
            self.plans.append(plan_layer(kernel_layer))
            self.output_orders.append(order.astype(np.uint16 if order.size <= 2**16 else np.int32))
            previous = order

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


def transfer_records(
    input_rows: int,
    input_nnz: int,
    final_rows: int,
    neurons: int,
    layers: int,
    *,
    device: str,
    run_id: str = "",
    seconds: tuple[float, float] | None = None,
) -> list[TraceRecord]:
    """The batch's copies (host to device: the input CSR; device to host: the live rows and
    their ids, into pinned memory) and the one host synchronisation before them (reading the
    per-layer counters, a few bytes)."""
    up = (input_rows + 1) * 4 + input_nnz * 8
    down = final_rows * (neurons * 4 + 4)
    h2d, d2h = seconds if seconds else (float("nan"), float("nan"))
    return [
        pass_through(
            run_id,
            0,
            COPY_H2D,
            "input-csr",
            rows=input_rows,
            cols=neurons,
            nnz=input_nnz,
            bytes_read=up,
            bytes_written=up,
            measured_us=h2d * 1e6,
            device=device,
        ),
        TraceRecord(run=run_id, layer=layers, kernel=SYNC, variant="stream", host_syncs=1, device=device),
        pass_through(
            run_id,
            layers,
            COPY_D2H,
            "live-rows",
            rows=final_rows,
            cols=neurons,
            bytes_read=down,
            bytes_written=down,
            measured_us=d2h * 1e6,
            device=device,
        ),
    ]
