"""The run folder: one atomic JSON file per finished point, plus the tables built from them.

    <out>/config.json        the experiment as resolved (every default filled in)
    <out>/environment.json   versions, host CPU, device, commit
    <out>/points/<id>.json   one point: its config, status, error, summary, times, simulations
    <out>/points/<id>.trace.csv
    <out>/simulated.csv      one row per point and machine
    <out>/*.csv              each workload's tables (spartan_py.workloads: Graph Challenge's
                             results.csv and challenge.csv, conv_layers' dense-layers.csv)

A point file is written last and atomically, so a point either has a complete file or is
run again when the experiment is restarted.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import numba
import numpy
import pandas as pd
import scipy

from spartan_py.costmodel.machine import machine_for_device
from spartan_py.costmodel.simulate import trust
from spartan_py.errors import InputError
from spartan_py.files import atomic_write_text
from spartan_py.runner.gpu_facts import gpu_facts
from spartan_py.workloads import workload_classes, workload_of_point


def write_json(path: Path, payload: dict) -> Path:
    """Write JSON atomically."""
    return atomic_write_text(path, json.dumps(payload, indent=1, default=str) + "\n")


def point_path(out: Path, point_id: str) -> Path:
    """Where a point's result file lives."""
    return out / "points" / f"{point_id}.json"


def finished_point(out: Path, point_id: str) -> dict | None:
    """A point's stored result if it finished (ok or failed), else None."""
    path = point_path(out, point_id)
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError:
        return None  # cannot happen with atomic writes; a hand-edited file is simply rerun


def cpu_name() -> str:
    """The host's CPU model, as /proc/cpuinfo names it (``platform.processor()`` elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def environment() -> dict:
    """What the results were produced with: versions, the host's CPU, the commit."""
    info = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu": cpu_name(),
        "cpu_count": os.cpu_count(),
        "numpy": numpy.__version__,
        "scipy": scipy.__version__,
        "numba": numba.__version__,
        "pandas": pd.__version__,
    }
    try:
        import cupy  # an optional dependency (CuPy): its version, or None

        info["cupy"] = cupy.__version__
    except ImportError:
        info["cupy"] = None
    info["commit"] = os.environ.get("SPARTAN_COMMIT")  # a copy of the tree without its history says which
    if not info["commit"]:
        info["commit"] = package_commit()
    info |= gpu_facts()  # clocks and power limit: what tells GPUs of one name apart
    return info


def package_commit(*, dirty: bool = False) -> str | None:
    """The commit of the checkout this package was imported from, or None for an installed
    copy (a wheel in site-packages has no history of its own: never the commit of whatever
    repository happens to contain it, nor the working directory's). With ``dirty``: marked
    ``+dirty`` when tracked files have uncommitted changes."""
    root = Path(__file__).resolve().parents[2]
    if not (root / "pyproject.toml").is_file() or not (root / ".git").exists():
        return None

    def git(*words: str) -> str:
        return subprocess.run(["git", *words], cwd=root, capture_output=True, text=True, timeout=10).stdout.strip()

    try:
        head = git("rev-parse", "--short=12", "HEAD")
        changed = dirty and bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.SubprocessError):
        return None
    return (head + ("+dirty" if changed else "")) or None


def check_run_folder(out: Path, experiment_name: str) -> None:
    """Refuse a run folder that holds another experiment's run (its points and tables would mix)."""
    config = out / "config.json"
    if not config.is_file():
        if (out / "points").is_dir() and any((out / "points").glob("*.json")):
            raise InputError(f"{out} holds points but no config.json: not a run folder of this tool's; choose another")
        return
    try:
        stored = json.loads(config.read_text())["experiment"]["name"]
    except (json.JSONDecodeError, KeyError, TypeError):
        raise InputError(f"{config}: not a run folder's config.json; choose another --out") from None
    if stored != experiment_name:
        raise InputError(
            f"{out} holds a run of experiment {stored!r}, not {experiment_name!r}: its points and tables would mix; "
            f"choose another --out (default: runs/{experiment_name})"
        )


def load_points(out: Path) -> list[dict]:
    """Every stored point of a run folder, in file-name order."""
    return [json.loads(p.read_text()) for p in sorted((out / "points").glob("*.json"))]


def in_sweep_order(points: list[dict], config: dict) -> list[dict]:
    """``points`` in the order of the run's sweep (``config.json``'s ``points``); points it does
    not list last."""
    order = {p["id"]: i for i, p in enumerate(config["points"])}
    return sorted(points, key=lambda p: order.get(p["id"], len(order)))


def run_environment(out: Path) -> dict | None:
    """A run folder's ``environment.json`` (versions, commit, the GPUs as the driver reports
    them), or None where the folder has none (a trace file, an older run)."""
    path = Path(out) / "environment.json"
    return json.loads(path.read_text()) if path.is_file() else None


def point_columns(point: dict) -> dict:
    """The columns that name a finished point in every table: id, label, backend, device."""
    summary = point["summary"]
    return {
        "point": point["id"],
        "label": point["label"],
        "backend": summary["backend"],
        "device": summary["device"],
        "simulated": summary["simulated"],
    }


def _trust(machine: str) -> str:
    try:
        return trust(machine)
    except InputError as exc:  # a run folder from a checkout with other machine files
        return f"unknown here: {exc}"


def simulated_table(points: list[dict]) -> pd.DataFrame:
    """One row per point and simulated machine: predicted seconds beside the point's own time."""
    rows = []
    trusts: dict[str, str] = {}  # each machine file read once
    for point in points:
        if point["status"] != "ok":
            continue
        for machine, predicted in point.get("machines", {}).items():
            if machine not in trusts:
                trusts[machine] = _trust(machine)
            rows.append(
                {
                    "point": point["id"],
                    "label": point["label"],
                    "machine": machine,
                    "trust": trusts[machine],
                    "predicted_seconds": predicted["seconds"],
                    # the 80% interval from the machine's leave-one-point-out spreads (none: no spreads)
                    "low_seconds": (predicted.get("interval_seconds") or [None, None])[0],
                    "high_seconds": (predicted.get("interval_seconds") or [None, None])[1],
                    "note": predicted.get("note", ""),
                    # families priced by a family-wide fallback or the defaults ("" : none)
                    "guessed": "; ".join(
                        f"{kind}: {', '.join(families)}" for kind, families in (predicted.get("guessed") or {}).items()
                    ),
                    "own_seconds": point["summary"]["seconds"],
                    "own_device": point["summary"]["device"],
                    "own_simulated": point["summary"]["simulated"],
                    "edges": workload_of_point(point).edges(point["summary"]),
                }
            )
    return pd.DataFrame(rows)


def guessed_predictions(out: Path) -> tuple[int, int] | None:
    """(predictions that priced some launches by a guess, predictions) of the run folder
    ``out``'s simulated.csv (its column ``guessed``), or None where none did or there is none."""
    try:
        table = pd.read_csv(out / "simulated.csv", keep_default_na=False)
    except (FileNotFoundError, pd.errors.EmptyDataError):
        return None
    guessed = int((table["guessed"] != "").sum()) if "guessed" in table else 0
    return (guessed, len(table)) if guessed else None


def device_machine(point: dict) -> str | None:
    """The point's listed machine (``sim/`` name) that describes the GPU it ran on, or None."""
    names = point["config"]["machines"]
    return machine_for_device(point["summary"]["device"], names) if names else None


def write_tables(out: Path) -> list[Path]:
    """(Re)build simulated.csv and each registered workload's tables from the point files.

    A table is written when it has rows; a workload's ``always_tables`` also when the run
    has a point of its kind but none finished (then one ``reason`` column says so). A run
    with no point of a kind writes none of its tables: never an empty file."""
    points = load_points(out)
    tables = {"simulated.csv": simulated_table(points)}
    for workload in workload_classes():
        kinds = [p for p in points if workload_of_point(p) is workload]
        for name, frame in workload.tables(points).items():
            if frame.empty and kinds and name in workload.always_tables:
                frame = pd.DataFrame(
                    {"reason": [f"no point of the run that writes {name} finished: see points/*.json"]}
                )
            tables[name] = frame
    written = []
    for name, frame in tables.items():
        if frame.empty:
            (out / name).unlink(missing_ok=True)  # a table of an earlier version of the run
        else:
            written.append(atomic_write_text(out / name, frame.to_csv(index=False)))
    return written
