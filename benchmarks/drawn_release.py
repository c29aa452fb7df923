"""A model release on a drawn validation set: predictions committed first, then the comparison.

    python -m benchmarks.drawn_release blank RUN OUT --delete   # on the GPU machine: launches, no times
    python -m benchmarks.drawn_release predict RUN_SIMULATED     # the frozen model's predictions, per GPU
    python -m benchmarks.drawn_release compare RUN --predictions FILE [--host-latency FILE] [--first RUN_H100]

``predict`` reads the run folder of the drawn set's simulated file (``python -m
benchmarks.draw_validation --mode simulated``; its CPU twins list the launches the GPUs will
run) and writes every listed machine's predictions (per launch, per whole run with the 80%
interval) to ``benchmarks/results/fidelity/``: commit it before any GPU runs the measured file.
``blank`` is the record pass's last step on the GPU's machine: the run folder's launch records
with every time removed (each point's label, status and error; its trace with ``measured_us``
empty) written to ``OUT``, the only thing brought back, and with ``--delete`` the run folder
removed there. ``compare`` matches a GPU's measured run of the same points to them: whole runs within 10%,
per-launch medians per family, how many measurements fall inside their intervals, and, with
``--host-latency`` (``python -m benchmarks.host_latency`` on that GPU's machine, apart from the
points), the same with the host's part of the error taken out: the predictions moved by the
difference between that host's latencies and the assumed host's. ``--first`` (the H100's run)
adds the measured and predicted speed-ups per family.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks._results import ROOT, commit, write_result
from spartan_py.costmodel import load_machine
from spartan_py.costmodel.families import FAMILIES
from spartan_py.costmodel.fidelity import (
    MIN_FAMILY_LAUNCHES,
    attach_predictions,
    family_errors,
    interval_coverage,
    predictions,
    run_traces,
    speedups,
)
from spartan_py.costmodel.hosts import load_host
from spartan_py.costmodel.machine import machine_for_device
from spartan_py.costmodel.model import host_added_us
from spartan_py.errors import InputError
from spartan_py.files import atomic_write_bytes
from spartan_py.runner.store import run_environment
from spartan_py.trace import read_trace, write_trace

OUT = ROOT / "benchmarks" / "results" / "fidelity"
WITHIN_PCT = 10.0
"""The whole-run bar: within 10% of the measurement."""


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


def cmd_predict(args) -> tuple[str, dict]:
    records, failed = launch_records(args.run)
    if records["measured_us"].notna().any():
        raise InputError(
            "the records carry measured times: predict from a simulated run or blanked records", path=args.run
        )
    return "drawn-predictions", {
        "drawn_set": str(args.experiment),
        "model_commit": commit().removesuffix("+dirty"),
        "records_from": args.records_from,
        "points": int(records["point"].nunique()),
        "not_run": failed,
        "machines": {name: predictions(records, load_machine(name)) for name in args.machines.split(",")},
    }


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
    families = family_errors(frame, machine)
    held = families[families["launches"] >= MIN_FAMILY_LAUNCHES]
    within = coverage["error_pct"].abs() <= WITHIN_PCT
    inside = coverage["inside"].dropna()
    return {
        "whole_runs": int(len(coverage)),
        "within_10pct": int(within.sum()),
        "within_10pct_share": round(float(within.mean()), 4),
        "worst_whole_run_pct": round(float(coverage["error_pct"].abs().max()), 2),
        "median_abs_whole_run_pct": round(float(coverage["error_pct"].abs().median()), 2),
        "inside_interval": int(inside.sum()),
        "with_interval": int(len(inside)),
        "families_within_15pct": int((held["median_pct"] <= 15).sum()),
        # host-bound families judged against twice their run-to-run spread where it was measured
        "families_within_bar": int(held["within_bar"].sum()),
        "families_held": int(len(held)),
    }


def _assumption_differences(machine, run: Path) -> list[str]:
    environment = run_environment(run)
    if machine.assumes is None or environment is None:
        return []
    return machine.assumes.differences(environment)


def cmd_compare(args) -> tuple[str, dict]:
    measured = run_traces(args.run)
    device = str(measured["device"].iloc[0])
    blind_all = json.loads(
        gzip.decompress(args.predictions.read_bytes())
        if args.predictions.suffix == ".gz"
        else args.predictions.read_text()
    )
    name = machine_for_device(device, list(blind_all["machines"]))
    if name is None:
        raise InputError(f"the predictions name no machine for {device}", path=args.predictions)
    blind = blind_all["machines"][name]
    machine = load_machine(name)
    frame = attach_predictions(measured, blind)
    coverage = interval_coverage(frame, blind)
    payload = {
        "device": device,
        "machine": name,
        "predictions": str(args.predictions.relative_to(ROOT) if args.predictions.is_absolute() else args.predictions),
        "predictions_commit": blind_all["model_commit"],
        "host_assumed": blind["host"],
        # where the measured GPU's driver reported other clocks, power limit or node than the file assumes
        "assumption_differences": _assumption_differences(machine, args.run),
        "blind": _summary(frame, coverage, machine),
        "families": family_errors(frame, machine).round(3).to_dict(orient="records"),
        "whole_runs": coverage.round(4).to_dict(orient="records"),
    }
    if args.host_latency is not None:
        figures = json.loads(args.host_latency.read_text())
        adjusted = _host_adjusted(frame, blind, figures)
        shift = adjusted["predicted_us"].sum() - frame["predicted_us"].sum()
        payload["host_measured"] = {"file": str(args.host_latency), **{k: figures[k] for k in ("launch_us", "sync_us")}}
        payload["with_measured_host"] = _summary(adjusted, whole_with(adjusted, coverage), machine)
        payload["host_part_us"] = round(float(shift), 3)
    if args.first is not None:
        first = attach_predictions(run_traces(args.first), blind_all["machines"][args.first_machine])
        table = speedups(first, frame).rename(
            columns={"measured_speedup": "measured", "predicted_speedup": "predicted"}
        )
        payload["speedups"] = table.round(4).to_dict(orient="records")
    return f"drawn-fidelity-{name}", payload


def whole_with(adjusted: pd.DataFrame, coverage: pd.DataFrame) -> pd.DataFrame:
    """``coverage``'s runs with the errors of the host-adjusted predictions (intervals moved alike)."""
    from spartan_py.costmodel.fidelity import whole_run_errors

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    pre = sub.add_parser("predict")
    pre.add_argument("run", type=Path, help="a simulated run of the drawn set, or a measured run's blanked records")
    pre.add_argument("--experiment", type=Path, required=True, help="the drawn (measured) experiment file")
    pre.add_argument("--machines", default="h100-sxm,h200-sxm")
    pre.add_argument("--records-from", required=True, help="where the records came from, in words (kept in the file)")
    blank = sub.add_parser("blank")
    blank.add_argument("run", type=Path, help="the record pass's run folder (measured)")
    blank.add_argument("out", type=Path, help="where its blanked records go")
    blank.add_argument("--delete", action="store_true", help="remove the run folder afterwards")
    cmp_ = sub.add_parser("compare")
    cmp_.add_argument("run", type=Path, help="a GPU's run folder of the drawn set")
    cmp_.add_argument("--predictions", type=Path, required=True)
    cmp_.add_argument("--host-latency", type=Path, help="host_latency-*.json measured on that GPU's machine")
    cmp_.add_argument("--first", type=Path, help="the calibration GPU's run of the same set (speed-ups)")
    cmp_.add_argument("--first-machine", default="h100-sxm")
    args = parser.parse_args(argv)
    if args.command == "blank":
        traces = blank_run(args.run, args.out)
        if args.delete:
            shutil.rmtree(args.run)
        print(f"{traces} traces blanked into {args.out}" + (f"; {args.run} removed" if args.delete else ""))
        return 0
    name, payload = {"predict": cmd_predict, "compare": cmd_compare}[args.command](args)
    path = write_result(name, "cpu (the cost model's replay)", payload, OUT)
    packed = path.with_suffix(".json.gz")  # every launch's price, every whole run: kept compressed
    atomic_write_bytes(packed, gzip.compress(path.read_bytes(), mtime=0))
    path.unlink()
    print(packed.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
