"""Balanced tile GEMM before/after the register-held step cursor, on the conv shapes."""
import json, os, sys
import numpy as np
import cupy as cp
sys.path.insert(0, os.getcwd())
from spartan_py.sparsity import SparsityMonitor, TileShape, tile_list, tile_sparse_matmul, dense_matmul
from spartan_py.sparsity import gpu_kernels
from spartan_py.sparsity.tile_gemm import _launch_balanced, fp32_block_width
from spartan_py.sparsity.workloads import conv_layer, tiled_preactivations
from spartan_py.timing import time_interleaved

CASES = (("alexnet/conv2", 128), ("alexnet/conv4", 128), ("vgg16/conv3_2", 16), ("vgg16/conv5_2", 64),
         ("resnet18/conv2_x", 64), ("resnet18/conv4_x", 64), ("resnet18/conv5_x", 128))
dev = cp.cuda.Device().id
real = gpu_kernels.kernel_source
gpu_kernels.kernel_source = lambda name: open("scratch/tile_gemm_before.cu").read() if name == "tile_gemm.cu" else real(name)
gpu_kernels.gemm_kernels.cache_clear()
before = gpu_kernels.gemm_kernels(dev)
gpu_kernels.kernel_source = real
gpu_kernels.gemm_kernels.cache_clear()
after = gpu_kernels.gemm_kernels(dev)
for key in after:
    if key[0] == "fp32-balanced":
        print(key, "regs before/after", before[key].num_regs, after[key].num_regs, "local", before[key].local_size_bytes, after[key].local_size_bytes, flush=True)

densities = [float(x) for x in os.environ.get("DENSITIES", "1.0,0.5,0.2,0.1,0.05,0.02").split(",")]
rows = []
for label, batch in CASES:
    m, k, n = conv_layer(label).gemm_shape(batch)
    w = cp.asarray((np.random.default_rng(3).standard_normal((k, n)) / np.sqrt(k)).astype(np.float32))
    c = cp.empty((m, n), dtype=cp.float32)
    shape = (128, fp32_block_width(n), 16)
    for density in densities:
        pre = tiled_preactivations(m, k, density, tile=(128, 32), seed=int(density * 1000), xp=cp)
        a, profile = SparsityMonitor(tile=(128, 32), mode="fused", timed=False).epilogue(pre, out=pre)
        tl = tile_list(profile.tile_nnz, a.shape, TileShape(128, 32))
        args = (a, w, c, np.int32(m), np.int32(n), np.int32(k), tl.row_ptr, tl.col_index, np.int32(32))
        ref = dense_matmul(a, w)
        scale = float(cp.abs(ref).max())
        cases = {"cublas": lambda i: dense_matmul(a, w, out=c),
                 "tiles": lambda i: tile_sparse_matmul(a, w, tl, out=c, schedule="tiles")}
        for name, kern in (("bal_before", before), ("bal_after", after)):
            def work(i, kern=kern):
                _launch_balanced(cp, dev, kern, shape, args, tl.grid[0], 4)
            c.fill(np.nan)
            work(0)
            err = float(cp.abs(c - ref).max()) / scale
            assert err < 1e-5, (label, density, name, err)
            cases[name] = work
        t = time_interleaved(cases, rounds=int(os.environ.get("ROUNDS", "10")), calls=1, flush_bytes=1 << 30)
        us = {kk: float(np.median(vv)) for kk, vv in t.items()}
        target = us["cublas"] * density / 0.7 if density <= 0.5 else float("nan")
        rows.append({"layer": label, "density": density, "us": us, "target_us": target})
        best = min(us["tiles"], us["bal_after"])
        print(f"{label:17s} d={density:<5} cublas {us['cublas']:8.1f} target {target:7.1f} | tiles {us['tiles']:7.1f} before {us['bal_before']:7.1f} after {us['bal_after']:7.1f} ({us['bal_after'] / us['bal_before'] - 1:+.1%}) {'MET' if best <= target else ''}", flush=True)
    cp.get_default_memory_pool().free_all_blocks()
json.dump(rows, open(os.path.join(os.environ.get("OUT", "/tmp"), "bal_bench.json"), "w"), indent=1)
