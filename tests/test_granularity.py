"""Sparsity at every granularity against a brute-force computation on small synthetic maps."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from spartan_py.errors import InputError
from spartan_py.sparsity.granularity import (
    GRAINS,
    TILE_GRAINS,
    ConvGeometry,
    im2col_mask,
    layer_granularity,
    network_bounds,
    operand_grains,
    zero_smallest,
)


def _im2col_loops(x, g: ConvGeometry, order: str) -> np.ndarray:
    """im2col by its definition: row (n, oy, ox), column (c, ky, kx) or (ky, kx, c)."""
    n = x.shape[0]
    rows = []
    for b, oy, ox in itertools.product(range(n), range(g.out_height), range(g.out_width)):
        row = {}
        for c, ky, kx in itertools.product(range(g.in_channels), range(g.kernel), range(g.kernel)):
            iy, ix = oy * g.stride - g.pad + ky, ox * g.stride - g.pad + kx
            inside = 0 <= iy < g.height and 0 <= ix < g.width
            row[(c, ky, kx) if order == "chw" else (ky, kx, c)] = bool(x[b, c, iy, ix]) if inside else False
        rows.append([row[key] for key in sorted(row)])
    return np.array(rows, dtype=bool)


def _brute(matrix: np.ndarray, rows: int, cols: int) -> tuple[float, float]:
    """(live tile fraction, dense area / live tiles' area) of ``matrix`` in ``rows x cols`` tiles."""
    m, k = matrix.shape
    live_area, live, total = 0, 0, 0
    for i in range(0, m, rows):
        for j in range(0, k, cols):
            block = matrix[i : i + rows, j : j + cols]
            total += 1
            if block.any():
                live += 1
                live_area += block.size
    return live / total, m * k / live_area


def _maps(rng, shape, density):
    x = rng.random(shape).astype(np.float32)
    return np.where(rng.random(shape) < density, x, 0).astype(np.float32)


@pytest.mark.parametrize("order", ["chw", "nhwc"])
@pytest.mark.parametrize(("kernel", "stride", "pad"), [(3, 1, 1), (1, 2, 0), (5, 2, 2)])
def test_im2col_matches_its_definition(order, kernel, stride, pad):
    rng = np.random.default_rng(kernel + stride)
    g = ConvGeometry(3, 4, 7, 6, kernel, stride, pad)
    x = _maps(rng, (2, 3, 7, 6), 0.4) != 0
    np.testing.assert_array_equal(im2col_mask(x, g, order), _im2col_loops(x, g, order))


@pytest.mark.parametrize("transposed", [False, True])
def test_operand_grains_match_brute_force(transposed):
    rng = np.random.default_rng(3)
    # clustered zeros so that coarse tiles are dead too; odd sizes for partial edge tiles
    matrix = rng.random((150, 77)) < 0.3
    matrix[:70, :40] = False
    matrix[100:, 50:] = False
    got = operand_grains(matrix, (5, 8), transposed=transposed)
    operand = matrix.T if transposed else matrix
    for rows, cols in TILE_GRAINS:
        density, bound = _brute(operand, rows, cols)
        assert got[f"{rows}x{cols}"]["density"] == pytest.approx(density)
        assert got[f"{rows}x{cols}"]["bound"] == pytest.approx(bound)
    live_rows = operand.any(axis=1)
    assert got["row"]["density"] == pytest.approx(live_rows.mean())
    assert got["row"]["bound"] == pytest.approx(1 / live_rows.mean())
    assert got["element"]["bound"] == pytest.approx(operand.size / operand.sum())
    assert got["channel"] == {"density": 5 / 8, "bound": 8 / 5, "live_fraction_of_work": 5 / 8}
    assert got["64x32"]["bound"] <= got["8x8"]["bound"] <= got["4x4"]["bound"] <= got["element"]["bound"]


def test_layer_granularity_and_network_sum():
    rng = np.random.default_rng(5)
    g = ConvGeometry(6, 5, 9, 9, 3, 1, 1)
    x = _maps(rng, (2, 6, 9, 9), 0.3)
    x[0, 2] = 0  # one dead (image, channel) map
    dy = _maps(rng, (2, 5, 9, 9), 0.5) != 0
    layer = layer_granularity(x, dy, g)
    cols = _im2col_loops(x != 0, g, "nhwc")
    assert layer["forward"]["orders"]["nhwc"]["16x8"]["bound"] == pytest.approx(_brute(cols, 16, 8)[1])
    assert layer["weight_grad"]["orders"]["nhwc"]["16x8"]["bound"] == pytest.approx(_brute(cols.T, 16, 8)[1])
    dy_matrix = dy.transpose(0, 2, 3, 1).reshape(-1, 5)
    assert layer["input_grad"]["orders"]["chw"]["4x4"]["bound"] == pytest.approx(_brute(dy_matrix, 4, 4)[1])
    assert layer["forward"]["orders"]["chw"]["channel"]["density"] == pytest.approx(11 / 12)
    assert layer["forward"]["dense_work"] == 2 * 81 * 54 * 5
    # a second layer: the network's bound is total dense work over total live work
    g2 = ConvGeometry(5, 4, 9, 9, 1, 2, 0)
    x2 = _maps(rng, (2, 5, 9, 9), 0.2)
    layer2 = layer_granularity(x2, _maps(rng, (2, 4, 5, 5), 0.5) != 0, g2)
    sums = network_bounds([layer, layer2])
    for grain in GRAINS:
        dense = live = 0.0
        for entry in (layer, layer2):
            for gemm in ("forward", "weight_grad", "input_grad"):
                e = entry[gemm]
                dense += e["dense_work"]
                live += e["dense_work"] / e["orders"]["chw"][grain]["bound"]
        assert sums["step"]["chw"][grain] == pytest.approx(dense / live)


def test_layer_granularity_checks_shapes():
    g = ConvGeometry(2, 3, 5, 5, 3, 1, 1)
    with pytest.raises(InputError, match="do not fit"):
        layer_granularity(np.ones((1, 3, 5, 5)), np.ones((1, 3, 5, 5)), g)
    with pytest.raises(InputError, match="gradient mask"):
        layer_granularity(np.ones((1, 2, 5, 5)), np.ones((1, 3, 4, 5)), g)


@pytest.mark.parametrize("sparsity", [0.7, 0.9])
def test_zero_smallest_reaches_the_sparsity_by_dropping_the_smallest(sparsity):
    rng = np.random.default_rng(7)
    x = _maps(rng, (2, 4, 8, 8), 0.6)
    thinned = zero_smallest(x, sparsity)
    zeros = (thinned == 0).mean()
    assert sparsity <= zeros < sparsity + 2 / x.size
    kept = thinned[thinned != 0]
    assert kept.min() >= x[(x != 0) & (thinned == 0)].max()
    np.testing.assert_array_equal(kept, x[thinned != 0])
    already = np.where(x > 0.95, x, 0)
    assert zero_smallest(already, sparsity) is already


@pytest.mark.gpu
def test_cupy_path_matches_numpy():
    cp = pytest.importorskip("cupy")
    rng = np.random.default_rng(11)
    g = ConvGeometry(8, 6, 12, 12, 3, 2, 1)
    x = _maps(rng, (2, 8, 12, 12), 0.3)
    dy = _maps(rng, (2, 6, 6, 6), 0.4) != 0
    on_cpu = layer_granularity(x, dy, g)
    on_gpu = layer_granularity(cp.asarray(x), cp.asarray(dy), g)
    assert on_gpu.keys() == on_cpu.keys()
    for gemm, entry in on_cpu.items():
        for order, grains in entry["orders"].items():
            for grain, values in grains.items():
                assert on_gpu[gemm]["orders"][order][grain] == pytest.approx(values), (gemm, order, grain)
    thinned = zero_smallest(cp.asarray(x), 0.9)
    np.testing.assert_array_equal(cp.asnumpy(thinned), zero_smallest(x, 0.9))
