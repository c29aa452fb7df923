"""Cross-machine fidelity: per-instance calibration, blind predictions written and matched
back, whole-run errors, speed-ups, and what each machine file says of its validation."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pandas as pd
import pytest

from spartan_py.api import infer, resolve_inputs, resolve_network
from spartan_py.costmodel import calibrate, carry_over, load_machine, predict
from spartan_py.costmodel.families import calibration_key, instance_of
from spartan_py.costmodel.fidelity import (
    attach_predictions,
    compare,
    family_errors,
    predictions,
    run_names,
    speedups,
    summary,
    whole_run_errors,
)
from spartan_py.costmodel.machine import FamilyCalibration, machine_for_device
from spartan_py.costmodel.simulate import trust
from spartan_py.errors import InputError
from spartan_py.trace import read_trace, to_frame, write_trace
from tests.conftest import ROOT


def _measured(neurons: int, layers: int, rows: int, point: str, machine_name: str = "h100-sxm") -> pd.DataFrame:
    """A twin's trace with ``measured_us`` made by the model of a machine whose gc_layer
    instance parameters are known (so that the truth is in the model's reach)."""
    network = resolve_network(f"generated:{neurons}", layers)
    inputs = resolve_inputs(f"generated:{rows}", neurons)
    # a layer a launch: enough launches on full tiles (the default runs the first four layers
    # in one launch, after which few rows are left)
    trace = to_frame(infer(network, inputs, backend="gpu-twin", compact_every=1).trace)
    # the kernels' full-tile multiply-add launches (not the first launch's counts, nor the
    # smaller tiles of launches with few rows): one instance per network size
    full = trace["variant"].str.match(r"R(16xC1|4xC4)-")
    trace = trace[(trace["kernel"] == "gpu.gc_layer") & full].reset_index(drop=True)
    return trace.assign(point=point)


@pytest.fixture(scope="module")
def two_instances() -> pd.DataFrame:
    return pd.concat(
        [_measured(1024, 24, 3000, "a"), _measured(1024, 24, 6000, "b"), _measured(4096, 24, 1500, "c")],
        ignore_index=True,
    )


def _known(machine, **per_instance):
    calibration = {
        "gpu.gc_layer": FamilyCalibration(
            launch_us=3,
            compute_efficiency=0.5,
            memory_efficiency=0.7,
            step_overhead_us=1,
            weight_load_cost=1,
            source="test",
        )
    }
    for instance, efficiency in per_instance.items():
        calibration[calibration_key("gpu.gc_layer", instance)] = calibration["gpu.gc_layer"].model_copy(
            update={"compute_efficiency": efficiency}
        )
    return machine.model_copy(update={"calibration": calibration})


@pytest.mark.slow
def test_each_instance_gets_its_own_fit(two_instances):
    h100 = load_machine("h100-sxm")
    instances = {instance_of("gpu.gc_layer", v) for v in two_instances["variant"]}
    assert len(instances) == 2 and all(instances)  # the 1024- and 4096-neuron instances
    slow, fast = sorted(instances)
    truth = _known(h100, **{slow: 0.25, fast: 0.9})
    trace = two_instances.assign(measured_us=predict(two_instances, truth)["predicted_us"])
    fitted = calibrate(trace, h100, source="synthetic")
    for instance in instances:
        assert calibration_key("gpu.gc_layer", instance) in fitted.calibration
    assert family_errors(predict(trace, fitted))["median_pct"].max() < 1.0
    family_only = fitted.model_copy(update={"calibration": {"gpu.gc_layer": fitted.calibration["gpu.gc_layer"]}})
    assert family_errors(predict(trace, family_only))["median_pct"].max() > 1.0  # one fit for both cannot


@pytest.mark.slow
def test_blind_predictions_round_trip_and_errors(two_instances, tmp_path):
    h100, h200 = load_machine("h100-sxm"), load_machine("h200-sxm")
    blind = json.loads(json.dumps(predictions(two_instances, h200)))  # as committed and read back
    assert set(blind["runs"]) == {"a", "b", "c"}
    assert sum(r["launches"] for r in blind["whole_runs"].values()) == len(two_instances)
    measured = two_instances.assign(measured_us=predict(two_instances, h200)["predicted_us"] * 1.1)
    matched = attach_predictions(measured, blind)
    assert np.allclose(matched["predicted_us"] / matched["measured_us"], 1 / 1.1, rtol=1e-4)
    runs = whole_run_errors(matched)
    assert np.allclose(runs["error_pct"], 100 * (1 / 1.1 - 1), atol=0.01)
    assert summary(matched)["per_launch_median_error_pct"] == pytest.approx(100 * (1 - 1 / 1.1), abs=0.01)
    with pytest.raises(InputError, match="launched"):
        attach_predictions(pd.concat([measured, measured.iloc[:1]], ignore_index=True), blind)
    first = two_instances.assign(measured_us=predict(two_instances, h100)["predicted_us"])
    first = predict(first, h100)
    second = predict(measured, h200)
    table = speedups(first, second).set_index("family")
    ratio = first["measured_us"].sum() / second["measured_us"].sum()
    assert table.loc["gpu.gc_layer", "measured_speedup"] == pytest.approx(ratio)
    tables = compare(first, measured, h100, h200, blind, holdout="^c$").tables
    assert {"families", "whole_runs", "speedups", "reverse_families"} <= set(tables)
    assert set(tables["whole_runs"]["h100-sxm role"]) == {"fitted", "held out"}
    assert set(tables["whole_runs"]["workload"]) == {"graph-challenge"}  # the experiment page's sections by it


def test_a_conv_point_is_one_whole_run_its_candidates_a_per_kernel_view():
    from spartan_py.costmodel.whole_runs import candidate_names

    frame = pd.DataFrame(
        {
            "point": ["gc", "gc", "conv", "conv"],
            "kernel": ["gpu.gc_layer", "gpu.copy_h2d", "gpu.dense_gemm.fp32", "gpu.tile_gemm.fp32"],
        }
    )
    assert list(run_names(frame)) == ["gc", "gc", "conv", "conv"]
    candidates = ["-", "-", "conv / gpu.dense_gemm.fp32", "conv / gpu.tile_gemm.fp32"]
    assert list(candidate_names(frame).fillna("-")) == candidates


@pytest.mark.slow
def test_gzipped_trace_round_trip(two_instances, tmp_path):
    path = write_trace(tmp_path / "t.trace.csv.gz", two_instances.drop(columns="point"))
    assert path.read_bytes()[:2] == b"\x1f\x8b"
    back = read_trace(path)
    assert back["executed_macs"].tolist() == two_instances["executed_macs"].tolist()


def test_machines_say_whether_they_were_validated():
    h100, h200, a100 = (load_machine(n) for n in ("h100-sxm", "h200-sxm", "a100-sxm"))
    assert h100.validated and not any(v.blind for v in h100.validation) and h100.calibration_frozen
    assert h200.validated and all(v.blind for v in h200.validation)
    assert all(v.scope in h200.validation_summary() for v in h200.validation)  # every set of runs is named
    for machine in (h100, h200):  # each figure's result file is in the repository
        assert all((ROOT / v.result).is_file() for v in machine.validation), machine.name
    assert not a100.validated and trust("a100-sxm").startswith("not validated")
    assert "does not exist" in trust("h100-sxm+hw-monitor")
    assert machine_for_device("NVIDIA H200") == "h200-sxm" and machine_for_device("NVIDIA T4 GPU") is None
    assert machine_for_device("NVIDIA H100 80GB HBM3", ["a100-sxm", "h100-sxm+tile-8"]) == "h100-sxm+tile-8"
    # the H200's calibration is the frozen H100 fit carried over: nothing fitted on the H200
    assert all(
        family.records == 0 and "carried over from h100-sxm" in family.source for family in h200.calibration.values()
    )
    assert carry_over(h100, h200).calibration == h200.calibration


def test_fidelity_tables_print_every_family_and_run_of_a_summary():
    """``spartan model tables``: the docs' tables from the committed round-14 summary,
    a row per family and whole run, with the figures the summary holds."""
    from spartan_py.costmodel.fidelity_tables import fidelity_tables

    summary = ROOT / "benchmarks" / "results" / "fidelity" / "h200-fidelity-20261126-231250.json.gz"
    found = json.loads(gzip.decompress(summary.read_bytes()))
    tables = fidelity_tables(summary).split("\n\n")
    families, gc_runs, conv_runs, speedups, reverse = (table.splitlines() for table in tables[:5])
    assert gc_runs[0].startswith("| Graph Challenge run |") and conv_runs[0].startswith("| conv run |")
    families, gc_runs, conv_runs, speedups, reverse = (t[2:] for t in (families, gc_runs, conv_runs, speedups, reverse))
    assert len(families) == len(speedups) == len(reverse) == len(found["families"])
    points = {r["run"].split(" / ")[0] for r in found["whole_runs"]}
    candidates = [r for r in found["whole_runs"] if " / " in r["run"]]
    # a conv point's candidates are summed into it: one row a point, none a candidate
    assert len(gc_runs) + len(conv_runs) == len(points) < len(found["whole_runs"]) and candidates
    assert not any("`gpu." in row.split("|")[1] for row in conv_runs)
    proxy = next(r for r in found["whole_runs"] if r["run"] == "backend=gpu-merged")
    assert "| `gpu-merged`, official 1024 x 120 proxy | " in "\n".join(gc_runs)
    assert f"**{proxy['h200-sxm blind error_pct']:+.1f}%**" in next(r for r in gc_runs if "gpu-merged`, official" in r)
    # a conv point's blind error is its candidates' measured and predicted times summed
    blind = pd.DataFrame(found["h200_blind"]["whole_runs"])
    point = next(p for p in points if "tf32" in p and "density 0.2" in p)
    mine = blind[blind["run"].str.startswith(point + " / ")]
    error = 100 * (mine["predicted_us"].sum() - mine["measured_us"].sum()) / mine["measured_us"].sum()
    assert f"**{error:+.1f}%**" in next(r for r in conv_runs if r.startswith("| TF32, batch 16, density 0.2 |"))
