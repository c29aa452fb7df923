"""Checking categories between engines: one rule for every engine.

Every engine but ``reference`` computes in float32, each summing a neuron's inputs in its own
order. A row whose float64 pre-activation comes within float32 rounding of zero at some
layer (``Y @ W + b`` for a neuron that ReLU then keeps or drops) sits on an unstable fixed
point: engines may honestly disagree there. The rule: where two engines' categories differ,
each differing row is recomputed alone in float64 (the ``reference`` semantics) and named
with its smallest relative margin; a row with a margin under :data:`BORDERLINE_MARGIN` is
*borderline* and does not count against either engine; any other difference is a failure.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from spartan_py.graph_challenge.network import Network

BORDERLINE_MARGIN = 1e-5
"""Relative margin ``|z| / (|Y| @ |W| + |b|)`` under which a neuron's sign is float32 rounding's to
decide: float32's unit roundoff is 6e-8, and a sum of up to a few hundred terms in any order
can move by a few hundred of them."""


@dataclass(frozen=True)
class RowVerdict:
    """One input row on which engines disagreed, as float64 decides it."""

    row: int
    """1-based row index (as categories are written)."""
    is_category: bool
    """Whether the float64 reference keeps the row alive to the last layer."""
    margin: float
    """Smallest relative margin of any neuron's pre-activation over all layers."""
    layer: int
    """The layer (1-based) where that margin occurs."""

    @property
    def borderline(self) -> bool:
        """Whether the row sits on an unstable fixed point (its margin is under float32's reach)."""
        return self.margin < BORDERLINE_MARGIN


def row_verdicts(network: Network, inputs: sp.spmatrix, rows: np.ndarray) -> list[RowVerdict]:
    """Recompute the 1-based ``rows`` of ``inputs`` in float64 and report each one's smallest
    relative margin (rows are computed together; cost grows with their number only)."""
    rows = np.asarray(rows, dtype=np.int64)
    if rows.size == 0:
        return []
    y = sp.csr_matrix(inputs, dtype=np.float64)[rows - 1].toarray()
    margin = np.full(rows.size, np.inf)
    where = np.zeros(rows.size, np.int64)
    for layer, weights in enumerate(network.weights, start=1):
        w = sp.csr_matrix(weights, dtype=np.float64)
        touched = (y != 0).astype(np.float64) @ (w != 0).astype(np.float64) > 0  # the bias lands only there
        z = y @ w + network.bias
        scale = np.abs(y) @ abs(w) + abs(network.bias)
        with np.errstate(divide="ignore", invalid="ignore"):
            relative = np.where(touched, np.abs(z) / scale, np.inf)
        smallest = relative.min(axis=1, initial=np.inf)
        closer = smallest < margin
        margin[closer] = smallest[closer]
        where[closer] = layer
        y = np.where(touched, np.clip(z, 0.0, network.clamp), 0.0)
    alive = (y != 0).any(axis=1)
    return [RowVerdict(int(r), bool(a), float(m), int(w)) for r, a, m, w in zip(rows, alive, margin, where)]


@dataclass(frozen=True)
class CategoryCheck:
    """Two engines' categories compared by the rule of this module."""

    equal: bool
    """Whether the categories are identical."""
    passed: bool
    """Whether every differing row is borderline."""
    differing: list[RowVerdict]

    def describe(self) -> str:
        """One line: identical, or the differing rows with float64's verdict and margin."""
        if self.equal:
            return "identical"
        shown = ", ".join(
            f"row {v.row} ({'a category' if v.is_category else 'not a category'} in float64, "
            f"margin {v.margin:.1e} at layer {v.layer}{', borderline' if v.borderline else ''})"
            for v in self.differing[:5]
        )
        more = f" and {len(self.differing) - 5} more" if len(self.differing) > 5 else ""
        verdict = "only borderline rows differ" if self.passed else "rows differ beyond float32 rounding"
        return f"{verdict}: {shown}{more}"


def compare_categories(network: Network, inputs: sp.spmatrix, got: np.ndarray, expected: np.ndarray) -> CategoryCheck:
    """Compare two engines' 1-based categories over the same ``inputs`` (see the module's rule)."""
    differ = np.setxor1d(np.asarray(got, np.int64), np.asarray(expected, np.int64))
    verdicts = row_verdicts(network, inputs, differ)
    return CategoryCheck(differ.size == 0, all(v.borderline for v in verdicts), verdicts)
