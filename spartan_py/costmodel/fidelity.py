"""How well the cost model predicts measured runs, on the machine it was fitted on and on
others: per-family and whole-run errors, blind predictions written before a measurement,
and the measured speed-up between two GPUs next to the predicted one.

A *run folder* is what ``spartan run`` wrote (``points/*.trace.csv``); its measured GPU
traces are gathered by :func:`run_traces`, one row per launch with the point's label in
``point``. A *whole run* is what a user runs and times as a whole
(:mod:`spartan_py.costmodel.whole_runs`): a Graph Challenge point's inference, or a conv
point's step with all its launches (:data:`WHOLE_RUN_FAMILIES`); measured against predicted,
the two workloads reported apart. A conv point's *candidate runs* (one family over its
launches: cuBLAS FP32 over the 13 layers at density 0.05, say) are a per-kernel view.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from spartan_py.costmodel.calibrate import calibrate
from spartan_py.costmodel.families import FAMILIES
from spartan_py.costmodel.intervals import candidate_intervals, run_intervals
from spartan_py.costmodel.machine import Machine, carry_over
from spartan_py.costmodel.model import predict, run_totals
from spartan_py.costmodel.repeatability import family_bar_pct
from spartan_py.costmodel.validation import kernel_error_table
from spartan_py.costmodel.whole_runs import (
    CANDIDATE_SEPARATOR,
    WHOLE_RUN_FAMILIES,
    candidate_names,
    run_names,
    workload,
    workload_figures,
)
from spartan_py.errors import InputError
from spartan_py.trace import read_trace

MIN_FAMILY_LAUNCHES = 5
"""Families with fewer measured launches are listed but not held to the per-launch bar."""


def run_traces(run_dir: str | Path) -> pd.DataFrame:
    """Every measured GPU launch of a ``spartan run`` folder, with ``point`` (the point's label)."""
    points = Path(run_dir) / "points"
    frames = []
    for path in sorted(points.glob("*.json")):
        record = json.loads(path.read_text())
        trace_path = points / f"{path.stem}.trace.csv"
        if record.get("status") != "ok" or not trace_path.is_file():
            continue
        trace = read_trace(trace_path)
        trace = trace[trace["kernel"].isin(list(FAMILIES)) & trace["measured_us"].notna() & (trace["measured_us"] > 0)]
        if not trace.empty:
            frames.append(trace.assign(point=record["label"]))
    if not frames:
        raise InputError(
            f"no measured GPU launches in {points}: a fidelity comparison needs both run folders "
            "measured on GPUs (points of a CPU backend or of --mode simulated have none)"
        )
    return pd.concat(frames, ignore_index=True)


def with_errors(predicted: pd.DataFrame) -> pd.DataFrame:
    """``predicted`` with ``error_pct`` = (predicted - measured) / measured, in percent."""
    frame = predicted[predicted["predicted_us"].notna()].copy()
    frame["error_pct"] = 100 * (frame["predicted_us"] - frame["measured_us"]) / frame["measured_us"]
    return frame


def family_errors(predicted: pd.DataFrame, machine: Machine | None = None) -> pd.DataFrame:
    """Per family: launches, median and 90th-percentile absolute per-launch error, and the
    median signed error (percent); :func:`~spartan_py.costmodel.validation.kernel_error_table`
    with the bias beside it. With ``machine``: its measured run-to-run spread beside each
    (median, percent; NaN where not measured), the bar the median is judged by
    (:func:`~spartan_py.costmodel.repeatability.family_bar_pct`) and whether it holds."""
    table = kernel_error_table(predicted).rename(
        columns={
            "kernel": "family",
            "records": "launches",
            "median_abs_error_pct": "median_pct",
            "p90_abs_error_pct": "p90_pct",
        }
    )
    bias = with_errors(predicted).groupby("kernel")["error_pct"].median()
    table["bias_pct"] = table["family"].map(bias)
    table = table[["family", "launches", "median_pct", "p90_pct", "bias_pct"]]
    if machine is None:
        return table
    table = with_bars(table, machine)
    table["within_bar"] = table["median_pct"] <= table["bar_pct"]
    return table


def with_bars(table: pd.DataFrame, machine: Machine) -> pd.DataFrame:
    """``table`` (a ``family`` column) with each family's measured run-to-run spread on
    ``machine`` (``run_to_run_pct``: median, percent; NaN where not measured) and the bar its
    per-launch median error is judged by (``bar_pct``,
    :func:`~spartan_py.costmodel.repeatability.family_bar_pct`)."""

    spreads = {family: spread.median_pct for family, spread in machine.run_to_run_spread.items()}
    table = table.assign(run_to_run_pct=table["family"].map(spreads).astype(float))
    table["bar_pct"] = [family_bar_pct(f, s) for f, s in zip(table["family"], table["run_to_run_pct"], strict=True)]
    return table


def _run_errors(predicted: pd.DataFrame, names: pd.Series) -> pd.DataFrame:
    totals = run_totals(predicted.assign(run=names).dropna(subset=["run"]), WHOLE_RUN_FAMILIES)
    return totals.rename(columns={"records": "launches"})


def whole_run_errors(predicted: pd.DataFrame) -> pd.DataFrame:
    """Per whole run (:func:`run_names`): its ``workload``, the measured and predicted sums of its
    :data:`WHOLE_RUN_FAMILIES` launches and the error (:func:`~spartan_py.costmodel.model.run_totals`)."""
    runs = _run_errors(predicted, run_names(predicted))
    kinds = predicted.groupby(run_names(predicted), sort=False)["kernel"].agg(workload)
    runs.insert(1, "workload", runs["run"].map(kinds))
    return runs


def candidate_run_errors(predicted: pd.DataFrame) -> pd.DataFrame:
    """Per candidate run of a conv point (:func:`candidate_names`: one family over the point's
    launches), with its ``family``: the per-kernel view, never counted as whole runs."""
    runs = _run_errors(predicted, candidate_names(predicted))
    runs.insert(1, "family", runs["run"].str.rsplit(CANDIDATE_SEPARATOR, n=1).str[1])
    return runs


def summary(predicted: pd.DataFrame) -> dict:
    """The figures a machine's validation states: the worst whole-run error and the worst
    per-launch median error of a family with :data:`MIN_FAMILY_LAUNCHES` or more launches, and
    per workload its whole runs' figures (:func:`workload_figures`)."""
    families = family_errors(predicted)
    held = families[families["launches"] >= MIN_FAMILY_LAUNCHES]
    runs = whole_run_errors(predicted)
    return {
        "whole_run_error_pct": float(runs["error_pct"].abs().max()),
        "per_launch_median_error_pct": float(held["median_pct"].max()),
        "by_workload": workload_figures(runs),
    }


def predictions(trace: pd.DataFrame, machine: Machine) -> dict:
    """Blind predictions of ``trace``'s launches on ``machine``: per point, per family the
    launch count and the predicted microseconds of each launch, in launch order; per whole run
    (:func:`run_names`) and per conv candidate run (:func:`candidate_names`) the predicted total
    and its 80% interval."""
    predicted = predict(trace, machine)
    predicted = predicted[predicted["kernel"].isin(list(FAMILIES))]
    points = {}
    for point, rows in predicted.groupby("point", sort=False):
        points[str(point)] = {
            "families": {
                kernel: {
                    "launches": int(len(group)),
                    "predicted_us": [round(float(v), 4) for v in group["predicted_us"]],
                }
                for kernel, group in rows.groupby("kernel", sort=False)
            }
        }
    timed = predicted[predicted["kernel"].isin(WHOLE_RUN_FAMILIES)]
    return {
        "machine": machine.name,
        "host": machine.host,
        "runs": points,
        "whole_runs": _predicted_runs(timed, run_names(timed), run_intervals(timed, machine)),
        "candidate_runs": _predicted_runs(timed, candidate_names(timed), candidate_intervals(timed, machine)),
    }


def _predicted_runs(timed: pd.DataFrame, names: pd.Series, intervals: pd.DataFrame) -> dict:
    launches = timed.groupby(names, sort=False).size()
    return {
        str(row["run"]): {
            "launches": int(launches[row["run"]]),
            "predicted_us": round(float(row["predicted_us"]), 3),
            "low_us": None if np.isnan(row["low_us"]) else round(float(row["low_us"]), 3),
            "high_us": None if np.isnan(row["high_us"]) else round(float(row["high_us"]), 3),
            "interval_from": row["spread"],
        }
        for _, row in intervals.iterrows()
    }


def interval_coverage(attached: pd.DataFrame, blind: dict) -> pd.DataFrame:
    """Per whole run of a measured trace with ``blind``'s predictions attached
    (:func:`attach_predictions`): its workload, measured microseconds beside the committed
    prediction and its 80% interval, and whether the measurement is inside (None where the
    predictions hold no interval for it: a conv point of a release whose predictions gave
    intervals to candidate runs only)."""
    return _coverage(whole_run_errors(attached), blind["whole_runs"])


def candidate_coverage(attached: pd.DataFrame, blind: dict) -> pd.DataFrame:
    """:func:`interval_coverage` of the conv points' candidate runs (the per-kernel view); a
    predictions file written before candidates were told apart lists them with the whole runs."""
    return _coverage(candidate_run_errors(attached), blind.get("candidate_runs", blind["whole_runs"]))


def _coverage(runs: pd.DataFrame, spans: dict) -> pd.DataFrame:
    rows = []
    for _, run in runs.iterrows():
        entry = spans.get(str(run["run"]), {})
        low, high = entry.get("low_us"), entry.get("high_us")
        inside = None if low is None or high is None else bool(low <= run["measured_us"] <= high)
        rows.append({**run.to_dict(), "low_us": low, "high_us": high, "inside": inside})
    return pd.DataFrame(rows, columns=[*runs.columns, "low_us", "high_us", "inside"])


def attach_predictions(trace: pd.DataFrame, blind: dict) -> pd.DataFrame:
    """``trace`` (measured) with ``predicted_us`` from a committed :func:`predictions` file,
    matched by point, family and launch order; launches it has no prediction for are dropped."""
    parts = []
    for (point, kernel), group in trace.groupby(["point", "kernel"], sort=False):
        values = blind["runs"].get(str(point), {}).get("families", {}).get(kernel, {}).get("predicted_us")
        if values is None:
            continue
        if len(values) != len(group):
            raise InputError(f"{point}: {kernel} launched {len(group)} times here, {len(values)} in the predictions")
        parts.append(group.assign(predicted_us=np.asarray(values, dtype=float)))
    if not parts:
        raise InputError("no launch of this trace has a prediction in the predictions file")
    return pd.concat(parts, ignore_index=True)


def speedups(first: pd.DataFrame, second: pd.DataFrame) -> pd.DataFrame:
    """Per family: measured time on the first machine over the second (the speed-up of the
    second), next to the same ratio of the predictions; both traces predicted already."""

    def sums(frame: pd.DataFrame) -> pd.DataFrame:
        frame = frame[frame["predicted_us"].notna()]
        return frame.groupby("kernel")[["measured_us", "predicted_us"]].sum()

    a, b = sums(first), sums(second)
    both = a.merge(b, left_index=True, right_index=True, suffixes=("_first", "_second"))
    table = pd.DataFrame(
        {
            "measured_speedup": both["measured_us_first"] / both["measured_us_second"],
            "predicted_speedup": both["predicted_us_first"] / both["predicted_us_second"],
        }
    )
    return table.reset_index().rename(columns={"kernel": "family"})


HOLDOUT_POINTS = r"1024 x 480|density 0.2|15000 rows"
"""The calibration experiments' points the H100 fit leaves out (a layer count, an activation
density and, in calibrate-wide.yaml, a row count it never saw): the H100's held-out error is
measured on them."""


def _side_by_side(tables: dict[str, pd.DataFrame], key: str, columns: list[str]) -> pd.DataFrame:
    """One table from several with the same ``key``: each one's ``columns`` prefixed by its name."""
    merged: pd.DataFrame | None = None
    for name, table in tables.items():
        part = table.set_index(key)[columns].add_prefix(f"{name} ")
        merged = part if merged is None else merged.join(part, how="outer")
    assert merged is not None
    return merged.reset_index()


@dataclass
class Comparison:
    """What :func:`compare` found: its ``tables`` (``families``, ``whole_runs``, ``speedups``,
    ``reverse_families``) and the launches behind them, each with ``predicted_us``: the
    first machine's by its own model, the second's by the blind predictions and by the
    model now, and the first's by a fit on the second (``reverse``)."""

    tables: dict[str, pd.DataFrame]
    first: pd.DataFrame
    blind: pd.DataFrame
    now: pd.DataFrame
    reverse: pd.DataFrame


def compare(
    first: pd.DataFrame,
    second: pd.DataFrame,
    first_machine: Machine,
    second_machine: Machine,
    blind: dict | None = None,
    holdout: str = HOLDOUT_POINTS,
) -> Comparison:
    """The cross-machine tables: ``first`` (measured on the machine the model was fitted on,
    ``holdout`` naming its held-out points) and ``second`` (measured on another, ``blind``
    its committed :func:`predictions`, made before it was measured).

    The tables: ``families`` (launches and median / p90 per-launch error: first machine held
    out, second blind, second with the current model), ``whole_runs`` (the same per whole run,
    with its workload),
    ``speedups`` (measured and predicted, first over second) and ``reverse_families`` (fit
    on the second machine, carried over to predict the first).
    """

    on_first = predict(first, first_machine)
    held = on_first[on_first["point"].str.contains(holdout)]
    now = predict(second, second_machine)
    blind_frame = attach_predictions(second, blind) if blind is not None else now
    reverse_fit = calibrate(second, second_machine, source=f"reverse check: fit on {second_machine.name}")
    reverse = predict(first, carry_over(reverse_fit, first_machine))
    a, b = first_machine.name, second_machine.name
    family_columns = ["launches", "median_pct", "p90_pct"]
    families = _side_by_side(
        {
            f"{a} held out": family_errors(held),
            f"{b} blind": family_errors(blind_frame),
            f"{b} now": family_errors(now),
        },
        "family",
        family_columns,
    )
    families = with_bars(families, first_machine)  # the first machine's run-to-run spreads beside each
    runs = _side_by_side(
        {a: whole_run_errors(on_first), f"{b} blind": whole_run_errors(blind_frame), f"{b} now": whole_run_errors(now)},
        "run",
        ["error_pct"],
    )
    kinds = whole_run_errors(on_first).set_index("run")["workload"]
    runs.insert(1, "workload", runs["run"].map(kinds))
    runs.insert(2, f"{a} role", np.where(runs["run"].str.contains(holdout), "held out", "fitted"))
    reverse_table = _side_by_side({f"{a} from {b} fit": family_errors(reverse)}, "family", family_columns)
    tables = {
        "families": families,
        "whole_runs": runs,
        "speedups": speedups(on_first, now),
        "reverse_families": reverse_table,
    }
    return Comparison(tables, first=on_first, blind=blind_frame, now=now, reverse=reverse)
