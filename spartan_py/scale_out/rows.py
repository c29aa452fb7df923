"""How a sharded run splits its input rows: every row in one shard, sizes within one
(:func:`shard_rows`; :mod:`spartan_py.scale_out.shard` runs the shards)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from spartan_py.errors import InputError

if TYPE_CHECKING:
    import scipy.sparse as sp


def shard_bounds(rows: int, shards: int) -> list[tuple[int, int]]:
    """``shards`` contiguous ``[start, stop)`` row ranges covering ``rows``, sizes within one."""
    if shards < 1:
        raise InputError(f"shards must be >= 1, got {shards}")
    edges = np.linspace(0, rows, shards + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]


SHARD_BALANCES = ("work", "count")
"""How :func:`shard_rows` splits the rows: ``work`` deals them by predicted work, ``count``
takes contiguous blocks."""

DEFAULT_BALANCE = "work"
"""The split a sharded run takes unless told otherwise (the API's, the CLI's, the benchmark's)."""


def shard_rows(inputs: sp.csr_matrix, shards: int, balance: str = DEFAULT_BALANCE) -> list[np.ndarray]:
    """The global row numbers (ascending) of each of ``shards`` shards of ``inputs``, every row
    in one shard, sizes within one.

    ``count``: contiguous blocks (:func:`shard_bounds`). ``work``: rows ranked by their input's
    non-zeros (a row's predicted work: how deep a row survives depends strongly on how many
    inputs it lights; on ``generated:4096`` x 480, 30000 rows, the top tenth by non-zeros held
    58% of the survivors) and dealt to the shards in turn, back and forth, so that each shard
    holds the same spread of them: there, four shards' survivors were at most 1.025x their mean,
    against 1.13x for blocks (docs/scale-out.md: where the predictor is weaker).
    """
    if balance not in SHARD_BALANCES:
        raise InputError(f"balance must be one of {', '.join(SHARD_BALANCES)}, not {balance!r}")
    rows = inputs.shape[0]
    bounds = shard_bounds(rows, shards)  # (refuses fewer than one shard)
    if balance == "count":
        return [np.arange(a, b) for a, b in bounds]
    ranked = np.argsort(-np.diff(inputs.indptr), kind="stable")
    turn, place = np.divmod(np.arange(rows), shards)
    owner = np.where(turn % 2 == 0, place, shards - 1 - place)  # back and forth: 0..n-1, n-1..0, ...
    return [np.sort(ranked[owner == shard]) for shard in range(shards)]
