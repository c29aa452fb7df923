"""The conv_layers part of a run's report: the training steps, the precision appendix, the
dense-weight layers, and the tile-sweep and training-step figures."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from spartan_py.report import figures
from spartan_py.workloads.base import ReportPart
from spartan_py.workloads.conv.tables import dense_layer_table, precision_table, training_step_table

#: The dense-layer table's columns shown in the report (the CSV has them all).
DENSE_LAYER_COLUMNS = [
    "label",
    "layer",
    "timed_on",
    "M",
    "K",
    "N",
    "tile",
    "density",
    "tile_density",
    "utilization",
    "monitor",
    "monitor_us",
    "dense_us",
    "tile_sparse_us",
    "tile_list_us",
    "speedup_tile_sparse",
    "kernel",
    "chosen_us",
    "speedup_chosen",
]


def conv_report(out: Path, points: list[dict], traces: pd.DataFrame) -> ReportPart:
    """The conv_layers sections and figures of the report of run folder ``out``."""
    dense_layers = dense_layer_table(points)
    forward_layers = dense_layers[dense_layers["gemm"] == "forward"] if "gemm" in dense_layers else dense_layers
    training, precisions = training_step_table(points), precision_table(points)
    part = ReportPart(
        pictures={
            "tile-sweep.png": (
                "Dense-weight layers: speed-up and tile utilization against tile size and density",
                figures.tile_sweep(forward_layers),
            ),
            "training-step.png": (
                "Training step: where the time goes, by layer and GEMM",
                figures.training_step(dense_layers),
            ),
        }
    )
    if not training.empty:
        part.sections.append(
            (
                "Training step of the conv layers (dense: cuBLAS; adaptive: the policy's picks with the "
                "monitor, lists and copies; bound: every skipped tile free; spartan_published: the paper's "
                "simulated speed-up)",
                training,
            )
        )
    if not precisions.empty:
        part.sections.append(
            (
                "Precision appendix: each layer's dense step (three GEMMs, µs) and largest error against float64 "
                "(|error| over |A||W|) at FP32, TF32 and fp32x3 (three TF32 products, opt-in)",
                precisions,
            )
        )
    if not dense_layers.empty:
        columns = list(DENSE_LAYER_COLUMNS)
        if "gemm" in dense_layers:  # training steps: which of a layer's GEMMs
            columns.insert(columns.index("layer") + 1, "gemm")
        part.sections.append(
            ("Dense-weight layers (times in µs; simulated points: the cost model of timed_on)", dense_layers[columns])
        )
    return part
