"""Merge output neurons whose weight columns are identical (the merged plan, host side).

Two outputs of a layer with the same inputs and the same weights compute the same value in
every row: after bias, ReLU and the clamp too. RadiX-Net networks are full of them: the
official 1024-neuron layers have 64 distinct columns (32 in layer 120), each shared by 16
or 32 outputs, and the generated networks have ``neurons / 16``. Computing each distinct
column once gives the same activations with a fraction of the work:

* layer ``l`` computes ``Z_l`` (rows x ``width_l``), one column per group of equal outputs,
  and ``Y_l[:, j] = Z_l[:, groups_l[j]]``;
* layer ``l + 1`` reads ``Z_l`` instead of ``Y_l``: an input ``i`` of the original layer
  becomes ``groups_l[i]``, and several inputs of one output that fall in the same group
  become one weight, their sum (exact for the official 1/16 weights; within float32 rounding
  of the original sum otherwise);
* a row is live when a column of ``Z`` is non-zero; its non-zeros in ``Y`` are the sizes of
  its non-zero groups summed.

Nothing here assumes a structure: the groups are found by comparing every column's sorted
(input, weight) list, and a network without duplicates merges into itself (factor 1).
Widths are padded to a multiple of 32; padding columns have no inputs and size 0.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from spartan_py.costmodel.families import EXPAND, GC_MERGED, SCATTER_ROWS
from spartan_py.engines.support.bank_schedule import BANKS, conflict_free_ell
from spartan_py.engines.support.chain_plan import (
    CHAIN_THREADS,
    chain_group_rows,
    chain_launch,
    chain_shared_bytes,
    chain_warp_bytes,
)
from spartan_py.engines.support.input_counts import NO_COLUMN, count_tile_words, pixel_columns
from spartan_py.engines.support.layer_plan import LaunchCost, LayerKernelTrace, LayerPlan, executed_macs
from spartan_py.errors import InputError
from spartan_py.graph_challenge.network import Network
from spartan_py.trace import pass_through


@dataclass
class MergedLayer:
    """One layer of the merged plan.

    ``plan``: ELL over the previous layer's merged columns (the input neurons for layer 1),
    steps x ``width``, bank-conflict-free, padding steps reading zero columns
    ``width_in .. width_in + 31``. ``groups[j]``: merged column of original output ``j``.
    ``sizes[h]``: original outputs in merged column ``h`` (0 for padding columns).
    ``original_nnz``: weights of the original layer.
    """

    plan: LayerPlan
    groups: np.ndarray
    sizes: np.ndarray
    width_in: int
    original_nnz: int

    @property
    def width(self) -> int:
        """Merged columns, padded to a multiple of 32."""
        return int(self.sizes.size)


@dataclass
class MergedNetwork:
    """Every layer of a network, merged; see the module docstring."""

    neurons: int
    layers: list[MergedLayer]

    @property
    def width(self) -> int:
        """The widest merged layer (the row width of the kernel's activation buffers)."""
        return max(layer.width for layer in self.layers)

    @property
    def factor(self) -> float:
        """Original multiply-adds per row / merged ones (steps x width summed over layers)."""
        merged = sum(layer.plan.steps * layer.width for layer in self.layers)
        original = sum(layer.original_nnz for layer in self.layers)
        return original / max(merged, 1)


def column_lists(matrix: sp.spmatrix) -> tuple[np.ndarray, np.ndarray]:
    """Each output's (inputs, weights) sorted by input, as (outputs x max degree) arrays;
    slots past a column's degree hold input -1 and weight 0."""
    csc = sp.csc_matrix(matrix, dtype=np.float32)
    csc.sum_duplicates()
    csc.sort_indices()
    outputs = csc.shape[1]
    degree = np.diff(csc.indptr)
    width = max(int(degree.max(initial=0)), 1)
    if outputs and int(degree.min()) == width:  # every column full (RadiX-Net): no padding
        return csc.indices.reshape(outputs, width).astype(np.int64), csc.data.reshape(outputs, width)
    inputs = np.full((outputs, width), -1, dtype=np.int64)
    weights = np.zeros((outputs, width), dtype=np.float32)
    slot = np.arange(csc.nnz) - np.repeat(csc.indptr[:-1], degree)
    column = np.repeat(np.arange(outputs), degree)
    inputs[column, slot] = csc.indices
    weights[column, slot] = csc.data
    return inputs, weights


def _row_hashes(inputs: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each row of (inputs, weights)."""
    salt = np.random.default_rng(12345).integers(1, 2**63, size=inputs.shape[1] * 2, dtype=np.uint64)
    with np.errstate(over="ignore"):
        keys = (inputs.astype(np.uint64) + np.uint64(1)) * salt[: inputs.shape[1]]
        keys ^= weights.view(np.uint32).astype(np.uint64) * salt[inputs.shape[1] :]
        return keys.sum(axis=1)


def duplicate_groups(inputs: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Group equal rows of (``inputs``, ``weights``) (as from :func:`column_lists`).

    Returns ``(groups, representatives)``: ``groups[j]`` numbers row ``j``'s group (in order of
    first appearance) and ``representatives[g]`` is the first row of group ``g``. Rows are
    bucketed by a 64-bit hash, then every row is compared with its bucket's first row; the
    rare bucket that holds unequal rows is split exactly.
    """
    rows = inputs.shape[0]
    if rows == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    _, first, bucket = np.unique(_row_hashes(inputs, weights), return_index=True, return_inverse=True)
    head = first[bucket]
    equal = (inputs == inputs[head]).all(axis=1) & (weights.view(np.uint32) == weights.view(np.uint32)[head]).all(
        axis=1
    )
    if not equal.all():  # a hash collision: compare whole rows
        packed = np.concatenate([inputs, weights.view(np.uint32).astype(np.int64)], axis=1)
        _, first, bucket = np.unique(packed, axis=0, return_index=True, return_inverse=True)
        bucket = bucket.ravel()
    order = np.argsort(first, kind="stable")  # number groups by first appearance
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return rank[bucket], np.sort(first)


def _padded(width: int) -> int:
    return max(BANKS, -(-width // BANKS) * BANKS)


@dataclass
class _ColumnGroups:
    """A layer's groups of equal outputs, and one representative column per group."""

    groups: np.ndarray  # int32 [outputs]
    inputs: np.ndarray  # int64 [groups x degree], -1 past a column's degree
    weights: np.ndarray  # float32 [groups x degree]
    original_nnz: int


def _column_groups(matrix: sp.spmatrix) -> _ColumnGroups:
    inputs, weights = column_lists(matrix)
    groups, representatives = duplicate_groups(inputs, weights)
    return _ColumnGroups(
        groups.astype(np.int32), inputs[representatives], weights[representatives], int((inputs >= 0).sum())
    )


def _merged_layer(found: _ColumnGroups, input_groups: np.ndarray | None, width_in: int) -> MergedLayer:
    width = _padded(found.inputs.shape[0])
    sizes = np.zeros(width, dtype=np.int32)
    np.add.at(sizes, found.groups, 1)
    valid = found.inputs >= 0
    sources = found.inputs[valid] if input_groups is None else input_groups[found.inputs[valid]]
    columns = np.broadcast_to(np.arange(found.inputs.shape[0])[:, None], found.inputs.shape)[valid]
    merged = sp.csc_matrix((found.weights[valid], (sources, columns)), shape=(width_in, width), dtype=np.float32)
    merged.sum_duplicates()  # inputs that fell in one group: one weight, their sum
    merged.sort_indices()
    index, weight = conflict_free_ell(merged.indptr, merged.indices, merged.data, width, width_in)
    values = merged.data
    uniform = float(values[0]) if values.size and np.all(values == values[0]) else None
    plan = LayerPlan(index.astype(np.int32), weight, uniform, int(merged.nnz))
    return MergedLayer(plan, found.groups, sizes, width_in, found.original_nnz)


#: Widest merged layer for which the monitor's per-tile masks are built (wider layers count
#: each tile by looking up its 32 columns' groups).
MASK_MAX_WIDTH = 256


def monitor_masks(groups: np.ndarray, width: int) -> np.ndarray | None:
    """The fused monitor's table for a merged layer: ``masks[level, tile, word]`` has bit
    ``h`` set when merged column ``32 * word + h`` appears at least ``level + 1`` times among
    the original columns of 32-column ``tile``. A row's non-zero count in ``tile`` is then
    the sum over levels and words of popcount(row's non-zero columns & mask). None for
    layers wider than :data:`MASK_MAX_WIDTH`."""
    if width > MASK_MAX_WIDTH or groups.size % 32:
        return None
    tiles = groups.size // 32
    multiplicity = np.zeros((tiles, width), dtype=np.int32)
    np.add.at(multiplicity, (np.repeat(np.arange(tiles), 32), groups), 1)
    levels = int(multiplicity.max(initial=0))
    bits = multiplicity[None, :, :] > np.arange(levels)[:, None, None]
    packed = np.packbits(bits.reshape(levels, tiles, width // 32, 32), axis=-1, bitorder="little")
    return np.ascontiguousarray(packed).view("<u4").reshape(levels, tiles, width // 32)


def first_layer_merge_factor(network: Network) -> float:
    """Outputs of the first layer per distinct weight column (1.0: nothing to merge)."""
    found = _column_groups(network.weights[0])
    return network.neurons / max(found.inputs.shape[0], 1)


#: Outputs per distinct column of the first layer from which merging pays (RadiX-Net: 16).
MERGE_MIN_FACTOR = 2.0


def worth_merging(network: Network) -> bool:
    """Whether to run ``network`` on merged columns (``gpu-merged``, the ``cpu`` engine's
    merged path): its first layer has at most 1 / :data:`MERGE_MIN_FACTOR` as many distinct
    weight columns as outputs."""
    return network.layers > 0 and first_layer_merge_factor(network) >= MERGE_MIN_FACTOR


def merge_network(network: Network, workers: int | None = None) -> MergedNetwork:
    """The merged plan of every layer of ``network``, worked out on ``workers`` threads
    (default: one per CPU). A layer's groups do not depend on the other layers, so they are
    found in parallel first; then each layer is rewritten over its input groups."""
    count = network.layers
    with ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
        found = list(pool.map(lambda layer: _column_groups(network.weights[layer]), range(count)))
        widths_in = [network.neurons] + [_padded(f.inputs.shape[0]) for f in found[:-1]]
        layers = list(
            pool.map(
                lambda layer: _merged_layer(found[layer], found[layer - 1].groups if layer else None, widths_in[layer]),
                range(count),
            )
        )
    return MergedNetwork(network.neurons, layers)


#: Threads per block of the merged kernel.
MERGED_THREADS = 256
#: Tile heights built for the merged kernel (rows per block; at most 32, one warp's lanes).
MERGED_TILE_ROWS = (1, 2, 4, 8, 16, 32)
#: Shared memory the two Z buffers of a block may take; more blocks per SM hide latency.
BUFFER_BUDGET_BYTES = 48 * 1024
#: Shared memory a block of the first launch may take (the H100 allows 227 KiB).
FIRST_LAUNCH_BUDGET_BYTES = 160 * 1024
#: Shared memory for one layer's indices, weights and column sizes, staged once per tile and
#: layer (layers that need more are read from device memory, through L1).
STAGE_BUDGET_BYTES = 32 * 1024


def stage_words(merged: MergedNetwork) -> int:
    """4-byte words of the per-block stage: the largest layer's indices (and weights, when not uniform)
    and column sizes, or the last layer's ``neurons`` groups (for the monitor), whichever is
    more, up to :data:`STAGE_BUDGET_BYTES`."""
    need = max(
        (layer.plan.index.size * (1 if layer.plan.uniform is not None else 2) + layer.width for layer in merged.layers),
        default=0,
    )
    return min(max(need, merged.neurons), STAGE_BUDGET_BYTES // 4)


def merged_tile_rows(
    neurons: int,
    width: int,
    block_shared_limit: int = 227 * 1024,
    rows_per_tile: int | None = None,
    stage_bytes: int = 0,
):
    """(rows per tile, rows per tile of the first launch, whether the first launch holds its
    n-wide input rows in shared memory) for a merged network of ``width`` columns.

    The tile is the largest (at most 16 rows) whose two buffers fit
    :data:`BUFFER_BUDGET_BYTES`; the first launch takes the largest tile, no taller, whose
    input rows fit too, and gathers from the expanded inputs in device memory when not even
    one row fits.
    """
    row_bytes = 2 * (width + 32) * 4 + width // 32 * 4  # two buffers and the monitor's bits
    if rows_per_tile is None:
        fitting = [r for r in MERGED_TILE_ROWS if r <= 16 and r * row_bytes <= BUFFER_BUDGET_BYTES]
        rows_per_tile = max(fitting, default=1)
    elif rows_per_tile not in MERGED_TILE_ROWS:
        raise InputError(f"rows_per_tile must be one of {MERGED_TILE_ROWS} for gpu-merged, not {rows_per_tile}")
    limit = min(block_shared_limit, FIRST_LAUNCH_BUDGET_BYTES)
    first = [
        r
        for r in MERGED_TILE_ROWS
        if r <= rows_per_tile and r * (row_bytes + (neurons + 32) * 4) + stage_bytes <= limit
    ]
    if first:
        return rows_per_tile, max(first), True
    return rows_per_tile, rows_per_tile, False


class MergedKernelTrace(LayerKernelTrace):
    """The trace of ``gpu.gc_merged``: its launches (as
    :class:`~spartan_py.engines.support.layer_plan.LayerKernelTrace`), then the expansion of
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
    stage_bytes: int
    #: rows a warp of the chain kernel takes (``kernels/gc_chain.cu``); None: by launch
    #: (:func:`~spartan_py.engines.support.chain_plan.chain_group_rows`); 0: no chain launches
    chain_rows: int | None
    #: rows a warp takes in each launch that runs the chain kernel, by the launch's first
    #: layer (:meth:`plan_chain_launches`, set once when the engine is built)
    chain_rows_by_start: dict[int, int]
    #: the first layer's merged columns of each input pixel, when binary inputs take the
    #: counts path (:func:`~spartan_py.engines.support.input_counts.pixel_columns`), else None
    input_columns: np.ndarray | None

    def plan_chain_launches(self) -> dict[int, int]:
        """{first layer: rows a warp} of the launches (``self.chunks``) that run the chain
        kernel (:func:`~spartan_py.engines.support.chain_plan.chain_launch`)."""
        plan, start = {}, 0
        for length in self.chunks:
            rows = chain_group_rows(length) if self.chain_rows is None else self.chain_rows
            if chain_launch(self.merged.layers[start : start + length], start, self.merged.width, rows):
                plan[start] = rows
            start += length
        return plan

    def plan_input_counts(self, enabled: bool) -> np.ndarray | None:
        """:attr:`input_columns` for the engine option ``input_counts`` (None when off or when
        the first layer does not allow the counts path)."""
        if not enabled or not self.merged.layers:
            return None
        return pixel_columns(self.merged.layers[0], self.merged.neurons)

    def counts_first_layer(self, bit_inputs: bool) -> bool:
        """Whether the first launch counts lit inputs (binary inputs, and a first layer that
        allows it: :mod:`~spartan_py.engines.support.input_counts`)."""
        return bit_inputs and self.input_columns is not None

    def first_launch_tile(self, bit_inputs: bool) -> tuple[int, int]:
        """(rows per tile, words of input tile a row) of the first launch: binary inputs
        as counts of lit inputs per merged column where the first layer allows it
        (:func:`~spartan_py.engines.support.input_counts.count_tile_words`), else as bits
        (``n / 32 + 1`` words a row), in tiles of ``rows_per_tile``; other inputs as floats
        (``n + 32``, :func:`merged_tile_rows`' first tile), or none when they are too wide."""
        n = self.merged.neurons
        if self.counts_first_layer(bit_inputs):
            return self.rows_per_tile, count_tile_words(self.merged.layers[0], n)
        if bit_inputs:
            return self.rows_per_tile, n // 32 + 1
        return self.first_rows, (n + 32) if self.first_from_tile else 0

    def launch_cost(
        self, start, stop, rows_in, entering, input_nnz, row_layers, tile_layers, streamed=False, bit_inputs=False
    ):
        """``tile_layers`` is not needed: merged tiles compute whole tiles, so the cost model
        works their weight loads out from the multiply-adds. ``streamed``: the weights come
        from host memory (named in the variant);
        ``bit_inputs``: the first launch holds binary inputs as bits (its own instance, "B"),
        or counts them (instance "P": its work is an increment per lit input and merged
        column it feeds, and a lookup per merged output).
        A chain launch is its own kernel (instance "C", the rows a warp takes); its warps work
        independently, so its record describes a warp as the block (one group of rows, its two
        buffers, 32 resident on an SM) and leaves the stage of indices, loaded once per
        launch, to the fitted per-wave cost."""
        n, layers, stride = self.merged.neurons, self.merged.layers, self.merged.width
        chunk = layers[start:stop]
        useful = sum(count * layer.original_nnz // max(n, 1) for count, layer in zip(entering, chunk))
        suffix = f"xW{stride}-layers{start + 1}-{stop}" + ("-streamed" if streamed else "")
        group = self.chain_rows_by_start.get(start, 0)
        if group:
            groups = -(-rows_in // group)
            return LaunchCost(
                variant=f"C{group}{suffix}",
                tile_rows=group,
                tiles=groups,
                bytes_read=rows_in * (layers[start - 1].width * 4 + 4)
                + chain_shared_bytes(chunk, stride, 0)  # the stages (each block's copy after the first from L2)
                + sum(4 * layer.width for layer in chunk),  # the column sizes
                row_bytes_written=chunk[-1].width * 4 + 4,
                useful_macs=useful,
                executed_macs=executed_macs(
                    [layer.plan for layer in chunk], start, groups, group, [layer.width for layer in chunk], row_layers
                ),
                block_threads=32,
                block_shared_bytes=chain_warp_bytes(stride, group),
                resident_blocks_per_sm=CHAIN_THREADS // 32,
            )
        first_rows, input_words = self.first_launch_tile(bit_inputs)
        tile = first_rows if start == 0 else self.rows_per_tile
        tiles = -(-rows_in // tile)
        if start == 0 and bit_inputs:
            read = input_nnz * 4 + (rows_in + 1) * 4  # the indices only
        elif start == 0:
            read = input_nnz * 8 + (rows_in + 1) * 4 if self.first_from_tile else rows_in * n * 4
        else:
            read = rows_in * (layers[start - 1].width * 4 + 4)
        weight_bytes = sum(
            layer.plan.index.size * 4
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
            [layer.plan for layer in chunk], start, tiles, tile, [layer.width for layer in chunk], row_layers
        )
        columns = self.input_columns if start == 0 and bit_inputs else None
        if columns is not None:  # the counts path (counts_first_layer)
            kind = "P"
            pairs = int(np.count_nonzero(columns.view(np.uint16) != NO_COLUMN))
            first = executed_macs([layers[0].plan], 0, tiles, tile, [layers[0].width], row_layers)
            executed += input_nnz * pairs // max(n, 1) + first // layers[0].plan.steps - first
        return LaunchCost(
            variant=f"{kind}{tile}{suffix}",
            tile_rows=tile,
            tiles=tiles,
            bytes_read=read + weight_bytes,
            row_bytes_written=chunk[-1].width * 4 + 4,
            useful_macs=useful,
            executed_macs=executed,
            block_threads=MERGED_THREADS,
            block_shared_bytes=(tile * (2 * (stride + 32) + stride // 32) + (tile * input_tile + 3) // 4 * 4) * 4
            + self.stage_bytes,
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
        layers, n = self.merged.layers, self.merged.neurons
        final = int(counts[len(layers)])
        return [
            pass_through(
                run_id,
                len(layers),
                EXPAND,
                "final-rows",
                rows=final,
                cols=n,
                bytes_read=final * layers[-1].width * 4 + n * 4,
                bytes_written=final * n * 4,
                measured_us=seconds[len(self.chunks)] * 1e6 if len(seconds) > len(self.chunks) else float("nan"),
                device=self.device,
            )
        ]
