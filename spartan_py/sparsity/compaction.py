"""The compaction engine: live rows and non-zero tiles of an activation matrix, and back.

On the GPU each compaction is count, scan and move on the device: the counts come from
the monitor (or a counting pass when none is given), a scan gives every kept row or tile its
position, and a kernel of ``kernels/spartan_tiles.cu`` moves it there. Rows: three launches
(live rows per block of 1024, their ids in order, the gather of the rows) and no host round
trip when the caller passes the live-row count it already has (else one host read of it, to
size the packed rows). Tiles: two launches into buffers with room for every tile, so listing
them needs no host round trip. On the CPU the same steps run in NumPy.

Example::

    import numpy as np
    from spartan_py.sparsity import compact_rows, compact_tiles, expand_rows, expand_tiles
    a = np.zeros((64, 64), np.float32); a[3, 5] = 1.0; a[40, 60] = 2.0
    rows = compact_rows(a)            # rows.ids == [3, 40], rows.values.shape == (2, 64)
    tiles = compact_tiles(a, (16, 16))  # tiles.tiles.coords == [[0, 0], [2, 3]]
    assert (expand_rows(rows) == a).all() and (expand_tiles(tiles) == a).all()
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from spartan_py.errors import InputError
from spartan_py.sparsity.arrays import array_module, as_matrix, is_gpu_array
from spartan_py.sparsity.gpu_kernels import LIVE_ROWS_PER_BLOCK, tile_kernels
from spartan_py.sparsity.tiles import TileList, TileShape, tile_counts


@dataclass(frozen=True)
class CompactRows:
    """The live rows of a ``rows x cols`` matrix: ``ids`` (int32, ascending) and ``values``."""

    ids: Any
    values: Any
    rows: int

    @property
    def live(self) -> int:
        """Number of live rows."""
        return int(self.ids.shape[0])


@dataclass(frozen=True)
class CompactTiles:
    """The non-zero tiles of a matrix: where they are (``tiles``) and their packed
    contents ``data`` (float32 ``[T x tile.rows x tile.cols]``, zero past the matrix edge)."""

    tiles: TileList
    data: Any


def compact_rows(a, row_nnz=None, *, live: int | None = None) -> CompactRows:
    """The rows of ``a`` with a non-zero (``row_nnz``: per-row counts from the monitor, else
    counted here). ``live``: how many there are, when the caller knows (the monitor's
    scalars); on the GPU it saves the one host read that sizes the packed rows, and is
    trusted (checked on the CPU)."""
    a = as_matrix(a, "a")
    xp = array_module(a)
    m, n = a.shape
    counts = xp.count_nonzero(a, axis=1) if row_nnz is None else xp.asarray(row_nnz)
    if counts.shape != (m,):
        raise InputError(f"row_nnz has shape {tuple(counts.shape)}; expected ({m},)")
    if not is_gpu_array(a):
        ids = np.flatnonzero(counts > 0).astype(np.int32)
        if live is not None and live != ids.size:
            raise InputError(f"live = {live}, but {ids.size} rows have a non-zero")
        return CompactRows(ids, a[ids], m)
    # optional dependency (extra gpu)
    import cupy

    kernels = tile_kernels(cupy.cuda.Device().id)
    counts = cupy.ascontiguousarray(counts, dtype=cupy.int32)
    a = cupy.ascontiguousarray(a, dtype=cupy.float32)
    blocks = max(-(-m // LIVE_ROWS_PER_BLOCK), 1)
    block_live = cupy.zeros(blocks, dtype=cupy.int32)
    if m:
        kernels["count_live_rows"]((blocks,), (LIVE_ROWS_PER_BLOCK,), (counts, np.int32(m), block_live))
    total = int(block_live.sum()) if live is None else int(live)
    ids = cupy.empty(total, dtype=cupy.int32)
    values = cupy.empty((total, n), dtype=cupy.float32)
    if total:
        kernels["list_live_rows"]((blocks,), (LIVE_ROWS_PER_BLOCK,), (counts, np.int32(m), block_live, ids))
        _move_rows(kernels, "gather", a, ids, values)
    return CompactRows(ids, values, m)


def _move_rows(kernels: dict, direction: str, matrix, ids, packed) -> None:
    """Queue ``move_rows`` (``kernels/spartan_tiles.cu``): ``gather`` copies rows ``ids`` of
    ``matrix`` into ``packed``, ``scatter`` copies them back; a block per row, float4 loads
    where the rows are a multiple of 4 wide."""
    n = packed.shape[1]
    kernel = kernels[f"{direction}_rows_vec4" if n % 4 == 0 else f"{direction}_rows"]
    kernel((ids.shape[0],), (128,), (matrix, ids, packed, np.int32(n)))


def expand_rows(compact: CompactRows, *, out=None):
    """The full matrix again: the live rows in place, zeros elsewhere (into ``out`` when
    given: float32, ``rows x cols``, on the same device)."""
    xp = array_module(compact.values)
    shape = (compact.rows, compact.values.shape[1])
    if out is None:
        out = xp.zeros(shape, dtype=xp.float32)
    elif out.shape != shape or out.dtype != np.float32 or array_module(out) is not xp:
        got = f"{out.dtype} {tuple(out.shape)}"
        raise InputError(f"out must be float32 of shape {shape} on the rows' device, got {got}")
    else:
        out.fill(0)
    if not is_gpu_array(out):
        out[compact.ids] = compact.values
        return out
    # optional dependency (extra gpu)
    import cupy

    if compact.live and shape[1]:
        # the gather's twin; CuPy's indexed assignment ran at about a third of the bandwidth,
        # bound on its index arithmetic rather than on memory
        values = cupy.ascontiguousarray(compact.values, dtype=cupy.float32)
        ids = cupy.ascontiguousarray(compact.ids, dtype=cupy.int32)
        _move_rows(tile_kernels(cupy.cuda.Device().id), "scatter", out, ids, values)
    return out


def tile_list(tile_nnz, shape: tuple[int, int], tile) -> TileList:
    """The :class:`TileList` of the tiles whose count is non-zero (counts on either device)."""
    tile = TileShape.of(tile)
    xp = array_module(tile_nnz)
    counts = xp.asarray(tile_nnz)
    if counts.shape != tile.grid(shape):
        raise InputError(
            f"tile counts of shape {tuple(counts.shape)} do not fit a {shape} matrix in {tile} tiles "
            f"(expected {tile.grid(shape)})"
        )
    tiles_m, tiles_n = counts.shape
    if not is_gpu_array(counts):
        flags = (counts.ravel() > 0).astype(np.int32)
        row_ptr = np.concatenate(
            [np.zeros(1, np.int32), np.cumsum(flags.reshape(tiles_m, tiles_n).sum(axis=1), dtype=np.int32)]
        )
        flat = np.flatnonzero(flags)
        coords = np.stack([flat // tiles_n, flat % tiles_n], axis=1).astype(np.int32).reshape(-1, 2)
        return TileList((int(shape[0]), int(shape[1])), tile, row_ptr, np.ascontiguousarray(coords[:, 1]), coords)
    # optional dependency (extra gpu)
    import cupy

    total = tiles_m * tiles_n
    row_ptr = cupy.empty(tiles_m + 1, dtype=cupy.int32)
    coords = cupy.empty((max(total, 1), 2), dtype=cupy.int32)
    col_index = cupy.empty(max(total, 1), dtype=cupy.int32)
    counts = cupy.ascontiguousarray(counts, dtype=cupy.int32)
    row_count = cupy.empty(max(tiles_m, 1), dtype=cupy.int32)
    kernels = tile_kernels(cupy.cuda.Device().id)
    dims = (np.int32(tiles_m), np.int32(tiles_n))
    kernels["count_tile_rows"]((min(max(-(-tiles_m // 8), 1), 4096),), (256,), (counts, *dims, row_count))
    kernels["list_tile_rows"](
        (max(-(-tiles_m // 32), 1),), (1024,), (counts, row_count, *dims, row_ptr, coords, col_index)
    )
    return TileList((int(shape[0]), int(shape[1])), tile, row_ptr, col_index, coords)


def compact_tiles(a, tile, tile_nnz=None, *, pack: bool = True) -> CompactTiles:
    """The non-zero tiles of ``a`` (``tile_nnz``: the monitor's counts at this tile shape,
    else counted here) and, when ``pack``, their contents."""
    a = as_matrix(a, "a")
    tile = TileShape.of(tile)
    counts = tile_counts(a, tile) if tile_nnz is None else tile_nnz
    tiles = tile_list(counts, a.shape, tile)
    if not pack:
        return CompactTiles(tiles, None)
    m, n = a.shape
    if not is_gpu_array(a):
        data = np.zeros((tiles.count, tile.rows, tile.cols), dtype=np.float32)
        for p, (i, j) in enumerate(tiles.coords):
            block = a[i * tile.rows : (i + 1) * tile.rows, j * tile.cols : (j + 1) * tile.cols]
            data[p, : block.shape[0], : block.shape[1]] = block
        return CompactTiles(tiles, data)
    # optional dependency (extra gpu)
    import cupy

    data = cupy.empty((tiles.count, tile.rows, tile.cols), dtype=cupy.float32)
    if tiles.count:
        args = (a, tiles.coords, data, np.int32(m), np.int32(n), np.int32(tile.rows), np.int32(tile.cols))
        tile_kernels(cupy.cuda.Device().id)["pack_tiles"]((tiles.count,), (256,), args)
    return CompactTiles(tiles, data)


def expand_tiles(compact: CompactTiles):
    """The full matrix again from packed tiles (zeros outside them)."""
    if compact.data is None:
        raise InputError("these tiles were compacted with pack=False: there is no tile data to expand")
    tiles, tile = compact.tiles, compact.tiles.tile
    m, n = tiles.shape
    xp = array_module(compact.data)
    out = xp.zeros((m, n), dtype=xp.float32)
    if not is_gpu_array(out):
        for p, (i, j) in enumerate(tiles.coords):
            block = out[i * tile.rows : (i + 1) * tile.rows, j * tile.cols : (j + 1) * tile.cols]
            block[...] = compact.data[p, : block.shape[0], : block.shape[1]]
        return out
    # optional dependency (extra gpu)
    import cupy

    if tiles.count:
        args = (out, tiles.coords, compact.data, np.int32(m), np.int32(n), np.int32(tile.rows), np.int32(tile.cols))
        tile_kernels(cupy.cuda.Device().id)["unpack_tiles"]((tiles.count,), (256,), args)
    return out
