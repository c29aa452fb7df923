"""The cost model's terms that carry over to GPUs and hosts it was not fitted on: a
memory-bound family's bandwidth from what it keeps in flight (Little's law), the host's
latencies apart from the GPU's, and the 80% intervals from leave-one-point-out fits."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from spartan_py.costmodel import carry_over, load_machine, predict
from spartan_py.costmodel.families import CSR_CONVERT, EPILOGUE, MONITOR_PASS
from spartan_py.costmodel.hosts import load_host
from spartan_py.costmodel.intervals import (
    POOLED,
    candidate_intervals,
    error_spreads,
    interval_us,
    lopo_run_errors,
    run_error_frame,
    run_intervals,
    run_kind,
)
from spartan_py.costmodel.machine import FamilyCalibration
from spartan_py.costmodel.memory_terms import dram_time_us
from spartan_py.costmodel.model import host_shift_us
from spartan_py.errors import InputError
from spartan_py.trace import TraceRecord, to_frame
from tests.conftest import ROOT


def _memory_records(kernel: str, sizes_bytes) -> pd.DataFrame:
    return to_frame(
        [
            TraceRecord(run=f"r{i}", layer=0, kernel=kernel, bytes_read=size // 2, bytes_written=size // 2)
            for i, size in enumerate(sizes_bytes)
        ]
    )


def _with_family(machine, kernel, **values):
    params = FamilyCalibration(launch_us=0.0, compute_efficiency=1.0, memory_efficiency=1.0, source="test", **values)
    return machine.model_copy(update={"calibration": {kernel: params}})


def test_littles_law_caps_bandwidth_by_what_is_in_flight():
    """A family that keeps 512 KiB in flight moves at most 512 KiB a latency, whatever the
    DRAM's peak: doubling the peak speeds it up far less than twice (the old model, bytes at a
    fitted share of the peak, gave exactly 2x); a launch smaller than one round still waits a
    whole latency."""
    h100 = _with_family(load_machine("h100-sxm"), EPILOGUE, bytes_in_flight_kib=512.0)
    specs = h100.specs
    assert specs.memory_latency_ns and specs.streaming_efficiency
    params = h100.calibration[EPILOGUE]
    moved = np.array([64e6])
    rounds = moved / (512 * 1024)
    expected = moved / (specs.memory_bandwidth_gb_s * 1e3 * specs.streaming_efficiency) + rounds * (
        specs.memory_latency_ns / 1e3
    )
    assert dram_time_us(h100, params, moved) == pytest.approx(expected)
    fast = h100.with_specs(memory_bandwidth_gb_s=2 * specs.memory_bandwidth_gb_s)
    speedup = dram_time_us(h100, params, moved)[0] / dram_time_us(fast, params, moved)[0]
    assert 1.0 < speedup < 1.5
    tiny = dram_time_us(h100, params, np.array([4096.0]))[0]
    assert tiny >= specs.memory_latency_ns / 1e3
    # without a latency (or without a fitted in-flight size) the old form: a share of the peak
    old = dram_time_us(h100.with_specs(memory_latency_ns=None), params, moved)[0]
    assert old == pytest.approx(moved[0] / (specs.memory_bandwidth_gb_s * 1e3))


def test_h200_speedup_of_memory_families_below_the_bandwidth_ratio():
    """The committed fits carried to the H200 (same SMs, same latency, 1.43x the bandwidth)
    predict every memory-bound family's large launch faster by less than the bandwidth ratio
    (measured: 1.06-1.23x on the development set; the old model said 1.39x for row expansion)."""
    h100, h200 = load_machine("h100-sxm"), load_machine("h200-sxm")
    ratio = h200.specs.memory_bandwidth_gb_s / h100.specs.memory_bandwidth_gb_s
    # Little's law (bytes in flight) or a block per row's round trips (row compaction's move_rows)
    fitted = [
        k
        for k, p in h100.calibration.items()
        if p.bytes_in_flight_kib > 0 or p.row_round_trips + p.block_round_trips > 0
    ]
    assert {"gpu.expand", "gpu.compact", "gpu.compact/expand_rows", EPILOGUE} <= set(fitted)
    for key in fitted:
        kernel, _, instance = key.partition("/")  # a compiled instance's own fit: gpu.compact/rows
        records = _memory_records(kernel, [200e6]).assign(variant=instance, rows_in=20000, rows_out=20000)
        speedup = predict(records, h100)["predicted_us"].iloc[0] / predict(records, h200)["predicted_us"].iloc[0]
        assert 1.0 <= speedup < ratio - 0.05, key


def test_hosts_shift_launch_and_sync_costs(monkeypatch):
    """Another host moves every launch by the difference of the hosts' launch latencies and
    each host synchronisation inside a record by the difference of their round trips; the
    machine's own host (the calibration's) moves nothing."""
    import spartan_py.costmodel.model as model

    h100 = load_machine("h100-sxm")
    assert h100.host == h100.calibration_host == "h100-vm"
    assert host_shift_us(h100) == (0.0, 0.0)
    fitted = load_host("h100-vm")
    slow = fitted.model_copy(
        update={"name": "slow-vm", "launch_us": fitted.launch_us + 2, "sync_us": fitted.sync_us + 5}
    )
    monkeypatch.setattr(model, "load_host", lambda name: slow if name == "slow-vm" else load_host(name))
    assert host_shift_us(h100, "slow-vm") == pytest.approx((2.0, 5.0))
    records = pd.concat([_memory_records(kernel, [8e6]) for kernel in (EPILOGUE, MONITOR_PASS, CSR_CONVERT)])
    here = predict(records.reset_index(drop=True), h100)
    there = predict(records.reset_index(drop=True), h100, host="slow-vm")
    added = (there["predicted_us"] - here["predicted_us"]).to_numpy()
    assert added == pytest.approx([2.0, 7.0, 7.0])  # the pass and the conversion wait on the host once
    assert set(there["host"]) == {"slow-vm"} and set(here["host"]) == {"h100-vm"}
    with pytest.raises(InputError, match="unknown host"):
        predict(_memory_records(EPILOGUE, [8e6]), h100, host="no-such-host")


def test_simulate_names_the_host_it_assumes():
    trace = ROOT / "benchmarks" / "results" / "fidelity" / "validate-h200-231cc66.trace.csv.gz"
    out = subprocess.run(
        [sys.executable, "-m", "spartan_py", "simulate", str(trace), "--machine", "a100-sxm", "--host", "h100-vm"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout
    assert "host assumed: h100-vm" in out


def test_error_spreads_and_intervals():
    """Spreads are the 10th and 90th percentiles of held-out predicted / measured per kind (a
    kind of fewer than five runs takes the pooled one); an interval divides the prediction
    by them, so a measurement at any held-out ratio inside lies inside its interval."""
    ratios = np.linspace(0.8, 1.2, 11)
    rows = [
        {"point": f"p{i}", "run": f"p{i} / {EPILOGUE}", "kind": EPILOGUE, "measured_us": 100.0, "predicted_us": 100 * r}
        for i, r in enumerate(ratios)
    ]
    rows.append(
        {"point": "q", "run": "q", "kind": "graph-challenge/gpu.gc_layer", "measured_us": 10.0, "predicted_us": 30.0}
    )
    errors = run_error_frame(rows)
    spreads = error_spreads(errors, "test")
    assert set(spreads) == {POOLED, EPILOGUE}
    assert spreads[EPILOGUE].low_ratio == pytest.approx(np.quantile(ratios, 0.1))
    assert spreads[POOLED].high_ratio == pytest.approx(np.quantile(errors["ratio"], 0.9))
    # the kind's own 90th percentile (1.16) is narrower than all runs' (the 3x outlier lifts it)
    assert spreads[EPILOGUE].high_ratio == spreads[POOLED].high_ratio > np.quantile(ratios, 0.9)
    low, high = interval_us(100.0, spreads[EPILOGUE])
    assert low == pytest.approx(100 / spreads[EPILOGUE].high_ratio) and high == pytest.approx(
        100 / spreads[EPILOGUE].low_ratio
    )
    assert interval_us(100.0, None) is None
    h100 = load_machine("h100-sxm").model_copy(update={"error_spread": spreads})
    assert carry_over(h100, load_machine("h200-sxm")).error_spread == spreads  # derived from H100 data only
    predicted = predict(_memory_records(EPILOGUE, [8e6, 16e6]).assign(point="x"), h100)
    table = candidate_intervals(predicted, h100)  # a conv point's candidate run: its family's spread
    assert list(table["spread"]) == [EPILOGUE]
    assert list(run_intervals(predicted, h100)["spread"]) == [POOLED]  # its whole run: no `conv` kind here
    assert (table["low_us"] < table["predicted_us"]).all() and (table["predicted_us"] < table["high_us"]).all()
    assert run_kind(pd.Series(["gpu.scatter_rows", "gpu.gc_merged"])) == "graph-challenge/gpu.gc_merged"


def test_leave_one_point_out_never_fits_on_the_point_it_predicts():
    """Each point is predicted by a fit that did not see it: a refit that records what it was
    given sees every point but the held-out one."""
    machine = load_machine("h100-sxm")
    trace = pd.concat(
        [_memory_records(EPILOGUE, [8e6 * (i + 1)]).assign(point=f"p{i}", measured_us=10.0 + i) for i in range(4)],
        ignore_index=True,
    )
    seen = []

    def refit(launches, fitted, families):
        seen.append(set(launches["point"]))
        assert families == (EPILOGUE,)
        return fitted

    errors = lopo_run_errors(trace, machine, refit=refit)
    assert seen == [{"p1", "p2", "p3"}, {"p0", "p2", "p3"}, {"p0", "p1", "p3"}, {"p0", "p1", "p2"}]
    assert list(errors.loc[errors["view"] == "whole", "point"]) == ["p0", "p1", "p2", "p3"]
    candidates = errors[errors["view"] == "candidate"]  # each point's one family, the per-kernel view
    assert list(candidates["run"]) == [f"p{i} / {EPILOGUE}" for i in range(4)]
    assert errors["ratio"].to_numpy() == pytest.approx(errors["predicted_us"] / errors["measured_us"])


def test_run_predictions_carry_their_interval():
    """A point's replay on each listed machine (what simulated.csv and the report's what-if
    table show) carries the 80% interval from the machine's spreads; the H200's, carried over
    from the H100's, is the same relative width."""
    from spartan_py.api import infer, resolve_inputs, resolve_network
    from spartan_py.runner.execute import replay_on_machines

    network = resolve_network("generated:1024", 8)
    result = infer(network, resolve_inputs("generated:500", 1024), backend="gpu-merged-twin", run_id="t")
    replayed = replay_on_machines(result.trace, ["h100-sxm", "h200-sxm"])
    for name, entry in replayed.items():
        low, high = entry["interval_seconds"]
        assert low < entry["seconds"] < high, name
        assert entry["interval_from"] == "graph-challenge/gpu.gc_merged"
    ratio = [entry["interval_seconds"][1] / entry["interval_seconds"][0] for entry in replayed.values()]
    assert ratio[0] == pytest.approx(ratio[1])
