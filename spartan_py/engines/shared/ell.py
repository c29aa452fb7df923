"""ELL form of sparse weights: each output neuron's inputs, side by side."""

from __future__ import annotations

import numba
import numpy as np


def ell_from_csc(col_ptr: np.ndarray, row_index: np.ndarray, values: np.ndarray, neurons: int, width: int):
    """CSC (column = output neuron) -> ``(index, weight)``, each (neurons, width), int64 and
    float32.

    Row ``j`` lists output ``j``'s inputs and weights in CSC order; slots past its degree
    hold input 0 with weight 0. ``width`` must be at least the largest column degree.
    """
    col_ptr = np.asarray(col_ptr, dtype=np.int64)
    degree = int(np.diff(col_ptr[: neurons + 1]).max(initial=0))
    if degree > width:
        raise ValueError(f"a column holds {degree} entries, more than the ELL width {width}")
    return ell_compiled(
        col_ptr,
        np.asarray(row_index, dtype=np.int64),
        np.asarray(values, dtype=np.float32),
        neurons,
        width,
    )


@numba.njit(cache=True, nogil=True)
def ell_compiled(col_ptr, row_index, values, neurons, width):  # pragma: no cover - compiled
    """:func:`ell_from_csc` on int64 pointers and indices and float32 values, without the GIL."""
    index = np.zeros((neurons, width), dtype=np.int64)
    weight = np.zeros((neurons, width), dtype=np.float32)
    for j in range(neurons):
        for slot, k in enumerate(range(col_ptr[j], col_ptr[j + 1])):
            index[j, slot] = row_index[k]
            weight[j, slot] = values[k]
    return index, weight
