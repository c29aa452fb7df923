"""A layer as a GPU layer kernel reads it: each output's inputs in bank-conflict-free order,
padded to whole step groups (shared by the rows and merged kernels and their CPU twins)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from spartan_py.engines.shared.bank_schedule import conflict_free_ell

#: Steps of a layer plan the rows kernel loads at once (a layer's steps are padded to a multiple).
STEP_GROUP = 4


@dataclass
class LayerPlan:
    """One layer as the kernel reads it.

    ``index``/``weight`` (steps x n, k-major): output j's input and weight at each step, in
    bank-conflict-free order; a padding step reads one of the zero columns ``n .. n + 31``
    with weight 0. ``uniform`` is the common weight when every weight of the layer is equal
    (the kernel then skips the weight array), else None.
    """

    index: np.ndarray
    weight: np.ndarray
    uniform: float | None
    nnz: int

    @property
    def steps(self) -> int:
        """Inputs summed per output, padding included."""
        return int(self.index.shape[0])

    def grouped(self, array: np.ndarray) -> np.ndarray:
        """``index`` or ``weight`` as the rows kernel reads them: each output's
        :data:`STEP_GROUP` consecutive steps side by side, ``[step / 4][output][step % 4]``,
        so that one load brings four."""
        steps, n = array.shape
        return np.ascontiguousarray(array.reshape(steps // STEP_GROUP, STEP_GROUP, n).transpose(0, 2, 1))

    @property
    def device_bytes(self) -> int:
        """Bytes the layer occupies on the device (uint16 indices, float32 weights unless uniform)."""
        return self.index.size * 2 + (0 if self.uniform is not None else self.weight.size * 4)


def plan_layer(matrix: sp.spmatrix) -> LayerPlan:
    """The kernel's view of one weight matrix (rows = inputs, columns = outputs), its steps
    padded to a multiple of :data:`STEP_GROUP` (output j's padding steps read the zero column
    ``n + j % 32``, a bank no other output of its warp reads then)."""
    csc = sp.csc_matrix(matrix, dtype=np.float32)
    csc.sort_indices()
    index, weight = conflict_free_ell(csc.indptr, csc.indices, csc.data, matrix.shape[0])
    pad = -index.shape[0] % STEP_GROUP
    if pad:
        n = index.shape[1]
        index = np.vstack([index, np.broadcast_to(n + np.arange(n) % 32, (pad, n))])
        weight = np.vstack([weight, np.zeros((pad, n), weight.dtype)])
    values = csc.data
    uniform = float(values[0]) if values.size and np.all(values == values[0]) else None
    return LayerPlan(index.astype(np.uint16), weight, uniform, int(csc.nnz))
