"""Which FP32 tile-GEMM instance (BM, BN, BK) is fastest on this GPU, against cuBLAS, at tile
density 1.0 and 0.1 on three conv shapes. (The fused monitor's extra time is measured by
turns in ``spartan_machinery.py``.)

    python3 benchmarks/tile_gemm_variants.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spartan_py.timing import GpuTimer  # noqa: E402
from spartan_py.sparsity import SparsityMonitor, dense_matmul, tile_list  # noqa: E402
from spartan_py.sparsity.gpu_kernels import F32_SHAPES  # noqa: E402
from spartan_py.sparsity.tile_gemm import _gpu_tile_matmul  # noqa: E402
from spartan_py.sparsity.tiles import TileShape  # noqa: E402
from spartan_py.sparsity.workloads import conv_layer, tiled_preactivations  # noqa: E402


def main() -> int:
    import cupy as cp

    timer = GpuTimer()
    for label, batch in (("alexnet/conv2", 128), ("vgg16/conv3_2", 16), ("resnet18/conv2_x", 64)):
        m, k, n = conv_layer(label).gemm_shape(batch)
        w = cp.asarray(np.random.default_rng(3).standard_normal((k, n), dtype=np.float32))
        c = cp.empty((m, n), dtype=cp.float32)
        for density in (1.0, 0.1):
            pre = tiled_preactivations(m, k, density, tile=(128, 32), seed=1, xp=cp)
            a, profile = SparsityMonitor(tile=(128, 32), timed=False).epilogue(pre)
            results = {"cublas": timer(lambda: dense_matmul(a, w, out=c))["median_us"]}
            for shape in F32_SHAPES:
                if n % shape[1]:
                    continue
                tile = TileShape(shape[0], 32)
                counts = profile.tile_nnz if shape[0] == 128 else None
                tiles = tile_list(counts if counts is not None else _counts(cp, a, tile), a.shape, tile)
                results[str(shape)] = timer(lambda: _gpu_tile_matmul(a, w, tiles, "fp32", c, block=shape))["median_us"]
            text = ", ".join(f"{key} {value:.0f}" for key, value in results.items())
            print(f"{label} d={density}: {text}", flush=True)
    return 0


def _counts(cp, a, tile):
    from spartan_py.sparsity import tile_counts

    return tile_counts(a, tile)


if __name__ == "__main__":
    raise SystemExit(main())
