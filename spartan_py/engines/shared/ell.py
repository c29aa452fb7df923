"""ELL form of sparse weights: each output neuron's inputs, side by side."""

from __future__ import annotations

import numpy as np


def ell_from_csc(col_ptr: np.ndarray, row_index: np.ndarray, values: np.ndarray, neurons: int, width: int):
    """CSC (column = output neuron) -> ``(index, weight)``, each (neurons, width).

    Row ``j`` lists output ``j``'s inputs and weights in CSC order; slots past its degree
    hold input 0 with weight 0. ``width`` must be at least the largest column degree.
    """
    degree = np.diff(col_ptr)
    index = np.zeros((neurons, width), dtype=np.int64)
    weight = np.zeros((neurons, width), dtype=np.float32)
    slot = np.arange(row_index.size) - np.repeat(col_ptr[:-1], degree)
    column = np.repeat(np.arange(neurons), degree)
    index[column, slot] = row_index
    weight[column, slot] = values
    return index, weight
