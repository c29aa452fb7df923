"""Rows that are copies of one another, computed once (spartan_py.engines.shared.duplicate_rows)
and the CPU engine that drops them: exact, the counts per layer still count every row."""

from __future__ import annotations

import numpy as np
import pytest

from spartan_py import generate_inputs, generate_network, make_engine
from spartan_py.engines.shared.duplicate_rows import RowCopies, looks_for_copies, representatives


def test_looks_after_powers_of_two_layers():
    assert [n for n in range(1, 70) if looks_for_copies(n)] == [2, 4, 8, 16, 32, 64]


def test_representatives_keep_the_first_of_equal_rows_and_survive_collisions():
    rows = np.array([[1.0, 2.0], [3.0, 4.0], [1.0, 2.0], [5.0, 6.0], [3.0, 4.0]])

    def equal(a, b):
        return (rows[a] == rows[b]).all(axis=1)

    honest = np.array([7, 9, 7, 11, 9], dtype=np.uint64)
    assert representatives(honest, equal).tolist() == [0, 1, 0, 3, 1]
    # every hash the same: a row unlike the first keeps itself (exact, if less thorough)
    colliding = np.zeros(5, dtype=np.uint64)
    assert representatives(colliding, equal).tolist() == [0, 1, 0, 3, 4]


def test_row_copies_follow_chains_of_merges():
    copies = RowCopies(6)
    copies.merge(np.array([4, 5]), np.array([2, 2]))  # 4 and 5 are copies of 2
    copies.merge(np.array([2]), np.array([0]))  # later, 2 is found a copy of 0
    assert copies.roots().tolist() == [0, 1, 0, 3, 0, 0]
    rows, source = copies.expand(np.array([0, 3]))  # rows 0 and 3 live at the end
    assert rows.tolist() == [0, 2, 3, 4, 5] and source.tolist() == [0, 0, 1, 0, 0]


@pytest.mark.parametrize(("neurons", "layers", "unmergeable"), [(1024, 70, False), (1024, 40, True)])
def test_the_cpu_engine_drops_copies_and_gives_every_row_the_same_result(neurons, layers, unmergeable):
    network = generate_network(neurons, layers, seed=3, unmergeable=unmergeable)
    inputs = generate_inputs(3000, neurons, seed=4)
    inputs = inputs[np.r_[np.arange(3000), np.arange(0, 3000, 3)]]  # copies from the start too
    plain = make_engine("cpu", network, row_copies=False).run(inputs)
    dropping = make_engine("cpu", network, row_copies=True).run(inputs)
    assert plain.live_rows.size > 100
    assert np.array_equal(dropping.live_rows, plain.live_rows)
    assert dropping.live_rows_by_layer == plain.live_rows_by_layer
    assert dropping.nonzeros_by_layer == plain.nonzeros_by_layer
    assert (dropping.values != plain.values).nnz == 0  # bit for bit
    looks = [r for r in dropping.trace if r.kernel == "cpu.row_copies"]
    assert looks and looks[0].layer == 2 and any(r.bytes_written > 0 for r in looks)
    computed = [r.rows_in for r in dropping.trace if r.kernel == "cpu.tile_layer"]
    assert computed[-1] < [r.rows_in for r in plain.trace if r.kernel == "cpu.tile_layer"][-1]


def test_the_benchmark_counts_distinct_live_rows_exactly():
    """benchmarks/gc_duplicate_rows: live and distinct rows of a CSR matrix, as np.unique counts
    them (empty rows are not live; a value differing in its last bit is another row)."""
    import scipy.sparse as sp

    from benchmarks.gc_duplicate_rows import distinct_rows

    rng = np.random.default_rng(5)
    base = (rng.random((40, 64)) < 0.2) * rng.integers(1, 4, (40, 64)).astype(np.float32)
    dense = base[rng.integers(0, 40, 3000)]
    dense[7] = np.nextafter(dense[7], np.float32(9))  # one row made unlike every other
    dense[11] = 0
    live = dense[dense.any(axis=1)]
    assert distinct_rows(sp.csr_matrix(dense)) == (live.shape[0], np.unique(live, axis=0).shape[0])
    assert distinct_rows(sp.csr_matrix((5, 64), dtype=np.float32)) == (0, 0)
