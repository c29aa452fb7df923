"""Compiled steps of column merging (:mod:`~spartan_py.engines.shared.column_merge`).

Each function releases the GIL, so that the layers of a network are merged on every core at
once (a 65536-neuron layer holds two million weights; the SciPy and NumPy steps these replace
held the GIL for most of their time). Each gives what the SciPy path gave, bit for bit
(tests compare them), but for one case: where three or more inputs of a merged column fall
in one group with unequal weights, their sum is taken in list order, SciPy's in the order of
an unstable sort, so the last bit may differ. ``column_merge`` keeps the SciPy path for what
these do not cover (a matrix not in canonical CSR form, a hash collision).
"""

from __future__ import annotations

import numba
import numpy as np

#: Odd multipliers of the row hash (splitmix64's constants).
_MIX_A = np.uint64(0xBF58476D1CE4E5B9)
_MIX_B = np.uint64(0x94D049BB133111EB)


@numba.njit(cache=True, nogil=True)
def column_lists_from_csr(indptr, indices, data, outputs):  # pragma: no cover - compiled
    """Each output's (inputs, weights) sorted by input, from a canonical CSR matrix (rows =
    inputs, sorted and unique column indices in each row), as (outputs x max degree) arrays
    (int64, float32); slots past a column's degree hold input -1 and weight 0. A row-order
    pass fills each column in input order, so no sort is needed."""
    degree = np.zeros(outputs, np.int64)
    for k in range(indices.size):
        degree[indices[k]] += 1
    width = 1
    for c in range(outputs):
        width = max(width, degree[c])
    inputs = np.full((outputs, width), -1, np.int64)
    weights = np.zeros((outputs, width), np.float32)
    fill = np.zeros(outputs, np.int64)
    for r in range(indptr.size - 1):
        for k in range(indptr[r], indptr[r + 1]):
            c = indices[k]
            inputs[c, fill[c]] = r
            weights[c, fill[c]] = data[k]
            fill[c] += 1
    return inputs, weights


@numba.njit(cache=True, nogil=True)
def row_hashes(inputs, weight_bits):  # pragma: no cover - compiled
    """A 64-bit hash of each row of (``inputs``, ``weight_bits``)."""
    rows, width = inputs.shape
    hashes = np.empty(rows, np.uint64)
    for r in range(rows):
        h = np.uint64(0x9E3779B97F4A7C15)
        for k in range(width):
            x = h ^ (np.uint64(inputs[r, k] + 1) * _MIX_A) ^ (np.uint64(weight_bits[r, k]) * _MIX_B)
            x ^= x >> np.uint64(31)
            h = x * _MIX_A
        hashes[r] = h
    return hashes


@numba.njit(cache=True, nogil=True)
def group_equal_rows(inputs, weight_bits, hashes):  # pragma: no cover - compiled
    """``(groups, representatives, exact)`` of the equal rows of (``inputs``, ``weight_bits``):
    ``groups[j]`` numbers row ``j``'s group in order of first appearance and
    ``representatives[g]`` is group ``g``'s first row, as
    :func:`~spartan_py.engines.shared.column_merge.duplicate_groups` gives them. Rows are
    bucketed by ``hashes``; ``exact`` is False when a bucket holds unequal rows (the caller
    then groups by comparing whole rows)."""
    rows, width = inputs.shape
    # each row's bucket head (the first row with its hash), by open addressing: rows are
    # visited in order, so a bucket's first entry is its smallest row
    size = 2
    while size < 2 * rows:
        size *= 2
    keys = np.zeros(size, np.uint64)
    first = np.full(size, -1, np.int64)
    head = np.empty(rows, np.int64)
    for r in range(rows):
        slot = hashes[r] & np.uint64(size - 1)
        while first[slot] >= 0 and keys[slot] != hashes[r]:
            slot = (slot + np.uint64(1)) & np.uint64(size - 1)
        if first[slot] < 0:
            first[slot] = r
            keys[slot] = hashes[r]
        head[r] = first[slot]
    groups = np.empty(rows, np.int64)
    representatives = np.empty(rows, np.int64)
    count = 0
    for r in range(rows):
        h = head[r]
        if h == r:
            groups[r] = count
            representatives[count] = r
            count += 1
            continue
        for k in range(width):
            if inputs[r, k] != inputs[h, k] or weight_bits[r, k] != weight_bits[h, k]:
                return groups, representatives[:0], False
        groups[r] = groups[h]  # h < r: numbered already
    return groups, representatives[:count], True


@numba.njit(cache=True, nogil=True)
def merged_columns(inputs, weights, input_groups, width):  # pragma: no cover - compiled
    """The CSC ``(indptr, indices, data)`` of a merged layer (``width`` columns, the first
    ``inputs.shape[0]`` of them from the representatives' lists, the rest empty): column
    ``h`` reads ``input_groups[i]`` for each input ``i`` of representative ``h`` (``i``
    itself when ``input_groups`` is empty), indices sorted, the weights of inputs that fall
    in one group summed in list order."""
    columns, degree = inputs.shape
    identity = input_groups.size == 0
    indptr = np.zeros(width + 1, np.int64)
    indices = np.empty(columns * degree, np.int32)
    data = np.empty(columns * degree, np.float32)
    nnz = 0
    source = np.empty(degree, np.int64)
    value = np.empty(degree, np.float32)
    for h in range(columns):
        length = 0
        for k in range(degree):
            i = inputs[h, k]
            if i < 0:
                continue
            s = i if identity else input_groups[i]
            w = weights[h, k]
            j = length  # stable insertion by source
            while j > 0 and source[j - 1] > s:
                source[j] = source[j - 1]
                value[j] = value[j - 1]
                j -= 1
            source[j] = s
            value[j] = w
            length += 1
        j = 0
        while j < length:
            s, total = source[j], value[j]
            j += 1
            while j < length and source[j] == s:
                total += value[j]
                j += 1
            indices[nnz] = s
            data[nnz] = total
            nnz += 1
        indptr[h + 1] = nnz
    for h in range(columns, width):
        indptr[h + 1] = nnz
    return indptr, indices[:nnz], data[:nnz]


@numba.njit(cache=True, nogil=True)
def valid_entries(inputs):  # pragma: no cover - compiled
    """Entries of column lists that hold an input (not the -1 padding)."""
    count = 0
    for i in inputs.ravel():
        count += i >= 0
    return count


@numba.njit(cache=True, nogil=True)
def first_appearance(labels):  # pragma: no cover - compiled
    """``(groups, representatives)`` of non-negative ``labels``: ``groups[j]`` numbers label
    ``labels[j]`` in order of first appearance, ``representatives[g]`` is where group ``g``
    first appears."""
    number = np.full(labels.max() + 1 if labels.size else 0, -1, np.int64)
    groups = np.empty(labels.size, np.int64)
    representatives = np.empty(labels.size, np.int64)
    count = 0
    for j in range(labels.size):
        label = labels[j]
        if number[label] < 0:
            number[label] = count
            representatives[count] = j
            count += 1
        groups[j] = number[label]
    return groups, representatives[:count]
