"""The compiled set-up path (column merging, generated wiring, input images, final rows)
against plain SciPy and NumPy on the same cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp

from spartan_py.engines.base import live_rows_matrix
from spartan_py.engines.shared.column_merge import column_lists, duplicate_groups, merge_network
from spartan_py.engines.shared.ell import ell_from_csc
from spartan_py.errors import InputError
from spartan_py.graph_challenge import generate
from spartan_py.graph_challenge.generate import generate_network
from spartan_py.graph_challenge.network import Network


def scipy_column_lists(matrix: sp.spmatrix) -> tuple[np.ndarray, np.ndarray]:
    """Each column's (rows, values) sorted by row, padded with -1 and 0: SciPy's transpose."""
    csc = sp.csc_matrix(matrix, dtype=np.float32)
    csc.sum_duplicates()
    csc.sort_indices()
    degree = np.diff(csc.indptr)
    width = max(int(degree.max(initial=0)), 1)
    inputs = np.full((csc.shape[1], width), -1, dtype=np.int64)
    weights = np.zeros((csc.shape[1], width), dtype=np.float32)
    for j in range(csc.shape[1]):
        rows = csc.indices[csc.indptr[j] : csc.indptr[j + 1]]
        inputs[j, : rows.size] = rows
        weights[j, : rows.size] = csc.data[csc.indptr[j] : csc.indptr[j + 1]]
    return inputs, weights


@pytest.mark.parametrize("neurons", [1024, 4096])
def test_generated_column_lists_equal_the_transposed_matrix(neurons):
    network = generate_network(neurons, 16, seed=3)
    period = int(math.log2(neurons // 16))
    for index in (0, period - 1, period, period + 3):  # butterfly, shift M/2, relabelled
        lists, lane = network.weights.lane_lists(index)
        expected_inputs, expected_weights = scipy_column_lists(network.weights[index])
        assert np.array_equal(lists[lane], expected_inputs) and lists.dtype == expected_inputs.dtype
        assert np.all(expected_weights == np.float32(generate.WEIGHT))


def test_compiled_column_lists_equal_scipy_on_uneven_and_non_canonical_matrices():
    rng = np.random.default_rng(2)
    uneven = sp.random(96, 64, density=0.1, format="csr", dtype=np.float32, random_state=rng)
    assert uneven.has_canonical_format
    got, expected = column_lists(uneven), scipy_column_lists(uneven)
    assert np.array_equal(got[0], expected[0]) and np.array_equal(got[1], expected[1])
    repeated = sp.csr_matrix((np.array([1.0, 2.0, 4.0], np.float32), np.array([3, 3, 1]), np.array([0, 3, 3])), (2, 5))
    assert not repeated.has_canonical_format  # duplicates, unsorted: SciPy's path sums them
    inputs, weights = column_lists(repeated)
    assert inputs[3, 0] == 0 and weights[3, 0] == 3.0 and inputs[1, 0] == 0 and weights[1, 0] == 4.0


def test_duplicate_groups_number_by_first_appearance_on_many_rows():
    rng = np.random.default_rng(7)
    distinct = rng.integers(0, 50, size=(300, 8))
    pick = rng.integers(0, 300, size=5000)
    inputs = distinct[pick]
    groups, representatives = duplicate_groups(inputs, np.ones(inputs.shape, np.float32))
    _, first, inverse = np.unique(inputs, axis=0, return_index=True, return_inverse=True)
    order = np.argsort(first)
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    assert np.array_equal(groups, rank[inverse.ravel()])
    assert np.array_equal(representatives, np.sort(first))


@pytest.mark.parametrize("neurons", [1024, 4096])
def test_lane_merging_equals_merging_the_built_matrices(neurons):
    """A generated network merges per lane; the same layers as plain CSR matrices merge
    through the general path; the plans are the same."""
    generated = generate_network(neurons, 14, seed=5)
    built = Network(neurons, tuple(generated.weights[i] for i in range(14)), bias=generated.bias)
    by_lane, general = merge_network(generated), merge_network(built)
    for a, b in zip(by_lane.layers, general.layers, strict=True):
        assert np.array_equal(a.groups, b.groups) and np.array_equal(a.sizes, b.sizes)
        assert np.array_equal(a.plan.index, b.plan.index) and np.array_equal(a.plan.weight, b.plan.weight)
        assert (a.plan.uniform, a.plan.nnz, a.original_nnz, a.width_in) == (
            b.plan.uniform,
            b.plan.nnz,
            b.original_nnz,
            b.width_in,
        )


def test_ell_refuses_a_width_below_a_column_degree():
    with pytest.raises(ValueError, match="more than the ELL width 1"):
        ell_from_csc(np.array([0, 2]), np.array([0, 1]), np.ones(2, np.float32), 1, 1)


def numpy_image(segments: np.ndarray, valid: np.ndarray, radius: float, side: int) -> np.ndarray:
    """Lit pixels of one image by NumPy: pixel centres within ``radius`` of a valid segment."""
    cy, cx = np.mgrid[0:side, 0:side] + 0.5
    lit = np.zeros((side, side), dtype=bool)
    for (x0, y0, x1, y1), ok in zip(segments, valid):
        if not ok:
            continue
        dx, dy = x1 - x0, y1 - y0
        t = np.clip(((cx - x0) * dx + (cy - y0) * dy) / max(dx * dx + dy * dy, 1e-9), 0.0, 1.0)
        lit |= (cx - x0 - t * dx) ** 2 + (cy - y0 - t * dy) ** 2 <= radius * radius
    return np.flatnonzero(lit.ravel())


def test_input_images_equal_a_numpy_rasterization():
    rng = np.random.default_rng(1)
    side, count = 32, 12
    digits = rng.integers(0, 10, size=count)
    segments = generate._TEMPLATES[digits] * 20 + 6  # unit box to pixels, inside the frame
    valid = generate._TEMPLATE_VALID[digits]
    radius = rng.uniform(1.0, 1.6, count)
    indptr, indices = generate._lit_pixels_csr(segments, valid, radius, side)
    for image in range(count):
        expected = numpy_image(segments[image], valid[image], radius[image], side)
        assert np.array_equal(indices[indptr[image] : indptr[image + 1]], expected), image


def test_final_rows_equal_scipys_dense_conversion():
    rng = np.random.default_rng(3)
    values = rng.standard_normal((40, 64)).astype(np.float32)
    values[values < 0.4] = 0
    values.flat[::9] = -0.0  # a zero: dropped
    values.flat[5::13] = np.nan  # not a zero: kept, as SciPy keeps it
    live = np.sort(rng.choice(100, size=40, replace=False))
    got = live_rows_matrix(live, values, 100)
    dense = np.zeros((100, 64), np.float32)
    dense[live] = values
    expected = sp.csr_matrix(dense)
    assert got.shape == expected.shape
    assert np.array_equal(got.indptr, expected.indptr) and np.array_equal(got.indices, expected.indices)
    assert np.array_equal(got.data, expected.data, equal_nan=True)
    with pytest.raises(ValueError, match="one row of values per live row"):
        live_rows_matrix(live[:3], values, 100)


def test_lane_lists_refuse_a_layer_out_of_range_and_the_unmergeable_variant():
    network = generate_network(1024, 4, seed=0)
    with pytest.raises(IndexError, match="layer 4 of a 4-layer network"):
        network.weights.lane_lists(4)
    with pytest.raises(InputError, match="no lanes"):
        generate_network(1024, 4, seed=0, unmergeable=True).weights.lane_lists(0)
