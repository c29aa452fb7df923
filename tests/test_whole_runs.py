"""Whole runs are whole (issue 73, item 4): a whole run is what a user runs (one Graph Challenge
inference, one conv point's step with every launch); Graph Challenge and conv runs are counted
apart in every table; a conv point's candidate runs are a per-kernel view, never pooled into a
headline; `spartan machines` tells the newest blind release first in three short lines, with
releases whose traces became calibration data marked."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from spartan_py import cli
from spartan_py.costmodel import load_machine
from spartan_py.costmodel.fidelity import predictions
from spartan_py.costmodel.maintain import keep_trace, measured_records
from spartan_py.costmodel.release import blind_for, compare_release, regroup
from spartan_py.costmodel.whole_runs import CONV, GRAPH_CHALLENGE, WHOLE_RUN_FAMILIES
from spartan_py.errors import InputError
from spartan_py.files import json_ready
from spartan_py.result_files import read_result
from tests.conftest import ROOT

FIDELITY = ROOT / "benchmarks" / "results" / "fidelity"
H100_TRACE = FIDELITY / "validate-h100-47a7d1c.trace.csv.gz"
"""Eight Graph Challenge points and six conv points (every candidate timed), measured on an H100."""
RELEASES = sorted(FIDELITY.glob("drawn-fidelity-*.json.gz"))
NEWEST = FIDELITY / "drawn-fidelity-h200-sxm-20261204-150341.json.gz"
NEWEST_TRACE = FIDELITY / "drawn-c905126-h200.trace.csv.gz"
NEWEST_H100 = FIDELITY / "drawn-fidelity-h100-sxm-20261208-005348.json.gz"
NEWEST_H100_TRACE = FIDELITY / "drawn-c1085d9-h100.trace.csv.gz"
SIXTH_H100 = FIDELITY / "drawn-fidelity-h100-sxm-20261207-223757.json.gz"
SIXTH_H100_TRACE = FIDELITY / "drawn-7e917c5-h100.trace.csv.gz"
FIFTH_H100 = FIDELITY / "drawn-fidelity-h100-sxm-20261207-165245.json.gz"
FIFTH_H100_TRACE = FIDELITY / "drawn-a0959e4-h100.trace.csv.gz"


def spartan(capsys, *args) -> str:
    assert cli.main([str(a) for a in args]) == 0
    return capsys.readouterr().out


@pytest.fixture(scope="module")
def compared():
    """The H100 trace against its own model's predictions, as a release compares them."""
    measured = measured_records(H100_TRACE)
    h100 = load_machine("h100-sxm")
    blind = json.loads(json.dumps(predictions(measured, h100)))  # as committed and read back
    return measured, blind, compare_release(measured, h100, blind)


def test_a_point_is_one_whole_run_its_candidates_a_per_kernel_view(compared):
    measured, blind, found = compared
    timed = measured[measured["kernel"].isin(WHOLE_RUN_FAMILIES)]
    points = timed["point"].unique()
    assert len(found["whole_runs"]) == len(points) == len(blind["whole_runs"])
    counted = found["blind"][GRAPH_CHALLENGE]["runs"] + found["blind"][CONV]["runs"]
    assert counted == len(points) and found["blind"][CONV]["runs"] == 6
    # a conv point's candidates: one per family it launches, listed apart, never a whole run
    conv = [r for r in found["whole_runs"] if r["workload"] == CONV]
    families = timed[timed["point"].isin([r["run"] for r in conv])].groupby("point")["kernel"].nunique()
    assert len(found["candidate_runs"]) == families.sum() > len(conv)
    assert all(" / " in r["run"] for r in found["candidate_runs"])
    assert not any(" / " in r["run"] for r in found["whole_runs"])
    assert sum(c["candidate_runs"] for c in found["candidates"]) == len(found["candidate_runs"])
    for run in conv:  # the whole run is its every launch: its candidates' times summed
        mine = [c for c in found["candidate_runs"] if c["run"].startswith(run["run"] + " / ")]
        assert run["measured_us"] == pytest.approx(sum(c["measured_us"] for c in mine), rel=1e-6)
        assert run["launches"] == sum(c["launches"] for c in mine)
    # a conv whole run's interval is committed with the predictions; a candidate's is its family's
    entry = blind["whole_runs"][conv[0]["run"]]
    assert entry["low_us"] < entry["predicted_us"] < entry["high_us"]
    assert {c["interval_from"] for c in blind["candidate_runs"].values()} - {"all runs"} <= set(timed["kernel"])


def test_a_measured_point_without_a_prediction_is_named_and_counted_nowhere(compared):
    measured, blind, found = compared
    assert found["unpredicted_points"] == []
    cut = json.loads(json.dumps(blind))
    dropped = sorted(cut["runs"])[0]  # a record pass that stopped before this point
    del cut["runs"][dropped]
    short = compare_release(measured, load_machine("h100-sxm"), cut)
    assert short["unpredicted_points"] == [dropped]
    assert dropped not in {r["run"] for r in short["whole_runs"]}
    runs = sum(short["blind"][w]["runs"] for w in (GRAPH_CHALLENGE, CONV))
    assert runs == sum(found["blind"][w]["runs"] for w in (GRAPH_CHALLENGE, CONV)) - 1


def test_speedups_sum_each_family_over_the_points_both_gpus_predicted(compared):
    measured, blind, _ = compared
    cut = json.loads(json.dumps(blind))
    del cut["runs"][sorted(cut["runs"])[0]]  # the first GPU's record pass stopped before this point
    found = compare_release(measured, load_machine("h100-sxm"), blind, first=(measured, cut))
    # the same launches on both sides: every family's measured and predicted speed-up is exactly 1
    assert found["speedups"] and all(row["measured"] == row["predicted"] == 1.0 for row in found["speedups"])


def test_compare_refuses_a_first_gpu_the_predictions_do_not_hold(tmp_path, capsys):
    predictions = read_result(FIDELITY / "drawn-predictions-20261207-165257.json.gz")  # the H200's alone
    assert list(predictions["machines"]) == ["h200-sxm"]
    h200_run = tmp_path / "h200.trace.csv.gz"
    trace = measured_records(H100_TRACE).assign(device="NVIDIA H200")
    keep_trace(trace, h200_run)
    args = ["model", "compare", h200_run, "--predictions", FIDELITY / "drawn-predictions-20261207-165257.json.gz"]
    assert cli.main([str(a) for a in [*args, "--first", H100_TRACE, "--out", tmp_path]]) != 0
    assert "holds no predictions for h100-sxm (only h200-sxm)" in capsys.readouterr().err
    alone = [*args, "--first-predictions", FIDELITY / "drawn-predictions-20261207-164031.json.gz"]
    assert cli.main([str(a) for a in [*alone, "--out", tmp_path]]) != 0  # nothing to price it for
    assert "--first-predictions prices --first's run" in capsys.readouterr().err


def _pooled(result: dict) -> tuple[int, int]:
    """(within 10%, runs) as the first four releases counted them: Graph Challenge runs and conv
    candidate runs pooled."""
    gc = result["blind"][GRAPH_CHALLENGE]
    candidates = result["candidates"]
    return (
        gc["within_10pct"] + sum(c["within_10pct"] for c in candidates),
        gc["runs"] + sum(c["candidate_runs"] for c in candidates),
    )


def test_a_second_gpu_compares_with_the_first_gpus_own_predictions_and_regroups_alike(tmp_path, capsys):
    h100 = FIDELITY / "drawn-a0959e4-h100.trace.csv.gz"
    h200_run = tmp_path / "h200.trace.csv.gz"
    keep_trace(measured_records(h100).assign(device="NVIDIA H200"), h200_run)  # stands for the H200's run
    words = ["model", "compare", h200_run, "--predictions", FIDELITY / "drawn-predictions-20261207-165257.json.gz"]
    words += ["--first", h100, "--first-predictions", FIDELITY / "drawn-predictions-20261207-164031.json.gz"]
    assert cli.main([str(w) for w in [*words, "--out", tmp_path]]) == 0
    path = Path(capsys.readouterr().out.split()[-1])
    found = read_result(path)
    assert found["unpredicted_points"] == [] and found["first"]["predictions"].endswith("164031.json.gz")
    # the same launches on both sides: measured speed-ups exactly 1, predicted ones the two machines' ratio
    assert found["speedups"] and all(row["measured"] == 1.0 for row in found["speedups"])
    assert any(row["predicted"] != 1.0 for row in found["speedups"])
    assert cli.main(["model", "regroup", str(path), "--measured", str(h200_run), "--first", str(h100)]) == 0
    assert read_result(path)["speedups"] == found["speedups"]


@pytest.mark.parametrize("unreadable", [b"", b"\x1f\x8b\x08\x00trunc", b"\x1f\x8b not gzip"])
def test_an_unreadable_result_file_is_refused_by_name(tmp_path, unreadable):
    path = tmp_path / "broken.json.gz"
    path.write_bytes(unreadable)
    for missing_or_broken in (path, tmp_path / "absent.json.gz"):
        with pytest.raises(InputError, match="not a readable result file") as caught:
            read_result(missing_or_broken)
        assert str(missing_or_broken) in str(caught.value)


@pytest.mark.parametrize("path", RELEASES, ids=lambda p: p.name.split(".")[0])
def test_no_headline_pools_candidate_runs(capsys, path):
    result = read_result(path)
    assert {GRAPH_CHALLENGE, CONV} <= set(result["blind"]) and "within_10pct" not in result["blind"]
    within, runs = _pooled(result)
    assert runs > 150  # the pooled count the release once quoted (211 for the fourth)
    pooled = [f"{within} of {runs}", f"{within}/{runs}", f"of {runs} ", f"{runs} runs", f"{runs} whole runs"]
    told = [
        ROOT / "docs" / "results.md",
        ROOT / "docs" / "cost-model.md",
        ROOT / "README.md",
        *sorted((ROOT / "docs" / "snippets").glob("*.md")),
    ]
    texts = {str(p.relative_to(ROOT)): p.read_text() for p in told}
    texts["spartan machines"] = spartan(capsys, "machines")
    for where, text in texts.items():
        for phrase in pooled:
            assert phrase not in text, f"{where} pools candidate runs: {phrase!r}"


def test_graph_challenge_and_conv_are_apart_in_every_release_table():
    from spartan_py.costmodel.published import RELEASES_PATH, release_table, trust_table

    assert (ROOT / RELEASES_PATH).read_text() == release_table(), "stale: run python -m spartan_py.costmodel.published"
    assert f'--8<-- "{RELEASES_PATH.as_posix()}"' in (ROOT / "docs" / "cost-model.md").read_text()
    table = release_table().splitlines()
    assert "| Graph Challenge within 10% |" in table[0] and "| conv within 10% |" in table[0]
    drawn = 0
    for name in ("h100-sxm", "h200-sxm"):
        for v in load_machine(name).validation:
            if "experiments/drawn/validate-" not in v.scope:
                continue
            drawn += 1
            assert set(v.workloads) == {GRAPH_CHALLENGE, CONV} and v.runs is None, v.scope
            # the fifth set's H100 record pass stopped after 41 points: its 7 others unpredicted (all conv)
            unpredicted = len(read_result(ROOT / v.result).get("unpredicted_points", []))
            assert v.workloads[CONV].runs + unpredicted == 32 and v.workloads[GRAPH_CHALLENGE].runs in (14, 16)
            release = re.search(r"validate-([0-9a-f]{12})", v.scope).group(1)
            row = next(r for r in table if r.startswith(f"| `validate-{release}` | {v.device} |"))
            gc, conv = v.workloads[GRAPH_CHALLENGE], v.workloads[CONV]
            assert f"| {gc.within_10pct} of {gc.runs} |" in row and f"| {conv.within_10pct} of {conv.runs} |" in row
    assert drawn == len(table) - 2 == len(RELEASES)
    trust = trust_table()
    assert trust.count("Graph Challenge: ") >= drawn and trust.count("conv: ") >= drawn
    page = (ROOT / "docs" / "results.md").read_text()
    for path in RELEASES:  # each release's headline on the results page: both workloads, candidates per kernel
        section = page.split(f"### fidelity / {path.name.split('.')[0]}\n", 1)[1].split("\n### ", 1)[0]
        assert "Graph Challenge: " in section and "; conv: " in section and "Per kernel (" in section


def test_the_committed_releases_are_what_the_code_recounts():
    result = read_result(NEWEST)
    measured = measured_records(NEWEST_TRACE)
    name, blind = blind_for(read_result(ROOT / result["predictions"]), str(measured["device"].iloc[0]))
    host = read_result(ROOT / result["host_measured"]["file"])
    again = regroup(result, measured, load_machine(name), blind, host_figures=host)
    for key in ("blind", "whole_runs", "candidates", "with_measured_host"):
        assert json_ready(again[key]) == json_ready(result[key]), key
    gc = result["blind"][GRAPH_CHALLENGE]
    assert (gc["within_10pct"], gc["runs"]) == (5, 16)  # as the fourth release's account says
    assert _pooled(result) == (157, 211)  # what it once quoted, pooled
    slower = measured.copy()
    slower.loc[slower.index[-1], "measured_us"] *= 1.5
    with pytest.raises(InputError, match="not the one this comparison counted"):
        regroup(result, slower, load_machine(name), blind, host_figures=host)


def test_machines_tells_the_newest_blind_release_first_workloads_apart(capsys):
    from spartan_py.costmodel.releases import entries, trust_lines

    text = spartan(capsys, "machines").split("variants (MACHINE+VARIANT):")[0].splitlines()
    h200 = load_machine("h200-sxm")
    newest = entries(h200)[0]
    v = newest.validation
    at = next(i for i, line in enumerate(text) if line.startswith("h200-sxm "))
    first = text[at + 1].strip()
    gc, conv = v.workloads[GRAPH_CHALLENGE], v.workloads[CONV]
    assert first.startswith(f"validated: newest blind release {newest.drawn} on {v.device}: ")
    assert f"Graph Challenge {gc.within_10pct}/{gc.runs}, conv {conv.within_10pct}/{conv.runs}" in first
    assert len(trust_lines(h200)) == 2 and all(len(line) <= 170 for line in trust_lines(h200))
    # the H100's newest release first, marked where it was fitted on since
    h100 = load_machine("h100-sxm")
    latest = entries(h100)[0]
    marked = " (now fitted on)" if latest.calibration_data else ""
    assert trust_lines(h100)[0].startswith(f"validated on the calibration GPU: held-out {latest.drawn}{marked}: ")


def test_a_release_whose_traces_became_calibration_data_is_marked():
    from spartan_py.costmodel.releases import BLIND_RELEASE, entries, trust_lines

    h200 = load_machine("h200-sxm")
    newest = entries(h200)[0]
    assert newest.kind == BLIND_RELEASE and not newest.calibration_data
    family, fit = next(iter(h200.calibration.items()))
    source = f"{fit.source}; refitted with benchmarks/results/fidelity/drawn-{newest.drawn}-h100.trace.csv.gz"
    fitted = h200.model_copy(
        update={"calibration": {**h200.calibration, family: fit.model_copy(update={"source": source})}}
    )
    marked = entries(fitted)[0]
    assert marked.calibration_data and marked.as_dict()["now_calibration_data"]
    assert trust_lines(fitted)[0].startswith(f"validated: newest blind release {newest.drawn} (now fitted on) ")
    assert "(traces now calibration data)" in marked.label()


def test_spreads_pool_whole_runs_only():
    from spartan_py.costmodel.intervals import POOLED, error_spreads, run_error_frame

    rows = [
        {"point": f"p{i}", "run": f"p{i}", "view": "whole", "workload": CONV, "kind": CONV}
        | {"measured_us": 100.0, "predicted_us": 100.0 + i}
        for i in range(10)
    ] + [
        {"point": "p0", "run": f"p0 / f{i}", "view": "candidate", "workload": CONV, "kind": "gpu.compact"}
        | {"measured_us": 10.0, "predicted_us": 20.0}
        for i in range(10)
    ]
    spreads = error_spreads(run_error_frame(rows), "test")
    whole = np.array([1 + i / 100 for i in range(10)])
    assert spreads[POOLED].high_ratio == pytest.approx(np.quantile(whole, 0.9), abs=1e-4)  # no candidate in it
    compact = spreads["gpu.compact"]  # its own (2.0, 2.0), never narrower than the whole runs'
    assert spreads[CONV].runs == 10 and compact.high_ratio == 2.0 and compact.low_ratio == spreads[POOLED].low_ratio


@pytest.mark.parametrize(
    ("result_file", "trace_file", "unpredicted"),
    [(FIFTH_H100, FIFTH_H100_TRACE, 7), (SIXTH_H100, SIXTH_H100_TRACE, 0), (NEWEST_H100, NEWEST_H100_TRACE, 0)],
)
def test_an_h100_release_is_what_the_kept_trace_gives(result_file, trace_file, unpredicted):
    result = read_result(result_file)
    measured = measured_records(trace_file)
    name, blind = blind_for(read_result(ROOT / result["predictions"]), str(measured["device"].iloc[0]))
    host = read_result(ROOT / result["host_measured"]["file"])
    again = json_ready(compare_release(measured, load_machine(name), blind, host_figures=host))
    for key in ("blind", "whole_runs", "candidates", "with_measured_host", "unpredicted_points"):
        assert again[key] == json_ready(result[key]), key
    assert len(result["unpredicted_points"]) == unpredicted and measured["point"].nunique() == 48


def test_the_docs_current_figures_quote_the_recount():
    doc = (ROOT / "docs" / "cost-model.md").read_text()
    current = " ".join(doc.split("## Current figures", 1)[1].split())
    assert "**Whole runs.** A whole run is what a user runs" in doc
    result = read_result(NEWEST_H100)
    gc, conv = result["blind"][GRAPH_CHALLENGE], result["blind"][CONV]

    def share(w: dict) -> str:
        return f"{w['within_10pct']} of {w['runs']} ({100 * w['within_10pct'] / w['runs']:.0f}%)"

    assert f"conv {share(conv)}, inside their intervals" in current
    assert f"inside their intervals {conv['inside_interval']} of {conv['with_interval']}" in current
    assert f"Graph Challenge {share(gc)}, inside {gc['inside_interval']} of {gc['with_interval']}" in current
    held = result["blind"]
    assert f"{held['families_within_15pct']} of {held['families_held']} families within 15%" in current
    host = result["with_measured_host"]  # the page says what the measured host changes
    assert "within-10% counts are the same" in current
    assert all(host[w]["within_10pct"] == held[w]["within_10pct"] for w in (GRAPH_CHALLENGE, CONV))
    assert f"inside the intervals conv {host[CONV]['inside_interval']} of {host[CONV]['with_interval']}" in current
    assert f"{host['families_within_15pct']} of {host['families_held']} families within 15%" in current
    history = " ".join((ROOT / "docs" / "cost-model-history.md").read_text().split())
    gc4, conv4 = (read_result(NEWEST)["blind"][w]["within_10pct"] for w in (GRAPH_CHALLENGE, CONV))
    assert f"conv {conv4} of 32 (91%), Graph Challenge {gc4} of 16" in history
    assert Path(ROOT / "docs" / "snippets" / "releases-table.md").is_file()
