"""The whole-challenge machinery on the CPU: official-format writing, check_rows, the challenge
table, generated layers and inputs (against their definitions), edges without building."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import spartan_py as spy
from spartan_py.engines import choose_backend, engine_class, twin_backend
from spartan_py.graph_challenge.generate import BLOCKS, GeneratedLayers, butterfly_layer
from spartan_py.runner.execute import run_experiment
from spartan_py.runner.store import load_points
from spartan_py.runner.sweep import load_experiment
from spartan_py.workloads.graph_challenge.tables import challenge_table


def test_write_network_round_trips(tmp_path):
    network = spy.generate_network(1024, 9, seed=3)
    paths = spy.write_network(network, tmp_path / "net")
    assert [p.name for p in paths] == [f"n1024-l{i}.tsv" for i in range(1, 10)]
    loaded = spy.load_network(tmp_path / "net")
    assert loaded.layers == 9 and loaded.bias == network.bias
    for a, b in zip(loaded.weights, network.weights):
        assert (a != b).nnz == 0


def test_write_triples_keeps_float32_values(tmp_path):
    matrix = sp.random(40, 30, density=0.2, format="csr", dtype=np.float32, random_state=2)
    spy.write_triples(tmp_path / "m.tsv.gz", matrix)
    back = spy.graph_challenge.read_triples_matrix(tmp_path / "m.tsv.gz", (40, 30))
    assert back.dtype == np.float32 and (back != matrix).nnz == 0


def test_generated_layer_is_a_relabelled_butterfly():
    layers = GeneratedLayers(1024, 12, seed=5)
    layer = layers[9]  # past the 6 un-relabelled layers
    assert layer.nnz == 1024 * 2 * BLOCKS and np.all(np.diff(layer.indptr) == 2 * BLOCKS)
    assert np.all(np.diff(layer.indices.reshape(1024, -1), axis=1) > 0)  # sorted, distinct
    rng = np.random.default_rng([5, 9])
    inputs, outputs = rng.permutation(1024), rng.permutation(1024)
    expected = butterfly_layer(1024, 1 << (9 % 6))[inputs][:, outputs]
    assert (layer != expected).nnz == 0


def test_edges_are_known_without_building_layers():
    network = spy.generate_network(65536, 1920)
    assert network.edges == 65536 * 32 * 1920
    assert network.weights._build.cache_info().currsize == 0


def test_auto_picks_the_merged_kernel_for_radix_net():
    network = spy.generate_network(1024, 3)
    assert twin_backend("auto", network) == "gpu-merged-twin"
    assert twin_backend("auto") == "gpu-twin"  # simulated mode's auto: the rows kernel
    if engine_class("gpu").unavailable_reason() is not None:
        assert choose_backend("auto", network) == "cpu"


def test_stock_paths_take_a_time_limit():
    assert engine_class("gpu-cusparse-spmm").stock_library
    assert not engine_class("gpu-merged").stock_library


@pytest.mark.parametrize("rows", [40])
def test_check_rows_and_challenge_table(tmp_path, rows):
    spec = tmp_path / "e.yaml"
    spec.write_text(
        "name: mini\n"
        f"workload: {{network: 'generated:1024', layers: 5, inputs: 'generated:300', check_rows: {rows}}}\n"
        "backend: cpu\nmachines: [h100-sxm]\ntime_limit_seconds: 60\n"
        "sweep:\n  cases:\n    - {}\n    - {backend: gpu-cusparse-spmm}\n"
    )
    experiment, points = load_experiment(spec)
    run_experiment(experiment, points, tmp_path / "run")
    table = challenge_table(load_points(tmp_path / "run"))
    assert len(table) == 1
    row = table.iloc[0]
    assert row["checked_rows"] == rows and bool(row["check_equal"])
    assert (tmp_path / "run" / "challenge.csv").is_file()
    if engine_class("gpu").unavailable_reason() is not None:  # the stock point failed here
        assert "unavailable" in row["stock_not_finished"]
