"""Run an experiment's points, resuming where a previous run stopped."""

from __future__ import annotations

import statistics
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from spartan_py.costmodel.families import FAMILIES
from spartan_py.engines import choose_backend, engine_class, make_engine, twin_backend, unavailable_reason
from spartan_py.engines.options import engine_options
from spartan_py.errors import SpartanError
from spartan_py.executors import Workers, run_all
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
    from spartan_py.costmodel.intervals import run_interval
    from spartan_py.costmodel.simulate import guessed_families, resolve_machine, simulate_trace

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
    here), or None. ``auto`` and simulated points always run (on the CPU where need be)."""
    config = point.experiment
    if config.mode == "simulated" or config.backend in ("auto", "cpu", "reference"):
        return None
    backend = "gpu" if config.workload.kind == "conv_layers" else config.backend
    return unavailable_reason(backend)


def run_point(point: Point) -> tuple[dict, list]:
    """Run one point (``repeats`` times): its result record and kernel trace (not yet stored)."""
    from spartan_py.api import cached_inputs, cached_network, infer

    config = point.experiment
    if config.workload.kind == "conv_layers":
        from spartan_py.workloads.conv.dense_layers import run_conv_point

        summary, trace = run_conv_point(config, point.id)
        return _record(point, summary, [summary["seconds"]], trace)
    workload = config.workload
    point_started = started = time.perf_counter()
    network = cached_network(workload.network, workload.layers)
    inputs = cached_inputs(workload.inputs, network.neurons, workload.rows)
    load_seconds = time.perf_counter() - started
    backend = choose_backend(config.backend, network) if config.mode == "measured" else twin_backend(config.backend)
    cls = engine_class(backend)
    options = engine_options(config, cls.takes_options)
    machine = config.machines[0] if config.mode == "simulated" else None
    started = time.perf_counter()  # the engine is prepared (planned, compiled, uploaded) once for all repeats
    engine = make_engine(backend, network, **options)
    prepare_seconds = time.perf_counter() - started
    results = [
        infer(
            network,
            inputs,
            truth=workload.truth,
            load_seconds=load_seconds,
            mode=config.mode,
            machine=machine,
            run_id=point.id,
            engine=engine,
        )
        for _ in range(config.repeats)
    ]
    seconds = [r.seconds for r in results]
    last = results[-1]
    summary = last.summary()
    summary["seconds"] = statistics.median(seconds)
    summary["prepare_seconds"] = prepare_seconds
    summary["edges_per_second"] = last.rows * last.edges / summary["seconds"] if summary["seconds"] > 0 else None
    summary["workload"] = "graph_challenge"
    if workload.check_rows:
        summary["check"] = check_categories(network, inputs, last.categories, workload.check_rows)
    summary["wall_seconds"] = time.perf_counter() - point_started  # loading, set-up, repeats and check
    return _record(point, summary, seconds, median_trace([r.trace for r in results]))


def check_categories(network, inputs, categories: np.ndarray, rows: int) -> dict:
    """The categories among the first ``rows`` input rows, checked against the ``cpu``
    engine's on those rows (untimed; the CPU engine shares no code with the GPU kernels) by
    the rule of :mod:`spartan_py.graph_challenge.check`: a row where they differ is decided
    in float64 and passes only if it is borderline (an unstable fixed point)."""
    from spartan_py.engines.cpu.engine import CpuEngine
    from spartan_py.graph_challenge.check import compare_categories

    rows = min(rows, inputs.shape[0])
    started = time.perf_counter()
    first = inputs[:rows]
    output = CpuEngine(network).run(first)
    expected = output.live_rows.astype(np.int64) + 1
    got = categories[categories <= rows]
    verdict = compare_categories(network, first, got, expected)
    return {
        "backend": "cpu",
        "rows": rows,
        "categories": int(expected.size),
        "equal": verdict.equal,
        "passed": verdict.passed,
        "differing": [asdict(v) | {"borderline": v.borderline} for v in verdict.differing],
        "note": verdict.describe(),
        "seconds": time.perf_counter() - started,
    }


def median_trace(traces: list[list]) -> list:
    """The last run's records, each with the median ``measured_us`` of that launch over the
    runs (when every run launched the same kernels; otherwise the last run's as they are)."""
    last = traces[-1]
    if len(traces) < 2 or any([r.kernel for r in t] != [r.kernel for r in last] for t in traces):
        return last
    times = np.array([[r.measured_us for r in t] for t in traces], dtype=float)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns (untimed records) stay NaN
        medians = np.nanmedian(times, axis=0)
    return [replace(r, measured_us=float(us)) for r, us in zip(last, medians)]


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
) -> RunSummary:
    """Run every point not already finished in ``out`` (all of them with ``force``).

    Points run inline, or on ``workers`` (from :func:`spartan_py.executors.open_executor`:
    a process pool or a Dask cluster), their results streaming back here. Each point's
    files are written atomically, here, when it finishes; a failing point is stored with its
    error and the run goes on; a point whose worker died is resubmitted (``retries`` times).
    ``on_point(point, record, skipped)`` is called after each point (the CLI's progress bar).
    """
    out = Path(out)
    check_run_folder(out, experiment.name)
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
    for point in points:
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
