"""The run folder: one atomic JSON file per finished point, plus the tables built from them.

    <out>/config.json        the experiment as resolved (every default filled in)
    <out>/environment.json   versions, host CPU, device, commit
    <out>/points/<id>.json   one point: its config, status, error, summary, times, simulations
    <out>/points/<id>.trace.csv
    <out>/results.csv        one row per Graph Challenge point and layer
    <out>/dense-layers.csv   one row per conv_layers point and layer
    <out>/simulated.csv      one row per point and machine

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

import pandas as pd

from spartan_py.errors import InputError
from spartan_py.files import atomic_write_text


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
    import numba
    import numpy
    import scipy

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
        import cupy

        info["cupy"] = cupy.__version__
    except ImportError:
        info["cupy"] = None
    info["commit"] = os.environ.get("SPARTAN_COMMIT")  # a copy of the tree without its history says which
    if not info["commit"]:
        info["commit"] = package_commit()
    from spartan_py.runner.gpu_facts import gpu_facts

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


def _training_steps(points: list[dict]):
    """``(point, summary, config)`` of each finished training-step point."""
    for point in points:
        summary = point.get("summary") or {}
        if point["status"] == "ok" and summary.get("step") == "training":
            yield point, summary, point["config"]


def is_graph_challenge(point: dict) -> bool:
    """Whether a finished point ran a Graph Challenge workload (not dense-weight layers)."""
    return point["status"] == "ok" and point["summary"].get("workload", "graph_challenge") == "graph_challenge"


def _point_columns(point: dict) -> dict:
    """The columns that name a finished point in every table: id, label, backend, device."""
    summary = point["summary"]
    return {
        "point": point["id"],
        "label": point["label"],
        "backend": summary["backend"],
        "device": summary["device"],
        "simulated": summary["simulated"],
    }


def results_table(points: list[dict]) -> pd.DataFrame:
    """One row per Graph Challenge point and layer: live rows, non-zeros, the point's time and rate."""
    rows = []
    for point in points:
        if not is_graph_challenge(point):
            continue
        summary = point["summary"]
        for layer, (live, nnz) in enumerate(zip(summary["live_rows_by_layer"], summary["nonzeros_by_layer"]), start=1):
            rows.append(
                {
                    **_point_columns(point),
                    "neurons": summary["neurons"],
                    "layers": summary["layers"],
                    "rows": summary["rows"],
                    "layer": layer,
                    "live_rows": live,
                    "nonzeros": nnz,
                    "density": nnz / max(summary["rows"] * summary["neurons"], 1),
                    "seconds": summary["seconds"],
                    "edges_per_second": summary["edges_per_second"],
                    "monitor": point["config"]["monitor"],
                    "rows_per_tile": point["config"]["rows_per_tile"],
                }
            )
    return pd.DataFrame(rows)


def dense_layer_table(points: list[dict]) -> pd.DataFrame:
    """One row per ``conv_layers`` point and layer: the point's swept values, the layer's
    profile, utilization, kernel times (measured or predicted) and the policy's choice."""
    rows = []
    for point in points:
        if point["status"] != "ok" or is_graph_challenge(point):
            continue
        summary, config = point["summary"], point["config"]
        for layer in summary["layers"]:
            rows.append(
                {
                    **_point_columns(point),
                    "timed_on": summary["timed_on"],
                    "monitor": config["monitor"],
                    "policy": config["policy"],
                    "precision": config["precision"],
                    "batch": config["workload"]["batch"],
                    "map_density": config["workload"]["density"],
                    **layer,
                }
            )
    return pd.DataFrame(rows)


def training_step_table(points: list[dict]) -> pd.DataFrame:
    """One row per ``conv_layers`` training-step point: the step's dense and adaptive times,
    speed-up, the bound its tile densities allow, the cost model's dense and adaptive step on
    the point's first machine (model_error: adaptive predicted / measured - 1) and with a
    hardware monitor, the largest difference from cuBLAS, and Spartan's published speed-up
    for the network (when the point is one whole network)."""
    from spartan_py.sparsity.workloads import SPARTAN_TRAINING_SPEEDUP

    rows = []
    for point, summary, config in _training_steps(points):
        layers = summary["layers"]
        networks = sorted({row["layer"].split("/")[0] for row in layers})
        rows.append(
            {
                "point": point["id"],
                "network": ", ".join(networks),
                "layers": len({row["layer"] for row in layers}),
                "precision": config["precision"],
                "batch": config["workload"]["batch"],
                "map_density": config["workload"]["density"],
                "density_source": config["workload"].get("density_source"),  # per-layer densities: their source
                "timed_on": summary["timed_on"],
                "dense_ms": summary["dense_seconds"] * 1e3,
                "adaptive_ms": summary["seconds"] * 1e3,
                "speedup": summary["speedup"],
                "bound_speedup": summary["speedup_bound"],
                "model_dense_ms": summary["predicted_dense_seconds"] * 1e3,
                "model_adaptive_ms": summary["predicted_seconds"] * 1e3,
                "model_error": summary["predicted_seconds"] / summary["seconds"] - 1,
                "hw_monitor_ms": summary["hw_monitor_seconds"] * 1e3,
                "monitor_ms": summary["monitor_seconds"] * 1e3,
                "software_monitor_ms": summary.get("software_monitor_seconds", float("nan")) * 1e3,
                "profiling_ratio": summary.get("profiling_ratio", float("nan")),
                "im2col_ms": summary["im2col_seconds"] * 1e3,
                "col2im_ms": summary.get("col2im_seconds", float("nan")) * 1e3,
                "sparse_picks": sum(row["kernel"] != "dense" for row in layers),
                "gemms": len(layers),
                "max_rel_diff": summary["max_rel_diff"],
                "max_rel_err": summary.get("max_rel_err", float("nan")),
                "spartan_published": SPARTAN_TRAINING_SPEEDUP.get(networks[0], float("nan"))
                if len(networks) == 1
                else float("nan"),
            }
        )
    return pd.DataFrame(rows)


def precision_table(points: list[dict]) -> pd.DataFrame:
    """Per training-step layer, each precision's dense time (the layer's three GEMMs, µs) and
    largest error against float64 (``|error|`` over ``|A| |W|``), side by side: the ``fp32x3``
    appendix, for the layers (at a batch and density) measured at ``fp32x3``. Empty unless some
    point ran ``fp32x3``."""
    rows = []
    for _, summary, config in _training_steps(points):
        for layer in summary["layers"]:
            rows.append(
                {
                    "batch": config["workload"]["batch"],
                    "map_density": config["workload"]["density"],
                    "layer": layer["layer"],
                    "precision": config["precision"],
                    "dense_us": layer["dense_us"],
                    "max_rel_err": layer.get("dense_max_rel_err", float("nan")),
                }
            )
    frame = pd.DataFrame(rows)
    if frame.empty or "fp32x3" not in set(frame["precision"]):
        return pd.DataFrame()
    keys = ["batch", "map_density", "layer"]
    by_layer = frame.groupby([*keys, "precision"], sort=False).agg(
        dense_us=("dense_us", "sum"), err=("max_rel_err", "max")
    )
    wide = by_layer.unstack("precision")
    wide.columns = [f"{precision}_{'us' if what == 'dense_us' else 'max_rel_err'}" for what, precision in wide.columns]
    wide = wide[wide["fp32x3_us"].notna()]  # layers measured at fp32x3: the others have nothing to set beside
    if "fp32_us" in wide:
        wide["fp32x3_vs_fp32"] = wide["fp32x3_us"] / wide["fp32_us"]
    return wide.reset_index()


def _trust(machine: str) -> str:
    from spartan_py.costmodel.simulate import trust
    from spartan_py.errors import InputError

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
                    "edges": point["summary"]["edges"] * point["summary"]["rows"]
                    if is_graph_challenge(point)
                    else None,
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


def _is_stock(point: dict) -> bool:
    from spartan_py.engines import engine_class

    backend = point["summary"]["backend"] if point["status"] == "ok" else point["config"]["backend"]
    return backend != "auto" and engine_class(backend).stock_library


def device_machine(point: dict) -> str | None:
    """The point's listed machine (``sim/`` name) that describes the GPU it ran on, or None."""
    from spartan_py.costmodel.machine import machine_for_device

    names = point["config"]["machines"]
    return machine_for_device(point["summary"]["device"], names) if names else None


def challenge_table(points: list[dict]) -> pd.DataFrame:
    """One row per Graph Challenge network of a run (points with the same workload): the
    fastest of our backends (time, rate, set-up, the CPU check, the cost model's prediction
    for the GPU it ran on and its error) beside the fastest stock-library path, or why none
    finished (a point past ``time_limit_seconds`` or out of memory)."""
    networks: dict[tuple, dict[str, list[dict]]] = {}
    for point in points:
        workload = point["config"]["workload"]
        if workload.get("kind", "graph_challenge") != "graph_challenge" or point["config"]["mode"] != "measured":
            continue
        key = (workload["network"], workload["layers"], workload["inputs"], workload["rows"])
        side = "stock" if _is_stock(point) else "ours"
        networks.setdefault(key, {"ours": [], "stock": []})[side].append(point)
    rows = []
    for (network, _, _, _), sides in networks.items():
        ours = [p for p in sides["ours"] if p["status"] == "ok"]
        if not ours:
            continue
        best = min(ours, key=lambda p: p["summary"]["seconds"])
        summary = best["summary"]
        machine = device_machine(best)
        predicted = best.get("machines", {}).get(machine, {}).get("seconds") if machine else None
        check = summary.get("check")
        stock = [p for p in sides["stock"] if p["status"] == "ok"]
        fastest = min(stock, key=lambda p: p["summary"]["seconds"]) if stock else None
        not_finished = "; ".join(p["error"] for p in sides["stock"] if p["status"] != "ok")
        rows.append(
            {
                "neurons": summary["neurons"],
                "layers": summary["layers"],
                "source": network,
                "rows": summary["rows"],
                "backend": summary["backend"],
                "device": summary["device"],
                "seconds": summary["seconds"],
                "edges_per_second": summary["edges_per_second"],
                "setup_seconds": summary["load_seconds"] + summary["prepare_seconds"],
                "categories": summary["categories"],
                "checked_rows": check["rows"] if check else None,
                "check_equal": check["equal"] if check else None,
                "check_passed": check.get("passed", check["equal"]) if check else None,
                "check_note": check.get("note", "") if check else "",
                "check_seconds": check["seconds"] if check else None,
                "wall_seconds": summary.get("wall_seconds"),
                "model": machine or "",
                "predicted_seconds": predicted,
                "model_error": predicted / summary["seconds"] - 1 if predicted and summary["seconds"] else None,
                "stock_backend": fastest["summary"]["backend"] if fastest else "",
                "stock_seconds": fastest["summary"]["seconds"] if fastest else None,
                "speedup_vs_stock": fastest["summary"]["seconds"] / summary["seconds"] if fastest else None,
                "stock_not_finished": not_finished,
            }
        )
    return pd.DataFrame(rows).sort_values(["neurons", "layers"], ignore_index=True) if rows else pd.DataFrame()


def write_tables(out: Path) -> list[Path]:
    """(Re)build results.csv, simulated.csv, and dense-layers.csv and challenge.csv (when
    there are points of their kind) from the point files."""
    points = load_points(out)
    tables = {
        "results.csv": results_table(points),
        "dense-layers.csv": dense_layer_table(points),
        "simulated.csv": simulated_table(points),
        "challenge.csv": challenge_table(points),
    }
    return [
        atomic_write_text(out / name, frame.to_csv(index=False))
        for name, frame in tables.items()
        if name in ("results.csv", "simulated.csv") or not frame.empty
    ]
