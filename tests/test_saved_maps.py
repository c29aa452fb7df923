"""Activation maps saved from a user's framework (``activations:`` of a conv_layers workload)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from spartan_py.config.validate import ConfigError
from spartan_py.errors import InputError
from spartan_py.runner import load_experiment, run_experiment
from spartan_py.workloads.conv.layers import conv_layer, im2col
from spartan_py.workloads.conv.saved_maps import saved_maps


def _maps(shape, density, seed):
    rng = np.random.default_rng(seed)
    values = np.abs(rng.standard_normal(shape)).astype(np.float32) + 0.1
    return np.where(rng.random(shape) < density, values, 0).astype(np.float32)


def test_a_point_runs_on_the_maps_a_user_saved(tmp_path):
    """Each layer computes on its saved maps (by label, or by name alone): the density the point
    reports is the maps' own after im2col, the batch theirs, the products checked as always."""
    conv3, conv4 = _maps((3, 256, 13, 13), 0.12, 1), _maps((2, 384, 13, 13), 0.4, 2)
    np.savez(tmp_path / "maps.npz", **{"alexnet/conv3": conv3, "conv4": conv4})
    path = tmp_path / "mine.yaml"
    path.write_text(
        "name: mine\nworkload:\n  kind: conv_layers\n  layers: [alexnet/conv3, alexnet/conv4]\n"
        "  activations: maps.npz\ntile: 32\nbackend: cpu\n"
    )
    experiment, points = load_experiment(path)
    assert "maps of maps.npz" in points[0].experiment.workload.short_label()
    assert (run_experiment(experiment, points, tmp_path / "run").failed, len(points)) == (0, 1)
    table = pd.read_csv(tmp_path / "run" / "dense-layers.csv").set_index("layer")
    for label, maps in (("alexnet/conv3", conv3), ("alexnet/conv4", conv4)):
        layer = conv_layer(label)
        a = im2col(maps, layer.kernel, layer.stride, layer.pad)
        row = table.loc[label]
        assert row["M"] == a.shape[0] == maps.shape[0] * layer.out_size**2
        assert row["density"] == pytest.approx(np.count_nonzero(a) / a.size)
        assert row["tile_sparse_max_rel_diff"] < 1e-5


@pytest.mark.parametrize(
    ("arrays", "message"),
    [
        ({"conv5": np.zeros((1, 384, 13, 13), np.float32)}, r"no maps for alexnet/conv3.*the file has conv5"),
        ({"conv3": np.zeros((1, 256, 14, 14), np.float32)}, r"shape \(1, 256, 14, 14\).*N x 256 x 13 x 13"),
        ({"conv3": -np.ones((1, 256, 13, 13), np.float32)}, r"43264 negative values: expected a ReLU's output"),
        ({"conv3": np.full((1, 256, 13, 13), np.nan, np.float32)}, r"NaN or infinite"),
    ],
)
def test_saved_maps_that_do_not_fit_the_layer_are_refused(tmp_path, arrays, message):
    path = tmp_path / f"bad-{len(message)}.npz"
    np.savez(path, **arrays)
    with pytest.raises(InputError, match=message) as info:
        saved_maps(path, conv_layer("alexnet/conv3"))
    assert str(path) in str(info.value)


def test_the_activations_field_names_a_file_that_exists(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: bad\nworkload:\n  kind: conv_layers\n  activations: missing.npz\n")
    with pytest.raises(ConfigError, match="activations file 'missing.npz' not found"):
        load_experiment(path)
    path.write_text("name: bad\nworkload:\n  kind: conv_layers\n  activations: maps.pt\n")
    with pytest.raises(ConfigError, match=r"expected a \.npz"):
        load_experiment(path)


def test_one_layer_reads_a_npy(tmp_path):
    maps = _maps((2, 512, 7, 7), 0.3, 3)
    np.save(tmp_path / "one.npy", maps)
    assert np.array_equal(saved_maps(tmp_path / "one.npy", conv_layer("resnet18/conv5_x")), maps)
