"""The conflict-free ordering of each output's inputs (rows kernel's shared-memory reads)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from spartan_py.engines.shared.bank_schedule import BANKS, conflict_free_ell
from spartan_py.graph_challenge.generate import generate_network


def check(matrix, neurons):
    csc = sp.csc_matrix(matrix, dtype=np.float32)
    csc.sort_indices()
    index, weight = conflict_free_ell(csc.indptr, csc.indices, csc.data, neurons)
    steps = index.shape[0]
    for s in range(steps):
        for start in range(0, neurons, BANKS):
            banks = index[s, start : start + BANKS] % BANKS
            assert len(set(banks.tolist())) == BANKS, f"step {s} group {start}: bank conflict"
    # every weight appears once, padding reads the zero columns with weight 0
    real = index < neurons
    assert np.all(weight[~real] == 0)
    rebuilt = sp.csc_matrix((weight[real], (index[real], np.nonzero(real)[1])), shape=(neurons, neurons))
    assert (rebuilt != csc).nnz == 0
    return steps


@pytest.mark.parametrize("layer", [0, 5, 6, 40])
def test_radixnet_layers(layer):
    steps = check(generate_network(1024, 41, seed=3).weights[layer], 1024)
    if layer < 6:
        assert steps == 32  # butterfly layers: banks already balanced
    else:
        assert 32 <= steps <= 56


def test_irregular_signed():
    rng = np.random.default_rng(0)
    matrix = sp.random(256, 256, density=0.05, format="csr", random_state=rng, dtype=np.float32)
    matrix.data = rng.uniform(-1, 1, matrix.nnz).astype(np.float32)
    check(matrix, 256)


def test_neurons_must_fill_banks():
    with pytest.raises(ValueError, match="multiple of 32"):
        conflict_free_ell(np.array([0, 0]), np.array([], dtype=np.int32), np.array([], dtype=np.float32), 1)
