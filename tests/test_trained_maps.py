"""spartan maps: the Fashion-MNIST reader, the capture of a step's maps, the whole job on the
CPU at a tiny setting, the figures, and the error without PyTorch."""

from __future__ import annotations

import gzip
import json
import sys

import numpy as np
import pandas as pd
import pytest

from spartan_py.cli import main
from spartan_py.errors import InputError
from spartan_py.trained_maps import fashion


def _write_idx(path, array: np.ndarray, magic: int) -> None:
    header = magic.to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in array.shape)
    with gzip.open(path, "wb") as handle:
        handle.write(header + array.astype(np.uint8).tobytes())


@pytest.fixture
def tiny_fashion(tmp_path):
    """A Fashion-MNIST folder of 64 training and 24 test images (random, with a zero border)."""
    rng = np.random.default_rng(0)
    for split, n in (("train", 64), ("test", 24)):
        images = rng.integers(0, 256, (n, 28, 28))
        images[:, :6] = 0
        images_name, labels_name = fashion.FILES[split]
        _write_idx(tmp_path / images_name, images, 2051)
        _write_idx(tmp_path / labels_name, rng.integers(0, 10, n), 2049)
    return tmp_path


def test_fashion_reader_reads_and_checks(tiny_fashion):
    images, labels = fashion.load_split(tiny_fashion, "test")
    assert images.shape == (24, 28, 28) and images.dtype == np.uint8 and labels.shape == (24,)
    assert (images[:, :6] == 0).all()
    _write_idx(tiny_fashion / "t10k-labels-idx1-ubyte.gz", np.zeros(24), 2051)
    with pytest.raises(InputError, match="t10k-labels.*magic 2051, expected 2049"):
        fashion.load_split(tiny_fashion, "test")
    with pytest.raises(InputError, match="not a folder"):
        fashion.load_split(tiny_fashion / "absent", "train")


def test_capture_without_torch_names_the_extra(monkeypatch, tiny_fashion, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    code = main(["maps", "capture", "--data", str(tiny_fashion), "--out", str(tmp_path / "o"), "--device", "cpu"])
    assert code == 1
    assert "pip install -e '.[torch]'" in capsys.readouterr().err


def _torch():
    return pytest.importorskip("torch")


@pytest.mark.slow
def test_capture_step_every_convolution():
    torch = _torch()
    from spartan_py.trained_maps.capture import capture_step
    from spartan_py.trained_maps.models import build
    from spartan_py.workloads.conv.layers import CONV_LAYERS

    torch.manual_seed(0)
    images, labels = torch.randn(2, 3, 32, 32), torch.tensor([1, 7])
    resnet = build("resnet18")
    norm = resnet.layer1[0].bn1
    before = norm.running_mean.clone()
    weights = resnet.conv1.weight.detach().clone()
    runs = capture_step("resnet18", resnet, images, labels)
    assert len(runs) == 20 and sum(r.name.endswith("_ds") for r in runs) == 3
    assert [r.name for r in runs[1:]] == [layer.name for layer in CONV_LAYERS["resnet18"]]
    assert [r.relu_input for r in runs].count(False) == 1 and runs[0].name == "conv1"
    for run in runs:
        g = run.geometry
        assert tuple(run.x.shape) == (2, g.in_channels, g.height, g.width)
        assert tuple(run.dy.shape) == (2, g.out_channels, g.out_height, g.out_width)
        assert run.relu_input is False or float(run.x.min()) >= 0
    assert torch.equal(norm.running_mean, before) and torch.equal(resnet.conv1.weight, weights)
    assert resnet.conv1.weight.grad is None

    vgg = build("vgg16")
    runs = capture_step("vgg16", vgg, images, labels)
    assert [r.name for r in runs][:3] == ["conv1_1", "conv1_2", "conv2_1"] and len(runs) == 13
    # no batch norm: the gradient reaching conv1_1's output is zero wherever its ReLU, the
    # input of conv1_2, is
    dy, x_next = runs[0].dy, runs[1].x
    assert not ((dy != 0) & (x_next == 0)).any()
    assert float((dy != 0).float().mean()) == pytest.approx(float((x_next != 0).float().mean()))


@pytest.mark.slow
def test_job_end_to_end_on_the_cpu(tiny_fashion, tmp_path, capsys):
    _torch()
    from spartan_py.trained_maps.job import POINTS
    from spartan_py.workloads.conv.layers import ConvLayer
    from spartan_py.workloads.conv.saved_maps import saved_maps

    out, maps = tmp_path / "out", tmp_path / "maps"
    argv = ["maps", "capture", "--data", str(tiny_fashion), "--out", str(out), "--networks", "alexnet", "resnet18"]
    argv += ["--steps", "3", "--batch", "4", "--px", "64", "--images", "1", "--device", "cpu", "--sensitivity", "0.9"]
    assert main([*argv, "--maps-dir", str(maps)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    for network, convs in (("alexnet", 5), ("resnet18", 20)):
        record = summary["networks"][network]
        assert list(record["points"]) == list(POINTS) and record["steps"] == 3
        assert record["last_tenth"]["to_step"] == 3
        samples = np.load(out / f"samples-{network}.npz")
        for point, data in record["points"].items():
            assert len(data["layers"]) == convs and 0 <= data["test_accuracy"] <= 1
            step = data["network"]["relu_inputs"]["step"]
            for order in ("chw", "nhwc"):
                assert step[order]["64x32"] <= step[order]["4x4"] + 1e-9 <= step[order]["element"] + 2e-9
            for layer in data["layers"]:
                shape = tuple(samples[f"{point}/{layer['name']}/x_shape"])
                assert shape == (1, layer["C"], layer["H"], layer["W"])
                bits = np.unpackbits(samples[f"{point}/{layer['name']}/x"])[: int(np.prod(shape))]
                assert bits.mean() == pytest.approx(layer["x_density"])
                assert ("input_grad" in layer["gemms"]) == layer["relu_input"]
            thinned = data["sensitivity"]["0.9"]["layers"]
            assert all(row["x_density"] <= 0.1 + 1e-6 for row in thinned)
    # the full maps are in the form a conv_layers workload's activations: reads
    conv2 = ConvLayer("alexnet", "conv2", 96, 256, size=7, kernel=5, pad=2)
    x = saved_maps(maps / "alexnet-late.npz", conv2)
    assert x.shape == (1, 96, 7, 7)
    layer = summary["networks"]["alexnet"]["points"]["late"]["layers"][1]
    assert float((x != 0).mean()) == pytest.approx(layer["x_density"])
    assert np.load(maps / "alexnet-late.npz")["alexnet/conv2.grad_mask"].dtype == bool
    capsys.readouterr()
    assert main(["maps", "figures", str(out / "summary.json"), "--out", str(tmp_path / "fig")]) == 0
    assert len(list((tmp_path / "fig").glob("*.png"))) == 8


@pytest.mark.slow
def test_captured_maps_run_a_whole_networks_training_step(tiny_fashion, tmp_path, capsys):
    """``spartan maps capture --maps-dir`` writes exactly what ``activations:`` reads (the
    layers' labels, the gradient masks under the reader's key): a whole network's training
    step runs from the file through ``spartan run``, its input gradients on the captured masks."""
    _torch()
    from spartan_py.workloads.conv.layers import CONV_LAYERS, STEMS
    from spartan_py.workloads.conv.saved_maps_check import check_saved_maps, gradient_mask_key

    maps = tmp_path / "maps"
    argv = ["maps", "capture", "--data", str(tiny_fashion), "--out", str(tmp_path / "out"), "--networks", "alexnet"]
    argv += ["--steps", "1", "--batch", "2", "--images", "2", "--test-images", "4", "--device", "cpu"]
    assert main([*argv, "--sensitivity", "--maps-dir", str(maps)]) == 0
    path = maps / "alexnet-late.npz"
    labels = tuple(layer.label for layer in CONV_LAYERS["alexnet"])
    keys = set(np.load(path).files)
    assert {STEMS["alexnet"].label, *labels, *(gradient_mask_key(label) for label in labels)} <= keys
    facts = check_saved_maps(str(path), labels)
    assert facts.masks == labels and set(facts.batches.values()) == {2}

    experiment = tmp_path / "mine.yaml"
    experiment.write_text(
        "name: captured\nworkload:\n  kind: conv_layers\n  layers: [alexnet]\n  step: training\n"
        f"  activations: {path}\ntile: 32\nbackend: cpu\nmode: simulated\nmachines: [h100-sxm]\n"
    )
    capsys.readouterr()
    assert main(["run", str(experiment), "--out", str(tmp_path / "run"), "--quiet"]) == 0
    rows = pd.read_csv(tmp_path / "run" / "dense-layers.csv")
    assert set(rows["layer"]) == set(labels) and set(rows["gemm"]) == {"forward", "weight_grad", "input_grad"}
    assert set(rows["batch"]) == {2}
    # the input gradient's operand is the captured mask, not a generated one
    with np.load(path) as archive:
        conv5 = archive[gradient_mask_key("alexnet/conv5")]
    row = rows.set_index(["layer", "gemm"]).loc[("alexnet/conv5", "input_grad")]
    assert row["density"] == pytest.approx(np.count_nonzero(conv5) / (row["M"] * row["K"]))


def test_measured_tables_are_made_from_the_committed_capture():
    """docs/snippets/maps-*.md equal their regeneration from benchmarks/results/maps-h100-20261207,
    and the committed summary loads gzipped with its three networks' late points."""
    from pathlib import Path

    from spartan_py.report import maps_tables
    from spartan_py.trained_maps.figures import load_summary

    root = Path(__file__).resolve().parents[1]
    for key, text in maps_tables.render(root).items():
        assert (root / maps_tables.SNIPPETS[key]).read_text() == text, "run python -m spartan_py.report.maps_tables"
    summary = load_summary(root / maps_tables.FOLDER / "summary.json.gz")
    assert sorted(summary["networks"]) == ["alexnet", "resnet18", "vgg16"]
    assert all("late" in record["points"] for record in summary["networks"].values())
