"""The rows kernel's neuron renumbering: same results, every warp reading each bank equally."""

import numpy as np
import pytest
import scipy.sparse as sp

from spartan_py import generate_inputs, generate_network, make_engine
from spartan_py.engines.rows.neuron_order import balanced_warps, neuron_orders, rainbow_banks, renumbered
from spartan_py.engines.shared.bank_schedule import BANKS
from spartan_py.engines.shared.layer_plan import plan_layer


def _kernel_layers(weights):
    orders = list(neuron_orders(weights))
    return orders, [renumbered(w, a, b) for w, a, b in zip(weights, orders, orders[1:])]


@pytest.mark.parametrize("neurons", [1024, 4096])
def test_radixnet_layers_need_32_steps_once_renumbered(neurons):
    """RadiX-Net layers (relabelled butterflies) need ~44-56 steps in natural order and 32,
    the least, once renumbered; the last layer's outputs stay in natural order."""
    weights = list(generate_network(neurons, 12, seed=4).weights)
    orders, layers = _kernel_layers(weights)
    assert max(plan_layer(w).steps for w in weights) > 40
    assert [plan_layer(w).steps for w in layers] == [32] * len(weights)
    assert np.array_equal(orders[-1], np.arange(neurons))
    assert all(np.array_equal(np.sort(order), np.arange(neurons)) for order in orders)


def test_renumbered_layers_compute_the_same_network():
    """Row x renumbered layers = the natural layers' result at the kernel's positions."""
    weights = list(generate_network(1024, 8, seed=5, unmergeable=True).weights)
    orders, layers = _kernel_layers(weights)
    x = sp.random(40, 1024, density=0.1, format="csr", random_state=1, dtype=np.float64)
    natural, kernel = x, x[:, orders[0]]
    for step, (w, k) in enumerate(zip(weights, layers), start=1):
        natural, kernel = natural @ w, kernel @ k
        assert np.allclose(natural.toarray()[:, orders[step]], kernel.toarray())


def test_unmergeable_layers_improve_without_a_rainbow():
    """Layers with no two equal columns get no rainbow banks; the warp search alone still
    cuts their steps."""
    weights = list(generate_network(1024, 12, seed=6, unmergeable=True).weights)
    assert rainbow_banks(weights[7]) is None
    _, layers = _kernel_layers(weights)
    relabelled = slice(5, -1)  # past the butterflies (32 steps either way), before the last (natural warps)
    before = sum(plan_layer(w).steps for w in weights[relabelled])
    assert sum(plan_layer(w).steps for w in layers[relabelled]) < 0.9 * before


def test_rainbow_banks_give_every_column_distinct_banks():
    """Each output reads its 32 inputs from 32 different banks, 32 inputs a bank."""
    layer = sp.csc_matrix(generate_network(1024, 9, seed=7).weights[8])
    bank = rainbow_banks(layer)
    assert bank is not None
    assert np.array_equal(np.bincount(bank, minlength=BANKS), np.full(BANKS, 1024 // BANKS))
    for j in range(1024):
        inputs = layer.indices[layer.indptr[j] : layer.indptr[j + 1]]
        assert np.unique(bank[inputs]).size == inputs.size


def test_balanced_warps_hold_one_output_of_each_bank():
    """Whatever the search does, warp x bank is a one-to-one grid of the outputs."""
    layer = generate_network(1024, 8, seed=8, unmergeable=True).weights[7]
    out_bank = np.random.default_rng(0).permutation(np.arange(1024) % BANKS)
    warp = balanced_warps(layer, np.arange(1024) % BANKS, out_bank)
    assert np.unique(warp * BANKS + out_bank).size == 1024


@pytest.mark.parametrize("unmergeable", [False, True])
def test_twin_results_do_not_depend_on_the_order(unmergeable):
    """The gpu twin renumbered and in natural order: the same live rows and values (to float
    rounding: sums run in another order), fewer executed multiply-adds."""
    network = generate_network(1024, 20, seed=9, unmergeable=unmergeable)
    inputs = generate_inputs(300, 1024, seed=9)
    natural = make_engine("gpu-twin", network, renumber_neurons=False).run(inputs)
    kernel = make_engine("gpu-twin", network).run(inputs)
    assert np.array_equal(natural.live_rows, kernel.live_rows)
    assert natural.live_rows_by_layer == kernel.live_rows_by_layer
    np.testing.assert_allclose(natural.values.toarray(), kernel.values.toarray(), rtol=1e-5, atol=1e-5)
    executed = [sum(r.executed_macs for r in out.trace if r.kernel == "gpu.gc_layer") for out in (natural, kernel)]
    assert executed[1] < executed[0]


def test_neuron_orders_on_threads_are_one_threads():
    """Each layer's banks and warps are worked out on threads (its seed is its number): the
    orders equal those of one thread; so do the distinct columns found by hashing and by
    comparing rows (``np.unique(axis=0)``)."""
    from spartan_py.engines.rows.neuron_order import _input_columns

    network = generate_network(1024, 9, seed=6)
    one = list(neuron_orders(network.weights, workers=1))
    many = list(neuron_orders(network.weights, workers=4))
    assert len(one) == len(many) == 10 and all(np.array_equal(a, b) for a, b in zip(one, many))
    csc = sp.csc_matrix(network.weights[2], copy=True)
    csc.sort_indices()
    columns, inverse = _input_columns(csc)
    degree = np.diff(csc.indptr)
    rows = np.full((csc.shape[1], degree.max()), -1, np.int64)
    for j in range(csc.shape[1]):
        rows[j, : degree[j]] = csc.indices[csc.indptr[j] : csc.indptr[j + 1]]
    want_columns, want_inverse = np.unique(rows, axis=0, return_inverse=True)
    assert np.array_equal(columns, want_columns) and np.array_equal(inverse.ravel(), want_inverse.ravel())


@pytest.mark.parametrize("shape", [(64, 96), (48, 48)])
def test_neuron_orders_refuse_layers_the_kernel_cannot_take(shape):
    layer = sp.random(*shape, density=0.1, format="csr", random_state=0)
    with pytest.raises(ValueError, match="square with a multiple of 32 neurons"):
        list(neuron_orders([layer]))
