"""Current tile GEMM kernels vs the S-stage cp.async variant, on the conv shapes."""
import json, os, sys
import numpy as np
import cupy as cp
sys.path.insert(0, os.getcwd())
from spartan_py.sparsity import SparsityMonitor, TileShape, tile_list, tile_sparse_matmul, dense_matmul
from spartan_py.sparsity.workloads import conv_layer, tiled_preactivations
from spartan_py.timing import time_interleaved

CASES = (("alexnet/conv2", 128), ("alexnet/conv4", 128), ("vgg16/conv3_2", 16), ("vgg16/conv5_2", 64),
         ("resnet18/conv2_x", 64), ("resnet18/conv4_x", 64), ("resnet18/conv5_x", 128))
VARIANTS = [(128, 128, 3, 2), (128, 128, 4, 2), (64, 128, 4, 4), (64, 128, 4, 2), (128, 64, 4, 2), (128, 64, 4, 4), (64, 64, 4, 4)]
names = {v: "tile_gemm_f32_staged<{}, {}, 16, {}, {}>".format(*v) for v in VARIANTS}
mod = cp.RawModule(code=open("scratch/tile_gemm_staged.cu").read(), options=("-std=c++17", "-DTILE_GEMM_NO_EXPLICIT_INSTANCES"),
                   name_expressions=list(names.values()))
K = {}
for v, nm in names.items():
    f = mod.get_function(nm)
    bm, bn, s, _ = v
    smem = s * (16 * (bm + 4) + 16 * bn) * 4
    f.max_dynamic_shared_size_bytes = smem
    per_sm = cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(f.kernel.ptr, (bm // 8) * (bn // 8), smem)
    K[v] = (f, smem)
    print(v, "regs", f.num_regs, "blocks/SM", per_sm, "smem", smem, flush=True)

densities = [float(x) for x in os.environ.get("DENSITIES", "1.0,0.5,0.1,0.05,0.02").split(",")]
rows = []
flush_rounds = int(os.environ.get("ROUNDS", "10"))
for label, batch in CASES:
    m, k, n = conv_layer(label).gemm_shape(batch)
    w = cp.asarray((np.random.default_rng(3).standard_normal((k, n)) / np.sqrt(k)).astype(np.float32))
    c = cp.empty((m, n), dtype=cp.float32)
    bn_ok = 128 if n % 128 == 0 else 64
    for density in densities:
        pre = tiled_preactivations(m, k, density, tile=(128, 32), seed=int(density * 1000), xp=cp)
        a, profile = SparsityMonitor(tile=(128, 32), mode="fused", timed=False).epilogue(pre, out=pre)
        lists = {bm: tile_list(SparsityMonitor(tile=(bm, 32), mode="fused", timed=False).epilogue(a)[1].tile_nnz, a.shape, TileShape(bm, 32)) for bm in (128, 64)}
        ref = dense_matmul(a, w)
        scale = float(cp.abs(ref).max())
        cases = {"cublas": lambda i: dense_matmul(a, w, out=c),
                 "default": lambda i: tile_sparse_matmul(a, w, lists[128], out=c),
                 "tiles": lambda i: tile_sparse_matmul(a, w, lists[128], out=c, schedule="tiles"),
                 "balanced": lambda i: tile_sparse_matmul(a, w, lists[128], out=c, schedule="balanced")}
        for v in VARIANTS:
            bm, bn, s, minb = v
            if bn != bn_ok:
                continue
            f, smem = K[v]
            tl = lists[bm]
            args = (a, w, c, np.int32(m), np.int32(n), np.int32(k), tl.row_ptr, tl.col_index, np.int32(32))
            grid = (n // bn, tl.grid[0])
            def work(i, f=f, args=args, grid=grid, bm=bm, bn=bn, smem=smem):
                f(grid, ((bm // 8) * (bn // 8),), args, shared_mem=smem)
            c.fill(np.nan)
            work(0)
            err = float(cp.abs(c - ref).max()) / scale
            assert err < 1e-5, (label, density, v, err)
            cases["staged %dx%d S%d b%d" % v] = work
        t = time_interleaved(cases, rounds=flush_rounds, calls=1, flush_bytes=1 << 30)
        us = {kk: float(np.median(vv)) for kk, vv in t.items()}
        target = us["cublas"] * density / 0.7 if density <= 0.5 else float("nan")
        rows.append({"layer": label, "density": density, "tile_density": profile.tile_density, "us": us, "target_us": target})
        best_new = min((vv, kk) for kk, vv in us.items() if kk.startswith("staged"))
        print(f"{label:17s} d={density:<5} cublas {us['cublas']:8.1f} target {target:7.1f} | default {us['default']:7.1f} tiles {us['tiles']:7.1f} bal {us['balanced']:7.1f} | "
              + " ".join(f"{kk[7:]}={vv:.1f}" for kk, vv in us.items() if kk.startswith("staged")) + f" | best new {best_new[1][7:]} {'MET' if best_new[0] <= target else ''}", flush=True)
    cp.get_default_memory_pool().free_all_blocks()
json.dump(rows, open(os.path.join(os.environ.get("OUT", "/tmp"), "staged_bench.json"), "w"), indent=1)
