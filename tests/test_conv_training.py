"""The training step of conv layers (``step: training``): three GEMMs a layer, each checked
against the dense product, the step's totals and bound, simulated and measured on the CPU."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from spartan_py.runner import load_experiment, run_experiment
from spartan_py.sparsity import SparsityMonitor, TileShape
from spartan_py.workloads.conv.layers import CONV_LAYERS, conv_layer, im2col
from spartan_py.workloads.conv.training import TRAINING_GEMMS, counting_tile, output_mask, transposed_profile

ROOT = Path(__file__).resolve().parents[1]


def _run(tmp_path, body: str):
    path = tmp_path / "step.yaml"
    path.write_text(
        "name: step\nworkload:\n  kind: conv_layers\n  step: training\n"
        "  layers: [vgg16/conv5_1, resnet18/conv5_x]\n  batch: 1\n  density: 0.2\n" + body
    )
    experiment, points = load_experiment(path)
    assert "training step" in points[0].experiment.workload.short_label()
    assert run_experiment(experiment, points, tmp_path / "run").failed == 0
    table = pd.read_csv(tmp_path / "run" / "dense-layers.csv")
    (point,) = (json.loads(p.read_text()) for p in (tmp_path / "run" / "points").glob("*.json"))
    return table, point["summary"]


def test_a_simulated_step_has_three_gemms_a_layer(tmp_path):
    """Each layer's GEMMs in order with their own shapes (the weight gradient contracts over the
    forward's rows); ResNet-18's input gradient is dense because of its BatchNorm; VGG-16's
    reads dY at the output's density; the totals are the rows' sums."""
    table, summary = _run(tmp_path, "mode: simulated\nmachines: [h100-sxm]\n")
    assert list(table["gemm"]) == list(TRAINING_GEMMS) * 2
    for label, rows in table.groupby("layer", sort=False):
        forward, wgrad, dgrad = (rows[rows["gemm"] == g].iloc[0] for g in TRAINING_GEMMS)
        layer = conv_layer(label)
        assert (wgrad["M"], wgrad["K"], wgrad["N"]) == (forward["K"], forward["M"], layer.out_channels)
        assert (dgrad["M"], dgrad["K"], dgrad["N"]) == (forward["M"], layer.out_channels, forward["K"])
        assert wgrad["density"] == pytest.approx(forward["density"])
        if layer.batchnorm:
            assert dgrad["sparse_operand"] == "none" and dgrad["kernel"] == "dense"
            assert "BatchNorm" in dgrad["reason"] and dgrad["bound_us"] == dgrad["dense_us"]
        else:
            rows = layer.out_size**2  # batch 1; M is padded to whole tiles with zero rows
            assert dgrad["M"] % 64 == 0 and dgrad["M"] - rows < 64
            assert dgrad["sparse_operand"] == "dY" and dgrad["density"] == pytest.approx(
                0.2 * rows / dgrad["M"], abs=0.02
            )
    assert (table["chosen_max_rel_diff"] < 1e-5).all()
    assert summary["step"] == "training"
    assert summary["cudnn_baseline"] == "not run: no cuDNN on the CPU"  # every run says why there is none
    assert summary["dense_seconds"] == pytest.approx(table["dense_us"].sum() * 1e-6)
    assert summary["seconds"] == pytest.approx((table["chosen_us"].sum() + table["monitor_us"].sum()) * 1e-6)
    assert summary["seconds"] == pytest.approx(summary["predicted_seconds"])  # simulated: the model's times
    assert summary["hw_monitor_seconds"] <= summary["predicted_seconds"]
    assert summary["bound_seconds"] <= summary["dense_seconds"]


@pytest.mark.parametrize("backend", ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("precision", ["fp32", "tf32"])
def test_a_measured_step_runs_each_sparse_gemm_and_checks_it(tmp_path, backend, precision):
    """With the tile GEMM fixed, every GEMM with a sparse operand runs it (the weight gradient
    on X transposed) and matches the dense product; im2col is timed apart."""
    table, summary = _run(tmp_path, f"backend: {backend}\nprecision: {precision}\npolicy: tile_sparse\nrepeats: 1\n")
    bound = 1e-5 if precision == "fp32" else 1e-5 if backend == "cpu" else 3e-3
    sparse = table[table["sparse_operand"] != "none"]
    assert set(sparse["kernel"]) == {"tile_sparse"} and len(sparse) == 5
    assert (table["chosen_max_rel_diff"] < bound).all() and (table["tile_sparse_max_rel_diff"] < bound).all()
    assert (table.loc[table["gemm"] == "forward", "im2col_us"] > 0).all()
    assert (table.loc[table["gemm"] == "forward", "col2im_us"] > 0).all()
    assert summary["im2col_seconds"] > 0 and summary["col2im_seconds"] > 0 and summary["max_rel_diff"] < bound
    # the software monitor (a counting pass and a wait for its counts) beside the fused one
    assert summary["software_monitor_seconds"] > 0
    software, fused = summary["software_monitor_seconds"], summary["monitor_seconds"]
    if fused > 0:
        assert summary["profiling_ratio"] == pytest.approx(software / fused)
    else:  # the fused monitor's cost is a per-round difference, which a loaded CPU can leave at nothing
        assert math.isnan(summary["profiling_ratio"])


@pytest.mark.parametrize(
    "backend",
    [
        pytest.param("cpu\nmode: simulated\nmachines: [h100-sxm]", id="cpu-simulated"),  # real products, model times
        pytest.param("gpu", marks=pytest.mark.gpu, id="gpu"),
    ],
)
def test_each_precision_reports_its_error_against_float64(tmp_path, backend):
    """Every GEMM row carries the dense product's error against float64; fp32x3 (three TF32
    products) lands near FP32's error, far under TF32's, and the appendix sets them side by side."""
    from spartan_py.runner.store import load_points
    from spartan_py.workloads.conv.tables import precision_table

    path = tmp_path / "precisions.yaml"
    path.write_text(
        "name: precisions\nworkload:\n  kind: conv_layers\n  step: training\n  layers: [alexnet/conv3]\n"
        f"  batch: 1\n  density: 0.2\nbackend: {backend}\nrepeats: 1\n"
        "sweep:\n  grid:\n    precision: [fp32, tf32, fp32x3]\n"
    )
    experiment, points = load_experiment(path)
    assert run_experiment(experiment, points, tmp_path / "run").failed == 0
    appendix = precision_table(load_points(tmp_path / "run"))
    (row,) = appendix.to_dict("records")
    assert row["layer"] == "alexnet/conv3" and row["fp32x3_vs_fp32"] > 0
    assert row["fp32_max_rel_err"] < 1e-6 and row["fp32x3_max_rel_err"] < 1e-6
    assert row["tf32_max_rel_err"] > 20 * max(row["fp32x3_max_rel_err"], row["fp32_max_rel_err"])


def test_no_precision_appendix_without_fp32x3():
    """The appendix is for fp32x3: runs without it get none."""
    from spartan_py.workloads.conv.tables import precision_table

    point = {
        "status": "ok",
        "config": {"precision": "fp32", "workload": {"batch": 1, "density": 0.1}},
        "summary": {"step": "training", "layers": [{"layer": "a", "dense_us": 1.0, "dense_max_rel_err": 1e-7}]},
    }
    assert precision_table([point]).empty


def test_fp32x3_with_every_launch_traced_is_refused(tmp_path):
    """trace: all times the fp32 and tf32 families one launch at a time; fp32x3 is refused there."""
    from spartan_py.config.validate import ConfigError

    path = tmp_path / "all.yaml"
    path.write_text(
        "name: all\nworkload:\n  kind: conv_layers\n  layers: [vgg16/conv5_1]\n  batch: 1\n"
        "precision: fp32x3\ntrace: all\n"
    )
    with pytest.raises(ConfigError, match="fp32x3 runs the tf32 ones"):
        load_experiment(path)


@pytest.mark.parametrize("precision", ["fp32", "tf32", "fp32x3"])
@pytest.mark.parametrize("kernel", ["dense", "tile_sparse"])
def test_a_time_lands_on_a_launch_only_where_the_launch_was_timed_alone(kernel, precision):
    """The GPU times a candidate whole (cuBLAS or the tile GEMM), its tile list apart: each
    launch gets its time only where it was timed alone. fp32x3's split, three products and adds
    are one timed part, so none of them carries its time (they did: the whole product's time on
    the split pass, which the H100's fit then took for the split's); its tile list keeps its own."""
    from spartan_py.sparsity.candidates import candidate_records
    from spartan_py.workloads.conv.operands import with_own_times

    tile = TileShape(32, 32) if precision == "fp32" else TileShape(64, 32)
    records = candidate_records(
        kernel, 1024, 576, 64, nnz=50_000, tiles_active=100, live_rows=1000, precision=precision, tile=tile
    )
    listed = sum(record.kernel == "gpu.list_tiles" for record in records)
    times = [5.0] * listed + [300.0]
    timed = with_own_times(records, times)
    got = [(record.kernel, record.measured_us) for record in timed]
    if precision == "fp32x3":
        assert len(records) > len(times)
        assert [us for name, us in got if name == "gpu.list_tiles"] == [5.0] * listed
        assert all(math.isnan(us) for name, us in got if name != "gpu.list_tiles")
    else:
        assert [us for _, us in got] == times
    assert with_own_times(records, [1.0] * (listed + 2)) == records  # not the form: unchanged


def test_the_transposed_profile_counts_x_transposed():
    """X^T's tile counts are X's transposed; its rows are live where their tile row is."""
    rng = np.random.default_rng(0)
    x = np.where(rng.random((96, 64)) < 0.1, 1.0, 0.0).astype(np.float32)
    x[:, 32:] = 0
    _, profile = SparsityMonitor(tile=counting_tile(TileShape(64, 32)), mode="fused").epilogue(x)
    flipped = transposed_profile(profile, np)
    assert flipped.shape == (64, 96) and flipped.tile == TileShape(32, 32)
    _, direct = SparsityMonitor(tile=(32, 32), mode="fused").epilogue(np.ascontiguousarray(x.T))
    assert np.array_equal(flipped.tile_nnz, direct.tile_nnz)
    assert flipped.nnz == direct.nnz and flipped.live_rows == 32


def test_the_output_mask_has_the_output_shape_and_density():
    label = "vgg16/conv5_1"
    layer = conv_layer(label)
    mask = output_mask(label, 2, 0.25, 2.0, 0)
    assert mask.shape == (2 * layer.out_size**2, layer.out_channels)
    assert (mask > 0).mean() == pytest.approx(0.25, abs=0.01)


def test_a_whole_network_is_labelled_by_its_name():
    """Points sweeping whole networks are labelled by them, not by a dozen layer names."""
    from spartan_py.workloads.conv.layers import layers_name

    _, points = load_experiment(ROOT / "experiments" / "spartan-table.yaml")
    assert [p.label for p in points[:3]] == [
        "layers=alexnet, precision=fp32",
        "layers=alexnet, precision=tf32",
        "layers=vgg16, precision=fp32",
    ]
    whole = [layer.label for layer in CONV_LAYERS["resnet18"]]
    assert layers_name([*whole, "alexnet/conv3"]) == "resnet18+alexnet/conv3"
    assert layers_name(whole[:2]) == "+".join(whole[:2])


def _workload(tmp_path, extra: str):
    path = tmp_path / "densities.yaml"
    path.write_text(
        "name: densities\nworkload:\n  kind: conv_layers\n  step: training\n"
        "  layers: [vgg16/conv5_1, resnet18/conv5_x]\n  batch: 1\n  density: 0.2\n" + extra
    )
    return path


def test_published_layer_densities_set_each_layers_maps(tmp_path):
    """layer_densities give each listed layer's generated maps their density (the others keep
    density); the step's table names their source."""
    from spartan_py.runner.store import load_points
    from spartan_py.workloads.conv.tables import training_step_table

    path = _workload(
        tmp_path,
        "  layer_densities: {vgg16/conv5_1: 0.6}\n  density_source: a test, not a publication\n"
        "mode: simulated\nmachines: [h100-sxm]\n",
    )
    experiment, points = load_experiment(path)
    assert "published densities" in points[0].experiment.workload.short_label()
    assert run_experiment(experiment, points, tmp_path / "run").failed == 0
    table = pd.read_csv(tmp_path / "run" / "dense-layers.csv")
    forward = table[table["gemm"] == "forward"].set_index("layer")
    for label, density in (("vgg16/conv5_1", 0.6), ("resnet18/conv5_x", 0.2)):
        # im2col's zero padding and the rows padded to whole tiles dilute the maps' density
        layer = conv_layer(label)
        cols = im2col(
            np.ones((1, layer.in_channels, layer.size, layer.size), np.float32), layer.kernel, layer.stride, layer.pad
        )
        row = forward.loc[label]
        expected = density * (cols != 0).sum() / (row["M"] * row["K_padded"])
        assert row["density"] == pytest.approx(expected, abs=0.03)
    (row,) = training_step_table(load_points(tmp_path / "run")).to_dict("records")
    assert row["density_source"] == "a test, not a publication"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("  layer_densities: {vgg16/conv5_1: 0.6}\n", "need density_source"),
        ("  layer_densities: {vgg16/conv9_9: 0.6}\n  density_source: x\n", "conv9_9"),
        ("  layer_densities: {vgg16/conv5_1: 1.5}\n  density_source: x\n", r"expected a density in \(0, 1\]"),
    ],
)
def test_published_densities_are_checked(tmp_path, extra, message):
    from spartan_py.config.validate import ConfigError

    with pytest.raises(ConfigError, match=message):
        load_experiment(_workload(tmp_path, extra))
