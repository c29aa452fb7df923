"""The merged kernel's trace (families ``gpu.scatter_rows``, ``gpu.gc_merged``, ``gpu.expand``),
written alike by the engine and its twin."""

from __future__ import annotations

import numpy as np

from spartan_py.costmodel.families import EXPAND, GC_MERGED, SCATTER_ROWS
from spartan_py.engines.merged.chain import (
    DEFAULT_GROUP_ROWS,
    chain_launch,
    chain_shared_bytes,
    chain_team_bytes,
    chain_team_warps,
    chain_teams,
)
from spartan_py.engines.merged.plan import (
    MERGED_THREADS,
    LaterShape,
    counts_tile_rows,
    later_index_dtype,
    later_launch_shape,
    merged_block_bytes,
    merged_min_blocks,
    merged_tile_rows,
    split_cut,
    stage_words,
)
from spartan_py.engines.rows.plan import TWIN_GRID_BLOCKS
from spartan_py.engines.shared.column_merge import MergedNetwork
from spartan_py.engines.shared.input_counts import NO_COLUMN, count_tile_words, pixel_columns
from spartan_py.engines.shared.kernel_trace import LaunchCost, LayerKernelTrace, executed_macs
from spartan_py.trace import pass_through

#: The later launches' grids (head, tail) the twin splits on: a block an SM of 132 (H100, H200).
TWIN_LATER_GRIDS = (TWIN_GRID_BLOCKS, TWIN_GRID_BLOCKS)

#: The expansion kernel's instance in its records: ``rowwise`` (a block a row, 16-byte
#: columns) since 4029541; the element-wise kernel before it wrote
#: ``final-rows`` (instance ``final``), so that each keeps its own fit.
EXPAND_INSTANCE = "rowwise"


class MergedKernelTrace(LayerKernelTrace):
    """The trace of ``gpu.gc_merged``: its launches (as
    :class:`~spartan_py.engines.shared.kernel_trace.LayerKernelTrace`), then the expansion of
    the final rows (``gpu.expand``); with too-wide inputs, first their scatter to dense rows
    (``gpu.scatter_rows``).

    ``executed_macs`` counts the merged multiply-adds done (tiles x rows x width x steps);
    ``useful_macs`` the original network's (one per non-zero input and outgoing edge), so
    their ratio can exceed 1: that is the work merging saved. Streamed weights are read from
    host memory by a copy overlapping the previous launch; their bytes are in ``bytes_read``
    either way.
    """

    kernel_family = GC_MERGED
    merged: MergedNetwork
    rows_per_tile: int
    first_rows: int
    first_from_tile: bool
    #: rows a tile of the first launch takes when binary inputs enter as counts
    #: (:func:`~spartan_py.engines.merged.plan.counts_tile_rows`, or ``rows_per_tile`` when given)
    count_rows: int
    #: the later block-tile launches' blocks, tiles and split
    #: (:func:`~spartan_py.engines.merged.plan.later_launch_shape`)
    later_shape: LaterShape
    #: 4-byte words of each block-tile launch's stage, by the launch's first layer
    #: (:func:`~spartan_py.engines.merged.plan.stage_words`; set by :meth:`plan_launch_shapes`)
    stage_words_by_start: dict[int, int]
    #: rows a team of the chain kernel takes (``kernels/gc_chain.cu``); None:
    #: :data:`~spartan_py.engines.merged.chain.DEFAULT_GROUP_ROWS`; 0: no chain launches
    chain_rows: int | None
    #: warps a team of the chain kernel has; None: by launch
    #: (:func:`~spartan_py.engines.merged.chain.chain_team_warps`)
    chain_warps: int | None
    #: (rows a team takes, warps a team has) in each launch that runs the chain kernel, by the
    #: launch's first layer (:meth:`plan_chain_launches`, set once when the engine is built)
    chain_shape_by_start: dict[int, tuple[int, int]]
    #: the first layer's merged columns of each input pixel, when binary inputs take the
    #: counts path (:func:`~spartan_py.engines.shared.input_counts.pixel_columns`), else None
    input_columns: np.ndarray | None
    #: compile-time options of the kernels by name
    #: (:data:`~spartan_py.engines.merged.variants.KERNEL_OPTIONS`)
    kernel_options: tuple[str, ...] = ()

    @property
    def expanded_by_chain(self) -> bool:
        """Whether the last launch, run by the chain kernel with ``chain-expand-final``, writes
        the final rows n wide itself: no expansion (``gpu.expand``) after it."""
        last = sum(self.chunks[:-1])
        return bool(self.chunks) and "chain-expand-final" in self.kernel_options and last in self.chain_shape_by_start

    def plan_launch_shapes(self, rows_per_tile: int | None, block_shared_limit: int = 227 * 1024) -> None:
        """Set :attr:`rows_per_tile`, :attr:`first_rows`, :attr:`first_from_tile`,
        :attr:`count_rows`, :attr:`later_shape` and :attr:`stage_words_by_start` as the GPU engine launches (and the
        twin records) them: each launch's stage sized to what it holds, the first launch's tile
        to what fits beside (call after :attr:`input_columns` is set)."""
        merged, n = self.merged, self.merged.neurons
        tile = merged_tile_rows(n, merged.width, block_shared_limit, rows_per_tile)[0]
        self.later_shape = later_launch_shape(merged.width, rows_per_tile)
        starts = np.cumsum([0, *self.chunks[:-1]], dtype=np.int64)
        self.stage_words_by_start = {
            int(start): stage_words(merged.layers[start : start + length], n, self.later_rows if start else tile)
            for start, length in zip(starts, self.chunks)
        }
        first_stage = 4 * self.stage_words_by_start.get(0, 0)
        self.rows_per_tile, self.first_rows, self.first_from_tile = merged_tile_rows(
            n, merged.width, block_shared_limit, rows_per_tile, first_stage
        )
        self.count_rows = self.rows_per_tile
        if rows_per_tile is None and self.input_columns is not None:
            words = count_tile_words(merged.layers[0], n)
            self.count_rows = counts_tile_rows(self.rows_per_tile, merged.width, words, first_stage // 4)

    @property
    def later_rows(self) -> int:
        """Rows a tile of the later block-tile launches takes (a split launch's head tiles)."""
        return self.later_shape.rows

    def later_tile_heights(self, rows_in: int, grids: tuple[int, int] = TWIN_LATER_GRIDS) -> np.ndarray:
        """The rows of each tile of a later block-tile launch entered by ``rows_in`` live rows, in
        the order they take the rows: a split launch's head tiles, then its tail's
        (:func:`~spartan_py.engines.merged.plan.split_cut`); ``grids``: the head's and the
        tail's blocks (the GPU engine's, or the twin's 132)."""
        shape = self.later_shape
        cut = rows_in
        if shape.tail_rows:
            cut = split_cut(rows_in, shape.rows * grids[0], shape.tail_rows * grids[1])
        head = np.full(-(-cut // shape.rows), shape.rows, np.int64)
        tail = np.full(-(-(rows_in - cut) // max(shape.tail_rows, 1)), shape.tail_rows, np.int64)
        return np.concatenate([head, tail])

    def plan_chain_launches(self) -> dict[int, tuple[int, int]]:
        """{first layer: (rows a team takes, warps a team has)} of the launches
        (``self.chunks``) that run the chain kernel
        (:func:`~spartan_py.engines.merged.chain.chain_launch`)."""
        plan, start = {}, 0
        rows = DEFAULT_GROUP_ROWS if self.chain_rows is None else self.chain_rows
        for length in self.chunks:
            warps = chain_team_warps(length) if self.chain_warps is None else self.chain_warps
            if chain_launch(self.merged.layers[start : start + length], start, self.merged.width, rows, warps):
                plan[start] = (rows, warps)
            start += length
        return plan

    def later_block_layers(self) -> list[bool]:
        """Per layer, whether a later block-tile launch computes it (not the first launch, not
        the chain kernel): those read their indices as
        :func:`~spartan_py.engines.merged.plan.later_index_dtype` has them."""
        later, start = [], 0
        for length in self.chunks:
            later += [bool(start) and start not in self.chain_shape_by_start] * length
            start += length
        return later

    def plan_input_counts(self, enabled: bool) -> np.ndarray | None:
        """:attr:`input_columns` for the engine option ``input_counts`` (None when off or when
        the first layer does not allow the counts path)."""
        if not enabled or not self.merged.layers:
            return None
        return pixel_columns(self.merged.layers[0], self.merged.neurons)

    def counts_first_layer(self, bit_inputs: bool) -> bool:
        """Whether the first launch counts lit inputs (binary inputs, and a first layer that
        allows it: :mod:`~spartan_py.engines.shared.input_counts`)."""
        return bit_inputs and self.input_columns is not None

    def first_launch_tile(self, bit_inputs: bool) -> tuple[int, int]:
        """(rows per tile, words of input tile a row) of the first launch: binary inputs
        as counts of lit inputs per merged column where the first layer allows it
        (:func:`~spartan_py.engines.shared.input_counts.count_tile_words`) in tiles of
        :attr:`count_rows`, else as bits (``n / 32 + 1`` words a row) in tiles of
        ``rows_per_tile``; other inputs as floats (``n + 32``, :func:`merged_tile_rows`' first
        tile), or none when they are too wide."""
        n = self.merged.neurons
        if self.counts_first_layer(bit_inputs):
            return self.count_rows, count_tile_words(self.merged.layers[0], n)
        if bit_inputs:
            return self.rows_per_tile, n // 32 + 1
        return self.first_rows, (n + 32) if self.first_from_tile else 0

    def launch_cost(
        self,
        start,
        stop,
        rows_in,
        entering,
        input_nnz,
        row_layers,
        tile_layers,
        streamed=False,
        bit_inputs=False,
        later_grids=TWIN_LATER_GRIDS,
    ):
        """``tile_layers`` is not needed: merged tiles compute whole tiles, so the cost model
        works their weight loads out from the multiply-adds. ``streamed``: the weights come
        from host memory (named in the variant);
        ``bit_inputs``: the first launch holds binary inputs as bits (its own instance, "B"),
        or counts them (instance "P": its work is an increment per lit input and merged
        column it feeds, and a lookup per merged output).
        A chain launch is its own kernel (instance "C", the rows a team takes, then "T" and the
        warps a team has; "C1" and "C2" alone name the kernel before 9ab4d00, whose fit stays
        with the traces it ran); its teams work independently, so its record describes a
        team as the block (one group of rows, its two buffers, as many resident on an SM as a
        block holds) and leaves the stage of indices, loaded once per launch, to the fitted
        per-wave cost. A later block-tile launch runs blocks of :attr:`later_shape`'s threads
        (instance "R", its rows, then "T" and its threads; "R" and the rows alone name the
        256-thread blocks before, whose fit stays with the traces they ran); a split one (its
        last round in shorter tiles: ``later_grids``, the head's and the tail's blocks, say
        where it splits) is one record of both launches, "S" and the tail's rows after the
        head's, its ``tiles`` both parts'. A block-tile launch is resident as many an SM as the
        kernel's launch bound holds by registers."""
        n, layers, stride = self.merged.neurons, self.merged.layers, self.merged.width
        chunk = layers[start:stop]
        useful = sum(count * layer.original_nnz // max(n, 1) for count, layer in zip(entering, chunk))
        suffix = f"xW{stride}-layers{start + 1}-{stop}" + ("-streamed" if streamed else "")
        group, warps = self.chain_shape_by_start.get(start, (0, 1))
        if group:
            groups = -(-rows_in // group)
            # the last launch writing its rows n wide too reads the groups table
            expands = stop == len(layers) and self.expanded_by_chain
            return LaunchCost(
                variant=f"C{group}T{warps}{suffix}",
                tile_rows=group,
                tiles=groups,
                bytes_read=rows_in * (layers[start - 1].width * 4 + 4)
                # the stages and column sizes (each block's copy after the first from L2)
                + chain_shared_bytes(chunk, stride, 0)
                + n * 4 * expands,
                row_bytes_written=chunk[-1].width * 4 + 4 + n * 4 * expands,
                useful_macs=useful,
                executed_macs=executed_macs(
                    [layer.plan for layer in chunk], start, groups, group, [layer.width for layer in chunk], row_layers
                ),
                block_threads=32 * warps,
                block_shared_bytes=chain_team_bytes(stride, group),
                resident_blocks_per_sm=chain_teams(warps),
            )
        first_rows, input_words = self.first_launch_tile(bit_inputs)
        tile = first_rows if start == 0 else self.later_rows
        heights = np.full(-(-rows_in // tile), tile) if start == 0 else self.later_tile_heights(rows_in, later_grids)
        tiles = len(heights)
        split = f"S{self.later_shape.tail_rows}" if start and self.later_shape.tail_rows else ""
        if start == 0 and bit_inputs:
            read = input_nnz * 4 + (rows_in + 1) * 4  # the indices only
        elif start == 0:
            read = input_nnz * 8 + (rows_in + 1) * 4 if self.first_from_tile else rows_in * n * 4
        else:
            read = rows_in * (layers[start - 1].width * 4 + 4)
        index_bytes = np.dtype(later_index_dtype(self.later_rows)).itemsize if start else 4
        weight_bytes = sum(
            layer.plan.index.size * index_bytes
            + (0 if layer.plan.uniform is not None else layer.plan.weight.size * 4)
            + layer.width * 4
            + n * 4
            for layer in chunk
        )
        input_tile = input_words if start == 0 else 0
        # a first launch that gathers its inputs from device memory (too wide for a tile in
        # shared memory) is a different kernel in effect: its own instance ("G"), calibrated
        # apart; so is one holding its inputs as bits ("B")
        kind = "R" if start else "B" if bit_inputs else "R" if self.first_from_tile else "G"
        executed = executed_macs(
            [layer.plan for layer in chunk], start, int(heights.sum()), 1, [layer.width for layer in chunk], row_layers
        )
        columns = self.input_columns if start == 0 and bit_inputs else None
        if columns is not None:  # the counts path (counts_first_layer)
            kind = "P"
            pairs = int(np.count_nonzero(columns.view(np.uint16) != NO_COLUMN))
            first = executed_macs([layers[0].plan], 0, tiles, tile, [layers[0].width], row_layers)
            executed += input_nnz * pairs // max(n, 1) + first // layers[0].plan.steps - first
        threads = self.later_shape.threads if start else MERGED_THREADS
        return LaunchCost(
            variant=f"{kind}{tile}{split}" + (f"T{threads}" if start else "") + suffix,
            tile_rows=tile,
            tiles=tiles,
            bytes_read=read + weight_bytes,
            row_bytes_written=chunk[-1].width * 4 + 4,
            useful_macs=useful,
            executed_macs=executed,
            block_threads=threads,
            block_shared_bytes=merged_block_bytes(tile, stride, input_tile, self.stage_words_by_start[start]),
            resident_blocks_per_sm=merged_min_blocks(threads),
        )

    def records_before(self, counts, input_nnz, run_id, bit_inputs=False, **options):
        if self.first_from_tile or bit_inputs:
            return []
        rows, n = int(counts[0]), self.merged.neurons
        return [
            pass_through(
                run_id,
                0,
                SCATTER_ROWS,
                "dense-inputs",
                rows=rows,
                cols=n,
                nnz=input_nnz,
                bytes_read=input_nnz * 8 + (rows + 1) * 4,
                bytes_written=rows * n * 4 + input_nnz * 4,
                device=self.device,
            )
        ]

    def records_after(self, counts, seconds, run_id):
        if self.expanded_by_chain:  # the last launch wrote the rows n wide: no expansion ran
            return []
        layers, n = self.merged.layers, self.merged.neurons
        final = int(counts[len(layers)])
        return [
            pass_through(
                run_id,
                len(layers),
                EXPAND,
                EXPAND_INSTANCE + "-final-rows",
                rows=final,
                cols=n,
                bytes_read=final * layers[-1].width * 4 + n * 4,
                bytes_written=final * n * 4,
                measured_us=seconds[len(self.chunks)] * 1e6 if len(seconds) > len(self.chunks) else float("nan"),
                device=self.device,
            )
        ]
