"""Calibrate the cost model's dense-layer families (cuBLAS, tile GEMM, compaction, cuSPARSE,
epilogue, monitor pass) on a trace from ``spartan_machinery.py``, check them on held-out
layers, and with ``--write`` store them in the measured machine's file (and carry them over
to the other machines, marked as such). ``--layers-table`` adds the cuBLAS and tile-GEMM
times of a ``conv_layers`` run (``dense-layers.csv`` of ``tile-size-sweep.yaml``: tiles of
16 to 128 rows) as records. Runs on the CPU.

    python benchmarks/calibrate_spartan.py --trace benchmarks/results/spartan-machinery-....trace.csv \
        --layers-table benchmarks/results/.../tile-size-sweep/dense-layers.csv --write
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spartan_py.costmodel.calibrate import calibrate, carry_over, median_abs_error_pct  # noqa: E402
from spartan_py.costmodel.machine import load_machine, machine_names, machine_path, write_calibration  # noqa: E402
from spartan_py.costmodel.model import predict  # noqa: E402
from spartan_py.report.tables import markdown_table  # noqa: E402
from spartan_py.trace import read_trace  # noqa: E402

HELD_OUT_NETWORK = "resnet18"  # fit on AlexNet and VGG-16 layers, check on ResNet-18's


def error_table(frame: pd.DataFrame, machine) -> pd.DataFrame:
    """Median and 90th-percentile absolute error per kernel family."""
    predicted = predict(frame, machine)
    rows = []
    for kernel, group in predicted.groupby("kernel"):
        error = np.abs(group["predicted_us"] - group["measured_us"]) / group["measured_us"] * 100
        rows.append({"kernel": kernel, "records": len(group), "median_error_pct": float(error.median()),
                     "p90_error_pct": float(error.quantile(0.9))})  # fmt: skip
    return pd.DataFrame(rows)


def layer_table_records(path: Path) -> pd.DataFrame:
    """Records of the cuBLAS and tile-GEMM launches a dense-layers table timed (list times
    are left out: they may come from an older list kernel)."""
    from dataclasses import replace

    from spartan_py.sparsity.policy import candidate_records
    from spartan_py.sparsity.tiles import TileShape
    from spartan_py.trace import to_frame

    table = pd.read_csv(path)
    table = table[~table["simulated"].astype(bool)]
    records = []
    for row in table.itertuples():
        tile = TileShape(int(row.tile_rows), int(row.tile_cols))
        m, k, n = int(row.M), int(row.K_padded), int(row.N)
        tm, tn = tile.grid((m, k))
        counts = dict(nnz=round(row.density * m * k), tiles_active=round(row.tile_density * tm * tn),
                      live_rows=round(row.live_row_fraction * m), tile=tile)  # fmt: skip
        run = f"{row.layer}/{row.tile}/{row.map_density}"
        dense = candidate_records("dense", m, k, n, **counts)[0]
        gemm = candidate_records("tile_sparse", m, k, n, **counts)[1]
        records += [replace(dense, run=run, measured_us=row.dense_us, device=row.device),
                    replace(gemm, run=run, measured_us=row.tile_sparse_us, device=row.device)]  # fmt: skip
    return to_frame(records)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, required=True)
    parser.add_argument("--machine", default="h100-sxm")
    parser.add_argument("--layers-table", type=Path, action="append", default=[],
                        help="a dense-layers.csv whose cuBLAS and tile-GEMM times join the fit")
    parser.add_argument("--write", action="store_true", help="store the fit (on every layer) in sim/")
    args = parser.parse_args()
    trace = pd.concat([read_trace(args.trace), *map(layer_table_records, args.layers_table)], ignore_index=True)
    trace = trace[trace["measured_us"].notna() & (trace["measured_us"] > 0)].reset_index(drop=True)
    held = trace["run"].str.startswith(HELD_OUT_NETWORK)
    base = load_machine(args.machine)
    names = " + ".join([args.trace.name, *(p.parent.name + "/" + p.name for p in args.layers_table)])
    source = f"{names} (fitted without {HELD_OUT_NETWORK})"
    fitted = calibrate(trace[~held], base, source=source)
    print(f"## Held out: {HELD_OUT_NETWORK} layers ({int(held.sum())} records)\n")
    print(markdown_table(error_table(trace[held], fitted)))
    print("\n## Fitted on\n")
    print(markdown_table(error_table(trace[~held], fitted)))
    if args.write:
        final = calibrate(trace, base, source=f"{names} (all layers)")
        write_calibration(machine_path(final.name), final.calibration)
        print(f"\nwrote {machine_path(final.name)}; whole-trace median error "
              f"{median_abs_error_pct(predict(trace, final)['predicted_us'], trace['measured_us']):.1f}%")
        for name in machine_names():
            if name != final.name:
                target = carry_over(final, load_machine(name))
                write_calibration(machine_path(name), target.calibration)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
