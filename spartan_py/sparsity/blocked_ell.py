"""Blocked-ELL: the block-sparse format of cuSPARSE's SpMM, as a baseline and a policy candidate.

A matrix is cut into ``block x block`` squares; each block row stores the same number of
blocks (the most any block row has, ``width``), padded with empty ones (column -1). The
blocks come from the layer's monitor counts when their tile divides the block or the block
divides the tile (no pass over the activations), else from the activations themselves.

On CuPy arrays the product is cuSPARSE's (:mod:`spartan_py.sparsity.cusparse_bell`); on
NumPy arrays it is the same blocks multiplied with NumPy, the reference the GPU is checked
against.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from spartan_py.errors import InputError
from spartan_py.sparsity.arrays import array_module, is_gpu_array
from spartan_py.sparsity.cusparse_bell import spmm_blocked_ell
from spartan_py.sparsity.tiles import TileShape

#: Block side used by the policy's Blocked-ELL candidate unless told otherwise.
BLOCKED_ELL_BLOCK = 32
#: Value types cuSPARSE's Blocked-ELL SpMM is run with here (accumulating in float32).
BLOCKED_ELL_DTYPES = ("float32", "float16")


@dataclass(frozen=True)
class BlockedEll:
    """A matrix in Blocked-ELL form, on the device of its arrays.

    ``shape``: rows and columns, padded to multiples of ``block``; ``col_index`` int32
    ``[rows / block x width]``: each stored block's block column, -1 for padding;
    ``values`` ``[rows x width * block]``: the stored blocks side by side, row-major.
    """

    shape: tuple[int, int]
    block: int
    col_index: Any
    values: Any

    @property
    def width(self) -> int:
        """Blocks stored per block row."""
        return int(self.col_index.shape[1])

    @property
    def ell_cols(self) -> int:
        """Columns of ``values`` (``width * block``)."""
        return self.width * self.block

    @property
    def stored_fraction(self) -> float:
        """Stored elements (padding blocks included) / all elements of the padded matrix."""
        return self.ell_cols / max(self.shape[1], 1)


def block_mask(a, block: int, counts=None, tile=None):
    """Which ``block x block`` squares of ``a`` hold a non-zero (bool, block rows x block
    columns), from ``counts`` at ``tile`` where the two shapes nest, else from ``a``."""
    xp = array_module(a)
    m, k = a.shape
    mb, kb = -(-m // block), -(-k // block)
    if counts is not None and tile is not None:
        tile = TileShape.of(tile)
        nonzero = counts > 0
        if block % tile.rows == 0 and block % tile.cols == 0:  # tiles inside a block: any of them
            fr, fc = block // tile.rows, block // tile.cols
            padded = xp.zeros((mb * fr, kb * fc), dtype=bool)
            padded[: nonzero.shape[0], : nonzero.shape[1]] = nonzero
            return padded.reshape(mb, fr, kb, fc).any(axis=(1, 3))
        if tile.rows % block == 0 and tile.cols % block == 0:  # blocks inside a tile: the tile's flag
            fr, fc = tile.rows // block, tile.cols // block
            return xp.repeat(xp.repeat(nonzero, fr, axis=0), fc, axis=1)[:mb, :kb]
    padded = _padded(a, mb * block, kb * block)
    return (padded.reshape(mb, block, kb, block) != 0).any(axis=(1, 3))


def _padded(a, rows: int, cols: int):
    if a.shape == (rows, cols):
        return a
    xp = array_module(a)
    out = xp.zeros((rows, cols), dtype=a.dtype)
    out[: a.shape[0], : a.shape[1]] = a
    return out


def to_blocked_ell(a, block: int = BLOCKED_ELL_BLOCK, *, counts=None, tile=None, dtype: str = "float32") -> BlockedEll:
    """``a`` in Blocked-ELL form with ``block``-sided blocks and ``dtype`` values.

    ``counts`` / ``tile``: the monitor's non-zero counts per tile, used for the block mask
    where the shapes nest (see :func:`block_mask`). Block columns are stored in ascending
    order; the width is read back to the host (one scalar).
    """
    if block < 1:
        raise InputError(f"block must be a positive size, got {block}")
    if dtype not in BLOCKED_ELL_DTYPES:
        raise InputError(f"dtype {dtype!r}; expected one of {', '.join(BLOCKED_ELL_DTYPES)}")
    xp = array_module(a)
    mask = block_mask(a, block, counts, tile)
    mb, kb = mask.shape
    width = max(int(mask.sum(axis=1).max()) if mb else 0, 1)  # cuSPARSE wants one block column at least
    columns = xp.arange(kb, dtype=xp.int32)
    order = xp.argsort(xp.where(mask, columns, kb + columns), axis=1)[:, :width].astype(xp.int32)
    stored = xp.take_along_axis(mask, order, axis=1)
    col_index = xp.where(stored, order, -1).astype(xp.int32)
    padded = _padded(a, mb * block, kb * block)
    blocks = padded.reshape(mb, block, kb, block).transpose(0, 2, 1, 3)[xp.arange(mb)[:, None], order]
    blocks *= stored[:, :, None, None]
    values = xp.ascontiguousarray(blocks.transpose(0, 2, 1, 3).reshape(mb * block, width * block), dtype=dtype)
    return BlockedEll((mb * block, kb * block), block, xp.ascontiguousarray(col_index), values)


def blocked_ell_matmul(ell: BlockedEll, w, *, out=None):
    """``A @ w`` for ``A`` in Blocked-ELL form: float32 ``[rows x n]`` (the padded rows
    included). ``w`` is cast to the values' dtype and padded to the blocks' columns when it
    is not already; on CuPy arrays cuSPARSE multiplies, on NumPy arrays NumPy does."""
    xp = array_module(ell.values)
    rows, cols = ell.shape
    if w.shape[0] > cols:
        raise InputError(f"w has {w.shape[0]} rows; the Blocked-ELL matrix has {cols} columns")
    w = xp.ascontiguousarray(_padded(w, cols, w.shape[1]), dtype=ell.values.dtype)
    n = w.shape[1]
    if out is None:
        out = xp.empty((rows, n), dtype=xp.float32)
    elif out.shape != (rows, n) or out.dtype != np.float32 or not out.flags.c_contiguous:
        raise InputError(f"out must be C-contiguous float32 {(rows, n)}, got {out.dtype} {out.shape}")
    if is_gpu_array(ell.values):
        spmm_blocked_ell(ell, w, out)
        return out
    block, width = ell.block, ell.width
    blocks = ell.values.reshape(rows // block, block, width, block).astype(np.float32)
    rows_of_w = w.astype(np.float32).reshape(cols // block, block, n)
    gathered = rows_of_w[np.maximum(ell.col_index, 0)] * (ell.col_index >= 0)[:, :, None, None]
    out[...] = np.einsum("ibjc,ijcn->ibn", blocks, gathered).reshape(rows, n)
    return out
