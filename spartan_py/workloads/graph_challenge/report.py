"""The Graph Challenge part of a run's report: the networks table, the live rows and edge
rate figures, the monitor's overhead, the tiles' utilization and the published runs."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from spartan_py.costmodel.families import GC_LAYER
from spartan_py.graph_challenge.generate import generated_family
from spartan_py.report import figures
from spartan_py.report.published_runs import published_rates
from spartan_py.workloads.base import ReportPart, point_of_kind
from spartan_py.workloads.graph_challenge.schema import KIND
from spartan_py.workloads.graph_challenge.tables import challenge_table, results_table


def _owned(point: dict) -> bool:
    return point_of_kind(point, KIND)


def _monitor_overhead(points: list[dict]) -> pd.DataFrame:
    """Graph Challenge points that differ only in the monitor: each mode's extra time over
    none. (A conv_layers point's monitor also changes the policy's input, so its overhead is
    the per-layer ``monitor_us`` of the dense-layer table instead.)"""
    groups: dict[str, dict] = {}
    for point in points:
        if not _owned(point):
            continue
        config = dict(point["config"])
        monitor = config.pop("monitor")
        key = json.dumps(config, sort_keys=True)
        groups.setdefault(key, {"label": point["label"]})[monitor] = point["summary"]["seconds"]
    rows = []
    for g in groups.values():
        if "off" not in g:
            continue
        for mode in ("fused", "sampled", "software"):
            if mode in g:
                extra = g[mode] - g["off"]
                fused_extra = g["fused"] - g["off"] if "fused" in g else float("nan")
                rows.append(
                    {
                        "group": g["label"],
                        "mode": mode,
                        "seconds": g[mode],
                        "off_seconds": g["off"],
                        "overhead_pct": 100 * extra / g["off"],
                        "times_fused_overhead": extra / fused_extra if fused_extra > 0 else float("nan"),
                    }
                )
    return pd.DataFrame(rows)


def _tile_utilization(traces: pd.DataFrame, points: list[dict]) -> pd.DataFrame:
    if traces.empty:
        return pd.DataFrame()
    tiled = traces[(traces["kernel"] == GC_LAYER) & (traces["executed_macs"] > 0)]
    if tiled.empty:
        return pd.DataFrame()
    workloads = {p["id"]: f"{p['summary']['neurons']}x{p['summary']['layers']}" for p in points if _owned(p)}
    tiled = tiled.assign(workload=tiled["point"].map(workloads))
    grouped = tiled.groupby(["workload", "block_rows"])[["useful_macs", "executed_macs"]].sum().reset_index()
    grouped["utilization"] = grouped["useful_macs"] / grouped["executed_macs"]
    return grouped


#: The networks table's columns in the report's first table (the CSV has them all).
NETWORK_COLUMNS = [
    "neurons",
    "layers",
    "source",
    "rows",
    "backend",
    "device",
    "seconds",
    "edges_per_second",
    "setup_seconds",
    "wall_seconds",
    "categories",
    "checked_rows",
    "check_passed",
    "check_note",
]
#: ... and in its second: the cost model's prediction and the stock libraries.
COMPARED_COLUMNS = [
    "neurons",
    "layers",
    "rows",
    "seconds",
    "model",
    "predicted_seconds",
    "model_error",
    "stock_backend",
    "stock_seconds",
    "speedup_vs_stock",
    "stock_not_finished",
]


def _challenge_sections(challenge: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """The networks table split in two narrower ones, every empty cell saying why."""
    total, setup = challenge["seconds"].sum(), challenge["setup_seconds"].sum()
    networks = challenge[NETWORK_COLUMNS].copy()
    networks.attrs["missing"] = {"checked_rows": "not checked", "check_passed": "not checked", "check_note": "none"}
    compared = challenge[COMPARED_COLUMNS].copy()
    on_cpu = challenge["device"].astype(str).str.startswith("cpu")
    for column in ("model", "predicted_seconds", "model_error"):
        absent = compared[column].isna() | (compared[column] == "")
        compared[column] = compared[column].astype(object)
        compared.loc[absent & on_cpu, column] = "not run on a GPU"
        compared.loc[absent & ~on_cpu, column] = "no listed machine describes this GPU"
    compared.attrs["missing"] = {
        "stock_backend": "no stock-library point",
        "stock_seconds": "no stock-library point",
        "speedup_vs_stock": "no stock-library point",
        "stock_not_finished": "none",
    }
    return [
        (
            f"Graph Challenge networks ({len(challenge)}; inference {total:.3g} s in all, set-up {setup:.3g} s)",
            networks,
        ),
        (
            "Graph Challenge networks: the cost model's prediction (model_error: predicted / measured - 1) "
            "and the fastest stock library",
            compared,
        ),
    ]


def graph_challenge_report(out: Path, points: list[dict], traces: pd.DataFrame) -> ReportPart:
    """The Graph Challenge sections and figures of the report of run folder ``out``."""
    results = results_table(points)
    overhead = _monitor_overhead(points)
    utilization = _tile_utilization(traces, points)
    proxy = any(
        p["summary"]["neurons"] == 1024
        and p["summary"]["layers"] == 120
        and p["summary"]["rows"] == 60000
        and generated_family(p["config"]["workload"]["network"]) is None
        for p in points
        if _owned(p)
    )  # the published runs used the official network and the proxy input
    part = ReportPart(
        head_pictures={
            "live-rows.png": ("Live rows and density by layer", figures.live_rows_by_layer(results)),
            "edge-rate.png": ("Edge rate by backend", figures.edge_rate(results, proxy_workload=proxy)),
        },
        pictures={
            "monitor-overhead.png": ("Profiling overhead by monitor mode", figures.monitor_overhead(overhead)),
            "tile-utilization.png": (
                "Tile utilization against rows per tile",
                figures.tile_utilization(utilization),
            ),
        },
    )
    challenge = challenge_table(points)
    if not challenge.empty:
        part.head_sections += _challenge_sections(challenge)
    if not overhead.empty:
        part.sections.append(("Profiling overhead by monitor mode (vs none)", overhead))
    if not utilization.empty:
        part.sections.append(("Tile utilization of the tiled layer kernel (useful / executed MACs)", utilization))
    if proxy:
        part.sections.append(("Published runs (1024 x 120, 60000-row proxy)", pd.DataFrame(published_rates())))
    return part
