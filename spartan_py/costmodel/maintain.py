"""The cost model's upkeep on measured runs (``spartan model calibrate``, ``cross-validate``,
``compare --cross``): fit a machine on part of its runs and report the rest, leave each point
out in turn for the 80% intervals, and compare a GPU measured after its blind predictions
were committed. The command line writes what these return (:mod:`spartan_py.cli.model`)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pandas as pd

from spartan_py.costmodel.algorithm_table import load_table, with_algorithm_table
from spartan_py.costmodel.calibrate import calibrate, check_may_calibrate
from spartan_py.costmodel.families import record_instances
from spartan_py.costmodel.fidelity import compare, family_errors, run_traces, summary, whole_run_errors
from spartan_py.costmodel.fits import Validation
from spartan_py.costmodel.intervals import held_out_runs, run_error_frame
from spartan_py.costmodel.machine import Machine
from spartan_py.costmodel.model import predict
from spartan_py.costmodel.releases import DRAWN_SET
from spartan_py.errors import InputError
from spartan_py.trace import read_trace, write_trace


def shown(path: Path) -> str:
    """``path`` as result files name it: relative to the working directory (the repository
    root, where the tooling runs) when inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def measured_records(path: Path) -> pd.DataFrame:
    """Measured launches of a ``spartan run`` folder, or of a kept trace file (its runs are
    the points)."""
    if path.is_dir():
        return run_traces(path)
    trace = read_trace(path)
    return trace.assign(point=trace["run"])


def keep_trace(trace: pd.DataFrame, path: Path) -> Path:
    """Keep a run folder's measured launches as one trace file (its points as runs)."""
    return write_trace(path, trace.drop(columns="point").assign(run=trace["point"]))


def with_algorithms(trace: pd.DataFrame, table: Path | None) -> pd.DataFrame:
    """``trace``'s cuBLAS records given their algorithm from ``table`` (``cublas_algos-*.json.gz``)
    where they name none; unchanged without one."""
    return trace if table is None else with_algorithm_table(trace, load_table(table))


def error_tables(predicted: pd.DataFrame) -> dict:
    """Per-family and whole-run errors of a predicted trace, and the two figures of
    :func:`~spartan_py.costmodel.fidelity.summary`."""
    return {
        "families": family_errors(predicted).round(3).to_dict(orient="records"),
        "whole_runs": whole_run_errors(predicted).round(3).to_dict(orient="records"),
        "summary": summary(predicted),
    }


def calibrate_runs(
    trace: pd.DataFrame,
    target: Machine,
    *,
    traces: list[str],
    holdout: str,
    measured_commit: str,
    code_commit: str,
    families: tuple[str, ...] | None = None,
    instances: set[str] | None = None,
) -> tuple[Machine, dict]:
    """``target`` fitted on the points of ``trace`` not matched by ``holdout`` (``families``
    only, or the named ``instances`` alone, when given), its ``calibration_frozen`` saying what,
    and the result: the fit's and the held-out points' errors."""
    device = str(trace["device"].iloc[0])
    check_may_calibrate(target, device)  # not a machine validated blind, nor another GPU's runs
    held = trace["point"].str.contains(holdout)
    fit_points, held_points = sorted(trace.loc[~held, "point"].unique()), sorted(trace.loc[held, "point"].unique())
    source = f"fit on {' + '.join(traces)} ({len(fit_points)} points; {device}; commit {measured_commit})"
    # named instances alone: the families' own fits stay as they are
    fitted = calibrate(
        trace[~held], target, source=source, families=families, instances=instances, family_wide=instances is None
    )
    refitted = f"{', '.join(families)} refitted" if families else "every family"
    if instances:
        refitted = f"instances {', '.join(sorted(instances))} of {', '.join(families or ['every family'])} fitted"
    others = "; the other families as their own source says" if families else ""
    frozen = (
        f"{refitted}: {source}; fitted by spartan model calibrate on the code of commit {code_commit}{others}; "
        "not refitted since"
    )
    payload = {
        "device": device,
        "fit_points": fit_points,
        "held_out_points": held_points,
        "holdout_pattern": holdout,
        "traces": traces,
        "families_refitted": list(families) if families else "all",
        "fit": error_tables(predict(trace[~held], fitted)),
        "held_out": error_tables(predict(trace[held], fitted)),
    }
    return fitted.model_copy(update={"calibration_frozen": frozen}), payload


def _held_out(job: tuple[pd.DataFrame, Machine, str]) -> list[dict]:
    """One point's held-out runs: its families refitted on the other points, warm from the
    committed fit, the compiled instances it launches with their own fits again."""
    trace, machine, point = job
    launches = trace[trace["point"] == point]
    instances = set(record_instances(launches)) - {""}

    def refit(others, fitted, families):
        return calibrate(
            others, fitted, source="leave-one-point-out", families=families, instances=instances, warm=True
        )

    return held_out_runs(trace, machine, point, refit)


def cross_validate(
    runs: list[tuple[str, pd.DataFrame]],
    machine: Machine,
    *,
    leave_out: list[str],
    workers: int,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[dict, pd.DataFrame]:
    """Leave each point of the calibration ``runs`` (name, measured launches) out of the fit in
    turn; returns the result's payload and the held-out whole runs, whose spreads become the
    machine's ``error_spread``
    (:func:`~spartan_py.costmodel.intervals.error_spreads`). With ``leave_out``, only the points of
    those runs are left out (the others stay in every fit): a drawn calibration set's points,
    which stand for the points a validation draw will hold."""
    names = [name for name, _ in runs]
    unknown = [name for name in leave_out if name not in names]
    if unknown:
        raise InputError(f"--leave-out names runs not given as the run or --also: {', '.join(unknown)}")
    trace = pd.concat([t for _, t in runs], ignore_index=True)
    trace = trace[trace["measured_us"].notna() & (trace["measured_us"] > 0)]
    chosen = [t for name, t in runs if not leave_out or name in leave_out]
    left_out = set(pd.concat(chosen)["point"])
    points = [p for p in trace["point"].unique() if p in left_out]
    rows: list[dict] = []
    with ProcessPoolExecutor(max_workers=workers) as pool:
        for done, found in enumerate(pool.map(_held_out, [(trace, machine, p) for p in points]), start=1):
            rows += found
            if progress is not None:
                progress(done, len(points))
    errors = run_error_frame(rows)
    payload = {
        "machine": machine.name,
        "traces": names,
        "points": len(points),
        "left_out_of": leave_out or "every trace",
        "runs": errors.round(4).to_dict(orient="records"),
    }
    return payload, errors


def compare_machines(
    first: pd.DataFrame, second: pd.DataFrame, machines: tuple[Machine, Machine], blind: dict, holdout: str
) -> dict:
    """The cross-machine tables of a GPU measured after its blind predictions (``blind``: one
    machine's) were committed, beside the first GPU's held-out points and a reverse fit
    (:func:`~spartan_py.costmodel.fidelity.compare`)."""
    found = compare(first, second, machines[0], machines[1], blind, holdout)
    return {
        "h200_blind": error_tables(found.blind),
        "h200_current_model": error_tables(found.now),
        "h100_all_points": error_tables(found.first),
        "reverse_whole_runs": whole_run_errors(found.reverse).round(3).to_dict(orient="records"),
        **{name: table.round(3).to_dict(orient="records") for name, table in found.tables.items()},
    }


def _same_runs(a: Validation, b: Validation) -> bool:
    """Whether two entries are of the same runs: the same scope, or the same drawn set on the same GPU."""
    if a.scope == b.scope:
        return True
    drawn_a, drawn_b = DRAWN_SET.search(a.scope), DRAWN_SET.search(b.scope)
    return bool(drawn_a and drawn_b and drawn_a.group(1) == drawn_b.group(1) and a.device == b.device)


def with_validation(machine: Machine, entry: Validation, exists: Callable[[str], bool]) -> Machine:
    """``machine`` with ``entry`` as its validation of its runs: a new measurement or a recount of
    the same runs (:func:`_same_runs`) replaces their entry; the others stay while their result
    file ``exists`` (a round whose files went to git history is history too)."""
    kept = [v for v in machine.validation if not _same_runs(v, entry) and exists(v.result)]
    return machine.model_copy(update={"validation": [*kept, entry]})
