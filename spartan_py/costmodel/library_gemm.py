"""A cuBLAS GEMM priced by the kernel it runs: the algorithm a record names in its ``variant``.

cuBLAS picks its output tile, split-K and cluster per shape (``spartan_py.sparsity.cublas_algo``
asks its heuristic on the GPU that runs; the record keeps the answer as
``lt-<rows>x<cols>-s<splits>-c<cluster>-w<waves>``). With it, a record's terms are those of the
kernel that ran (see :func:`algorithm_terms`) instead of its multiply-adds spread over every SM:

- compute: the tiles' padded multiply-adds (``ceil(M / rows) x ceil(N / cols)`` tiles of
  ``rows x cols x K / splits`` each, ``splits`` times) spread evenly over the SMs, no partial
  last wave (as if the kernel shared out the last tiles' K steps, stream-K: our reading of the
  log's ``numSplitsK=-1``, not checked in the kernel); of the three forms tried on the H100's 27
  calibration shapes (even spread, whole waves, at least one wave) it held the earlier drawn
  sets' shapes best;
- memory: ``A`` read once per column of tiles beyond what the L2 cache holds of it (``1 + (tile
  columns - 1) x max(0, 1 - L2 / A)``; a wave's tiles of one row of tiles share it through the
  L2 while it fits), ``B`` once, ``C`` written once, and a split product's partial sums written
  and read again.

These records are fitted apart (their own calibration key, :data:`ALGORITHM_INSTANCE`); a record
without an algorithm (a run before it was recorded, a CPU run) keeps the family's fit and form.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

ALGORITHM_INSTANCE = "lt"
"""The instance (:func:`spartan_py.costmodel.families.instance_of`) of a cuBLAS record that names
its algorithm: its variant's first part."""

_PATTERN = re.compile(rf"{ALGORITHM_INSTANCE}-(\d+)x(\d+)-s(\d+)-c([0-9a-z]+)-w([0-9.]+)")


@dataclass(frozen=True)
class CublasAlgo:
    """cuBLAS's kernel for one GEMM ``[m x k] @ [k x n]`` (row-major, as spartan_py calls it).

    ``tile_rows`` x ``tile_cols`` is the output tile in the caller's terms (rows of the output,
    columns of the output); ``splits`` the split-K factor (1: none); ``cluster`` the thread-block
    cluster as cuBLAS names it (its first extent along the output's columns); ``waves`` the
    heuristic's own figure of waves."""

    tile_rows: int
    tile_cols: int
    splits: int
    cluster: str
    waves: float

    @property
    def variant(self) -> str:
        """The record's ``variant``: ``lt-<rows>x<cols>-s<splits>-c<cluster>-w<waves>``."""
        return (
            f"{ALGORITHM_INSTANCE}-{self.tile_rows}x{self.tile_cols}-s{self.splits}-c{self.cluster}-w{self.waves:.2f}"
        )

    @classmethod
    def from_variant(cls, variant: str) -> CublasAlgo | None:
        """The algorithm ``variant`` names (without a training step's role: see
        :func:`spartan_py.costmodel.families.instance_of`), or ``None``."""
        if not isinstance(variant, str):  # a trace read back holds NaN where a record named none
            return None
        found = _PATTERN.fullmatch(variant)
        if found is None:
            return None
        rows, cols, splits, cluster, waves = found.groups()
        return cls(int(rows), int(cols), int(splits), cluster, float(waves))


def algorithm_terms(
    rows: pd.DataFrame, algos: list[CublasAlgo | None], sm_count: int, l2_bytes: float
) -> dict[str, np.ndarray]:
    """Per record of ``rows`` whose algorithm ``algos`` holds: ``unit_macs`` (the multiply-adds of one tile's share
    of K, padded), ``waves`` (tiles x splits over the SMs, a fraction: see the module doc) and
    ``moved_bytes``. Records without one are NaN."""
    n = len(rows)
    tile_rows = np.array([a.tile_rows if a else np.nan for a in algos], dtype=float)
    tile_cols = np.array([a.tile_cols if a else np.nan for a in algos], dtype=float)
    splits = np.array([a.splits if a else np.nan for a in algos], dtype=float)
    m = rows["rows_in"].to_numpy(float)
    n_cols = rows["cols"].to_numpy(float)
    k = rows["executed_macs"].to_numpy(float) / np.maximum(m * n_cols, 1)
    tiles_m, tiles_n = np.ceil(m / tile_rows), np.ceil(n_cols / tile_cols)
    units = tiles_m * tiles_n * splits
    a_bytes = 4 * m * k
    a_reads = 1 + (tiles_n - 1) * np.maximum(0.0, 1 - l2_bytes / np.maximum(a_bytes, 1))
    partials = np.where(splits > 1, 2 * splits, 0.0)  # each split's partial tile written, then read
    moved = a_bytes * a_reads + 4 * k * n_cols + 4 * m * n_cols * (1 + partials)
    return {
        "unit_macs": tile_rows * tile_cols * np.ceil(k / splits) if n else np.zeros(0),
        "waves": units / sm_count,
        "moved_bytes": moved,
    }
