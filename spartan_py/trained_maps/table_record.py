"""What ``spartan maps table`` keeps of each measured step: one record per network, training
point and precision (the step's times by cuBLAS, cuDNN and the adaptive policy, the bound by
granularity from the capture, the cost model's predictions, Spartan's hardware priced at each
grain, the profiling overhead, where the time goes per layer), and one row per GEMM."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from spartan_py.costmodel.spartan_hardware import DensePrices, SpartanAssumptions, price_layers
from spartan_py.workloads.conv.layers import SPARTAN_TRAINING_SPEEDUP

#: the grains the table prices Spartan's hardware at and shows the bound of, coarse to fine
TABLE_GRAINS: tuple[str, ...] = ("64x32", "16x8", "8x8", "4x4", "element")
#: the per-GEMM columns ``gemms.csv`` keeps
GEMM_COLUMNS: tuple[str, ...] = (
    "network", "training_point", "precision", "batch", "layer", "gemm", "M", "K", "N", "density", "tile_density",
    "kernel", "dense_path", "dense_us", "cudnn_us", "chosen_us", "adaptive_us", "tile_sparse_us", "bound_us",
    "monitor_us", "software_monitor_us", "im2col_us", "col2im_us", "predicted_dense_us", "predicted_chosen_us",
    "chosen_max_rel_diff", "cudnn_max_rel_diff", "tile_sparse_max_rel_diff", "dense_max_rel_err",
)  # fmt: skip


def training_point(point: dict) -> str:
    """The training point a stored step point ran the maps of (``NETWORK-POINT.npz``)."""
    return Path(point["config"]["workload"]["activations"]).stem.split("-", 1)[1]


def _ms(seconds) -> float:
    return math.nan if seconds is None else seconds * 1e3


def _per_layer(rows: list[dict]) -> list[dict]:
    """Where the step's time goes, layer by layer (microseconds)."""
    out: dict[str, dict] = {}
    for row in rows:
        layer = out.setdefault(
            row["layer"],
            {"layer": row["layer"], "cublas_us": 0.0, "cudnn_us": 0.0, "adaptive_us": 0.0, "bound_us": 0.0},
        )
        layer["cublas_us"] += row["dense_us"]
        layer["cudnn_us"] += row.get("cudnn_us", math.nan)
        layer["adaptive_us"] += row.get("adaptive_us", math.nan)
        layer["bound_us"] += row["bound_us"]
        layer["path"] = row.get("dense_path")
        if row["gemm"] == "forward":
            layer |= {k: row.get(k, math.nan) for k in ("im2col_us", "col2im_us", "monitor_us", "software_monitor_us")}
    return list(out.values())


def _whatif(capture_point: dict, rows: list[dict], precision: str, batch: int, prices: DensePrices) -> dict:
    """Spartan's hardware at each grain on this point's maps, the step's GEMMs (the post-ReLU
    convolutions) priced from their measured cuBLAS times: speed-up and ideal per grain."""
    measured = {(row["layer"].split("/", 1)[1], row["gemm"]): row["dense_us"] for row in rows}
    layers = [layer for layer in capture_point["layers"] if layer.get("relu_input", True)]
    out = {}
    for grain in TABLE_GRAINS:
        assumptions = SpartanAssumptions(grain=grain, precision="tf32" if precision == "tf32" else "fp32")
        price = price_layers(layers, assumptions, prices, batch, measured)
        out[grain] = {"speedup": price.speedup, "ideal": price.ideal_speedup, "sparse_gemms": price.sparse_gemms}
    return out


def table_records(network: str, points: list[dict], capture: dict) -> list[dict[str, Any]]:
    """One record per step point of ``network`` (``capture``: the network's record of the
    capture summary); a failed point's record carries its error."""
    records = []
    prices: dict[str, DensePrices] = {}
    order = {"init": 0, "early": 1, "middle": 2, "late": 3}
    points = sorted(points, key=lambda p: (order.get(training_point(p), 9), p["config"]["precision"]))
    for point in points:
        if point["status"] != "ok":
            records.append({"network": network, "point_id": point["id"], "error": point.get("error")})
            continue
        summary, config, at = point["summary"], point["config"], training_point(point)
        captured = capture["points"][at]
        rows = summary["layers"]
        machines = point.get("machines", {})
        first = config["machines"][0] if config["machines"] else "h100-sxm"
        prices.setdefault(first, DensePrices(first))
        bounds = captured["network"]["relu_inputs"]["step"]
        cudnn_layers = summary.get("cudnn_layers", 0)
        records.append(
            {
                "network": network,
                "training_point": at,
                "step": captured["step"],
                "test_accuracy": captured["test_accuracy"],
                "precision": config["precision"],
                "batch": summary["batch"],
                "map_density": summary["map_density"],
                "timed_on": summary["timed_on"],
                "simulated": summary["simulated"],
                "cudnn_baseline": summary.get("cudnn_baseline"),
                "layers": len({row["layer"] for row in rows}),
                "gemms": len(rows),
                "sparse_picks": sum(row["kernel"] != "dense" for row in rows),
                "dense_cublas_gemms_ms": _ms(summary["dense_seconds"]),
                "im2col_ms": _ms(summary["im2col_seconds"]),
                "col2im_ms": _ms(summary["col2im_seconds"]),
                "dense_cublas_step_ms": _ms(summary.get("dense_cublas_step_seconds")),
                "dense_cudnn_ms": _ms(summary.get("dense_cudnn_seconds")),
                "faster_dense_ms": _ms(summary.get("faster_dense_seconds")),
                "adaptive_ms": _ms(summary.get("adaptive_step_seconds")),
                "adaptive_gemms_ms": _ms(summary["seconds"]),
                "adaptive_over_faster_dense": summary.get("adaptive_over_faster_dense"),
                "cudnn_layers": cudnn_layers,
                "tile_bound": summary["speedup_bound"],
                "bound": {order: {g: bounds[order][g] for g in TABLE_GRAINS} for order in bounds},
                "model_machine": first,
                "model_dense_gemms_ms": _ms(summary["predicted_dense_seconds"]),
                "model_dense_error": summary["predicted_dense_seconds"] / summary["dense_seconds"] - 1,
                "model_adaptive_gemms_ms": _ms(summary["predicted_seconds"]),
                "model_adaptive_error": summary["predicted_seconds"] / summary["seconds"] - 1,
                "predicted_ms": {name: _ms(m.get("seconds")) for name, m in machines.items()},
                "monitor_ms": _ms(summary["monitor_seconds"]),
                "software_monitor_ms": _ms(summary["software_monitor_seconds"]),
                "profiling_ratio": summary["profiling_ratio"],
                "max_rel_diff": summary["max_rel_diff"],
                "cudnn_max_rel_diff": summary.get("cudnn_max_rel_diff"),
                "max_rel_err": summary["max_rel_err"],
                "whatif": _whatif(captured, rows, config["precision"], summary["batch"], prices[first]),
                "spartan_published": SPARTAN_TRAINING_SPEEDUP[network.removesuffix("_bn")],
                "per_layer": _per_layer(rows),
            }
        )
    return records


def gemm_rows(points: list[dict]) -> list[dict]:
    """``gemms.csv``'s rows of the finished step points: each GEMM's row with its network,
    training point and precision."""
    out = []
    for point in points:
        if point["status"] != "ok":
            continue
        network = point["config"]["workload"]["layers"][0].split("/")[0]
        for row in point["summary"]["layers"]:
            out.append(row | {"network": network, "training_point": training_point(point),
                              "precision": point["config"]["precision"]})  # fmt: skip
    return out
