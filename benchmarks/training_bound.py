"""How much a conv-layer training step could gain, against the generated maps' blob length.

The bound of a step (``spartan_py.workloads.conv.training``) is its dense time with every GEMM
scaled by its sparse operand's tile density: the time if every skipped tile cost nothing. The
tile densities depend on the maps alone, so this computes them on the host (no GPU) for each
network, map density and blob length (``cluster_px``; the table's 2 px, half and twice it, and
longer), at the GEMM's 64 x 32 tile: ``X`` for the forward GEMM, ``X^T`` for the weight
gradient (``X`` at 32 x 64), the output's pattern for the input gradient (dense with
BatchNorm). The weights are the dense GEMM times measured on the H100 run of
``experiments/spartan-table.yaml`` (``--times``, its ``gemms.csv``) at the same network,
precision and density.

    python -m benchmarks.training_bound [--batch 2] [--clusters 1,2,4,8,16]
        [--times benchmarks/results/spartan-table-h100/gemms.csv.gz] [--out DIR]
"""

from __future__ import annotations

import argparse
import platform
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks.harness import write_result
from spartan_py.sparsity.tiles import tile_counts
from spartan_py.workloads.conv.layers import CONV_LAYERS, feature_maps, im2col
from spartan_py.workloads.conv.training import output_mask

TILE = (64, 32)


def _tile_density(a: np.ndarray, tile) -> float:
    return float((tile_counts(a, tile) > 0).mean())


def layer_tile_densities(label: str, batch: int, density: float, cluster_px: float) -> dict:
    """Tile densities of one layer's three sparse operands (1.0 where the operand is dense)."""
    from spartan_py.workloads.conv.layers import conv_layer

    layer = conv_layer(label)
    maps = feature_maps(batch, layer.in_channels, layer.size, density, cluster_px=cluster_px, seed=0)
    x = im2col(maps, layer.kernel, layer.stride, layer.pad)
    rows, cols = -(-x.shape[0] // 64) * 64, -(-x.shape[1] // 64) * 64
    x = np.pad(x, ((0, rows - x.shape[0]), (0, cols - x.shape[1])))
    out = {"forward": _tile_density(x, TILE), "weight_grad": _tile_density(x, TILE[::-1])}
    if layer.batchnorm:
        out["input_grad"] = 1.0
    else:
        mask = output_mask(label, batch, density, cluster_px, 0)
        out["input_grad"] = _tile_density(
            np.pad(mask, ((0, -(-mask.shape[0] // 64) * 64 - mask.shape[0]), (0, 0))), TILE
        )
    return out


def main(argv=None) -> None:
    """Compute the bounds and write ``training_bound-<date>.json``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--clusters", default="1,2,4,8,16")
    parser.add_argument("--densities", default="0.1,0.3")
    parser.add_argument("--times", type=Path, default=Path("benchmarks/results/spartan-table-h100/gemms.csv.gz"))
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    times = pd.read_csv(args.times)
    rows = []
    for density in (float(d) for d in args.densities.split(",")):
        for cluster in (float(c) for c in args.clusters.split(",")):
            for network, layers in CONV_LAYERS.items():
                densities = {
                    layer.label: layer_tile_densities(layer.label, args.batch, density, cluster) for layer in layers
                }
                for precision in ("fp32", "tf32"):
                    measured = times[(times["precision"] == precision) & (times["map_density"] == density)]
                    measured = measured[measured["layer"].str.startswith(f"{network}/")]
                    dense = float(measured["dense_us"].sum())
                    bound = sum(row.dense_us * densities[row.layer][row.gemm] for row in measured.itertuples())
                    rows.append(
                        {
                            "network": network,
                            "precision": precision,
                            "map_density": density,
                            "cluster_px": cluster,
                            "dense_ms": dense / 1e3,
                            "bound_ms": bound / 1e3,
                            "bound_speedup": dense / bound,
                            "mean_tile_density": float(np.mean([v for d in densities.values() for v in d.values()])),
                        }
                    )
                print(
                    f"density {density} blob {cluster} px {network}: bound {rows[-1]['bound_speedup']:.3f}x", flush=True
                )
    payload = {"batch": args.batch, "tile": list(TILE), "times": str(args.times), "rows": rows}
    path = write_result("training_bound", f"host: {platform.processor() or platform.machine()}", payload, args.out)
    print(path)


if __name__ == "__main__":
    main()
