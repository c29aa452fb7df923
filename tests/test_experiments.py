"""The experiment files in experiments/: each validates as written, runs at a small size on
this machine (GPU points in simulated mode, or recorded as failed where a sweep asks for a
GPU backend that is missing), and its report opens in a real headless browser with every
figure loaded, nothing sticking out of the page and no labels over each other."""

from __future__ import annotations

import copy
import json
import os
import re

import pytest
import yaml

from spartan_py.config.yaml_marks import load_yaml
from spartan_py.report import write_report
from spartan_py.runner import load_experiment, run_experiment
from tests import browser
from tests.conftest import DATA, ROOT, gpu_unavailable_reason

EXPERIMENTS = sorted((ROOT / "experiments").glob("*.yaml"))
#: Figures each experiment's report must show (by file name), whatever the machine.
EXPECTED_FIGURES = {
    "quickstart": {"live-rows.png", "edge-rate.png", "what-if.png"},
    "graph-challenge-1024": {"live-rows.png", "edge-rate.png"},
    "graph-challenge-all": {"live-rows.png", "edge-rate.png"},
    "profiling-overhead": {"monitor-overhead.png", "live-rows.png"},
    "what-if-gpus": {"what-if.png", "live-rows.png"},
    "tile-size-sweep": {"tile-sweep.png", "what-if.png"},
    "validate-h200": {"live-rows.png"},
    "calibrate-wide": {"live-rows.png"},
    "calibrate-rows": {"live-rows.png"},
    "calibrate-instances": {"live-rows.png"},
    "calibrate-conv": {"tile-sweep.png", "what-if.png"},
    "spartan-table": {"training-step.png"},
    "calibrate-gradients": {"training-step.png"},
    "repeatability": {"live-rows.png"},
}
GPU_MISSING = re.compile(r"CuPy|cupy|GPU|CUDA", re.I)


def _small_workload_value(key: str, value):
    """A workload field's value at a size the CI machine runs in seconds."""
    if value is None:
        return None
    if key == "inputs":
        return "generated:300"
    if key in ("rows", "truth"):
        return None
    if key == "layers" and isinstance(value, int):
        return max(2, value // 40)  # 120 -> 3, 480 -> 12, 1920 -> 48
    if key == "layers" and isinstance(value, list):  # the first two layers (a network name stands for its own)
        from spartan_py.workloads.conv.layers import CONV_LAYERS

        return [label for v in value for label in ([x.label for x in CONV_LAYERS[v]] if v in CONV_LAYERS else [v])][:2]
    if key == "batch":
        return 1
    return value


def _off_the_gpu(data: dict, workload: dict) -> None:
    """A fixed GPU kernel backend in ``data`` becomes its twin in simulated mode (Graph
    Challenge) or the CPU (conv layers)."""
    backend = data.get("backend")
    if workload.get("kind") == "conv_layers":
        if backend == "gpu":
            data["backend"] = "cpu"
    elif backend in ("gpu", "gpu-merged"):
        data["backend"], data["mode"] = f"{backend}-twin", "simulated"


def small_copy(data: dict, gpu: bool) -> dict:
    """``data`` (an experiment file's mapping) shrunk; without a GPU, a fixed GPU kernel
    backend becomes its twin in simulated mode (Graph Challenge) or the CPU (conv layers)."""
    data = copy.deepcopy(data)
    workload = data["workload"]
    for key in list(workload):
        workload[key] = _small_workload_value(key, workload[key])
    data["repeats"] = 1
    if not gpu:
        _off_the_gpu(data, workload)
    sweep = data.get("sweep") or {}
    for kind in ("grid", "zip"):
        for key, values in sweep.get(kind, {}).items():
            if key.startswith("workload."):
                sweep[kind][key] = [_small_workload_value(key.split(".", 1)[1], v) for v in values]
    for case in sweep.get("cases", []):
        if "repeats" in case:  # a case's own repeats (validate-h200's 20) would override the file's
            case["repeats"] = 1
        for key in [key for key in case if key.startswith("workload.")]:  # one field of the workload
            case[key] = _small_workload_value(key.split(".", 1)[1], case[key])
        case_workload = case.get("workload", workload)
        if "workload" in case:
            case["workload"] = {key: _small_workload_value(key, value) for key, value in case_workload.items()}
        if not gpu and "backend" in case:
            _off_the_gpu(case, case_workload)
            if case.get("mode") == "simulated" or case.get("backend") == "cpu":
                data.pop("mode", None)
    return data


def _here(text: str) -> str:
    """The file's text with the shared data folder where this machine has it."""
    return text.replace("../../shared/data/graph-challenge", str(DATA))


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.stem)
def test_experiment_validates_as_written(path, tmp_path):
    if "../../shared/" in path.read_text() and not DATA.is_dir():
        pytest.skip(f"the Graph Challenge data is not at {DATA}")
    copy_here = tmp_path / path.name
    copy_here.write_text(_here(path.read_text()))
    experiment, points = load_experiment(copy_here)
    assert experiment.name == path.stem
    assert points


def test_every_experiment_the_issue_names_is_here():
    assert {p.stem for p in EXPERIMENTS} >= set(EXPECTED_FIGURES)


@pytest.mark.skipif(
    browser.chromium() is None and not os.environ.get("CI"),
    reason="no Chromium on PATH (.ci/run installs it; under CI this test fails instead)",
)
@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.stem)
@pytest.mark.slow
def test_experiment_runs_small_and_its_report_loads_in_a_browser(path, tmp_path):
    gpu = gpu_unavailable_reason() is None
    data = small_copy(load_yaml(path).data, gpu)
    small = tmp_path / path.name
    small.write_text(_here(yaml.safe_dump(data, sort_keys=False)))
    experiment, points = load_experiment(small)
    out = tmp_path / "run"
    summary = run_experiment(experiment, points, out)
    assert summary.ran == len(points)
    records = [json.loads(p.read_text()) for p in (out / "points").glob("*.json")]
    failed = [r for r in records if r["status"] != "ok"]
    assert len(records) > len(failed), "no point succeeded"
    for record in failed:  # only GPU backends may fail, and only where there is no GPU
        assert not gpu and GPU_MISSING.search(record["error"]), record["error"]
    html_path, md_path = write_report(out)
    figures = set(re.findall(r"\]\(([\w.-]+\.png)\)", md_path.read_text()))
    assert EXPECTED_FIGURES[path.stem] <= figures, figures
    seen = browser.inspect_page(html_path, tmp_path / "browser", screenshot=tmp_path / "page.png")
    assert seen["title"] == f"spartan_py report: {experiment.name}"
    assert len(seen["images"]) == len(figures)
    broken = [image["alt"] for image in seen["images"] if not image["loaded"]]
    assert not broken, f"figures that did not load: {broken}"
    assert all(image["width"] >= 300 and image["height"] >= 200 for image in seen["images"])
    assert seen["tables"] >= 1
    assert not seen["page_scrolls_sideways"] and not seen["overflowing"], seen["overflowing"]  # wide tables scroll
    assert not seen["overlapping"], seen["overlapping"]
    text = md_path.read_text()  # every table cell says something (finding 7)
    cells = [cell.strip() for line in text.splitlines() if line.startswith("| ") for cell in line.strip("|").split("|")]
    assert not {"nan", "None", ""} & set(cells)
    headings = re.findall(r"^## (.*)$", text, re.M)
    assert len(headings) == len(set(headings)), headings
