"""The three defects of the saved-maps path (issue 77), each with a test that failed at 25a78d2:
a saved batch unlike ``workload.batch`` crashed the training step and was recorded as the
config's batch; the tables' ``map_density`` and ``batch`` were the config's, so a density sweep
over one maps file labelled identical data twice; the input gradient's mask stayed generated
though the file could carry it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from spartan_py.config.validate import ConfigError
from spartan_py.runner import load_experiment, run_experiment
from spartan_py.runner.store import load_points
from spartan_py.workloads.conv.layers import conv_layer
from spartan_py.workloads.conv.saved_maps_check import GRADIENT_MASK_SUFFIX, check_saved_maps
from spartan_py.workloads.conv.tables import training_step_table


def _maps(shape, density, seed):
    rng = np.random.default_rng(seed)
    return np.where(rng.random(shape) < density, rng.random(shape) + 0.1, 0).astype(np.float32)


CONV3, CONV4 = conv_layer("alexnet/conv3"), conv_layer("alexnet/conv4")


def _experiment(tmp_path, step: str, extra: str = "") -> str:
    return (
        f"name: mine-{step}\nworkload:\n  kind: conv_layers\n  layers: [alexnet/conv3, alexnet/conv4]\n"
        f"  step: {step}\n  activations: maps.npz\n{extra}tile: 32\nbackend: cpu\nmode: simulated\n"
        "machines: [h100-sxm]\n"
    )


def _run(tmp_path, text: str):
    path = tmp_path / "mine.yaml"
    path.write_text(text)
    experiment, points = load_experiment(path)
    summary = run_experiment(experiment, points, tmp_path / "run")
    assert summary.failed == 0, [p.get("error") for p in load_points(tmp_path / "run")]
    return load_points(tmp_path / "run")


@pytest.mark.parametrize("step", ["forward", "training"])
def test_a_saved_batch_unlike_the_configs_runs_and_is_recorded_as_the_maps(tmp_path, step):
    """Batch 3 saved, workload.batch left at its default 8: the training step broadcast a
    generated 8-image output mask against 3 images' rows and failed; both forms recorded 8."""
    conv3, conv4 = _maps((3, 256, 13, 13), 0.2, 1), _maps((3, 384, 13, 13), 0.5, 2)
    np.savez(tmp_path / "maps.npz", conv3=conv3, conv4=conv4)
    points = _run(tmp_path, _experiment(tmp_path, step))
    table = pd.read_csv(tmp_path / "run" / "dense-layers.csv")
    assert set(table["batch"]) == {3}
    density = (np.count_nonzero(conv3) + np.count_nonzero(conv4)) / (conv3.size + conv4.size)
    assert table["map_density"].to_numpy() == pytest.approx(density)
    assert points[0]["summary"]["batch"] == 3
    if step == "training":
        steps = training_step_table(points)
        assert steps["batch"].tolist() == [3] and steps["map_density"].tolist() == pytest.approx([density])


def test_maps_of_several_batches_record_each_layers(tmp_path):
    np.savez(tmp_path / "maps.npz", conv3=_maps((2, 256, 13, 13), 0.2, 1), conv4=_maps((5, 384, 13, 13), 0.5, 2))
    points = _run(tmp_path, _experiment(tmp_path, "training"))
    table = pd.read_csv(tmp_path / "run" / "dense-layers.csv").groupby("layer")["batch"].unique()
    assert (list(table["alexnet/conv3"]), list(table["alexnet/conv4"])) == ([2], [5])
    assert points[0]["summary"]["batch"] == "2-5"


@pytest.mark.parametrize("field", ["density: 0.1", "batch: 4", "cluster_px: 1"])
def test_settings_of_generated_maps_are_refused_beside_saved_ones(tmp_path, field):
    """A `density: [0.1, 0.3]` sweep over one maps file gave two labels for identical data:
    density, batch and cluster_px are the maps' own, so setting one is refused."""
    np.savez(tmp_path / "maps.npz", conv3=_maps((1, 256, 13, 13), 0.2, 1), conv4=_maps((1, 384, 13, 13), 0.5, 2))
    path = tmp_path / "mine.yaml"
    path.write_text(_experiment(tmp_path, "forward", f"  {field}\n"))
    with pytest.raises(ConfigError, match=f"{field.split(':')[0]}: the saved maps"):
        load_experiment(path)


def test_a_density_sweep_over_one_maps_file_is_refused(tmp_path):
    np.savez(tmp_path / "maps.npz", conv3=_maps((1, 256, 13, 13), 0.2, 1), conv4=_maps((1, 384, 13, 13), 0.5, 2))
    path = tmp_path / "mine.yaml"
    path.write_text(_experiment(tmp_path, "forward") + "sweep:\n  grid:\n    workload.density: [0.1, 0.3]\n")
    with pytest.raises(ConfigError, match=r"point \{'workload.density': 0.1\}: .*density: the saved maps"):
        load_experiment(path)


def test_the_input_gradient_takes_its_mask_from_the_maps_file(tmp_path):
    """The input gradient's sparse operand dY is the gradient under the mask the file carries
    (here: only the first 40 output channels pass), not a generated one."""
    batch = 2
    mask = np.zeros((batch, CONV3.out_channels, CONV3.out_size, CONV3.out_size), bool)
    mask[:, :40] = True
    np.savez(
        tmp_path / "maps.npz",
        **{
            "conv3": _maps((batch, 256, 13, 13), 0.3, 1),
            "conv4": _maps((batch, 384, 13, 13), 0.3, 2),
            "conv3" + GRADIENT_MASK_SUFFIX: mask,
        },
    )
    assert check_saved_maps(str(tmp_path / "maps.npz"), ("alexnet/conv3", "alexnet/conv4")).masks == ("alexnet/conv3",)
    _run(tmp_path, _experiment(tmp_path, "training"))
    rows = pd.read_csv(tmp_path / "run" / "dense-layers.csv").set_index(["layer", "gemm"])
    conv3 = rows.loc[("alexnet/conv3", "input_grad")]
    assert conv3["density"] == pytest.approx(np.count_nonzero(mask) / (conv3["M"] * conv3["K"]))
    assert conv3["density"] == pytest.approx(40 / 384 * (batch * 169) / conv3["M"])
    generated = rows.loc[("alexnet/conv4", "input_grad")]  # no mask saved: generated, as before
    assert 0 < generated["density"] and generated["density"] != pytest.approx(40 / 384, rel=0.05)


def test_the_docs_list_each_layers_maps_and_mask_shapes():
    """docs/experiments.md lists every layer's input C x H x W (and its output's, the gradient
    mask's), as the code defines the networks."""
    from pathlib import Path

    from spartan_py.workloads.conv.layers import CONV_LAYERS

    text = (Path(__file__).parents[1] / "docs" / "experiments.md").read_text()
    for layers in CONV_LAYERS.values():
        for layer in layers:
            size, out = layer.size, layer.out_size
            row = f"| `{layer.label}` | {layer.in_channels} x {size} x {size} | {layer.out_channels} x {out} x {out} |"
            assert row in text, row
