"""The merged kernel's shapes and decisions (``kernels/gc_merged.cu``; backend ``gpu-merged``),
worked out on the host so that the engine and its CPU twin take the same ones: the monitor's
masks, rows per tile and the shared-memory budgets."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from spartan_py.costmodel.families import FAMILIES, GC_MERGED
from spartan_py.engines.rows.plan import ROWS_PER_TILE
from spartan_py.engines.shared.column_merge import MergedLayer
from spartan_py.errors import BackendUnavailableError, InputError

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


#: Threads per block of the merged kernel's first launch (block tiles over every input row).
MERGED_THREADS = 256

#: Threads per block of the merged kernel's later launches (wide networks, whose later launches
#: do not run the chain kernel): persistent blocks, one an SM (the launch bound's 64 registers a
#: thread), each taking a tile of rows through the launch's layers at a time. A 65536 x 1920
#: round of 1024-thread blocks took 113 ms on 4-row tiles against 121 ms for two 512-thread
#: blocks of 2 rows an SM (528 rows either way), and 66 ms on 2-row tiles (264 rows; one H200,
#: docs/performance-notes.md), so that a launch's last round takes shorter tiles
#: (:func:`split_cut`): 65536 x 1920 on 60000 rows 1247 -> 1065 ms, a quarter of the rows
#: 370 -> 294 ms; 16384 x 1920 160 -> 137 ms (one H200, by turns).
MERGED_LATER_THREADS = 1024


@dataclass(frozen=True)
class LaterShape:
    """How the later block-tile launches run: blocks of ``threads``, tiles of ``rows`` rows and,
    where ``tail_rows`` is not 0, each launch split in two (:func:`split_cut`): its whole
    rounds of ``rows``-row tiles, then the rest in tiles of ``tail_rows`` when they fit one
    round of those."""

    threads: int
    rows: int
    tail_rows: int = 0


def later_launch_shape(width: int, rows_per_tile: int | None = None) -> LaterShape:
    """The later block-tile launches' shape for a merged network ``width`` columns wide: tiles of
    :func:`later_tile_rows` in blocks of :data:`MERGED_LATER_THREADS`, their last round split
    off in tiles of half the rows where a tile has four rows or more. A ``rows_per_tile`` given
    is kept for every tile (no split)."""
    rows = later_tile_rows(width, rows_per_tile)
    tail = rows // 2 if rows_per_tile is None and rows >= 4 else 0
    return LaterShape(MERGED_LATER_THREADS, rows, tail)


def split_cut(live_rows: int, round_rows: int, tail_round_rows: int) -> int:
    """Where a split later launch (``kernels/gc_merged.cu``, ``split_part``) divides ``live_rows``:
    the head takes rows ``[0, cut)`` in whole rounds of ``round_rows`` (its tile rows times its
    grid), the tail the rest, when the rest fits one round of the tail's shorter tiles
    (``tail_round_rows``); else the head takes them all. The kernel works the same out from the
    live-row count on the device."""
    full = live_rows // round_rows * round_rows
    return full if live_rows - full <= tail_round_rows else live_rows


def later_module_shares_rows(later_rows: int) -> bool:
    """Whether the later block-tile launches, on tiles of ``later_rows`` rows, run the kernel's
    later module (``GM_LATER``, ``GM_INDEX16``): a thread's items one column of several rows,
    so that one index load serves them, and 16-bit indices in device memory (a later layer's
    input is narrower than 65536 columns). These launches stream each layer's indices from L2
    once per tile (a 65536-neuron tail layer's 51 x 4096), so shared loads are their time.
    Tiles of one row share nothing and keep the first launches' code: in the later module they
    ran 65536 x 1920 in 1854 against 1704 ms (one H200, docs/performance-notes.md)."""
    return later_rows > 1


def later_index_dtype(later_rows: int) -> type[np.integer]:
    """The dtype of the indices the later block-tile launches read, on tiles of ``later_rows``."""
    return np.uint16 if later_module_shares_rows(later_rows) else np.int32


def merged_module_options(threads: int, later: bool) -> tuple[str, ...]:
    """nvcc options of a ``kernels/gc_merged.cu`` module of blocks of ``threads``: the first
    launches' code, or (``later``) the later module (:func:`later_module_shares_rows`)."""
    options = (f"-DGM_THREADS={threads}", f"-DGM_MIN_BLOCKS={merged_min_blocks(threads)}")
    return options + ("-DGM_LATER", "-DGM_INDEX16") if later else options


#: Threads an SM the merged kernel's launch bound keeps resident (64 registers a thread, the
#: kernel's ``GM_MIN_BLOCKS`` = this over a block's threads; the cost model reads it from the
#: family): at 5 and 6 blocks of 256 threads the registers spilled and 65536 x 1920 ran
#: 1.5-1.8x slower (session 37).
MERGED_SM_THREADS = FAMILIES[GC_MERGED].register_bound_threads_per_sm


def merged_min_blocks(threads: int) -> int:
    """The merged kernel's launch bound for blocks of ``threads``: the blocks an SM holds by
    registers (``GM_MIN_BLOCKS``)."""
    return MERGED_SM_THREADS // threads


#: Tile heights built for the merged kernel (rows per block; at most 32, one warp's lanes).
MERGED_TILE_ROWS = (1, 2, 4, 8, 16, 32)

#: Shared memory the two Z buffers of a block may take; more blocks per SM hide latency.
BUFFER_BUDGET_BYTES = 48 * 1024

#: Shared memory the rows of a later block-tile launch's tile may take (two buffers and bits a
#: row), one block an SM: 65536 neurons' tail runs tiles of four rows (131 KiB), each index load
#: serving all four; 16384 neurons tiles of eight (67 KiB).
LATER_BUFFER_BUDGET_BYTES = 132 * 1024

#: Shared memory a block of the first launch may take (the H100 allows 227 KiB).
FIRST_LAUNCH_BUDGET_BYTES = 160 * 1024

#: Shared memory for one layer's indices, weights and column sizes, staged once per tile and
#: layer (layers that need more are read from device memory, through L1).
STAGE_BUDGET_BYTES = 32 * 1024

#: Shared memory a block of the first launch may take when binary inputs enter as counts of lit
#: inputs (:mod:`~spartan_py.engines.shared.input_counts`) and the tile grows taller than
#: ``rows_per_tile`` (:func:`counts_tile_rows`): four blocks an SM of 228 KiB, the kernel's
#: launch bound. Official proxy, H100: 32-row tiles (41 KiB) ran launch 1 in 58 against 63 us;
#: at 4096 neurons a 32-row block takes 121 KiB (one an SM) and ran it in 428 against 233 us.
COUNTS_TILE_BUDGET_BYTES = 56 * 1024


def stage_words(layers: Sequence[MergedLayer], neurons: int, rows_per_tile: int) -> int:
    """4-byte words of the stage of a block of a launch computing ``layers``: room for what it
    will hold, up to :data:`STAGE_BUDGET_BYTES`: the largest of its layers' indices (and
    weights, when not uniform) and column sizes among those that fit, the ``neurons`` groups a
    monitored launch looks up if they fit, and a tile's one-byte counts (``rows_per_tile x
    neurons / 32``).

    What does not fit is read from device memory, so no room is kept for it: at 65536 neurons
    a block that kept 24 KiB for the few layers that fit left 3 blocks a SM instead of 4 in
    every launch (the tail 21% slower, one H200: docs/performance-notes.md).
    """
    budget = STAGE_BUDGET_BYTES // 4
    needs = [layer.plan.index.size * (1 if layer.plan.uniform is not None else 2) + layer.width for layer in layers]
    needs += [neurons, -(-rows_per_tile * (neurons // 32) // 4)]
    return max((need for need in needs if need <= budget), default=0)


def merged_block_bytes(rows: int, stride: int, input_words: int, stage_words: int) -> int:
    """Dynamic shared memory of a block of the merged kernel (``kernels/gc_merged.cu``): ``rows``
    rows' two buffers (``stride`` floats and 32 padding columns each) and non-zero bits, the
    first launch's input tile of ``input_words`` a row (rounded up to 16-byte units, as the
    kernel does; 0 in later launches) and a stage of ``stage_words``."""
    return rows * merged_row_bytes(stride) + 4 * ((rows * input_words + 3) // 4 * 4 + stage_words)


def merged_row_bytes(width: int) -> int:
    """Shared memory a row of a merged network ``width`` columns wide takes in a block: two
    buffers with their padding, and the monitor's non-zero bits."""
    return 2 * (width + 32) * 4 + width // 32 * 4


def later_tile_rows(width: int, rows_per_tile: int | None = None) -> int:
    """Rows a tile of the later block-tile launches takes: ``rows_per_tile`` when given, else
    the tallest of :data:`MERGED_TILE_ROWS` (at most 16) whose rows fit
    :data:`LATER_BUFFER_BUDGET_BYTES` (at least one)."""
    if rows_per_tile is not None:
        return rows_per_tile
    row_bytes = merged_row_bytes(width)
    return max((r for r in MERGED_TILE_ROWS if r <= 16 and r * row_bytes <= LATER_BUFFER_BUDGET_BYTES), default=1)


def counts_tile_rows(rows_per_tile: int, stride: int, input_words: int, stage_words: int) -> int:
    """Rows a tile of the first launch takes when binary inputs enter as counts: the tallest of
    :data:`MERGED_TILE_ROWS`, no shorter than ``rows_per_tile``, whose block fits
    :data:`COUNTS_TILE_BUDGET_BYTES`. A block builds the first layer's table of sums once for
    all its rows, and with no multiply-adds in that layer the taller tile costs no occupancy
    while it fits."""
    fitting = [
        rows
        for rows in MERGED_TILE_ROWS
        if rows >= rows_per_tile
        and merged_block_bytes(rows, stride, input_words, stage_words) <= COUNTS_TILE_BUDGET_BYTES
    ]
    return max(fitting, default=rows_per_tile)


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
    one row fits. A network whose one row does not fit a block at all (an unmergeable 65536-neuron
    one: 520 KiB a row) is refused with :class:`~spartan_py.errors.BackendUnavailableError`.
    """
    row_bytes = merged_row_bytes(width)
    if row_bytes > block_shared_limit:
        raise BackendUnavailableError(
            f"gpu-merged holds each row of the merged network in shared memory: {width} merged columns need "
            f"{row_bytes // 1024} KiB a row, more than the {block_shared_limit // 1024} KiB a block may have "
            f"(this network's {neurons} neurons merge into no fewer columns); use backend cpu"
            + (" or gpu" if neurons in ROWS_PER_TILE else "")  # the widths the rows kernel runs
        )
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
