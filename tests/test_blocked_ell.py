"""Blocked-ELL: the format built from the monitor's counts or the activations, and the
product (NumPy on the CPU, cuSPARSE on the GPU) against a float64 reference."""

import numpy as np
import pytest

from spartan_py.errors import InputError
from spartan_py.sparsity import SparsityMonitor, tile_counts
from spartan_py.sparsity.blocked_ell import block_mask, blocked_ell_matmul, to_blocked_ell
from spartan_py.workloads.conv.layers import tiled_preactivations


def _activations(xp, rows=300, cols=200, density=0.2):
    z = tiled_preactivations(rows, cols, density, tile=(64, 32), seed=1)
    a, _ = SparsityMonitor(tile=(64, 32)).epilogue(z)
    return xp.asarray(a)


def _host(array) -> np.ndarray:
    return array.get() if hasattr(array, "get") else array


@pytest.mark.parametrize("block", [16, 32, 64])
def test_blocked_ell_product_matches_the_dense_one(xp, block):
    a = _activations(xp)
    w = xp.asarray(np.random.default_rng(0).standard_normal((200, 70)).astype(np.float32))
    ell = to_blocked_ell(a, block, counts=tile_counts(a, (64, 32)), tile=(64, 32))
    assert ell.shape[0] % block == 0 and ell.shape[1] % block == 0
    product = _host(blocked_ell_matmul(ell, w))[:300]
    ref = _host(a).astype(np.float64) @ _host(w)
    # cuSPARSE's FP32 Blocked-ELL product rounds like TF32 (3e-4 of the largest output measured on an H100)
    assert np.abs(product - ref).max() <= (1e-4 if xp is np else 2e-3) * np.abs(ref).max()


def test_blocked_ell_stores_each_nonzero_block_once_in_column_order():
    a = np.zeros((64, 96), np.float32)
    a[0, 40] = 1.0  # block (0, 1)
    a[5, 70] = 2.0  # block (0, 2)
    a[40, 3] = 3.0  # block (1, 0)
    ell = to_blocked_ell(a, 32)
    assert ell.width == 2
    assert ell.col_index.tolist() == [[1, 2], [0, -1]]
    assert ell.values[0, 8] == 1.0 and ell.values[5, 32 + 6] == 2.0 and ell.values[40, 3] == 3.0
    assert ell.values[32:, 32:].sum() == 0  # the padding block is zeros


def test_block_mask_from_counts_covers_the_activations():
    a = _activations(np)
    counts = tile_counts(a, (64, 32))
    for block in (32, 64, 128):
        from_counts, exact = block_mask(a, block, counts, (64, 32)), block_mask(a, block)
        assert np.all(from_counts >= exact)  # a superset: never drops a non-zero block
    assert np.array_equal(block_mask(a, 64, counts, (64, 32)), block_mask(a, 64))  # tiles nest exactly


def test_blocked_ell_float16_accumulates_in_float32():
    a = _activations(np)
    w = np.random.default_rng(0).standard_normal((200, 70)).astype(np.float32)
    ell = to_blocked_ell(a, 32, dtype="float16")
    assert ell.values.dtype == np.float16
    product = blocked_ell_matmul(ell, w)
    assert product.dtype == np.float32
    ref = a.astype(np.float64) @ w
    assert np.abs(product[:300] - ref).max() <= 2e-3 * np.abs(ref).max()


def test_blocked_ell_rejects_bad_arguments():
    a = _activations(np)
    with pytest.raises(InputError, match="block"):
        to_blocked_ell(a, 0)
    with pytest.raises(InputError, match="dtype"):
        to_blocked_ell(a, 32, dtype="int8")
    with pytest.raises(InputError, match="rows"):
        blocked_ell_matmul(to_blocked_ell(a, 32), np.zeros((500, 4), np.float32))
    with pytest.raises(InputError, match="out must be"):
        blocked_ell_matmul(to_blocked_ell(a, 32), np.zeros((200, 4), np.float32), out=np.zeros((3, 4), np.float32))
