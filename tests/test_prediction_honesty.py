"""Every prediction says what it is (issue 73, item 5; and item 4's `spartan machines`): an
interval and a trust line beside a simulated time, what-ifs of hardware that does not exist
labelled so first, calibration counted by kind, no partial sums, the launches a total leaves
out printed beside it, intervals checked against a same-GPU run, short trust lines."""

from __future__ import annotations

import json
import re

import pytest

from spartan_py import cli
from tests.conftest import ROOT

H100_TRACE = ROOT / "benchmarks" / "results" / "fidelity" / "validate-h100-47a7d1c.trace.csv.gz"
"""Graph Challenge and conv runs measured on an H100, with their host copies."""


def spartan(capsys, *args) -> str:
    assert cli.main([str(a) for a in args]) == 0
    return capsys.readouterr().out


@pytest.fixture(scope="module")
def replays():
    """``spartan simulate``'s entries for the H100 trace on the H100 (the GPU that measured it),
    the T4 (which cannot price every launch) and the H100 with a hardware monitor."""
    from spartan_py.costmodel.simulate import read_replayable_trace, replay_summary

    trace = read_replayable_trace(H100_TRACE)
    return {name: replay_summary(trace, name) for name in ("h100-sxm", "t4", "h100-sxm+hw-monitor")}


INFER = ["infer", "--network", "generated:1024:1", "--inputs", "generated:60:2", "--layers", "4", "--quiet"]


def test_a_simulated_inference_prints_its_interval_and_trust(capsys):
    text = spartan(capsys, *INFER, "--mode", "simulated")
    assert "0.000 s" not in text
    timing = next(line for line in text.splitlines() if line.startswith("inference "))
    # a few layers of 60 rows take tens of microseconds on an H100: said in us, not rounded away
    assert re.match(r"inference \d+\.\d+ us predicted \(80% interval \d+\.\d+-\d+\.\d+ us, spread of ", timing)
    assert any(line.startswith("trust: validated") for line in text.splitlines())
    summary = json.loads(spartan(capsys, *INFER, "--mode", "simulated", "--json"))
    low, high = summary["interval_seconds"]
    assert low < summary["seconds"] < high and summary["interval_from"].startswith("graph-challenge/")
    assert summary["trust"].startswith("validated") and summary["what_if"] is None


def test_a_what_if_of_hardware_that_does_not_exist_says_so_first(capsys, replays):
    from spartan_py import trust

    label = "what-if of hardware that does not exist"
    for variant in ("hw-monitor", "hbm-2x"):  # a monitor nobody built; twice the H100's DRAM bandwidth
        assert trust(f"h100-sxm+{variant}").startswith(label)
    assert trust("h100-sxm+tile-8").startswith("what-if change to the replayed kernel configuration")
    assert trust("h100-sxm").startswith("validated")
    machines = spartan(capsys, "machines")
    assert f"  hw-monitor: {label}" in machines and f"  hbm-2x: {label}" in machines
    first = spartan(capsys, *INFER, "--mode", "simulated", "--machine", "h100-sxm+hw-monitor").splitlines()[0]
    assert first.startswith(label)
    entry, _ = replays["h100-sxm+hw-monitor"]
    assert entry["trust"].startswith(label)
    # measured on the H100, but a what-if of it: its predictions are not the H100's errors
    assert entry["compared"] is False and "error_by_run" not in entry


def test_each_familys_calibration_is_counted_by_kind(replays):
    from spartan_py.costmodel.families import GC_LAYER, record_instances
    from spartan_py.costmodel.machine import load_machine
    from spartan_py.costmodel.model import calibration_kind
    from spartan_py.costmodel.simulate import read_replayable_trace, replay_summary

    trace = read_replayable_trace(H100_TRACE)
    layer = trace.index[trace["kernel"] == GC_LAYER]
    trace.loc[layer[0], "variant"] = "R7xC7-no-such-instance"  # one launch of an instance never fitted
    entry, _ = replay_summary(trace, "h100-sxm")
    counted = entry["calibration_by_kernel"][GC_LAYER]
    h100 = load_machine("h100-sxm")
    rows = trace.loc[layer]
    expected: dict[str, int] = {}
    for instance in record_instances(rows):
        kind = calibration_kind(h100, GC_LAYER, instance)
        expected[kind] = expected.get(kind, 0) + 1
    assert counted == expected and sum(counted.values()) == len(layer)
    assert counted["family-wide fallback"] >= 1 and counted["fitted"] >= 1  # two kinds in one family
    h200 = replays["h100-sxm"][0]["calibration_by_kernel"]  # every family a dict of counts
    assert all(isinstance(kinds, dict) for kinds in h200.values())


def test_no_partial_sum_in_a_json_total(capsys, replays):
    entry, predicted = replays["t4"]
    counts = predicted.groupby("kernel")["predicted_us"].agg(["count", "size"])
    # the T4 prices the merged kernel's small tiles, not its larger ones (shared memory per block)
    partly = counts[(counts["count"] > 0) & (counts["count"] < counts["size"])]
    assert "gpu.gc_merged" in partly.index
    for kernel, (priced, launches) in partly.iterrows():
        assert entry["predicted_us_by_kernel"][kernel] is None, kernel  # not the priced launches' sum
        assert entry["launches_by_kernel"][kernel] == launches
        assert entry["unpriced_by_kernel"][kernel].startswith(f"{launches - priced} of {launches} launches")
    compact = predicted.loc[predicted["kernel"] == "gpu.compact", "predicted_us"]
    assert entry["predicted_us_by_kernel"]["gpu.compact"] == pytest.approx(compact.sum())
    runs = json.loads(spartan(capsys, "simulate", H100_TRACE, "--machine", "h100-sxm", "--json"))[0]["error_by_run"]
    assert all(row["records"] <= row["launches"] for row in runs)  # a paired sum says how many it pairs


def test_copies_and_synchronisation_are_printed_beside_the_total(capsys, replays):
    entry, predicted = replays["h100-sxm"]
    text = spartan(capsys, "simulate", H100_TRACE, "--machine", "h100-sxm")
    lines = text.splitlines()
    gc_runs = [run for run in entry["beside_by_run"] if "gpu.copy_h2d" in entry["beside_by_run"][run]]
    assert gc_runs  # every Graph Challenge run copies its inputs in and its categories out
    for run in gc_runs:
        beside = entry["beside_by_run"][run]
        copies = predicted[(predicted["run"] == run) & (predicted["kernel"] == "gpu.copy_h2d")]
        assert beside["gpu.copy_h2d"]["predicted_us"] == pytest.approx(copies["predicted_us"].sum())
        kernels = entry["predicted_us_by_run"][run]
        outside = sum(total["predicted_us"] for total in beside.values())
        at = next(i for i, line in enumerate(lines) if line.startswith(f"  run {run}: "))
        share = f"{100 * outside / (kernels + outside):.0f}% of the run's predicted time"
        assert lines[at + 1].startswith("    beside it, not in that total: ") and lines[at + 1].endswith(share)
        assert "gpu.copy_h2d" in lines[at + 1] and "gpu.copy_d2h" in lines[at + 1]


def test_a_same_gpu_replay_counts_the_runs_inside_their_intervals(capsys, replays):
    text = spartan(capsys, "simulate", H100_TRACE, "--machine", "h100-sxm").splitlines()
    counted = [line for line in text if re.match(r"  (Graph Challenge|conv): \d+ of \d+ runs within 10%, ", line)]
    assert len(counted) == 2  # the trace holds both workloads, counted apart
    entry, _ = replays["h100-sxm"]
    spans = entry["interval_us_by_run"]
    names = {"graph-challenge": "Graph Challenge", "conv": "conv"}
    assert set(entry["by_workload"]) == set(names)
    for name, count in entry["by_workload"].items():
        rows = [r for r in entry["error_by_run"] if r["workload"] == name]
        inside = [
            spans[row["run"]]["low_us"] <= row["measured_us"] <= spans[row["run"]]["high_us"]
            for row in rows
            if row["run"] in spans and row["records"] == row["launches"]
        ]
        assert len(inside) >= 5 and count["runs"] == len(rows)
        assert count["inside_interval"] == sum(inside) and count["with_interval"] == len(inside)
        told = f"  {names[name]}: {count['within_10pct']} of {len(rows)} runs within 10%, "
        assert any(line.startswith(told + f"{sum(inside)} of {len(inside)} inside their 80% interval") for line in text)
    assert "by_workload" not in replays["t4"][0]  # measured on another GPU: nothing to count


def _machine_blocks(text: str) -> dict[str, list[str]]:
    blocks: dict[str, list[str]] = {}
    name = ""
    for line in text.split("variants (MACHINE+VARIANT):")[0].splitlines():
        if not line.startswith(" "):
            name = line.split()[0]
        blocks.setdefault(name, []).append(line)
    return blocks


def test_machines_lists_the_newest_blind_release_first_in_three_short_lines(capsys):
    from spartan_py.costmodel.machine import load_machine

    blocks = _machine_blocks(spartan(capsys, "machines"))
    assert {"h100-sxm", "h200-sxm", "t4"} <= set(blocks)
    for name, lines in blocks.items():
        assert len(lines) <= 3, name
        assert all(len(line.strip()) <= 170 for line in lines[1:]), name  # a line a terminal shows whole
    h200 = load_machine("h200-sxm")
    blind_drawn = [v for v in h200.validation if v.blind and "experiments/drawn/validate-" in v.scope]
    newest = max(blind_drawn, key=lambda v: re.search(r"\d{8}-\d{6}", v.result).group(0))
    release = re.search(r"validate-([0-9a-f]{7})", newest.scope).group(1)
    assert blocks["h200-sxm"][1].strip().startswith(f"validated: newest blind release {release} ")
    listed = {m["name"]: m for m in json.loads(spartan(capsys, "machines", "--json"))["machines"]}
    for entry in listed["h200-sxm"]["validation"]:
        drawn = "experiments/drawn/validate-" in entry["scope"]
        # round 14 of validate-h200.yaml was a development round, whatever its `blind` flag says
        assert entry["kind"] == ("blind release" if drawn else "development round"), entry["scope"]
        calibrated = drawn and any(f"drawn-{entry['release']}-" in p.source for p in h200.calibration.values())
        assert entry["now_calibration_data"] == calibrated
    marked = [e["release"] for e in listed["h200-sxm"]["validation"] if e["now_calibration_data"]]
    assert marked  # the first two drawn sets' H100 traces were fitted after their release
    assert all(f"{release}*" in blocks["h200-sxm"][2] for release in marked)
    development = [e for e in listed["h200-sxm"]["validation"] if e["kind"] == "development round"]
    assert all(f"development (not blind): {e['commit'][:7]}" in blocks["h200-sxm"][2] for e in development[:1])


def test_a_development_round_flagged_blind_is_not_a_release():
    from spartan_py.costmodel.machine import load_machine
    from spartan_py.costmodel.releases import DEVELOPMENT, entries, trust_lines

    h200 = load_machine("h200-sxm")
    rounds = [v for v in h200.validation if "experiments/drawn/" not in v.scope]
    only_rounds = h200.model_copy(update={"validation": [v.model_copy(update={"blind": True}) for v in rounds]})
    assert rounds and all(e.kind == DEVELOPMENT for e in entries(only_rounds))
    (line, *_) = trust_lines(only_rounds)
    assert line.startswith("validated by development rounds only (not blind)") and "blind release" not in line
