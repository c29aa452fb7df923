"""Numba kernels of the CPU path: the layer epilogue with and without a fused monitor.

Each runs over a part of the rows (or of the tile rows), the parts spread over the cores by
:func:`~spartan_py.host.threads.run_split`.
"""

from __future__ import annotations

from numba import njit


@njit(cache=True, nogil=True)
def epilogue_plain(first, stop, z, bias, clamp, y):  # pragma: no cover - compiled
    """y = min(clamp, max(0, z + bias)) for rows ``first:stop``."""
    n = z.shape[1]
    for r in range(first, stop):
        for c in range(n):
            v = z[r, c] + bias[c]
            y[r, c] = min(clamp, v) if v > 0 else 0.0


@njit(cache=True, nogil=True)
def epilogue_fused(
    first, stop, z, bias, clamp, y, tile_rows, tile_cols, tile_nnz, row_nnz
):  # pragma: no cover - compiled
    """The same epilogue for tile rows ``first:stop``, counting non-zeros per tile and per row
    as it writes them; a tile row is never split between parts, so the counts need no atomics.
    Their rows of ``tile_nnz`` and ``row_nnz`` are overwritten."""
    m, n = z.shape
    for ti in range(first, stop):
        for tj in range(tile_nnz.shape[1]):
            tile_nnz[ti, tj] = 0
        for r in range(ti * tile_rows, min(m, (ti + 1) * tile_rows)):
            count = 0
            for c in range(n):
                v = z[r, c] + bias[c]
                v = min(clamp, v) if v > 0 else 0.0
                y[r, c] = v
                if v != 0.0:
                    count += 1
                    tile_nnz[ti, c // tile_cols] += 1
            row_nnz[r] = count
