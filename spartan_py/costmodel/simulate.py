"""Simulated mode: times for a twin's trace from the cost model instead of a clock."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from spartan_py.costmodel.families import FAMILIES, TIMED_FAMILIES
from spartan_py.costmodel.intervals import run_interval
from spartan_py.costmodel.machine import Machine, Variant, load_machine, load_variants
from spartan_py.costmodel.model import GUESSED_KINDS, predict, run_totals
from spartan_py.costmodel.releases import trust_lines
from spartan_py.costmodel.validation import kernel_error_table
from spartan_py.costmodel.whole_runs import workload, workload_figures
from spartan_py.errors import InputError
from spartan_py.trace import TraceRecord, read_trace, to_frame

_RUN_TABLES = ("results.csv", "dense-layers.csv", "simulated.csv")
"""A run folder's tables: what ``spartan run`` writes beside its traces, not traces themselves."""


def resolve_machine(name: str, variant: str | None = None) -> tuple[Machine, Variant | None]:
    """A machine by name and an optional variant by name (``sim/variants.yaml``).

    ``name`` may also be written ``MACHINE+VARIANT``.
    """
    if "+" in name and variant is None:
        name, variant = name.split("+", 1)
    machine = load_machine(name)
    if variant is None:
        return machine, None
    variants = load_variants()
    if variant not in variants:
        raise InputError(f"unknown variant {variant!r}; known: {', '.join(sorted(variants))}")
    return machine, variants[variant]


def trust(name: str) -> str:
    """How far to trust predictions for ``name`` (``MACHINE`` or ``MACHINE+VARIANT``), in one
    short line: a variant's what-if status first (hardware that does not exist, or a kernel
    configuration never run), then the machine's newest validation figures or why it has none
    (:func:`~spartan_py.costmodel.releases.trust_lines`)."""
    machine, variant = resolve_machine(name)
    text = trust_lines(machine)[0]
    return text if variant is None else f"{what_if(variant)}; {machine.name}: {text}"


def what_if(variant: Variant | None) -> str | None:
    """What a variant's predictions are, with its name (said before anything else of them); None without one."""
    return None if variant is None else f"{variant.status()} ({variant.name})"


def simulate_trace(
    records: list[TraceRecord] | pd.DataFrame, machine: Machine, variant: Variant | None = None
) -> tuple[float, pd.DataFrame]:
    """(predicted seconds of the timed kernels, the predicted trace) for a twin's records."""
    frame = records if isinstance(records, pd.DataFrame) else to_frame(records)
    predicted = predict(frame, machine, variant)
    label = predicted["machine"].iloc[0] if len(predicted) else machine.name
    predicted["device"] = f"simulated:{label}"
    timed = predicted[predicted["kernel"].isin(TIMED_FAMILIES)]
    missing = timed["predicted_us"].isna()
    if missing.any():
        reason = timed.loc[missing, "note"].iloc[0]
        raise InputError(f"{machine.name} cannot run this kernel configuration: {reason}")
    return float(timed["predicted_us"].sum()) / 1e6, predicted


def guessed_families(predicted: pd.DataFrame) -> dict[str, list[str]]:
    """{calibration kind: families} of a predicted trace's timed launches priced by a guess (a
    family-wide fallback or the defaults): what a total's warning line names."""
    timed = predicted[predicted["kernel"].isin(TIMED_FAMILIES)]
    kinds = timed.groupby("calibration")["kernel"].agg(lambda k: sorted(set(k)))
    return {str(kind): families for kind, families in kinds.items() if kind in GUESSED_KINDS}


def read_replayable_trace(path: str | Path) -> pd.DataFrame:
    """The GPU kernel launches to replay from ``path``: a trace file (``--trace-out``, a
    benchmark's) or a ``spartan run`` folder (every point's trace, ``run`` naming the point).
    Refuses, saying what to give instead, a run's table or a trace with no GPU launch in it."""
    path = Path(path)
    if path.is_dir():
        traces = sorted((path / "points").glob("*.trace.csv")) if (path / "points").is_dir() else []
        if not traces:
            raise InputError(
                "a folder without points/*.trace.csv: give a trace file or a `spartan run` folder", path=path
            )
        frames = []
        for trace_path in traces:
            frame = read_trace(trace_path)
            label = trace_path.name.removesuffix(".trace.csv")
            frame["run"] = frame["run"].where(frame["run"] != "", label)
            frames.append(frame)
        trace = pd.concat(frames, ignore_index=True)
    elif path.name in _RUN_TABLES:
        raise InputError(
            f"{path.name} is a run's table, not a kernel trace: give the run folder ({path.parent}) "
            "or one of its points/*.trace.csv",
            path=path,
        )
    else:
        trace = read_trace(path)
    if not trace["kernel"].isin(list(FAMILIES)).any():
        devices = ", ".join(sorted(trace["device"].astype(str).unique())) or "none"
        raise InputError(
            f"no GPU kernel launch to replay (devices: {devices}); a trace of the cpu or reference backend has "
            "none: record one with --backend gpu (or --backend gpu-twin --mode simulated on a machine without a GPU)",
            path=path,
        )
    return trace


def interval_status(machine: Machine, variant: Variant | None = None) -> str:
    """What a machine's 80% intervals are: held-out spreads of its own runs, the calibration
    machine's spreads carried to a GPU of the same architecture (a statement its runs check),
    or to another architecture (a guess); or none. A variant's intervals are its machine's
    spreads, which nothing it changes was measured to check."""
    if not machine.error_spread:
        return "no intervals: the machine has no leave-one-point-out spreads"
    if variant is not None:
        return f"80% intervals: {machine.name}'s spreads as they are; the what-if {variant.name} was never measured"
    if (
        machine.calibration_from is None
        and machine.calibration
        and all(p.records > 0 for p in machine.calibration.values())
    ):
        return "80% intervals from leave-one-point-out fits on this GPU's runs"
    if machine.validated:
        return (
            "80% intervals carried over from the calibration GPU's held-out spreads (nothing measured here enters them)"
        )
    return "80% intervals carried over from another GPU's held-out spreads: a guess for this GPU (unvalidated)"


def simulated_run_facts(predicted: pd.DataFrame, name: str) -> dict:
    """What a simulated run's time is (``spartan infer --mode simulated``): its 80% interval in
    seconds (``None`` without a spread), the kind whose spread gave it, what the intervals are,
    the trust line of ``name`` (:func:`trust`) and, for a variant, what it is (``what_if``)."""
    machine, variant = resolve_machine(name)
    timed = predicted[predicted["kernel"].isin(TIMED_FAMILIES)]
    bounds, kind = (None, "")
    if len(timed) and not timed["predicted_us"].isna().any():
        bounds, kind = run_interval(machine, timed["kernel"], float(timed["predicted_us"].sum()))
    return {
        "interval_seconds": [bound / 1e6 for bound in bounds] if bounds else None,
        "interval_from": kind or None,
        "interval_status": interval_status(machine, variant),
        "trust": trust(name),
        "what_if": what_if(variant),
    }


def _priced_sum(rows: pd.DataFrame) -> dict:
    """A group of launches' predicted total and count; the total None, with the reason, when any
    launch has no price (never a partial sum)."""
    missing = rows["predicted_us"].isna()
    entry: dict = {"launches": int(len(rows)), "unpriced": int(missing.sum())}
    entry["predicted_us"] = None if missing.any() else float(rows["predicted_us"].sum())
    if missing.any():
        entry["reason"] = next((n for n in rows.loc[missing, "note"] if n), "no price on this machine")
    return entry


def _beside_totals(predicted: pd.DataFrame) -> dict[str, dict[str, dict]]:
    """Per run, the described families its total leaves out (copies, synchronisations, the
    monitor's pass, the epilogue): each family's :func:`_priced_sum`."""
    beside = predicted[predicted["kernel"].isin(list(FAMILIES)) & ~predicted["kernel"].isin(TIMED_FAMILIES)]
    return {
        str(run): {str(kernel): _priced_sum(group) for kernel, group in rows.groupby("kernel")}
        for run, rows in beside.groupby("run", sort=False)
    }


def _inside_intervals(errors: list[dict], intervals: dict[str, dict]) -> None:
    """Marks each compared run ``inside_interval`` (None: no interval, or not every launch
    measured): whether its measurement is inside its 80% interval."""
    for row in errors:
        span = intervals.get(str(row["run"]))
        whole = span is not None and row["records"] == row["launches"]
        row["inside_interval"] = span["low_us"] <= row["measured_us"] <= span["high_us"] if span and whole else None


def replay_summary(
    trace: pd.DataFrame, name: str, host: str | None = None, environment: dict | None = None
) -> tuple[dict, pd.DataFrame]:
    """What ``spartan simulate`` reports of ``trace`` replayed on machine ``name``
    (``MACHINE[+VARIANT]``) in ``host`` (``sim/hosts/``; default the machine's own), and the
    predicted trace. Nothing is guessed silently:

    - a total (a run's, a family's) is None, with the reason (``unpriced_by_run``,
      ``unpriced_by_kernel``), when a launch it sums has no price on this machine (a partial
      sum is never given);
    - ``beside_by_run``: per run, the copies, synchronisations and other described launches its
      total leaves out, each family's total and count;
    - ``left_out`` counts the launches of families the model does not describe (stock
      libraries, CPU engines), which no total includes;
    - ``calibration_by_kernel``: per family, its launches counted by how their parameters were
      had (fitted, carried over, family-wide fallback, default);
    - errors against measured times are given only when the trace was measured on a GPU this
      machine describes and no what-if variant is named (``measured_on`` names the GPU that
      measured it either way); ``by_workload`` then counts, Graph Challenge and conv runs apart,
      the runs within 10% and those inside their 80% interval;
    - ``assumption_differences``: where the run's ``environment`` (its ``environment.json``)
      reports clocks, a power limit or a node other than the machine file assumes.
    """
    machine, variant = resolve_machine(name)
    predicted = predict(trace, machine, variant, host=host)
    timed = predicted[predicted["kernel"].isin(TIMED_FAMILIES)]
    by_run: dict[str, float | None] = {}
    intervals: dict[str, dict] = {}
    unpriced: dict[str, str] = {}
    for run, rows in timed.groupby("run", sort=False):
        total = _priced_sum(rows)
        by_run[str(run)] = total["predicted_us"]
        if total["predicted_us"] is None:
            families = ", ".join(sorted(rows.loc[rows["predicted_us"].isna(), "kernel"].unique()))
            unpriced[str(run)] = f"{total['unpriced']} launches cannot be priced ({families}): {total['reason']}"
            continue
        bounds, kind = run_interval(machine, rows["kernel"], total["predicted_us"])
        if bounds is not None:
            intervals[str(run)] = {"low_us": bounds[0], "high_us": bounds[1], "from": kind}
    by_kernel = {str(kernel): _priced_sum(rows) for kernel, rows in predicted.groupby("kernel")}
    outside = trace[~trace["kernel"].isin(list(FAMILIES))]
    measured = trace[trace["measured_us"].notna() & trace["kernel"].isin(list(FAMILIES))]
    devices = sorted(str(d) for d in measured["device"].unique())
    by_kind: dict[str, dict[str, int]] = {}
    for (kernel, kind), count in predicted.groupby(["kernel", "calibration"]).size().items():
        by_kind.setdefault(str(kernel), {})[str(kind)] = int(count)
    entry: dict = {
        "machine": predicted["machine"].iloc[0] if len(predicted) else name,
        "trust": trust(name),
        "what_if": what_if(variant),
        "host": host or machine.host,
        "predicted_us_by_run": by_run,
        "interval_us_by_run": intervals,
        "interval_status": interval_status(machine, variant),
        "unpriced_by_run": unpriced,
        "beside_by_run": _beside_totals(predicted),
        "left_out": {str(k): int(v) for k, v in outside["kernel"].value_counts().items()},
        "predicted_us_by_kernel": {kernel: total["predicted_us"] for kernel, total in by_kernel.items()},
        "launches_by_kernel": {kernel: total["launches"] for kernel, total in by_kernel.items()},
        "unpriced_by_kernel": {
            kernel: f"{total['unpriced']} of {total['launches']} launches cannot be priced: {total['reason']}"
            for kernel, total in by_kernel.items()
            if total["predicted_us"] is None
        },
        "notes": sorted(n for n in predicted["note"].unique() if n),
        "calibration_by_kernel": by_kind,
        "guessed": guessed_families(predicted),
        "measured_on": devices,
    }
    same_gpu = bool(devices) and all(d in machine.device_names for d in devices)
    entry["compared"] = same_gpu and variant is None
    entry["assumption_differences"] = (
        machine.assumes.differences(environment) if same_gpu and environment and machine.assumes else []
    )
    if entry["compared"]:
        entry["error_by_kernel"] = kernel_error_table(predicted).to_dict(orient="records")
        errors = run_totals(predicted, TIMED_FAMILIES).to_dict(orient="records")
        launches = timed.groupby("run", sort=False).size()
        kinds = timed.groupby("run", sort=False)["kernel"].agg(workload)
        for row in errors:
            row["launches"] = int(launches[row["run"]])
            row["workload"] = kinds[row["run"]]
        _inside_intervals(errors, intervals)
        entry["error_by_run"] = errors
        frame = pd.DataFrame(errors, columns=["workload", "error_pct", "inside_interval"])
        entry["by_workload"] = workload_figures(frame.rename(columns={"inside_interval": "inside"}))
    return entry, predicted
