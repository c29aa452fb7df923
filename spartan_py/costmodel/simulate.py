"""Simulated mode: times for a twin's trace from the cost model instead of a clock."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from spartan_py.costmodel.families import FAMILIES, TIMED_FAMILIES
from spartan_py.costmodel.intervals import run_interval
from spartan_py.costmodel.machine import Machine, Variant, load_machine, load_variants
from spartan_py.costmodel.model import GUESSED_KINDS, predict
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
    """How far to trust predictions for ``name`` (``MACHINE`` or ``MACHINE+VARIANT``): the
    machine's validation (measured here, with its errors, or not) and what a variant is."""
    machine, variant = resolve_machine(name)
    text = machine.validation_summary()
    return text if variant is None else f"{text}; {variant.name}: {variant.status()}"


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


def interval_status(machine: Machine) -> str:
    """What a machine's 80% intervals are: held-out spreads of its own runs, the calibration
    machine's spreads carried to a GPU of the same architecture (a statement its runs check),
    or to another architecture (a guess); or none."""
    if not machine.error_spread:
        return "no intervals: the machine has no leave-one-point-out spreads"
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


def replay_summary(
    trace: pd.DataFrame, name: str, host: str | None = None, environment: dict | None = None
) -> tuple[dict, pd.DataFrame]:
    """What ``spartan simulate`` reports of ``trace`` replayed on machine ``name``
    (``MACHINE[+VARIANT]``) in ``host`` (``sim/hosts/``; default the machine's own), and the
    predicted trace. Nothing is guessed silently:

    - a run's total is None, with the reason in ``unpriced_by_run``, when a launch it times
      has no price on this machine (a partial sum is never given);
    - ``left_out`` counts the launches of families the model does not describe (stock
      libraries, CPU engines), which no total includes;
    - errors against measured times are given only when the trace was measured on a GPU this
      machine describes (``measured_on`` names the GPU that measured it either way);
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
        bounds, kind = run_interval(machine, rows["kernel"], float(rows["predicted_us"].sum()))
        if bounds is not None and not rows["predicted_us"].isna().any():
            intervals[str(run)] = {"low_us": bounds[0], "high_us": bounds[1], "from": kind}
        missing = rows["predicted_us"].isna()
        if missing.any():
            families = ", ".join(sorted(rows.loc[missing, "kernel"].unique()))
            reason = next((n for n in rows.loc[missing, "note"] if n), "no price on this machine")
            by_run[str(run)] = None
            unpriced[str(run)] = f"{int(missing.sum())} launches cannot be priced ({families}): {reason}"
        else:
            by_run[str(run)] = float(rows["predicted_us"].sum())
    guessed = guessed_families(predicted)
    outside = trace[~trace["kernel"].isin(list(FAMILIES))]
    measured = trace[trace["measured_us"].notna() & trace["kernel"].isin(list(FAMILIES))]
    devices = sorted(str(d) for d in measured["device"].unique())
    entry: dict = {
        "machine": predicted["machine"].iloc[0] if len(predicted) else name,
        "trust": trust(name),
        "host": host or machine.host,
        "predicted_us_by_run": by_run,
        "interval_us_by_run": intervals,
        "interval_status": interval_status(machine),
        "unpriced_by_run": unpriced,
        "left_out": {str(k): int(v) for k, v in outside["kernel"].value_counts().items()},
        "predicted_us_by_kernel": predicted.groupby("kernel")["predicted_us"].sum(min_count=1).to_dict(),
        "notes": sorted(n for n in predicted["note"].unique() if n),
        "calibration_by_kernel": dict(zip(predicted["kernel"], predicted["calibration"])),
        "guessed": guessed,
        "measured_on": devices,
    }
    same_gpu = bool(devices) and all(d in machine.device_names for d in devices)
    entry["compared"] = same_gpu
    entry["assumption_differences"] = (
        machine.assumes.differences(environment) if same_gpu and environment and machine.assumes else []
    )
    if same_gpu:
        from spartan_py.costmodel.model import run_totals
        from spartan_py.costmodel.validation import kernel_error_table

        entry["error_by_kernel"] = kernel_error_table(predicted).to_dict(orient="records")
        entry["error_by_run"] = run_totals(predicted, TIMED_FAMILIES).to_dict(orient="records")
    return entry, predicted
