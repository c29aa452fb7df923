"""Which FP32 tile-GEMM variant is fastest on this GPU, against cuBLAS: the two schedules
(``tiles``: one block per output; ``balanced``: stream-K over a resident grid, with several
fewest-steps-per-block settings) and the block shapes, on the conv shapes of
``spartan_machinery.py`` at a few tile densities. The variants of a point take turns (1 GiB
of L2 flush before each), median of the rounds, through ``benchmarks.harness``'s declared sweep
(layer x density). Writes ``tile-gemm-variants-<date>.json``.

    python3 -m benchmarks.tile_gemm_variants [--out DIR] [--quick] [--densities 0.01,0.02]
                                              [--min-steps 1,4,16]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from benchmarks._conv_cases import CONV_CASES, GEMM_TILE
from benchmarks.harness import RESULTS, CudaTimer, Sweep, log, medians, run_sweep, write_result
from spartan_py.sparsity import SparsityMonitor, coarsen_counts, dense_matmul, tile_list
from spartan_py.sparsity.tile_gemm import _gpu_tile_matmul, block_width
from spartan_py.sparsity.tiles import TileShape
from spartan_py.workloads.conv.layers import conv_layer, tiled_preactivations

DENSITIES = (1.0, 0.5, 0.1, 0.02)
MIN_STEPS = (1, 2, 4, 8, 16)


def variants(a, w, c, tiles_by_rows: dict, min_steps: tuple | None = None) -> dict:
    """{name: work(i)} of every variant at one point; the balanced schedule with each of
    ``min_steps`` fewest steps per block (None: :data:`MIN_STEPS` for 128-row tiles, 4 for
    64-row ones)."""
    n = w.shape[1]
    cases = {"cublas": lambda i: dense_matmul(a, w, out=c)}
    for rows, tiles in tiles_by_rows.items():
        block = (rows, block_width(n), 16)
        cases[f"tiles {rows}"] = lambda i, t=tiles, b=block: _gpu_tile_matmul(
            a, w, t, "fp32", c, block=b, schedule="tiles"
        )
        for steps in min_steps or (MIN_STEPS if rows == 128 else (4,)):
            cases[f"balanced {rows} min{steps}"] = lambda i, t=tiles, b=block, s=steps: _gpu_tile_matmul(
                a, w, t, "fp32", c, block=b, schedule="balanced", min_steps=s
            )
    return cases


def _floats(text: str) -> tuple:
    return tuple(float(v) for v in text.split(","))


def measure_point(timer, layer: str, density: float, *, rounds: int, min_steps: tuple | None) -> dict:
    """Every variant at one point, checked against cuBLAS, then timed by turns (1 GiB of L2
    flush before each); the row of the result file's ``points``."""
    import cupy as cp

    batch = dict(CONV_CASES)[layer]
    m, k, n = conv_layer(layer).gemm_shape(batch)
    w = cp.asarray((np.random.default_rng(3).standard_normal((k, n)) / np.sqrt(k)).astype(np.float32))
    c = cp.empty((m, n), dtype=cp.float32)
    pre = tiled_preactivations(m, k, density, tile=GEMM_TILE, seed=int(density * 1000), xp=cp)
    a, profile = SparsityMonitor(tile=GEMM_TILE, timed=False).epilogue(pre, out=pre)
    tiles_by_rows = {}
    for rows in (128, 64):  # the monitor's counts at GEMM_TILE, coarsened to each block height
        tile = TileShape(rows, GEMM_TILE[1])
        tiles_by_rows[rows] = tile_list(coarsen_counts(profile.tile_nnz, profile.tile, tile), a.shape, tile)
    reference = dense_matmul(a, w)
    cases = variants(a, w, c, tiles_by_rows, min_steps)
    for name, work in cases.items():  # each variant once against cuBLAS before timing
        c.fill(cp.nan)
        work(0)
        error = float(cp.abs(c - reference).max())
        assert error <= 1e-4 * float(cp.abs(reference).max()) + 1e-6, (layer, density, name, error)
    us = medians(timer.by_turns(cases, rounds=rounds, calls=1, flush_bytes=1 << 30))
    best = min((v, name) for name, v in us.items() if name != "cublas")
    text = ", ".join(f"{name} {v:.0f}" for name, v in us.items())
    log(f"{layer} d={density}: {text}; best {best[1]} x{us['cublas'] / best[0]:.2f}")
    return {
        "M": m,
        "K": k,
        "N": n,
        "tile_density": profile.tile_density,
        "us": us,
        "best": best[1],
        "best_speedup": us["cublas"] / best[0],
    }


def main(argv: list[str] | None = None) -> int:
    """Time every variant at every point of the sweep and write ``tile-gemm-variants-<date>.json``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--quick", action="store_true", help="two layers (a smoke run)")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--densities", type=_floats, default=DENSITIES, help="tile densities, comma-separated")
    parser.add_argument(
        "--min-steps",
        type=lambda text: tuple(int(v) for v in text.split(",")),
        default=None,
        help="the balanced schedule's fewest steps per block, for both tile heights",
    )
    args = parser.parse_args(argv)
    timer = CudaTimer()
    layers = [label for label, _ in (CONV_CASES[:2] if args.quick else CONV_CASES)]
    sweep = Sweep({"layer": layers, "density": args.densities})
    table = run_sweep(
        sweep,
        lambda layer, density: measure_point(timer, layer, density, rounds=args.rounds, min_steps=args.min_steps),
        progress=False,
    )
    payload = {"min_steps": args.min_steps or MIN_STEPS, "densities": list(args.densities)}
    path = write_result("tile-gemm-variants", timer.device(), payload, args.out, table=table.drop(columns="density"))
    log(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
