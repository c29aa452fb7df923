"""col2im on the GPU, gather kernel against strided adds, beside im2col and the memory floor.

For every convolution layer of the Spartan networks (``spartan_py.workloads.conv.layers``) at
``--batch``: im2col of the layer's maps, and col2im of a ``[M x K]`` column matrix (the input
gradient's GEMM output) back to the maps, by the gather kernel (``kernels/col2im.cu``, the
default on CuPy arrays) and by the strided adds it replaced; the two results are checked equal
bit for bit. The floor of either direction is its bytes (the column matrix once, the maps
once) over the GPU's measured copy rate. Times: CUDA events, L2 flushed before each call,
median of ``--repeats`` after warm-up (``benchmarks.harness``: a sweep over the layers).

    python -m benchmarks.col2im [--batch 32] [--repeats 10] [--out DIR]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from benchmarks.harness import RESULTS, CudaTimer, Sweep, sweep_rows, write_result


def _layer_row(layer, batch: int, timer, rate: float, repeats: int) -> dict:
    import cupy as cp

    from spartan_py.workloads.conv.layers import col2im, im2col

    m, k, _ = layer.gemm_shape(batch)
    shape = (batch, layer.in_channels, layer.size, layer.size)
    maps = cp.random.standard_normal(shape, dtype=cp.float32)
    cols = cp.random.standard_normal((m, k), dtype=cp.float32)
    args = (shape, layer.kernel, layer.stride, layer.pad)
    equal = bool(cp.array_equal(col2im(cols, *args), col2im(cols, *args, method="strided")))
    times = {
        "im2col_us": timer.median(lambda: im2col(maps, layer.kernel, layer.stride, layer.pad), repeats=repeats),
        "col2im_gather_us": timer.median(lambda: col2im(cols, *args), repeats=repeats),
        "col2im_strided_us": timer.median(lambda: col2im(cols, *args, method="strided"), repeats=repeats),
    }
    moved = 4 * (m * k + int(np.prod(shape)))
    cp.get_default_memory_pool().free_all_blocks()
    return {
        "network": layer.network,
        "layer": layer.label,
        "M": m,
        "K": k,
        "bytes": moved,
        "floor_us": round(moved / rate * 1e6, 2),
        **{name: round(t["median_us"], 2) for name, t in times.items()},
        "gather_p10_p90_us": [round(times["col2im_gather_us"][q], 2) for q in ("p10_us", "p90_us")],
        "equal": equal,
    }


def layer_rows(timer, batch: int, repeats: int) -> list[dict]:
    """One row per layer (the sweep's one parameter): shapes, bytes, the three times (us) and the floor."""
    import cupy as cp

    from spartan_py.timing import copy_bandwidth
    from spartan_py.workloads.conv.layers import CONV_LAYERS

    rate = copy_bandwidth()  # read + write bytes per second
    cp.random.seed(0)
    layers = [layer for network in CONV_LAYERS.values() for layer in network]
    return sweep_rows(
        Sweep({"layer": layers}), lambda layer: _layer_row(layer, batch, timer, rate, repeats), progress=False
    )


def main(argv: list[str] | None = None) -> int:
    """Time every layer and write ``col2im-<date>.json``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    timer = CudaTimer(min_warmup_ms=200)
    rows = layer_rows(timer, args.batch, args.repeats)
    totals = {}
    for network in dict.fromkeys(r["network"] for r in rows):
        mine = [r for r in rows if r["network"] == network]
        totals[network] = {
            key: round(sum(r[key] for r in mine) / 1e3, 3)
            for key in ("floor_us", "im2col_us", "col2im_gather_us", "col2im_strided_us")
        }
    payload = {"batch": args.batch, "repeats": args.repeats, "totals_ms": totals, "layers": rows}
    path = write_result("col2im", timer.device(), payload, args.out)
    for network, t in totals.items():
        print(
            f"{network}: im2col {t['im2col_us']} ms, col2im gather {t['col2im_gather_us']} ms "
            f"(strided {t['col2im_strided_us']} ms), floor {t['floor_us']} ms"
        )
    print(f"all equal: {all(r['equal'] for r in rows)} -> {path}")
    return 0 if all(r["equal"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
