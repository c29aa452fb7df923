"""Run the tile GEMM (and cuBLAS) on one conv shape at a few densities, for ncu."""
import os, sys
import numpy as np
import cupy as cp
sys.path.insert(0, os.getcwd())
from spartan_py.sparsity import SparsityMonitor, TileShape, tile_list, tile_sparse_matmul, dense_matmul
from spartan_py.sparsity.workloads import conv_layer, tiled_preactivations

label, batch = os.environ.get("LAYER", "vgg16/conv3_2"), int(os.environ.get("BATCH", "16"))
m, k, n = conv_layer(label).gemm_shape(batch)
w = cp.asarray((np.random.default_rng(3).standard_normal((k, n)) / np.sqrt(k)).astype(np.float32))
c = cp.empty((m, n), dtype=cp.float32)
flush = cp.empty(1 << 28, dtype=cp.int32)
for density in [float(x) for x in os.environ.get("DENSITIES", "0.1,1.0").split(",")]:
    pre = tiled_preactivations(m, k, density, tile=(128, 32), seed=int(density * 1000), xp=cp)
    a, profile = SparsityMonitor(tile=(128, 32), mode="fused", timed=False).epilogue(pre, out=pre)
    tiles = tile_list(profile.tile_nnz, a.shape, TileShape(128, 32))
    for schedule in os.environ.get("SCHEDULES", "tiles,balanced").split(","):
        for _ in range(3):
            flush.fill(0)
            tile_sparse_matmul(a, w, tiles, out=c, schedule=schedule)
    if os.environ.get("CUBLAS"):
        for _ in range(3):
            flush.fill(0)
            dense_matmul(a, w, out=c)
cp.cuda.Device().synchronize()
print("done", label, m, k, n)
