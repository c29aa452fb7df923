"""Run an experiment's points, resuming where a previous run stopped."""

from __future__ import annotations

import traceback
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from spartan_py.costmodel.families import FAMILIES
from spartan_py.costmodel.intervals import run_interval
from spartan_py.costmodel.simulate import guessed_families, resolve_machine, simulate_trace
from spartan_py.errors import SpartanError
from spartan_py.host.executors import Workers, run_all
from spartan_py.runner.check_points import check_points
from spartan_py.runner.run_folder import bind_run_folder, run_folder_lock
from spartan_py.runner.schema import Experiment
from spartan_py.runner.store import (
    check_run_folder,
    environment,
    finished_point,
    point_path,
    write_json,
    write_tables,
)
from spartan_py.runner.sweep import Point
from spartan_py.trace import to_frame, write_trace
from spartan_py.workloads import workload_of


@dataclass
class RunSummary:
    """What a call to :func:`run_experiment` did."""

    out: Path
    ran: int
    skipped: int
    failed: int


def replay_on_machines(trace, machines: list[str]) -> dict:
    """A point's ``machines`` entry: its trace (records or a table) replayed on each listed
    machine, ``{name: {"seconds": ...}}`` with its 80% interval and the families priced by a
    guess (``guessed``), or ``None`` with a note where the machine cannot run the kernel
    configuration."""
    frame = trace if isinstance(trace, pd.DataFrame) else to_frame(trace)
    out: dict[str, dict[str, Any]] = {}
    for name in machines:
        machine, variant = resolve_machine(name)
        try:
            seconds, predicted = simulate_trace(frame, machine, variant)
            bounds, kind = run_interval(machine, predicted.loc[predicted["predicted_us"].notna(), "kernel"], seconds)
            out[name] = {
                "seconds": seconds,
                "interval_seconds": list(bounds) if bounds else None,
                "interval_from": kind,
                "guessed": guessed_families(predicted),
            }
        except SpartanError as exc:
            out[name] = {"seconds": None, "note": str(exc)}
    return out


def _record(point: Point, summary: dict, seconds: list[float], trace) -> tuple[dict, list]:
    """A finished point's result record and its trace, replayed on ``machines``."""
    config = point.experiment
    has_gpu_kernels = any(r.kernel in FAMILIES for r in trace)
    machines = (
        replay_on_machines(trace, config.machines)
        if has_gpu_kernels
        else {
            name: {"seconds": None, "note": f"backend {summary['backend']} records no GPU kernels to replay"}
            for name in config.machines
        }
    )
    return {
        "id": point.id,
        "label": point.label,
        "values": point.values,
        "config": config.model_dump(mode="json"),
        "status": "ok",
        "error": None,
        "summary": summary,
        "repeat_seconds": seconds,
        "trace": f"{point.id}.trace.csv",
        "machines": machines,
    }, trace


def unavailable_here(point: Point) -> str | None:
    """Why ``point`` cannot run on this machine (its backend needs a GPU or CuPy that is not
    here), or None: its workload says (simulated points always run, on the CPU)."""
    config = point.experiment
    if config.mode == "simulated":
        return None
    return workload_of(config).unavailable_reason(config)


def run_point(point: Point) -> tuple[dict, list]:
    """Run one point (``repeats`` times, by its workload): its result record and kernel trace (not yet stored)."""
    summary, seconds, trace = workload_of(point.experiment).run_point(point.experiment, point.id)
    return _record(point, summary, seconds, trace)


def _failed(point: Point, exc: BaseException, tb: str) -> dict:
    return {
        "id": point.id,
        "label": point.label,
        "values": point.values,
        "config": point.experiment.model_dump(mode="json"),
        "status": "failed",
        "error": f"{type(exc).__name__}: {exc}",
        "traceback": tb,
    }


def run_point_task(point: Point) -> tuple[dict, list]:
    """A point as a task for any executor: a point that raises becomes a failed record (so
    that an exception from the future itself always means the worker was lost)."""
    try:
        return run_point(point)
    except Exception as exc:  # a failing point is a result: record it and go on
        return _failed(point, exc, traceback.format_exc(limit=5)), []


def _store(out: Path, record: dict, trace: list) -> None:
    """The trace first, then the point file (its presence marks the point finished)."""
    if record["status"] == "ok":
        write_trace(out / "points" / record["trace"], trace)
    write_json(point_path(out, record["id"]), record)


def _run_on(workers: Workers, todo: list[Point], retries: int):
    """Yield ``(point, record, trace)`` as the workers finish them (a point whose worker was
    lost more than ``retries`` times is recorded as failed)."""
    by_id = {point.id: point for point in todo}
    for point_id, result, error in run_all(workers, run_point_task, {p.id: (p,) for p in todo}, retries=retries):
        point = by_id[point_id]
        if error is not None:
            yield point, _failed(point, error, f"worker lost {retries + 1} times"), []
        else:
            yield point, *result


def run_experiment(
    experiment: Experiment,
    points: list[Point],
    out: Path,
    *,
    force: bool = False,
    on_point: Callable[[Point, dict, bool], None] | None = None,
    workers: Workers | None = None,
    retries: int = 3,
    only: Collection[str] | None = None,
    replace_changed: bool = False,
    on_wait: Callable[[str], None] | None = None,
) -> RunSummary:
    """Run every point not already finished in ``out`` (all of them with ``force``).

    ``points`` are all the experiment's points (``config.json`` lists them all); ``only``:
    the ids of those to run now (``--only``), None for all. The folder is bound to the
    experiment (:func:`~spartan_py.runner.run_folder.bind_run_folder`: a folder holding
    points the experiment no longer has is refused, or with ``replace_changed`` those are
    dropped) and locked for the whole run (:func:`~spartan_py.runner.run_folder.run_folder_lock`:
    a second run waits, ``on_wait(holder)`` told once, then skips what the first finished).

    Points run inline, or on ``workers`` (from :func:`spartan_py.host.executors.open_executor`:
    a process pool or a Dask cluster), their results streaming back here. Each point's
    files are written atomically, here, when it finishes; a failing point is stored with its
    error and the run goes on; a point whose worker died is resubmitted (``retries`` times).
    ``on_point(point, record, skipped)`` is called after each point (the CLI's progress bar).
    """
    out = Path(out)
    selected = [p for p in points if only is None or p.id in only]
    check_points(selected)  # every input checked before any work: a bad one stops the run here (exit 2)
    check_run_folder(out, experiment.name)  # another experiment's folder: refused before the lock makes it
    with run_folder_lock(out, on_wait):
        bind_run_folder(out, experiment, points, replace_changed=replace_changed)
        return _run_locked(experiment, points, selected, out, force, on_point, workers, retries)


def _run_locked(experiment, points, selected, out, force, on_point, workers, retries) -> RunSummary:
    (out / "points").mkdir(parents=True, exist_ok=True)
    write_json(
        out / "config.json",
        {
            "experiment": experiment.model_dump(mode="json"),
            "points": [{"id": p.id, "label": p.label, "values": p.values} for p in points],
        },
    )
    write_json(
        out / "environment.json", environment() | {"executor": workers.description if workers else "this process"}
    )
    ran = skipped = failed = 0
    todo = []
    for point in selected:
        stored = None if force else finished_point(out, point.id)
        if stored is not None and stored.get("status") == "ok":
            skipped += 1
            if on_point:
                on_point(point, stored, True)
        else:
            todo.append(point)
    finished = (
        _run_on(workers, todo, retries) if workers and workers.executor else ((p, *run_point_task(p)) for p in todo)
    )
    for point, record, trace in finished:
        _store(out, record, trace)
        ran += 1
        failed += record["status"] != "ok"
        if on_point:
            on_point(point, record, False)
    write_tables(out)
    return RunSummary(out, ran, skipped, failed)
