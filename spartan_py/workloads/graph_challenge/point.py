"""One Graph Challenge point: the network and inputs loaded (cached across points), the
engine prepared once, ``repeats`` timed runs, and the categories checked on the CPU."""

from __future__ import annotations

import statistics
import time
import warnings
from dataclasses import asdict, replace
from typing import Any

import numpy as np

from spartan_py.api import cached_inputs, cached_network, infer
from spartan_py.engines import choose_backend, engine_class, make_engine, twin_backend
from spartan_py.engines.cpu.engine import CpuEngine
from spartan_py.engines.options import engine_options
from spartan_py.graph_challenge.check import compare_categories
from spartan_py.trace import TraceRecord
from spartan_py.workloads.graph_challenge.schema import GraphChallengeWorkload


def run_gc_point(config: Any, point_id: str) -> tuple[dict, list[float], list[TraceRecord]]:
    """``(summary, seconds of each repeat, trace)`` of one Graph Challenge point."""
    workload = config.workload
    assert isinstance(workload, GraphChallengeWorkload)
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
            run_id=point_id,
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
    summary["workload"] = workload.kind
    if workload.check_rows:
        summary["check"] = check_categories(network, inputs, last.categories, workload.check_rows)
    summary["wall_seconds"] = time.perf_counter() - point_started  # loading, set-up, repeats and check
    return summary, seconds, median_trace([r.trace for r in results])


def check_categories(network, inputs, categories: np.ndarray, rows: int) -> dict:
    """The categories among the first ``rows`` input rows, checked against the ``cpu``
    engine's on those rows (untimed; the CPU engine shares no code with the GPU kernels) by
    the rule of :mod:`spartan_py.graph_challenge.check`: a row where they differ is decided
    in float64 and passes only if it is borderline (an unstable fixed point)."""
    rows = min(rows, inputs.shape[0])
    started = time.perf_counter()
    first = inputs[:rows]
    output = CpuEngine(network).run(first)
    expected = output.live_rows.astype(np.int64) + 1
    got = categories[categories <= rows]
    verdict = compare_categories(network, first, got, expected)
    return {
        "backend": CpuEngine.name,
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
