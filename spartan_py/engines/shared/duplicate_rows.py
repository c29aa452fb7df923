"""Rows that are exact copies of one another, computed once.

A Graph Challenge layer computes each row from that row and the weights alone, so rows that
enter a layer equal (bit for bit) leave it equal, whatever the weights: an engine may keep one
row of each set of copies, carry on with it, and give its result to every copy at the end.
Exact, and it assumes nothing of the network. It pays in the challenge's networks: once most
rows have saturated, nearly every live row is the same (on the official 1024 x 120 network and
the 60000-row proxy, 1475 live rows, all equal, from about layer 30; the measured counts are in
``benchmarks/results/gc_duplicate_rows-*.json.gz``).

:class:`RowCopies` keeps the bookkeeping for one batch of rows (engine-neutral: positions are
the batch's rows in order); the engine hashes its live rows, asks :func:`representatives` which
ones to keep, and compacts them.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def looks_for_copies(layers_done: int) -> bool:
    """Whether an engine looks for copies after ``layers_done`` layers: powers of two from 2, so
    at most log2 of the depth looks, each a pass over the live rows' values to hash them and one
    to compare each row with the row its hash names (a layer reads 32 inputs an output)."""
    return layers_done >= 2 and layers_done & (layers_done - 1) == 0


def representatives(hashes: np.ndarray, equal: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> np.ndarray:
    """For rows ``0 .. n - 1`` with 64-bit ``hashes``, the row each one is a copy of (itself when
    it is kept): the first row of its hash, where ``equal(rows, firsts)`` (index arrays) says
    the two are equal value for value; a row whose hash collides with a different row's stays
    its own."""
    _, first, group = np.unique(hashes, return_index=True, return_inverse=True)
    candidate = first[group.ravel()]
    rows = np.arange(hashes.size)
    check = np.flatnonzero(candidate != rows)
    keep_own = check[~equal(check, candidate[check])]
    candidate[keep_own] = keep_own
    return candidate


class RowCopies:
    """Which rows of a batch of ``rows`` stand for which (module docstring): ``owner[p]`` is the
    row whose result row ``p`` takes (itself unless it was found a copy)."""

    def __init__(self, rows: int):
        self.owner = np.arange(rows, dtype=np.int64)

    def merge(self, copies: np.ndarray, kept: np.ndarray) -> None:
        """Rows ``copies`` (positions) are copies of rows ``kept`` (positions, alike)."""
        self.owner[copies] = kept

    def roots(self) -> np.ndarray:
        """For every row, the kept row whose result it takes (chains of merges followed)."""
        root = self.owner.copy()
        while True:
            step = self.owner[root]
            if np.array_equal(step, root):
                return root
            root = step

    def expand(self, final: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(rows, source)``: every row whose kept row is among ``final`` (positions of the rows
        live at the end), ascending, and the index into ``final`` of the row it takes its values from."""
        where = np.full(self.owner.size, -1, dtype=np.int64)
        where[final] = np.arange(final.size)
        source = where[self.roots()]
        rows = np.flatnonzero(source >= 0)
        return rows, source[rows]
