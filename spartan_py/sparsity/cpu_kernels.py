"""Numba kernels of the CPU path: the layer epilogue with and without a fused monitor."""

from __future__ import annotations

from numba import njit, prange


@njit(parallel=True, cache=True)
def epilogue_plain(z, bias, clamp, y):  # pragma: no cover - compiled
    """y = min(clamp, max(0, z + bias)), row by row in parallel."""
    m, n = z.shape
    for r in prange(m):
        for c in range(n):
            v = z[r, c] + bias[c]
            y[r, c] = min(clamp, v) if v > 0 else 0.0


@njit(parallel=True, cache=True)
def epilogue_fused(z, bias, clamp, y, tile_rows, tile_cols, tile_nnz, row_nnz):  # pragma: no cover - compiled
    """The same epilogue counting non-zeros per tile and per row as it writes them; each
    tile row is one parallel task, so the counts need no atomics. ``tile_nnz`` and
    ``row_nnz`` are overwritten."""
    m, n = z.shape
    tiles_m = (m + tile_rows - 1) // tile_rows
    for ti in prange(tiles_m):
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
