"""Loading networks and inputs from directories and files."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

from spartan_py import InputError, generate_network, load_inputs, load_network
from spartan_py.graph_challenge.writers import write_triples


@pytest.fixture
def small_network_dir(tmp_path):
    network = generate_network(1024, 4, seed=5)
    for number, layer in enumerate(network.weights, start=1):
        suffix = {1: "tsv", 2: "tsv.gz", 3: "mtx", 4: "tsv.gz"}[number]
        path = tmp_path / f"n1024-l{number}.{suffix}"
        if suffix == "mtx":
            scipy.io.mmwrite(path, layer)
        else:
            write_triples(path, layer)
    return tmp_path, network


def test_load_mixed_formats(small_network_dir):
    directory, expected = small_network_dir
    network = load_network(directory)
    assert network.neurons == 1024 and network.layers == 4 and network.bias == pytest.approx(-0.3)
    for got, want in zip(network.weights, expected.weights):
        assert (got != want).nnz == 0
    assert network.edges == 4 * 32 * 1024
    assert load_network(directory, layers=2).layers == 2


def test_missing_layer_file(small_network_dir):
    directory, _ = small_network_dir
    (directory / "n1024-l3.mtx").unlink()
    assert load_network(directory, layers=2).layers == 2  # the layers before the gap, when asked for
    # issue 74: the gap is named, never run around (it ran the 2 layers before it, exit 0)
    with pytest.raises(
        InputError, match="missing layer file n1024-l3.tsv.gz .* for layer 3: the folder's layer files go"
    ):
        load_network(directory)
    with pytest.raises(InputError, match="missing layer file n1024-l3.tsv.gz .* for layer 3: --layers 4 asks for it"):
        load_network(directory, layers=4)


def test_wrong_neuron_count(tmp_path):
    layer = generate_network(1024, 1).weights[0]
    write_triples(tmp_path / "n4096-l1.tsv", layer)  # says 4096, fine: indices fit
    assert load_network(tmp_path).neurons == 4096
    big = sp.csr_matrix(([1.0], ([1500], [3])), shape=(2048, 2048))
    write_triples(tmp_path / "x" / "n1024-l1.tsv", big)
    with pytest.raises(
        InputError, match=r"n1024-l1\.tsv:1: row index 1501 is out of range: expected between 1 and 1024"
    ):
        load_network(tmp_path / "x")


def test_network_directory_errors(tmp_path):
    with pytest.raises(InputError, match="network directory not found"):
        load_network(tmp_path / "none")
    with pytest.raises(InputError, match="no layer files"):
        load_network(tmp_path)
    layer = generate_network(1024, 1).weights[0]
    write_triples(tmp_path / "n1024-l1.tsv", layer)
    write_triples(tmp_path / "n4096-l1.tsv", layer)
    with pytest.raises(InputError, match="several sizes"):
        load_network(tmp_path)
    assert load_network(tmp_path, neurons=1024).layers == 1
    with pytest.raises(InputError, match="no layer files for 16384"):
        load_network(tmp_path, neurons=16384)


def test_load_inputs(tmp_path):
    matrix = sp.csr_matrix(([1.0, 1.0, 0.5], ([0, 2, 2], [5, 0, 1023])), shape=(3, 1024))
    write_triples(tmp_path / "in.tsv", matrix)
    got = load_inputs(tmp_path / "in.tsv", 1024)
    assert got.shape == (3, 1024) and (got != matrix).nnz == 0
    assert load_inputs(tmp_path / "in.tsv", 1024, rows=2).shape == (2, 1024)
    with pytest.raises(InputError, match="rows 10: the inputs hold 3 rows"):  # issue 74: not padded silently
        load_inputs(tmp_path / "in.tsv", 1024, rows=10)
    with pytest.raises(InputError, match="col index 1024 is out of range"):
        load_inputs(tmp_path / "in.tsv", 1000)
    scipy.io.mmwrite(tmp_path / "in.mtx", matrix)
    assert (load_inputs(tmp_path / "in.mtx", 1024) != matrix).nnz == 0
    with pytest.raises(InputError, match="the network has 4096 neurons"):
        load_inputs(tmp_path / "in.mtx", 4096)


def test_official_network_files(official_network):
    assert official_network.layers == 120 and official_network.edges == 3_932_160
    first = official_network.weights[0]
    assert np.all(first.getnnz(axis=0) == 32) and np.all(first.getnnz(axis=1) == 32)
