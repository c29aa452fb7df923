"""The tile GEMM (both schedules) on one conv shape at low density, for ncu."""
import os
import sys

import cupy as cp
import numpy as np

sys.path.insert(0, os.getcwd())
from spartan_py.sparsity import SparsityMonitor, TileShape, tile_list, tile_sparse_matmul  # noqa: E402
from spartan_py.sparsity.workloads import conv_layer, tiled_preactivations  # noqa: E402

label, batch = os.environ.get("LAYER", "vgg16/conv5_2"), int(os.environ.get("BATCH", "64"))
m, k, n = conv_layer(label).gemm_shape(batch)
w = cp.asarray((np.random.default_rng(3).standard_normal((k, n)) / np.sqrt(k)).astype(np.float32))
c = cp.empty((m, n), dtype=cp.float32)
flush = cp.empty(1 << 28, dtype=cp.int32)
for density in [float(x) for x in os.environ.get("DENSITIES", "0.01").split(",")]:
    pre = tiled_preactivations(m, k, density, tile=(64, 32), seed=int(density * 1000), xp=cp)
    a, profile = SparsityMonitor(tile=(64, 32), mode="fused", timed=False).epilogue(pre, out=pre)
    tiles = tile_list(profile.tile_nnz, a.shape, TileShape(64, 32))
    rp = cp.asnumpy(tiles.row_ptr)
    per = np.diff(rp)
    print("row blocks", per.size, "tiles", rp[-1], "max per row block", per.max(), "empty", (per == 0).mean(), flush=True)
    for schedule in os.environ.get("SCHEDULES", "tiles,balanced").split(","):
        for _ in range(2):
            flush.fill(0)
            tile_sparse_matmul(a, w, tiles, out=c, schedule=schedule)
cp.cuda.Device().synchronize()
print("done", label, m, k, n)
