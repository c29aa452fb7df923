"""The rows kernel's shapes and decisions (``kernels/gc_layer.cu``; backend ``gpu``), worked out on
the host so that the engine and its CPU twin take the same ones: threads and rows per tile,
layers per launch, when a tile compacts its rows."""

from __future__ import annotations

import numpy as np

from spartan_py.engines.shared.launches import MAX_LAUNCH_LAYERS
from spartan_py.engines.shared.layer_plan import LayerPlan

#: Threads per block (one kernel build each); output columns per thread = neurons / threads.
THREAD_CHOICES = (1024, 512)

#: The default: one block of 32 warps per SM (measured faster than 512; docs/performance-notes.md).
DEFAULT_THREADS = 1024

#: neurons -> default rows per tile (the tile, R x (neurons + 32) floats, is ~64 KiB).
ROWS_PER_TILE: dict[int, int] = {1024: 16, 4096: 4, 16384: 1}

#: Other tile heights built for 1024 neurons (``rows_per_tile=``).
EXTRA_ROWS_1024 = (12, 8, 4, 2)

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


def launch_layer_cap(plans: list[LayerPlan], rows_per_tile: int) -> int:
    """Most layers a ``"doubling"`` launch of the rows kernel takes: :data:`MAX_LAUNCH_LAYERS`,
    or, for one-row tiles, as many of the largest layer as fit :data:`ONE_ROW_LAUNCH_BYTES`."""
    if rows_per_tile > 1 or not plans:
        return MAX_LAUNCH_LAYERS
    largest = max(plan.device_bytes for plan in plans)
    return int(min(MAX_LAUNCH_LAYERS, max(1, ONE_ROW_LAUNCH_BYTES // max(largest, 1))))


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
