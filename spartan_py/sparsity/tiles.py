"""Activation tiles: the tile shape, per-tile non-zero counts, and the list of non-zero tiles.

A matrix ``[M x N]`` is cut into tiles of ``rows x cols`` from the top-left corner; edge
tiles are partial. Tile ``(i, j)`` covers rows ``i*rows .. (i+1)*rows - 1`` and columns
``j*cols .. (j+1)*cols - 1``. Counts are ``int32 [tiles_m x tiles_n]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from spartan_py.errors import InputError
from spartan_py.sparsity.arrays import array_module


@dataclass(frozen=True)
class TileShape:
    """A tile of ``rows x cols`` activations (both powers of two)."""

    rows: int
    cols: int

    def __post_init__(self):
        for name in ("rows", "cols"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or value < 1 or value & (value - 1):
                raise InputError(f"tile {name} must be a power of two >= 1, got {value!r}")

    @classmethod
    def of(cls, tile) -> TileShape:
        """A TileShape from a TileShape, an int (square) or a ``(rows, cols)`` pair."""
        if isinstance(tile, TileShape):
            return tile
        if isinstance(tile, (int, np.integer)):
            return cls(int(tile), int(tile))
        try:
            rows, cols = tile
        except (TypeError, ValueError):
            raise InputError(f"a tile is an int or a (rows, cols) pair, got {tile!r}") from None
        return cls(int(rows), int(cols))

    def grid(self, shape: tuple[int, int]) -> tuple[int, int]:
        """(tiles_m, tiles_n) covering a matrix of ``shape``."""
        m, n = shape
        return -(-m // self.rows), -(-n // self.cols)

    @property
    def size(self) -> int:
        """Activations in one full tile."""
        return self.rows * self.cols

    def __str__(self) -> str:
        return f"{self.rows}x{self.cols}"


def tile_counts(a, tile) -> np.ndarray:
    """Non-zeros per tile of ``a`` (NumPy or CuPy; the result lives on the same device)."""
    tile = TileShape.of(tile)
    xp = array_module(a)
    m, n = a.shape
    tm, tn = tile.grid((m, n))
    flags = xp.zeros((tm * tile.rows, tn * tile.cols), dtype=xp.int32)
    flags[:m, :n] = a != 0
    return flags.reshape(tm, tile.rows, tn, tile.cols).sum(axis=(1, 3), dtype=xp.int32)


def coarsen_counts(counts, tile, to) -> np.ndarray:
    """Counts of ``tile``-shaped tiles summed into the larger tiles ``to`` (whose sides are
    multiples of ``tile``'s)."""
    tile, to = TileShape.of(tile), TileShape.of(to)
    if to.rows % tile.rows or to.cols % tile.cols:
        raise InputError(f"tile {to} is not a multiple of {tile}")
    xp = array_module(counts)
    fr, fc = to.rows // tile.rows, to.cols // tile.cols
    tm, tn = counts.shape
    padded = xp.zeros((-(-tm // fr) * fr, -(-tn // fc) * fc), dtype=xp.int32)
    padded[:tm, :tn] = counts
    return padded.reshape(padded.shape[0] // fr, fr, padded.shape[1] // fc, fc).sum(axis=(1, 3), dtype=xp.int32)


@dataclass(frozen=True)
class TileList:
    """The non-zero tiles of a matrix, on the matrix's device: ``row_ptr`` int32
    ``[tiles_m + 1]`` indexes the tiles of each tile row (CSR over tiles); ``col_index``
    int32 holds each listed tile's column and ``coords`` int32 ``[T x 2]`` its (tile row,
    tile column), row-major order. On the GPU the list is built without a host round trip:
    its buffers have room for every tile, and ``count`` (and so ``coords``) reads the total
    from the device on first use."""

    shape: tuple[int, int]
    tile: TileShape
    row_ptr: Any
    col_index: Any  # may be longer than count (GPU buffers)
    coords_buffer: Any = field(repr=False, default=None)
    _count: list = field(default_factory=list, repr=False, compare=False)

    @property
    def count(self) -> int:
        """Number of listed (non-zero) tiles."""
        if not self._count:
            self._count.append(int(self.row_ptr[-1]))
        return self._count[0]

    @property
    def coords(self):
        """(tile row, tile column) of each listed tile, ``[count x 2]``."""
        return self.coords_buffer[: self.count]

    @property
    def grid(self) -> tuple[int, int]:
        """(tiles_m, tiles_n) of the whole matrix."""
        return self.tile.grid(self.shape)

    @property
    def tile_density(self) -> float:
        """Listed tiles / all tiles."""
        tm, tn = self.grid
        return self.count / max(tm * tn, 1)


@dataclass(frozen=True)
class TileCounts:
    """The non-zeros of each ``tile`` of a matrix of ``shape`` (``nnz``: int32 ``[tiles_m x
    tiles_n]`` on the matrix's device, as the monitor writes them). Given to
    :func:`~spartan_py.sparsity.tile_sparse_matmul` in place of a :class:`TileList`, it lets
    the GPU's FP32 kernel list the non-zero tiles itself, in the same launch."""

    shape: tuple[int, int]
    tile: TileShape
    nnz: Any

    def __post_init__(self):
        object.__setattr__(self, "tile", TileShape.of(self.tile))
        expected = self.tile.grid(self.shape)
        if tuple(self.nnz.shape) != expected:
            raise InputError(
                f"tile counts of shape {tuple(self.nnz.shape)} do not fit a {tuple(self.shape)} matrix "
                f"in {self.tile} tiles (expected {expected})"
            )

    @property
    def grid(self) -> tuple[int, int]:
        """(tiles_m, tiles_n) of the whole matrix."""
        return self.tile.grid(self.shape)


def tile_utilization(a, tile) -> float:
    """Useful / executed multiply-adds of a tile-sparse product at this tile size: the
    non-zeros of ``a`` over the activations in its non-zero tiles (full tiles; 1.0 for a
    matrix without non-zeros)."""
    return counts_utilization(tile_counts(a, tile), tile)


def counts_utilization(counts, tile) -> float:
    """:func:`tile_utilization` from per-tile non-zero counts already at ``tile``."""
    active = int((counts > 0).sum())
    return 1.0 if active == 0 else float(counts.sum()) / (active * TileShape.of(tile).size)
