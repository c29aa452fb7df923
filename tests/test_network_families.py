"""The two generated network families (RadiX-Net and unmergeable), the cpu engine's merged
path, and how ``auto`` and the specs tell them apart."""

from __future__ import annotations

import numpy as np
import pytest

import spartan_py as spy
from spartan_py.api import network_neurons, resolve_network
from spartan_py.engines import engine_class, gpu_backend_for
from spartan_py.engines.cpu.engine import CpuEngine
from spartan_py.engines.reference import ReferenceEngine
from spartan_py.engines.shared.column_merge import column_lists, duplicate_groups, merge_network, worth_merging
from spartan_py.errors import InputError
from spartan_py.graph_challenge.generate import WEIGHT, generate_network


@pytest.mark.parametrize("neurons", [1024, 4096])
def test_unmergeable_layers_keep_the_degrees_and_have_no_equal_columns(neurons):
    network = generate_network(neurons, 12, seed=4, unmergeable=True)
    for index in (0, 2, 4, 9, 11):  # un-relabelled and relabelled layers
        layer = network.weights[index].copy()
        layer.sum_duplicates()  # a repeated (input, output) pair would show as a lower degree
        assert np.all(np.diff(layer.indptr) == 32) and np.all(np.diff(layer.tocsc().indptr) == 32)
        assert np.all(layer.data == np.float32(WEIGHT))
        _, representatives = duplicate_groups(*column_lists(layer))
        assert representatives.size == neurons  # every column distinct
    assert not worth_merging(network)
    assert merge_network(generate_network(neurons, 12, seed=4)).factor > 10  # the RadiX-Net ones merge


def test_unmergeable_network_keeps_a_non_trivial_category_count():
    network = resolve_network("generated-unmergeable:1024", 120)
    inputs = spy.generate_inputs(3000, 1024, seed=1)
    want = ReferenceEngine(network).run(inputs)
    got = spy.make_engine("cpu", network).run(inputs)
    assert 0.005 * 3000 < want.live_rows.size < 0.2 * 3000
    assert np.array_equal(got.live_rows, want.live_rows)
    assert network.source == "generated-unmergeable:1024:0" and network.bias == np.float32(-0.3)


def test_generated_specs_name_the_family():
    assert network_neurons("generated-unmergeable:4096:2") == 4096
    assert resolve_network("generated-unmergeable:1024:2", 3).weights.unmergeable
    assert not resolve_network("generated:1024:2", 3).weights.unmergeable
    with pytest.raises(InputError, match="generated-unmergeable:N"):
        resolve_network("generated-unmergeable:1024:2:9")


def test_auto_picks_by_family():
    assert gpu_backend_for(generate_network(1024, 2)) == "gpu-merged"
    assert gpu_backend_for(generate_network(1024, 2, unmergeable=True)) == "gpu"
    # no rows kernel holds a 65536-wide row: an unmergeable network that wide runs on the CPU
    assert 65536 not in (engine_class("gpu").supported_neurons or ())
    assert gpu_backend_for(generate_network(65536, 1, unmergeable=True)) == "cpu"


@pytest.mark.parametrize(
    "spec, merged",
    [("generated:1024", True), ("generated:4096", True), ("generated-unmergeable:1024", False)],
)
def test_cpu_takes_the_merged_path_where_auto_would(spec, merged):
    network = resolve_network(spec, 24)
    inputs = spy.generate_inputs(800, network.neurons, seed=2)
    engine = spy.make_engine("cpu", network)
    assert engine.merged is merged and ("merged" in engine.device) is merged
    rows = CpuEngine(network, merged=False).run(inputs)
    got = engine.run(inputs)
    assert 0 < rows.live_rows.size < 800
    assert np.array_equal(got.live_rows, rows.live_rows)
    assert got.values.shape == (800, network.neurons)
    assert abs(got.values - rows.values).max() <= 1e-5 * max(1.0, abs(rows.values).max())
    if merged:  # the merged path does a small fraction of the row path's multiply-adds
        assert sum(r.executed_macs for r in got.trace) < 0.2 * sum(r.executed_macs for r in rows.trace)


def test_cpu_merged_path_on_the_official_network(official_network, official_first1200):
    inputs, truth = official_first1200
    engine = spy.make_engine("cpu", official_network)
    assert engine.merged
    out = engine.run(inputs)
    assert np.array_equal(out.live_rows + 1, truth)
