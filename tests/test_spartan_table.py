"""Spartan's table on real maps (issue 77, item 5): layers at any image side, saved maps of
smaller images through the training step, the adaptive step's dense path (cuDNN or cuBLAS),
the experiment made per network, the whole `spartan maps table` job on the CPU at a tiny size
and its page table; cuDNN against cuBLAS on the GPU."""

from __future__ import annotations

import gzip
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from spartan_py.errors import InputError
from spartan_py.runner import load_experiment, run_experiment
from spartan_py.trained_maps.table import TABLE_POINTS, experiment_for
from spartan_py.workloads.conv.cudnn import choose_dense_path
from spartan_py.workloads.conv.layers import CONV_LAYERS, STEMS, conv_layer
from tests.conftest import ROOT


def _torch_or_skip():
    try:
        import torch  # noqa: F401  (the optional torch extra)
        import torchvision  # noqa: F401
    except ImportError:
        pytest.skip("PyTorch and torchvision are not installed (the torch extra)")


def test_a_layer_at_another_image_side_follows_the_networks_convolutions_and_pools():
    for layers in CONV_LAYERS.values():
        assert all(conv_layer(layer.label, 224) == layer for layer in layers)
    at_64 = {label: conv_layer(label, 64).size for label in ("alexnet/conv2", "alexnet/conv3", "vgg16/conv5_1")}
    assert at_64 == {"alexnet/conv2": 7, "alexnet/conv3": 3, "vgg16/conv5_1": 4}
    assert [conv_layer(f"resnet18/conv{s}_2", 64).size for s in (2, 3, 4, 5)] == [16, 8, 4, 2]
    with pytest.raises(InputError, match="too small"):
        conv_layer("alexnet/conv3", 16)


def test_layer_sizes_at_64_px_are_those_pytorch_runs():
    """The sizes conv_layer gives at 64 px are the input sizes of the networks' convolutions."""
    _torch_or_skip()
    import torch

    from spartan_py.trained_maps.models import build, conv_layers_of

    for network in CONV_LAYERS:
        model = build(network)
        seen = {}
        hooks = [
            m.register_forward_pre_hook(
                lambda _m, inputs, label=layer.label: seen.__setitem__(label, inputs[0].shape[-1])
            )
            for m, layer in conv_layers_of(network, model).items()
        ]
        with torch.no_grad():
            model(torch.zeros(1, 3, 64, 64))
        for hook in hooks:
            hook.remove()
        assert seen == {label: conv_layer(label, 64).size if label != STEMS[network].label else 64 for label in seen}


def _maps(shape, density, seed):
    rng = np.random.default_rng(seed)
    return np.where(rng.random(shape) < density, rng.random(shape) + 0.1, 0).astype(np.float32)


def test_saved_maps_of_smaller_images_run_the_step_at_their_size(tmp_path):
    """A file holding the stem's input (the image) sets every layer's size: AlexNet's conv3 and
    conv4 at 64 px are 3 x 3; without the image the same maps are refused (224 px: 13 x 13)."""
    arrays = {"alexnet/conv3": _maps((2, 256, 3, 3), 0.3, 1), "alexnet/conv4": _maps((2, 384, 3, 3), 0.5, 2)}
    np.savez(tmp_path / "maps.npz", **arrays, **{STEMS["alexnet"].label: np.zeros((2, 3, 64, 64), np.float32)})
    np.savez(tmp_path / "bare.npz", **arrays)
    text = (
        "name: small\nworkload:\n  kind: conv_layers\n  layers: [alexnet/conv3, alexnet/conv4]\n  step: training\n"
        "  activations: {}\ntile: 32\nbackend: cpu\nmode: simulated\nmachines: [h100-sxm]\n"
    )
    (tmp_path / "small.yaml").write_text(text.format("maps.npz"))
    experiment, points = load_experiment(tmp_path / "small.yaml")
    assert run_experiment(experiment, points, tmp_path / "run").failed == 0
    rows = pd.read_csv(tmp_path / "run" / "dense-layers.csv")
    assert set(rows.loc[rows["gemm"] == "forward", "M"]) == {32}  # 2 x 3 x 3 rows, padded to a 32-row tile
    (tmp_path / "bare.yaml").write_text(text.format("bare.npz").replace("name: small", "name: bare"))
    experiment, points = load_experiment(tmp_path / "bare.yaml")
    with pytest.raises(InputError, match=r"N x 256 x 13 x 13"):
        run_experiment(experiment, points, tmp_path / "run-bare")


def _rows(kernels=("dense",) * 3, cudnn=(10.0, 20.0, 30.0), chosen=(20.0, 20.0, 20.0)):
    rows = [
        {"gemm": g, "kernel": k, "cudnn_us": c, "chosen_us": u}
        for g, k, c, u in zip(("forward", "weight_grad", "input_grad"), kernels, cudnn, chosen, strict=True)
    ]
    rows[0] |= {"im2col_us": 5.0, "col2im_us": 7.0}
    return rows


def test_the_adaptive_step_runs_a_layer_on_the_faster_dense_path():
    rows = _rows()  # cuDNN 60 against cuBLAS 60 + im2col 5 + col2im 7
    assert choose_dense_path(rows) == "cudnn"
    assert [r["adaptive_us"] for r in rows] == [10.0, 20.0, 30.0]
    rows = _rows(cudnn=(30.0, 30.0, 30.0))  # 90 against 72
    assert choose_dense_path(rows) == "cublas"
    assert [r["adaptive_us"] for r in rows] == [25.0, 20.0, 27.0]
    rows = _rows(kernels=("tile_sparse", "dense", "dense"))  # a sparse pick needs the im2col operand
    assert choose_dense_path(rows) == "cublas"
    rows = _rows(cudnn=(math.nan,) * 3)  # no cuDNN (the CPU, simulated)
    assert choose_dense_path(rows) == "cublas" and {r["dense_path"] for r in rows} == {"cublas"}


def test_the_tables_experiment_runs_the_files_settings_on_each_points_maps(tmp_path):
    base = json.loads(json.dumps(__import__("yaml").safe_load((ROOT / "experiments/spartan-table.yaml").read_text())))
    maps = {point: tmp_path / f"vgg16-{point}.npz" for point in TABLE_POINTS}
    data = experiment_for(base, "vgg16", maps, simulated=True)
    assert data["name"] == "spartan-table-vgg16" and data["mode"] == "simulated"
    assert data["workload"]["layers"] == ["vgg16"] and not {"batch", "density", "cluster_px"} & set(data["workload"])
    assert data["sweep"]["zip"] == {"workload.activations": [str(p) for p in maps.values()]}
    assert [case["precision"] for case in data["sweep"]["cases"]] == ["fp32", "tf32"]
    base["workload"]["step"] = "forward"
    with pytest.raises(InputError, match="training step"):
        experiment_for(base, "vgg16", maps, simulated=True)


def _fashion(folder):
    from spartan_py.trained_maps import fashion

    rng = np.random.default_rng(0)
    for split, n in (("train", 32), ("test", 8)):
        images = rng.integers(0, 256, (n, 28, 28))
        for name, array, magic in zip(
            fashion.FILES[split], (images, rng.integers(0, 10, n)), (2051, 2049), strict=True
        ):
            header = magic.to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in array.shape)
            with gzip.open(folder / name, "wb") as handle:
                handle.write(header + array.astype(np.uint8).tobytes())


@pytest.mark.slow
def test_the_table_job_end_to_end_on_the_cpu_and_its_page_table(tmp_path, capsys):
    """`spartan maps table --simulated` at 64 px, 2 training steps, 2 images: every network at
    init, middle and late, FP32 and TF32, each step from its own maps; the summaries written;
    the page's table generated from them (and "not measured yet" without them)."""
    _torch_or_skip()
    from spartan_py.cli import main
    from spartan_py.report.maps_tables import table_snippet

    data, out = tmp_path / "fm", tmp_path / "out"
    data.mkdir()
    _fashion(data)
    argv = ["maps", "table", "--data", str(data), "--out", str(out), "--work", str(tmp_path / "work"), "--simulated"]
    argv += ["--device", "cpu", "--steps", "2", "--batch", "2", "--px", "64", "--images", "2", "--test-images", "8"]
    assert main([*argv, "--sensitivity", "0.9"]) == 0
    assert "adaptive / faster dense" in capsys.readouterr().out
    assert sorted(p.name for p in out.rglob("*") if p.is_file()) == sorted(
        ["table.json", "gemms.csv", "summary.json"] + [f"samples-{n}.npz" for n in CONV_LAYERS]
    )
    table = json.loads((out / "table.json").read_text())
    records = table["records"]
    assert table["schema"] == "spartan-table/1" and "environment" in table
    from spartan_py.report.results_headlines import headlines

    assert "adaptive / faster" in "\n".join(headlines({**table, "benchmark": "spartan-table"}))
    assert {(r["network"], r["training_point"], r["precision"]) for r in records} == {
        (n, p, q) for n in CONV_LAYERS for p in TABLE_POINTS for q in ("fp32", "tf32")
    }
    capture = json.loads((out / "maps" / "summary.json").read_text())
    for r in records:
        assert r["layers"] == len(CONV_LAYERS[r["network"]]) and r["gemms"] == 3 * r["layers"]
        assert r["batch"] == 2 and r["max_rel_diff"] == 0 and r["cudnn_baseline"].startswith("not run")
        captured = capture["networks"][r["network"]]["points"][r["training_point"]]
        assert r["bound"]["chw"]["16x8"] == captured["network"]["relu_inputs"]["step"]["chw"]["16x8"]
        assert r["step"] == captured["step"] and r["test_accuracy"] == captured["test_accuracy"]
        assert set(r["whatif"]) == {"64x32", "16x8", "8x8", "4x4", "element"}
        assert r["predicted_ms"]["h200-sxm"] > 0 and r["adaptive_ms"] > 0
    assert main(["maps", "figures", str(out / "table.json"), "--out", str(tmp_path / "fig")]) == 0
    assert sorted(p.name for p in (tmp_path / "fig").iterdir()) == [f"step-{n}.png" for n in sorted(CONV_LAYERS)]
    gemms = pd.read_csv(out / "gemms.csv")
    assert len(gemms) == sum(r["gemms"] for r in records)
    # the page's table: from the folder's table.json.gz, or "not measured yet"
    folder = tmp_path / "results"
    folder.mkdir()
    assert "Not measured yet" in table_snippet(tmp_path, folder.relative_to(tmp_path))
    with gzip.open(folder / "table.json.gz", "wt") as handle:
        shutil.copyfileobj((out / "table.json").open(), handle)
    text = table_snippet(tmp_path, folder.relative_to(tmp_path))
    assert "Not measured yet" not in text
    assert text.count("| VGG-16 | ") == 3 * 2 + 3 * 2 + 2  # the step's and the grains' rows, profiling per precision
    assert "52.5x" in text and "| 3.4 |" in text


@pytest.mark.parametrize("h200_timed", [False, True])
def test_the_pages_h200_line_says_what_the_table_holds(tmp_path, monkeypatch, h200_timed):
    """The H200 line under the page's table is derived from the table: its steps timed on an
    H200 (not simulated), else "not measured yet"; and whether it holds H200 predictions."""
    from spartan_py.report import maps_tables

    monkeypatch.setattr(maps_tables, "table_lines", lambda table: "(the tables)")
    h100 = {"timed_on": "NVIDIA H100 80GB HBM3", "simulated": False, "predicted_ms": {"h200-sxm": 1.5}}
    simulated = {"timed_on": "h200-sxm", "simulated": True, "predicted_ms": {"h200-sxm": math.nan}}
    h200 = {"timed_on": "NVIDIA H200", "simulated": False, "predicted_ms": {}}
    records = [h100, simulated, {"network": "vgg16", "error": "out of memory"}, *([h200] * h200_timed)]
    folder = tmp_path / "results"
    folder.mkdir()
    with gzip.open(folder / "table.json.gz", "wt") as handle:
        json.dump({"schema": "spartan-table/1", "records": records}, handle)
    text = maps_tables.table_snippet(tmp_path, folder.relative_to(tmp_path))
    line = text.splitlines()[-1]
    if h200_timed:
        assert line == (
            "H200: measured on 1 of 3 steps (NVIDIA H200); the H200 predicted column: the model's, for 1 of 3 steps."
        )
    else:
        assert line == "H200: not measured yet; the H200 predicted column: the model's, for 1 of 2 steps."
    assert "no model predictions" in maps_tables.h200_line({"records": [h200]})


def test_the_pages_table_is_generated_from_the_committed_summary():
    """docs/snippets/spartan-table.md equals its regeneration: "not measured yet" until a run's
    table.json.gz is committed in the results folder the generator names."""
    from spartan_py.report import maps_tables

    assert (ROOT / maps_tables.SNIPPETS["table"]).read_text() == maps_tables.table_snippet(ROOT)


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fp32", "tf32"])
def test_cudnn_matches_cublas_on_each_gemm_of_a_layer(precision):
    """cuDNN's three calls on the step's operands give the cuBLAS GEMMs' products (the input
    gradient after col2im)."""
    import cupy

    from spartan_py.sparsity import dense_matmul
    from spartan_py.workloads.conv.cudnn import CudnnLayer, cudnn_unavailable
    from spartan_py.workloads.conv.layers import im2col

    if cudnn_unavailable(cupy, precision):
        pytest.skip(cudnn_unavailable(cupy, precision))
    layer = conv_layer("alexnet/conv3")
    maps = cupy.asarray(_maps((2, layer.in_channels, layer.size, layer.size), 0.4, 3))
    x = im2col(maps, layer.kernel, layer.stride, layer.pad)
    w = cupy.asarray(np.random.default_rng(4).standard_normal((x.shape[1], layer.out_channels), dtype=np.float32))
    dy = cupy.asarray(np.random.default_rng(5).standard_normal((x.shape[0], layer.out_channels), dtype=np.float32))
    calls = CudnnLayer(layer, maps, w, dy, precision)
    references = {
        "forward": dense_matmul(x, w, precision=precision),
        "weight_grad": dense_matmul(x, dy, precision=precision, transposed_a=True),
        "input_grad": dense_matmul(dy, cupy.ascontiguousarray(w.T), precision=precision),
    }
    bound = 1e-5 if precision == "fp32" else 5e-3
    for gemm, reference in references.items():
        assert calls.difference(gemm, reference) < bound, gemm


@pytest.mark.parametrize("label", ["alexnet/conv2", "resnet18/conv3_1", "resnet18/conv3_ds"])
def test_the_cudnn_calls_stand_for_the_cublas_gemms(label):
    """The cuDNN baseline's three calls, run by PyTorch on the CPU's arrays, give the three GEMMs'
    products on the same operands (weights in im2col order, the output's gradient as GEMM rows,
    the input gradient summed back to maps): the layouts the GPU run relies on."""
    _torch_or_skip()
    import torch

    from spartan_py.workloads.conv.cudnn import CudnnLayer
    from spartan_py.workloads.conv.layers import im2col

    layer = conv_layer(label, 64)
    maps = _maps((2, layer.in_channels, layer.size, layer.size), 0.4, 3)
    x = im2col(maps, layer.kernel, layer.stride, layer.pad)
    rng = np.random.default_rng(4)
    w = rng.standard_normal((x.shape[1] + 16, layer.out_channels), dtype=np.float32)  # K padded, as the step's
    w[x.shape[1] :] = 0
    dy = rng.standard_normal((x.shape[0] + 8, layer.out_channels), dtype=np.float32)  # M padded
    x = np.pad(x, ((0, 8), (0, 16)))
    calls = CudnnLayer(layer, maps, w, dy, "fp32", torch=torch)
    references = {"forward": x @ w, "weight_grad": x.T @ dy, "input_grad": dy @ w.T}
    for gemm, reference in references.items():
        assert calls.difference(gemm, np.ascontiguousarray(reference)) < 1e-5, gemm
    assert calls.difference("forward", references["forward"] * 1.01) > 1e-3  # the check can fail


def test_the_step_totals_put_each_layer_on_its_dense_path():
    """Two layers: one where cuDNN is faster (run there), one where cuBLAS with im2col and
    col2im is; the adaptive step is their sum plus the monitor, never over the faster dense step
    by more than the monitor."""
    from spartan_py.workloads.conv.training import step_totals

    def layer(name, cudnn):
        rows = _rows(cudnn=cudnn)
        for row in rows:
            row |= {"layer": name, "dense_us": row["chosen_us"], "bound_us": row["chosen_us"], "monitor_us": 0.0}
            row |= {"chosen_max_rel_diff": 0.0, "dense_max_rel_err": 1e-7}
            row |= {"predicted_dense_us": 1.0, "predicted_chosen_us": 1.0, "predicted_monitor_us": 0.0}
            row |= {"hw_monitor_chosen_us": 1.0, "hw_monitor_monitor_us": 0.0, "software_monitor_us": 0.0}
        rows[0]["monitor_us"] = 2.0
        choose_dense_path(rows)
        return rows

    rows = layer("a", (10.0, 20.0, 30.0)) + layer("b", (40.0, 40.0, 40.0))
    totals = step_totals(rows)
    assert totals["dense_cublas_step_seconds"] == pytest.approx(2 * 72e-6)
    assert totals["dense_cudnn_seconds"] == pytest.approx(180e-6)
    assert totals["faster_dense_seconds"] == pytest.approx(144e-6)
    assert totals["adaptive_step_seconds"] == pytest.approx((60 + 72 + 4) * 1e-6)
    assert totals["cudnn_layers"] == 1 and totals["adaptive_over_faster_dense"] < 1


@pytest.mark.gpu
@pytest.mark.slow
def test_the_table_job_on_the_gpu_runs_cudnn_beside_cublas(tmp_path, capsys):
    """`spartan maps table` measured on the GPU at 64 px: cuDNN ran beside cuBLAS on every
    point, each of its products and every adaptive one close to cuBLAS's."""
    _torch_or_skip()
    from spartan_py.cli import main

    data, out = tmp_path / "fm", tmp_path / "out"
    data.mkdir()
    _fashion(data)
    argv = ["maps", "table", "--data", str(data), "--out", str(out), "--work", str(tmp_path / "work")]
    argv += ["--networks", "alexnet", "resnet18", "--steps", "2", "--batch", "4", "--px", "64", "--images", "2"]
    assert main([*argv, "--test-images", "8", "--sensitivity", "0.9"]) == 0
    records = json.loads((out / "table.json").read_text())["records"]
    assert len(records) == 2 * len(TABLE_POINTS) * 2 and not [r for r in records if "error" in r]
    for r in records:
        assert r["cudnn_baseline"].startswith("cuDNN"), r["cudnn_baseline"]
        bound = 1e-4 if r["precision"] == "fp32" else 1e-2
        assert r["cudnn_max_rel_diff"] < bound and r["max_rel_diff"] < bound
        assert r["dense_cudnn_ms"] > 0 and r["dense_cublas_step_ms"] > r["dense_cublas_gemms_ms"] > 0
        assert r["adaptive_ms"] <= r["faster_dense_ms"] + r["monitor_ms"] + 1e-9


def _step_record(network, point, precision, timed_on, adaptive_ms, predicted=None):
    return {
        "network": network, "training_point": point, "step": 0, "precision": precision, "timed_on": timed_on,
        "simulated": False, "adaptive_gemms_ms": adaptive_ms, "model_machine": "h100-sxm",
        "predicted_ms": predicted or {},
    }  # fmt: skip


def test_the_blind_h200_check_holds_each_measured_step_against_the_committed_column(tmp_path, monkeypatch):
    """The H200's measured adaptive GEMMs against the H100 table's blind H200 column, step by
    step; the count within 10% and the speed-ups; the page gains the check where the H200
    folder holds a table; a step the H100 table lacks, or one not timed on an H200, is refused
    by name."""
    from spartan_py.errors import InputError
    from spartan_py.report import maps_tables
    from spartan_py.trained_maps.blind_check import blind_rows, blind_summary

    h100 = {
        "records": [
            _step_record("vgg16", "late", "tf32", "NVIDIA H100", 17.4, {"h100-sxm": 19.3, "h200-sxm": 15.2}),
            _step_record("alexnet", "init", "fp32", "NVIDIA H100", 4.2, {"h100-sxm": 4.1, "h200-sxm": 4.0}),
            {"network": "resnet18", "error": "out of memory"},
        ]
    }
    h200 = {
        "records": [
            _step_record("vgg16", "late", "tf32", "NVIDIA H200", 13.0),
            _step_record("alexnet", "init", "fp32", "NVIDIA H200", 4.1),
        ]
    }
    rows = {r["network"]: r for r in blind_rows(h100, h200)}
    assert rows["vgg16"]["error"] == pytest.approx(15.2 / 13.0 - 1)  # +16.9%: outside
    assert rows["alexnet"]["error"] == pytest.approx(4.0 / 4.1 - 1)
    assert rows["vgg16"]["measured_speedup"] == pytest.approx(17.4 / 13.0)
    assert rows["vgg16"]["predicted_speedup"] == pytest.approx(19.3 / 15.2)
    summary = blind_summary(list(rows.values()))
    assert (summary["within"], summary["predicted"]) == (1, 2)
    with pytest.raises(InputError, match="timed on 'NVIDIA H100'"):
        blind_rows(h100, h100)
    stray = {"records": [_step_record("alexnet", "late", "tf32", "NVIDIA H200", 1.0)]}
    with pytest.raises(InputError, match="alexnet late tf32 is not among the steps of the predicted table h100.json"):
        blind_rows(h100, stray, paths=("h100.json", "h200.json"))
    later = {"records": [{**_step_record("alexnet", "init", "fp32", "NVIDIA H200", 4.1), "step": 750}]}
    with pytest.raises(InputError, match="training step 750 here and 0 in"):
        blind_rows(h100, later)
    for bad in (0.0, math.nan, None):
        with pytest.raises(InputError, match="h200.json.*expected a positive adaptive_gemms_ms"):
            blind_rows(
                h100,
                {"records": [_step_record("alexnet", "init", "fp32", "NVIDIA H200", bad)]},
                paths=("", "h200.json"),
            )
    twice = {"records": [h200["records"][0], h200["records"][0]]}
    with pytest.raises(InputError, match="two steps of vgg16 late tf32"):
        blind_rows(h100, twice)
    unpredicted = {"records": [{**h100["records"][1], "predicted_ms": None}]}
    assert blind_rows(unpredicted, {"records": [h200["records"][1]]})[0]["error"] is None
    from spartan_py.trained_maps.blind_check import unmeasured_steps

    assert unmeasured_steps(h100, {"records": [h200["records"][0]]}) == ["alexnet init fp32"]
    monkeypatch.setattr(maps_tables, "table_lines", lambda table: "(the tables)")
    for name, table in (("h100", h100), ("h200", h200)):
        (tmp_path / name).mkdir()
        with gzip.open(tmp_path / name / "table.json.gz", "wt") as handle:
            json.dump({"schema": "spartan-table/1", **table}, handle)
    text = maps_tables.table_snippet(tmp_path, Path("h100"), Path("h200"))
    assert "H200: measured on 2 of 2 steps (NVIDIA H200)" in text
    assert "within 10%: **1 of 2** steps (errors -2.4% to +16.9%" in text
    assert "| VGG-16 | late (step 0) | TF32 | 15.2 | 13 | +16.9% | 1.270 | 1.338 |" in text
