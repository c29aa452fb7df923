"""The network and input generators."""

from __future__ import annotations

import numpy as np
import pytest

from spartan_py import InputError, generate_inputs, generate_network, infer


@pytest.mark.parametrize("neurons", [1024, 4096, 16384, 65536])
def test_radixnet_degrees(neurons):
    network = generate_network(neurons, 14, seed=2)
    period = int(np.log2(neurons // 16))
    for index in (0, period - 1, period, 13):
        layer = network.weights[index]
        assert layer.shape == (neurons, neurons)
        assert np.all(layer.getnnz(axis=0) == 32), "32 inputs per output neuron"
        assert np.all(layer.getnnz(axis=1) == 32), "32 outputs per input neuron"
        assert np.all(layer.data == np.float32(1 / 16))


def test_first_layers_match_the_official_rule():
    network = generate_network(1024, 6)
    for layer in range(1, 7):
        csc = network.weights[layer - 1].tocsc()
        for j in (0, 5, 63, 64, 700, 1023):
            inputs = csc.indices[csc.indptr[j] : csc.indptr[j + 1]]
            lanes = {j % 64, (j % 64 + 2 ** (layer - 1)) % 64}
            assert set(inputs % 64) == lanes
            assert len(set(inputs // 64)) == 16


def test_first_layers_equal_official_files(official_network):
    generated = generate_network(1024, 6)
    for layer in range(6):
        assert (generated.weights[layer] != official_network.weights[layer]).nnz == 0


def test_seeded_and_reproducible():
    a, b, c = (generate_network(1024, 10, seed=s) for s in (1, 1, 2))
    assert (a.weights[9] != b.weights[9]).nnz == 0
    assert (a.weights[9] != c.weights[9]).nnz > 0
    assert (generate_inputs(50, seed=4) != generate_inputs(50, seed=4)).nnz == 0
    assert (generate_inputs(50, seed=4) != generate_inputs(50, seed=5)).nnz > 0


@pytest.mark.parametrize("neurons", [1024, 4096])
def test_digit_inputs(neurons):
    inputs = generate_inputs(400, neurons, seed=0)
    assert inputs.shape == (400, neurons)
    assert np.all(inputs.data == 1.0)
    per_1024 = inputs.nnz / 400 / (neurons / 1024)
    assert 70 <= per_1024 <= 130
    assert np.diff(inputs.indptr).min() > 20  # no blank images


def test_generator_errors():
    with pytest.raises(InputError, match="generated networks have 1024"):
        generate_network(1000, 3)
    with pytest.raises(InputError, match="layers must be at least 1"):
        generate_network(1024, 0)
    with pytest.raises(InputError, match="square number"):
        generate_inputs(5, 1000)


@pytest.mark.slow
def test_generated_activity_stays_in_the_official_range():
    """1024 x 120 with 60000 generated rows: 0.5%..10% live at the end (official data: 3.0%)."""
    result = infer(generate_network(1024, 120, seed=0), generate_inputs(60000, 1024, seed=0), backend="cpu")
    fraction = result.categories.size / 60000
    assert 0.005 <= fraction <= 0.10, fraction
    assert result.live_rows_by_layer[0] > 0.5 * 60000  # activity neither dies at once
    assert result.nonzeros_by_layer[-1] < 60000 * 1024  # nor saturates everything


def test_rows_limit_generated_inputs():
    """An experiment's ``workload.rows`` takes the first rows of generated inputs too (it was
    ignored for them, so calibration points meant for fewer rows ran all of them)."""
    from spartan_py.api import resolve_inputs

    every = resolve_inputs("generated:300", 1024)
    first = resolve_inputs("generated:300", 1024, rows=120)
    assert every.shape == (300, 1024) and first.shape == (120, 1024)
    assert (first != every[:120]).nnz == 0
