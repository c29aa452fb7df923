"""A model release on a drawn validation set (``spartan model predict``, ``blank``, ``compare``):
the frozen model's predictions committed before anything in the set is measured, the
measured runs' records brought back with no time in them, and the comparison.

The predictions are made from a simulated run of the drawn set (its CPU twins list the
launches the GPUs will run) or from a measured run's blanked records (:func:`blank_run`), never
from records that carry times. A comparison matches a GPU's measured run of the same points to
them: per workload (Graph Challenge, conv) whole runs within 10% and how many measurements fall
inside their intervals, per-launch medians per family, the conv points' candidate runs as a
per-kernel view apart, and, given the host's latencies measured on that GPU's machine, the same with
the host's part of the error taken out.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from spartan_py.costmodel.families import FAMILIES
from spartan_py.costmodel.fidelity import (
    MIN_FAMILY_LAUNCHES,
    attach_predictions,
    candidate_coverage,
    family_errors,
    interval_coverage,
    predictions,
    speedups,
    whole_run_errors,
)
from spartan_py.costmodel.fits import Validation, WorkloadFigures
from spartan_py.costmodel.hosts import load_host
from spartan_py.costmodel.machine import Machine, machine_for_device
from spartan_py.costmodel.model import host_added_us
from spartan_py.costmodel.repeatability import FAMILY_MEDIAN_BAR_PCT
from spartan_py.costmodel.whole_runs import GRAPH_CHALLENGE, WITHIN_PCT, WORKLOADS, workload_figures
from spartan_py.errors import InputError
from spartan_py.files import atomic_write_bytes, json_ready
from spartan_py.runner.sweep import load_experiment
from spartan_py.trace import read_trace, write_trace


def point_label(label: str) -> str:
    """A point's label as the measured run writes it: a simulated conv point runs backend
    ``auto`` (the CPU path) where the measured one runs ``gpu``."""
    return label.replace("backend=auto,", "backend=gpu,", 1)


def _point_trace(path: Path) -> Path:
    """The trace file beside a point's result file (``points/<id>.json``)."""
    return path.with_suffix("").with_suffix(".trace.csv")


def launch_records(run_dir: Path) -> tuple[pd.DataFrame, dict[str, str]]:
    """Every GPU launch a run folder lists, with ``point`` (the measured label), and the points
    that did not finish (label: error). The folder is a simulated run of the drawn set (its CPU
    twins list the launches the GPUs run) or a measured run's records with their times blanked."""
    frames, failed = [], {}
    for path in sorted((run_dir / "points").glob("*.json")):
        record = json.loads(path.read_text())
        trace_path = _point_trace(path)
        if record.get("status") != "ok" or not trace_path.is_file():
            failed[point_label(record["label"])] = str(record.get("error"))
            continue
        trace = read_trace(trace_path)
        frames.append(trace[trace["kernel"].isin(list(FAMILIES))].assign(point=point_label(record["label"])))
    if not frames:
        raise InputError("no finished points in the run folder", path=run_dir)
    return pd.concat(frames, ignore_index=True), failed


def unrecorded_points(experiment: Path, records: pd.DataFrame, failed: dict[str, str]) -> list[str]:
    """The points of the drawn ``experiment`` file that neither have launch records nor failed
    (a record pass stopped before them), by their measured labels."""
    _, points = load_experiment(experiment)
    seen = set(records["point"].astype(str)) | set(failed)
    return [label for label in (point_label(p.label) for p in points) if label not in seen]


def blank_run(run: Path, out: Path) -> int:
    """Write ``run``'s launch records to ``out`` with every time removed: each point's label,
    status and error (no seconds), and its trace with ``measured_us`` empty. Returns the traces
    written."""
    points = out / "points"
    points.mkdir(parents=True, exist_ok=True)
    traces = 0
    for path in sorted((run / "points").glob("*.json")):
        record = json.loads(path.read_text())
        kept = {"label": record["label"], "status": record.get("status"), "error": record.get("error")}
        atomic_write_bytes(points / path.name, json.dumps(kept).encode())
        trace_path = _point_trace(path)
        if trace_path.is_file():
            write_trace(points / trace_path.name, read_trace(trace_path).assign(measured_us=np.nan))
            traces += 1
    return traces


def release_predictions(records: pd.DataFrame, machines: list[Machine], *, allow_measured: bool = False) -> dict:
    """Every machine's predictions of ``records``' launches (per launch, per whole run with its
    80% interval). Records that carry measured times are refused unless ``allow_measured`` (one
    GPU's measured launches standing for another GPU's, whose predictions these are)."""
    if records["measured_us"].notna().any() and not allow_measured:
        raise InputError("the records carry measured times: predict from a simulated run or blanked records")
    return {machine.name: predictions(records, machine) for machine in machines}


def blind_for(predictions_file: dict, device: str) -> tuple[str, dict]:
    """(the machine, its predictions) of a predictions file for a GPU the CUDA runtime calls
    ``device``; a file of one machine's predictions (the form before drawn releases) is read too."""
    machines = predictions_file.get("machines") or {predictions_file["machine"]: predictions_file}
    name = machine_for_device(device, list(machines))
    if name is None:
        raise InputError(f"the predictions name no machine for {device} (they hold {', '.join(machines)})")
    return name, machines[name]


def _host_adjusted(frame: pd.DataFrame, blind: dict, host_figures: dict) -> pd.DataFrame:
    """``frame``'s blind per-launch predictions (attached to the measured launches) moved to the
    measured host: each launch by the difference of launch latencies, each host synchronisation
    by the difference of round trips."""
    assumed = load_host(blind["host"])
    shift = (host_figures["launch_us"] - assumed.launch_us, host_figures["sync_us"] - assumed.sync_us)
    added = pd.Series(0.0, index=frame.index)
    for kernel, group in frame.groupby("kernel", sort=False):
        added[group.index] = host_added_us(FAMILIES[kernel], shift, group["host_syncs"].to_numpy(float))
    return frame.assign(predicted_us=frame["predicted_us"] + added)


def _summary(frame: pd.DataFrame, coverage: pd.DataFrame, machine) -> dict:
    """Per workload its whole runs' figures (:func:`workload_figures`), then the families'."""
    families = family_errors(frame, machine)
    held = families[families["launches"] >= MIN_FAMILY_LAUNCHES]
    return {
        **workload_figures(coverage),
        "families_within_15pct": int((held["median_pct"] <= FAMILY_MEDIAN_BAR_PCT).sum()),
        # host-bound families judged against twice their run-to-run spread where it was measured
        "families_within_bar": int(held["within_bar"].sum()),
        "families_held": int(len(held)),
    }


def candidate_view(candidates: pd.DataFrame) -> list[dict]:
    """The conv points' candidate runs per family (the per-kernel view): runs, within 10%,
    median and worst absolute error, inside their interval of those with one."""
    rows = []
    for family, group in candidates.groupby("family"):
        error = group["error_pct"].abs()
        judged = group["inside"].dropna()
        rows.append(
            {
                "family": family,
                "candidate_runs": int(len(group)),
                "within_10pct": int((error <= WITHIN_PCT).sum()),
                "median_abs_pct": round(float(error.median()), 2),
                "worst_pct": round(float(error.max()), 2),
                "inside_interval": int(judged.astype(bool).sum()),
                "with_interval": int(len(judged)),
            }
        )
    return rows


def compare_release(
    measured: pd.DataFrame,
    machine: Machine,
    blind: dict,
    *,
    environment: dict | None = None,
    host_figures: dict | None = None,
    first: tuple[pd.DataFrame, dict] | None = None,
) -> dict:
    """A GPU's measured run of a drawn set against its committed predictions (``blind``, of
    ``machine``): the summary, per-family errors and every whole run with its interval. With the
    run's ``environment``: where its driver reported other clocks, power limit or node than the
    machine file assumes. With ``host_figures`` (``launch_us``, ``sync_us`` measured on that GPU's
    machine): the same with the predictions moved to that host. With ``first`` (the calibration
    GPU's measured run of the same set and its predictions): speed-ups per family, over the points
    both have predictions for. Measured points without a prediction are listed
    (``unpredicted_points``) and counted nowhere. Graph Challenge and conv whole runs are told
    apart (:data:`WORKLOADS`); the conv points' candidate runs only per family (``candidates``,
    ``candidate_runs``)."""
    frame = attach_predictions(measured, blind)
    unpredicted = sorted(set(measured["point"].astype(str)) - set(blind["runs"]))
    coverage = interval_coverage(frame, blind)
    candidates = candidate_coverage(frame, blind)
    differences = machine.assumes.differences(environment) if machine.assumes and environment else []
    payload: dict = {
        "device": str(measured["device"].iloc[0]),
        "machine": machine.name,
        "host_assumed": blind["host"],
        "assumption_differences": differences,
        # measured points the predictions do not hold (a record pass cut short): in no figure
        "unpredicted_points": unpredicted,
        "blind": _summary(frame, coverage, machine),
        "families": family_errors(frame, machine).round(3).to_dict(orient="records"),
        "whole_runs": json_ready(coverage.round(4).to_dict(orient="records")),
        "candidates": candidate_view(candidates),
        "candidate_runs": json_ready(candidates.round(4).to_dict(orient="records")),
    }
    if host_figures is not None:
        adjusted = _host_adjusted(frame, blind, host_figures)
        shift = adjusted["predicted_us"].sum() - frame["predicted_us"].sum()
        payload["with_measured_host"] = _summary(adjusted, whole_with(adjusted, coverage), machine)
        payload["host_part_us"] = round(float(shift), 3)
    if first is not None:
        before = attach_predictions(*first)
        common = set(before["point"]) & set(frame["point"])  # a family's sums over the same points on both
        table = speedups(before[before["point"].isin(common)], frame[frame["point"].isin(common)]).rename(
            columns={"measured_speedup": "measured", "predicted_speedup": "predicted"}
        )
        payload["speedups"] = table.round(4).to_dict(orient="records")
    return payload


def whole_with(adjusted: pd.DataFrame, coverage: pd.DataFrame) -> pd.DataFrame:
    """``coverage``'s runs with the errors of the host-adjusted predictions (intervals moved alike)."""
    runs = whole_run_errors(adjusted).set_index("run")
    out = coverage.set_index("run").copy()
    shift = runs["predicted_us"] - out["predicted_us"]
    out["predicted_us"] = runs["predicted_us"]
    out["error_pct"] = runs["error_pct"]
    for end in ("low_us", "high_us"):
        out[end] = out[end].astype(float) + shift
    inside = (out["low_us"] <= out["measured_us"]) & (out["measured_us"] <= out["high_us"])
    out["inside"] = inside.where(out["low_us"].notna(), np.nan)
    return out.reset_index()


REGROUPED_KEYS = (
    "blind",
    "families",
    "whole_runs",
    "candidates",
    "candidate_runs",
    "with_measured_host",
    "speedups",
    "unpredicted_points",
)
"""What :func:`regroup` recomputes of a drawn set's comparison; the rest (provenance, the
measurement's host and driver facts) stays as measured."""


def regroup(
    result: dict,
    measured: pd.DataFrame,
    machine: Machine,
    blind: dict,
    *,
    host_figures: dict | None = None,
    first: tuple[pd.DataFrame, dict] | None = None,
) -> dict:
    """A drawn set's comparison (``result``, written before whole runs were told apart)
    recomputed from the measured trace it compared and the committed predictions (``blind``)
    with Graph Challenge and conv whole runs apart and the candidate runs a per-kernel view: a
    regrouping of the same measurements, no new one. Refused when ``measured`` is not the trace
    it compared (the runs it counted, Graph Challenge points and conv candidates pooled, must
    come back with the same errors)."""
    found = compare_release(measured, machine, blind, host_figures=host_figures, first=first)

    def counted(found: dict) -> dict[str, float]:  # Graph Challenge runs and conv candidates, as first counted
        rows = [r for r in found["whole_runs"] if r.get("workload", GRAPH_CHALLENGE) == GRAPH_CHALLENGE]
        return {str(r["run"]): float(r["error_pct"]) for r in [*rows, *found.get("candidate_runs", [])]}

    before, after = counted(result), counted(found)
    if before.keys() != after.keys() or any(abs(before[k] - after[k]) > 1e-3 for k in before):
        changed = sorted(k for k in before.keys() | after.keys() if k not in before or k not in after)[:3]
        raise InputError(f"the trace is not the one this comparison counted (runs differ: {changed or 'errors'})")
    return {**result, **{key: found[key] for key in REGROUPED_KEYS if key in found}}


def _workload_figures(figures: dict) -> dict[str, WorkloadFigures]:
    return {
        name: WorkloadFigures(
            runs=f["runs"],
            within_10pct=f["within_10pct"],
            median_abs_error_pct=f["median_abs_pct"],
            worst_error_pct=f["worst_pct"],
            inside_interval=f.get("inside_interval"),
            with_interval=f.get("with_interval", 0),
        )
        for name, f in figures.items()
        if name in WORKLOADS
    }


def validation_entry(result: dict, path: str, *, scope: str, blind: bool, commit: str) -> Validation:
    """A machine's validation entry from a comparison's result file (``path``): a drawn set's
    (``spartan model compare``), a calibration's held-out points or a cross-machine one
    (``compare --cross``); Graph Challenge and conv whole runs counted apart where the file tells them."""
    if "blind" in result and "whole_runs" in result:  # a drawn set's
        figures = result["blind"]
        if not set(WORKLOADS) & set(figures):
            raise InputError("a drawn set's comparison written before whole runs were told apart: run compare again")
        held = [f["median_pct"] for f in result["families"] if f["launches"] >= MIN_FAMILY_LAUNCHES]
        workloads = _workload_figures(figures)
        return Validation(
            scope=scope,
            device=result["device"],
            blind=blind,
            result=path,
            commit=commit,
            whole_run_error_pct=max(w.worst_error_pct for w in workloads.values()),
            per_launch_median_error_pct=round(max(held), 2),
            workloads=workloads,
        )
    tables = result.get("h200_blind") or result.get("held_out")
    if tables is None:
        raise InputError("not a comparison's result file (no drawn-set figures, no blind or held-out tables)")
    return Validation(
        scope=scope,
        device=result.get("h200_device") or result["device"],
        blind=blind,
        result=path,
        commit=commit,
        whole_run_error_pct=round(tables["summary"]["whole_run_error_pct"], 2),
        per_launch_median_error_pct=round(tables["summary"]["per_launch_median_error_pct"], 2),
        workloads=_workload_figures(tables["summary"].get("by_workload", {})),
    )
