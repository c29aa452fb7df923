"""Run an experiment's points, resuming where a previous run stopped."""

from __future__ import annotations

import functools
import statistics
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from spartan_py.engines import resolve_backend
from spartan_py.errors import SpartanError
from spartan_py.runner.schema import Experiment
from spartan_py.runner.store import environment, finished_point, point_path, write_json, write_tables
from spartan_py.runner.sweep import Point
from spartan_py.trace import to_frame, write_trace


@dataclass
class RunSummary:
    """What a call to :func:`run_experiment` did."""

    out: Path
    ran: int
    skipped: int
    failed: int


@functools.lru_cache(maxsize=4)
def _network(spec: str, layers: int | None):
    from spartan_py.api import resolve_network

    return resolve_network(spec, layers)


@functools.lru_cache(maxsize=4)
def _inputs(spec: str, neurons: int, rows: int | None):
    from spartan_py.api import resolve_inputs

    return resolve_inputs(spec, neurons, rows=rows)


def _simulate(trace, machines: list[str]) -> dict:
    from spartan_py.costmodel.simulate import resolve_machine, simulate_trace

    frame = to_frame(trace)
    out = {}
    for name in machines:
        machine, variant = resolve_machine(name)
        try:
            seconds, _ = simulate_trace(frame, machine, variant)
            out[name] = {"seconds": seconds}
        except SpartanError as exc:
            out[name] = {"seconds": None, "note": str(exc)}
    return out


def _record(point: Point, summary: dict, seconds: list[float], trace, out: Path) -> dict:
    """A finished point's result record: its trace written, its trace replayed on ``machines``."""
    config = point.experiment
    trace_path = write_trace(out / "points" / f"{point.id}.trace.csv", trace)
    has_gpu_kernels = any(r.kernel.startswith("gpu.") for r in trace)
    machines = _simulate(trace, config.machines) if has_gpu_kernels else {
        name: {"seconds": None, "note": f"backend {summary['backend']} records no GPU kernels to replay"} for name in config.machines
    }  # fmt: skip
    return {"id": point.id, "label": point.label, "values": point.values, "config": config.model_dump(mode="json"),
            "status": "ok", "error": None, "summary": summary, "repeat_seconds": seconds,
            "trace": trace_path.name, "machines": machines}  # fmt: skip


def run_point(point: Point, out: Path) -> dict:
    """Run one point (``repeats`` times) and return its result record (not yet stored)."""
    from spartan_py.api import infer

    config = point.experiment
    if config.workload.kind == "conv_layers":
        from spartan_py.runner.dense_layers import run_conv_point

        summary, trace = run_conv_point(config, point.id)
        return _record(point, summary, [summary["seconds"]], trace, out)
    workload = config.workload
    started = time.perf_counter()
    network = _network(workload.network, workload.layers)
    inputs = _inputs(workload.inputs, network.neurons, workload.rows)
    load_seconds = time.perf_counter() - started
    options = {}
    backend = "gpu-twin" if config.mode == "simulated" else resolve_backend(config.backend)
    if backend in ("gpu", "gpu-twin"):  # the tile height and monitor are the gpu kernel's options
        options["monitor"] = config.monitor
        options["compact_every"] = config.compact_every
        if config.rows_per_tile:
            options["rows_per_tile"] = config.rows_per_tile
    results = []
    for _ in range(config.repeats):
        results.append(infer(network, inputs, backend=config.backend, truth=workload.truth, load_seconds=load_seconds,
                             mode=config.mode, machine=config.machines[0] if config.mode == "simulated" else None,
                             run_id=point.id, **options))  # fmt: skip
    seconds = [r.seconds for r in results]
    last = results[-1]
    summary = last.summary()
    summary["seconds"] = statistics.median(seconds)
    summary["edges_per_second"] = last.rows * last.edges / summary["seconds"] if summary["seconds"] > 0 else None
    summary["workload"] = "graph_challenge"
    return _record(point, summary, seconds, last.trace, out)


def run_experiment(
    experiment: Experiment,
    points: list[Point],
    out: Path,
    *,
    force: bool = False,
    on_point: Callable[[Point, dict, bool], None] | None = None,
) -> RunSummary:
    """Run every point not already finished in ``out`` (all of them with ``force``).

    Each point's file is written atomically when it finishes; a failing point is stored with
    its error and the run goes on. ``on_point(point, record, skipped)`` is called after each
    point (the CLI draws its progress bar from it).
    """
    out = Path(out)
    (out / "points").mkdir(parents=True, exist_ok=True)
    write_json(out / "config.json", {"experiment": experiment.model_dump(mode="json"),
                                     "points": [{"id": p.id, "label": p.label, "values": p.values} for p in points]})  # fmt: skip
    write_json(out / "environment.json", environment())
    ran = skipped = failed = 0
    for point in points:
        stored = None if force else finished_point(out, point.id)
        if stored is not None and stored.get("status") == "ok":
            skipped += 1
            if on_point:
                on_point(point, stored, True)
            continue
        try:
            record = run_point(point, out)
        except Exception as exc:  # a failing point is a result: record it and go on
            failed += 1
            record = {"id": point.id, "label": point.label, "values": point.values,
                      "config": point.experiment.model_dump(mode="json"), "status": "failed",
                      "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc(limit=5)}  # fmt: skip
        write_json(point_path(out, point.id), record)
        ran += 1
        if on_point:
            on_point(point, record, False)
    write_tables(out)
    return RunSummary(out, ran, skipped, failed)
