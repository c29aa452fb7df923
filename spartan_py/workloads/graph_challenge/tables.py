"""The Graph Challenge run folder's tables: ``results.csv`` (one row per point and layer)
and ``challenge.csv`` (one row per network: our fastest beside the fastest stock library)."""

from __future__ import annotations

import pandas as pd

from spartan_py.engines import AUTO_BACKEND, engine_class
from spartan_py.runner.store import device_machine, point_columns
from spartan_py.workloads.base import kind_of_section, point_of_kind
from spartan_py.workloads.graph_challenge.schema import KIND


def _owned(point: dict) -> bool:
    """Whether a finished point ran a Graph Challenge workload."""
    return point_of_kind(point, KIND)


def results_table(points: list[dict]) -> pd.DataFrame:
    """One row per Graph Challenge point and layer: live rows, non-zeros, the point's time and rate."""
    rows = []
    for point in points:
        if not _owned(point):
            continue
        summary = point["summary"]
        for layer, (live, nnz) in enumerate(zip(summary["live_rows_by_layer"], summary["nonzeros_by_layer"]), start=1):
            rows.append(
                {
                    **point_columns(point),
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


def _is_stock(point: dict) -> bool:
    backend = point["summary"]["backend"] if point["status"] == "ok" else point["config"]["backend"]
    return backend != AUTO_BACKEND and engine_class(backend).stock_library


def challenge_table(points: list[dict]) -> pd.DataFrame:
    """One row per Graph Challenge network of a run (points with the same workload): the
    fastest of our backends (time, rate, set-up, the CPU check, the cost model's prediction
    for the GPU it ran on and its error) beside the fastest stock-library path, or why none
    finished (a point past ``time_limit_seconds`` or out of memory)."""
    networks: dict[tuple, dict[str, list[dict]]] = {}
    for point in points:
        workload = point["config"]["workload"]
        if kind_of_section(workload) != KIND or point["config"]["mode"] != "measured":
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
