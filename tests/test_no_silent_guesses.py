"""The cost model's answers say what they leave out (issue 49, item 5): no partial totals, no
error line against a GPU that did not measure the trace, JSON without bare NaN."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest

from spartan_py import cli
from tests.conftest import ROOT

H200_TRACE = ROOT / "benchmarks" / "results" / "fidelity" / "validate-h200-231cc66.trace.csv.gz"


def simulate(capsys, *args) -> tuple[int, str]:
    status = cli.main(["simulate", str(H200_TRACE), *map(str, args)])
    return status, capsys.readouterr().out


def test_a_trace_measured_on_another_gpu_gets_no_error_line(capsys):
    status, text = simulate(capsys, "--machine", "h100-sxm")
    assert status == 0
    assert "measured on NVIDIA H200: not this machine, so no error against it" in text
    assert "model error" not in text
    status, text = simulate(capsys, "--machine", "h200-sxm")  # the GPU that measured it: errors shown
    assert status == 0 and "model error" in text and "not this machine" not in text


def test_a_total_with_launches_it_cannot_price_is_not_given(capsys):
    status, text = simulate(capsys, "--machine", "v100-sxm2")  # Volta: no TF32 unit
    assert status == 0
    tf32_runs = [line for line in text.splitlines() if "precision=tf32" in line]
    assert tf32_runs and all("no total: 39 launches cannot be priced" in line for line in tf32_runs)
    assert not any("precision=tf32" in line and " ms (kernel launches)" in line for line in text.splitlines())


def _strict(text: str):
    def refuse(constant):
        raise ValueError(f"bare {constant} in JSON output")

    return json.loads(text, parse_constant=refuse)


def test_json_output_has_null_never_nan(capsys):
    status, text = simulate(capsys, "--machine", "v100-sxm2", "--json")
    assert status == 0
    (entry,) = _strict(text)
    assert any(v is None for v in entry["predicted_us_by_run"].values())
    assert entry["measured_on"] == ["NVIDIA H200"] and entry["compared"] is False


def test_families_the_model_does_not_describe_are_counted_apart(tmp_path, capsys):
    from spartan_py.trace import read_trace, write_trace

    trace = read_trace(H200_TRACE).head(40).copy()
    extra = trace.head(3).copy()
    extra["kernel"] = "cusparse.spgemm"  # a stock-library launch: no family of the model
    path = write_trace(tmp_path / "mixed.trace.csv", pd.concat([trace, extra]))
    assert cli.main(["simulate", str(path), "--machine", "h200-sxm"]) == 0
    assert "left out of every total (the model does not describe them): cusparse.spgemm (3)" in capsys.readouterr().out


@pytest.mark.parametrize("value, expected", [(float("nan"), None), (float("inf"), None), (1.5, 1.5)])
def test_json_ready(value, expected):
    from spartan_py.files import json_ready

    assert json_ready({"a": [value, (value,)]}) == {"a": [expected, [expected]]}


def test_each_prediction_says_how_its_family_was_calibrated(capsys, tmp_path):
    from spartan_py.costmodel import load_machine
    from spartan_py.costmodel.model import calibration_kind
    from spartan_py.trace import read_trace, write_trace

    h100, h200 = load_machine("h100-sxm"), load_machine("h200-sxm")
    assert calibration_kind(h100, "gpu.epilogue") == "fitted"
    assert calibration_kind(h200, "gpu.epilogue") == "carried over"
    assert calibration_kind(h100, "gpu.gc_layer", "no-such-instance") == "family-wide fallback"
    assert calibration_kind(h100.model_copy(update={"calibration": {}}), "gpu.epilogue") == "default"
    assert calibration_kind(h100, "cusparse.spgemm") == "none"
    # a rows-kernel launch of an instance no fit has (every one of the committed trace has its own since 2026-12-07)
    trace = read_trace(H200_TRACE)
    first = trace.index[trace["kernel"] == "gpu.gc_layer"][0]
    trace.loc[first, "variant"] = "R2xC16-layers1-4"
    path = write_trace(tmp_path / "unfitted.trace.csv", trace)
    assert cli.main(["simulate", str(path), "--machine", "h100-sxm"]) == 0
    text = capsys.readouterr().out
    assert "warning: totals include launches priced by family-wide fallback parameters: gpu.gc_layer" in text


#: an instance the 16384-neuron network's later launches take (the merged kernel's split
#: 1024-thread blocks)
UNFITTED_HERE = "gpu.gc_merged/R8S4T1024xW1024"


@pytest.fixture
def h100_missing_an_instance_fit(monkeypatch):
    """The H100's fit with :data:`UNFITTED_HERE` taken out, so that its launches take the
    family-wide fallback: no launch of a shipped engine does any more (tests/test_launched_instances.py),
    and the warnings below must still be shown when one does."""
    from spartan_py.costmodel import machine as machine_module

    read = machine_module.read_fit

    def without(datasheet):
        fit = read(datasheet)
        if fit is None or Path(datasheet).stem != "h100-sxm":
            return fit
        assert UNFITTED_HERE in fit.calibration, "pick an instance the fit has"
        kept = {key: value for key, value in fit.calibration.items() if key != UNFITTED_HERE}
        return fit.model_copy(update={"calibration": kept})

    monkeypatch.setattr(machine_module, "read_fit", without)


def test_a_simulated_inference_says_when_its_time_includes_a_guess(capsys, h100_missing_an_instance_fit):
    """`spartan infer --mode simulated` warns as `spartan simulate` does: a 16384-neuron
    network's later launches (`R8S4T1024xW1024`) without a fit of their own on the H100; a
    1024-neuron network's launches all have one."""
    common = ["infer", "--layers", "4", "--inputs", "generated:300", "--backend", "gpu-merged", "--mode", "simulated"]
    assert cli.main([*common, "--network", "generated:16384"]) == 0
    text = capsys.readouterr().out
    assert "warning: the time includes launches priced by family-wide fallback parameters: gpu.gc_merged" in text
    assert cli.main([*common, "--network", "generated:1024", "--json"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["guessed"] == {}


def test_a_simulated_experiment_says_which_predictions_include_a_guess(tmp_path, capsys, h100_missing_an_instance_fit):
    """`spartan run` of a simulated experiment: simulated.csv names the families each prediction
    priced by a guess (``guessed``), the command warns when any did, and the report shows it."""
    for neurons, warned in ((16384, True), (1024, False)):
        spec = tmp_path / f"guess-{neurons}.yaml"
        spec.write_text(
            f"name: guess-{neurons}\n"
            f"workload: {{network: 'generated:{neurons}', layers: 4, inputs: 'generated:300'}}\n"
            "backend: gpu-merged\nmode: simulated\nmachines: [h100-sxm]\nrepeats: 1\n"
        )
        out = tmp_path / f"run-{neurons}"
        assert cli.main(["run", str(spec), "--out", str(out), "--quiet"]) == 0
        text = capsys.readouterr().out
        table = pd.read_csv(out / "simulated.csv", keep_default_na=False)
        assert list(table["guessed"]) == (["family-wide fallback: gpu.gc_merged"] if warned else [""])
        assert ("warning: 1 of 1 predictions in simulated.csv" in text) == warned
        assert cli.main(["report", str(out)]) == 0  # the what-if table shows the column
        assert ("family-wide fallback: gpu.gc_merged" in (out / "report.md").read_text()) == warned


def test_what_if_machines_derive_their_calibration_when_loaded(tmp_path):
    from spartan_py.costmodel import carry_over, load_machine, machine_names
    from spartan_py.errors import InputError

    h100 = load_machine("h100-sxm")
    for name in machine_names():
        machine = load_machine(name)
        if machine.calibration_from is None:
            continue
        assert machine.calibration_from == "h100-sxm"
        assert "calibration:" not in (ROOT / "sim" / f"{name}.yaml").read_text()  # no copy to go stale
        assert set(machine.calibration) == set(h100.calibration)
        assert all(v.source.startswith("carried over from h100-sxm") for v in machine.calibration.values())
        assert machine.error_spread == h100.error_spread and machine.calibration_host == h100.host
        if not machine.validation:  # the what-if machines; the H200's blind rounds are its validation
            assert "carried over from h100-sxm when loaded" in machine.validation_summary()
    t4 = load_machine("t4")
    assert t4.calibration == carry_over(h100, t4.model_copy(update={"calibration": {}})).calibration
    entry = "{launch_us: 3.0, compute_efficiency: 0.5, memory_efficiency: 0.5, source: copied}"
    text = (ROOT / "sim" / "t4.yaml").read_text() + f"calibration:\n  gpu.epilogue: {entry}\n"
    (tmp_path / "t4-copy.yaml").write_text(text.replace("name: t4", "name: t4-copy"))
    with pytest.raises(InputError, match="`calibration` is generated.*remove the file's `calibration:` block"):
        load_machine(tmp_path / "t4-copy.yaml")


def test_runs_record_what_tells_gpus_of_one_name_apart(tmp_path, monkeypatch):
    from spartan_py.runner import gpu_facts, store

    sample = (
        "0, NVIDIA H200, 1980, 3201, 1755, 3201, 700.00, 700.00, 00000000:19:00.0\n"
        "1, NVIDIA H200, 1980, 3201, [N/A], 3201, 600.00, 700.00, 00000000:3B:00.0\n"
    )
    (first, second) = gpu_facts.parse_gpu_query(sample)
    assert first["name"] == "NVIDIA H200" and first["sm_clock_max_mhz"] == 1980 and first["power_limit_w"] == 700
    assert second["sm_clock_mhz"] is None and second["power_limit_w"] == 600
    fake = tmp_path / "nvidia-smi"
    fake.write_text(f"#!/bin/sh\nprintf '{sample}'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    info = store.environment()
    assert info["gpus_in_node"] == 2 and info["gpus"][1]["power_limit_w"] == 600
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    assert gpu_facts.gpu_facts() == {"gpus": [], "gpus_in_node": 0}


def test_a_machine_validated_blind_is_not_calibrated():
    from spartan_py.costmodel import load_machine
    from spartan_py.costmodel.calibrate import check_may_calibrate
    from spartan_py.errors import InputError

    check_may_calibrate(load_machine("h100-sxm"), "NVIDIA H100 80GB HBM3")  # its own runs: allowed
    with pytest.raises(InputError, match="validated blind"):
        check_may_calibrate(load_machine("h200-sxm"), "NVIDIA H200")
    with pytest.raises(InputError, match="derives its calibration from h100-sxm"):
        check_may_calibrate(load_machine("a100-sxm"), "NVIDIA A100-SXM4-80GB")
    with pytest.raises(InputError, match="does not describe"):
        check_may_calibrate(load_machine("h100-sxm"), "NVIDIA H200")


@pytest.mark.parametrize("backend, kernel", [("gpu-twin", "gpu.gc_layer"), ("gpu-merged-twin", "gpu.gc_merged")])
def test_hw_monitor_removes_the_fused_monitors_measured_share(backend, kernel):
    import spartan_py as sp
    from spartan_py.costmodel.families import FUSED_MONITOR_SHARE
    from spartan_py.costmodel.model import predict
    from spartan_py.costmodel.simulate import resolve_machine
    from spartan_py.trace import to_frame

    network = sp.generate_network(1024, layers=12, seed=0)
    trace = to_frame(sp.infer(network, sp.generate_inputs(2000, 1024, seed=1), backend=backend).trace)
    plain = predict(trace, *resolve_machine("h100-sxm"))
    hardware = predict(trace, *resolve_machine("h100-sxm+hw-monitor"))
    fused = (plain["kernel"] == kernel) & (plain["monitor_mode"] == "fused")
    assert fused.any()
    saved = 1 - hardware.loc[fused, "predicted_us"].sum() / plain.loc[fused, "predicted_us"].sum()
    assert saved >= FUSED_MONITOR_SHARE[kernel] > 0.015  # the measured share, not the bytes alone (<1%)


def _run_folder(tmp_path, environment: dict):
    """A `spartan run` folder holding part of the H200 trace and the given environment.json."""
    from spartan_py.trace import read_trace, write_trace

    run = tmp_path / "run"
    (run / "points").mkdir(parents=True)
    write_trace(run / "points" / "p1.trace.csv", read_trace(H200_TRACE).head(60))
    (run / "environment.json").write_text(json.dumps(environment))
    return run


def test_a_run_on_a_gpu_other_than_the_file_assumes_is_named(tmp_path, capsys):
    """The machine file says which clocks, power limit and node it assumes; a run whose driver
    reported otherwise gets a warning line for each difference (and none when they agree)."""
    from spartan_py.costmodel import load_machine

    assumed = load_machine("h200-sxm").assumes
    assert assumed is not None and assumed.power_limit_w == 700
    same = {
        "gpus": [{"name": "NVIDIA H200", "sm_clock_max_mhz": 1980, "memory_clock_max_mhz": 3201, "power_limit_w": 700}],
        "gpus_in_node": 1,
    }
    assert cli.main(["simulate", str(_run_folder(tmp_path / "a", same)), "--machine", "h200-sxm"]) == 0
    assert "the run's GPU reports" not in capsys.readouterr().out
    other = {"gpus": [dict(same["gpus"][0], power_limit_w=500)] * 4, "gpus_in_node": 4}
    assert cli.main(["simulate", str(_run_folder(tmp_path / "b", other)), "--machine", "h200-sxm"]) == 0
    text = capsys.readouterr().out
    assert "warning: the run's GPU reports power limit 500 W where the machine file assumes 700 W" in text
    assert "warning: the run's GPU reports 4 GPUs in the node where the machine file assumes 1" in text
    # a machine that does not describe the measured GPU compares nothing, assumptions included
    assert cli.main(["simulate", str(_run_folder(tmp_path / "c", other)), "--machine", "h100-sxm"]) == 0
    assert "the run's GPU reports" not in capsys.readouterr().out
