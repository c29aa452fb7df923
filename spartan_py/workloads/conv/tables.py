"""The conv_layers run folder's tables: ``dense-layers.csv`` (one row per point and layer,
or per layer and GEMM of a training step) and the report's training-step and precision tables."""

from __future__ import annotations

import pandas as pd

from spartan_py.runner.store import point_columns
from spartan_py.workloads.base import point_of_kind
from spartan_py.workloads.conv.layers import SPARTAN_TRAINING_SPEEDUP
from spartan_py.workloads.conv.schema import KIND


def _owned(point: dict) -> bool:
    """Whether a finished point ran a conv_layers workload."""
    return point_of_kind(point, KIND)


def _training_steps(points: list[dict]):
    """``(point, summary, config)`` of each finished training-step point."""
    for point in points:
        summary = point.get("summary") or {}
        if point["status"] == "ok" and summary.get("step") == "training":
            yield point, summary, point["config"]


def dense_layer_table(points: list[dict]) -> pd.DataFrame:
    """One row per ``conv_layers`` point and layer: the point's swept values, the layer's
    profile, utilization, kernel times (measured or predicted) and the policy's choice."""
    rows = []
    for point in points:
        if not _owned(point):
            continue
        summary, config = point["summary"], point["config"]
        for layer in summary["layers"]:
            rows.append(
                {
                    **point_columns(point),
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
                "batch": summary.get("batch", config["workload"]["batch"]),  # the maps' own
                "map_density": summary.get("map_density", config["workload"]["density"]),
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
                    "batch": layer.get("batch", config["workload"]["batch"]),  # the maps' own
                    "map_density": layer.get("map_density", config["workload"]["density"]),
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
