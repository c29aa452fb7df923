"""Spartan's table from a run of ``experiments/spartan-table.yaml``: the summary files the
Spartan page cites, written into a results folder.

``training.csv``    one row per point: the training step dense and adaptive, speed-up, bound,
                    the cost model's step, the monitors (fused, software, their ratio), im2col
                    and col2im, the largest error against float64, and each simulated machine's
                    replay of the adaptive step (``<machine>_predicted_ms``: for a machine the
                    run did not measure, its blind prediction);
``gemms.csv``       one row per point, layer and GEMM;
``precisions.csv``  the fp32x3 appendix: per layer, each precision's dense time and error;
``environment.json`` the run's environment (commit, GPU, clocks, power limit).

With ``--blind FILE`` (a ``training.csv`` written from another GPU's run before this one was
measured) its ``<this machine>_predicted_ms`` column joins by point: the blind prediction beside
the measurement. Usage::

    spartan run experiments/spartan-table.yaml --out RUN
    python -m benchmarks.spartan_table RUN --out benchmarks/results/spartan-table-h100
    python -m benchmarks.spartan_table RUN_H200 --out benchmarks/results/spartan-table-h200 \\
        --blind benchmarks/results/spartan-table-h100/training.csv --machine h200-sxm
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import pandas as pd

from spartan_py.files import atomic_write_text
from spartan_py.runner.store import in_sweep_order, load_points, simulated_table
from spartan_py.workloads.conv.tables import dense_layer_table, precision_table, training_step_table

GEMM_COLUMNS = (
    "point",
    "precision",
    "batch",
    "map_density",
    "layer",
    "gemm",
    "M",
    "K",
    "N",
    "density",
    "tile_density",
    "kernel",
    "dense_us",
    "tile_sparse_us",
    "chosen_us",
    "bound_us",
    "monitor_us",
    "software_monitor_us",
    "im2col_us",
    "col2im_us",
    "predicted_dense_us",
    "predicted_chosen_us",
    "tile_sparse_max_rel_diff",
    "chosen_max_rel_diff",
    "dense_max_rel_err",
)
"""The per-GEMM columns kept (the policy's reasons and the what-if times stay in the run folder)."""


def tables(run: Path) -> dict[str, pd.DataFrame]:
    """The three tables of a run folder, by file name."""
    points = in_sweep_order(load_points(run), json.loads((run / "config.json").read_text()))
    training = training_step_table(points)
    simulated = simulated_table(points)
    for machine, rows in simulated.groupby("machine", sort=False):
        by_point = rows.set_index("point")["predicted_seconds"] * 1e3
        training[f"{machine}_predicted_ms"] = training["point"].map(by_point)
    gemms = dense_layer_table(points)
    gemms = gemms[[c for c in GEMM_COLUMNS if c in gemms.columns]]
    return {"training.csv": training, "gemms.csv": gemms, "precisions.csv": precision_table(points)}


def main(argv: list[str] | None = None) -> None:
    """Write the tables of ``RUN`` into ``--out``."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="a run folder of experiments/spartan-table.yaml")
    parser.add_argument("--out", type=Path, required=True, help="the results folder to write")
    parser.add_argument("--blind", type=Path, help="training.csv of another GPU's run, with this GPU's predictions")
    parser.add_argument("--machine", default="h200-sxm", help="the sim/ machine this run measured (with --blind)")
    args = parser.parse_args(argv)
    found = tables(args.run)
    if args.blind is not None:
        column = f"{args.machine}_predicted_ms"
        blind = pd.read_csv(args.blind).set_index("point")
        if column not in blind:
            parser.error(f"{args.blind} has no {column} column")
        training = found["training.csv"]
        training[f"blind_{column}"] = training["point"].map(blind[column])
        training["blind_error"] = training[f"blind_{column}"] / training["adaptive_ms"] - 1
    args.out.mkdir(parents=True, exist_ok=True)
    for name, frame in found.items():
        if not frame.empty:
            atomic_write_text(args.out / name, frame.to_csv(index=False, float_format="%.6g"))
    shutil.copyfile(args.run / "environment.json", args.out / "environment.json")


if __name__ == "__main__":
    main()
