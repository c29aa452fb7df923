"""Spartan's table on real maps in one job (``spartan maps table``): per network, train it and
capture every convolution's maps at initialisation, the middle and the end of training
(:mod:`~spartan_py.trained_maps.job`), then run the experiment file's training step (by default
``experiments/spartan-table.yaml``: its precisions, repeats, monitor, policy and machines) on
each point's maps, and write the summary the Spartan page's table is generated from.

Network by network, so a job cut short keeps every network it finished: ``OUT/maps/`` the
capture's ``summary.json`` and ``samples-NETWORK.npz``; ``OUT/table.json`` one record per
network, training point and precision (:mod:`~spartan_py.trained_maps.table_record`);
``OUT/gemms.csv`` every GEMM's row (``table.json`` carries the run's environment). The full
maps and the run folders stay in the work folder (``--work``): they are made again from the seed.
"""

from __future__ import annotations

import copy
import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from spartan_py.config.yaml_marks import load_yaml
from spartan_py.errors import InputError
from spartan_py.files import atomic_write_text, json_ready
from spartan_py.runner import load_experiment, run_experiment
from spartan_py.runner.store import load_points
from spartan_py.trained_maps.job import JobSettings, release_gpu_memory, run_job
from spartan_py.trained_maps.models import LAYERS_NETWORK
from spartan_py.trained_maps.table_record import GEMM_COLUMNS, gemm_rows, table_records

#: the training points the table measures, in the order they run (the late point first: a
#: call cut short keeps the trained network's step)
TABLE_POINTS: tuple[str, ...] = ("late", "init", "middle")
SCHEMA = "spartan-table/1"
#: workload fields the saved maps replace (the runner refuses them beside activations)
_MAPS_HOLD = ("batch", "density", "cluster_px", "layer_densities", "density_source", "layers")


@dataclass(frozen=True)
class TableSettings:
    """One table: ``capture`` says what is trained and captured (its ``images`` are the
    step's batch, its ``out`` and ``maps_dir`` are set per network under ``work``);
    ``experiment`` the file whose step settings run on each point's maps; ``simulated``: the
    step's times from the cost model (CPU, for tests) instead of measured."""

    capture: JobSettings
    experiment: Path
    out: Path
    work: Path
    simulated: bool = False


def experiment_for(base: dict, network: str, maps: dict[str, Path], simulated: bool) -> dict:
    """The experiment file's mapping for one network: its workload's generated-maps fields
    dropped, ``layers`` the network, one point per training point's maps (``activations``)
    and per case of the file's sweep (its precisions)."""
    data = copy.deepcopy(base)
    workload = {k: v for k, v in data["workload"].items() if k not in _MAPS_HOLD}
    if workload.get("step") != "training":  # only a conv_layers workload has a training step
        raise InputError("the table's experiment must be a conv_layers training step (workload.step: training)")
    data["name"] = f"{base['name']}-{network}"
    data["workload"] = workload | {"layers": [LAYERS_NETWORK[network]], "activations": str(next(iter(maps.values())))}
    sweep = data.get("sweep") or {}
    data["sweep"] = {"zip": {"workload.activations": [str(path) for path in maps.values()]}}
    if sweep.get("cases"):
        data["sweep"]["cases"] = sweep["cases"]
    if simulated:
        data |= {"mode": "simulated", "backend": "auto"}
    return data


def _run_network(network: str, settings: TableSettings, base: dict, progress) -> tuple[dict, list[dict], Path]:
    """Capture ``network``'s maps and run its step on them: (capture summary, stored points, run folder)."""
    capture_out, maps_dir = settings.work / f"capture-{network}", settings.work / "maps"
    job = replace(settings.capture, networks=(network,), out=capture_out, maps_dir=maps_dir, points=TABLE_POINTS)
    summary = run_job(job, progress)
    release_gpu_memory()  # training's cached blocks, for the step's CuPy arrays
    maps = {point: maps_dir / f"{network}-{point}.npz" for point in TABLE_POINTS}
    data = experiment_for(base, network, maps, settings.simulated)
    path = settings.work / f"{data['name']}.yaml"
    atomic_write_text(path, yaml.safe_dump(data, sort_keys=False))
    experiment, points = load_experiment(path)
    started = time.perf_counter()
    run = settings.work / f"run-{network}"
    result = run_experiment(experiment, points, run)
    release_gpu_memory()  # the step's, for the next network's training
    progress(f"{network}: {result.ran} step points in {time.perf_counter() - started:.1f} s, {result.failed} failed")
    return summary, load_points(run), run


def _merge_capture(merged: dict | None, summary: dict) -> dict:
    if merged is None:
        return copy.deepcopy(summary)
    merged["networks"].update(summary["networks"])
    merged["seconds"] = merged.get("seconds", 0.0) + summary.get("seconds", 0.0)
    return merged


def run_table(settings: TableSettings, progress: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Run the table (see the module doc); returns what ``OUT/table.json`` holds."""
    base = load_yaml(settings.experiment).data
    settings.out.mkdir(parents=True, exist_ok=True)
    (settings.out / "maps").mkdir(exist_ok=True)
    capture: dict | None = None
    records: list[dict] = []
    gemms: list[dict] = []
    table: dict[str, Any] = {
        "schema": SCHEMA,
        "experiment": str(settings.experiment),
        "experiment_text": settings.experiment.read_text(),
        "capture_settings": {k: str(v) for k, v in vars(settings.capture).items()},
        "simulated": settings.simulated,
        "points": list(TABLE_POINTS),
        "records": records,
    }
    budget, started, trained = settings.capture.train_seconds, time.perf_counter(), 0.0
    networks = settings.capture.networks
    for index, network in enumerate(networks):
        share = None  # the training time left, shared among the networks left (captures and steps apart)
        if budget is not None:
            share = max(budget - trained, 1.0) / (len(networks) - index)
        job = replace(settings.capture, train_seconds=share)
        summary, points, run = _run_network(network, replace(settings, capture=job), base, progress)
        done = summary["networks"][network]
        trained += done["steps"] * done["step_seconds"]
        capture = _merge_capture(capture, summary)
        atomic_write_text(settings.out / "maps" / "summary.json", json.dumps(json_ready(capture), allow_nan=False))
        shutil.copyfile(run.parent / f"capture-{network}" / f"samples-{network}.npz",
                        settings.out / "maps" / f"samples-{network}.npz")  # fmt: skip
        if (run / "environment.json").is_file():  # one environment: the runs share the process
            table["environment"] = json.loads((run / "environment.json").read_text())
        records += table_records(network, points, summary["networks"][network])
        gemms += gemm_rows(points)
        table["seconds"] = time.perf_counter() - started
        atomic_write_text(settings.out / "table.json", json.dumps(json_ready(table), indent=1))
        _write_gemms(settings.out / "gemms.csv", gemms)
    return table


def _write_gemms(path: Path, rows: list[dict]) -> None:
    lines = [",".join(GEMM_COLUMNS)]
    for row in rows:
        lines.append(",".join(_cell(row.get(column)) for column in GEMM_COLUMNS))
    atomic_write_text(path, "\n".join(lines) + "\n")


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)
