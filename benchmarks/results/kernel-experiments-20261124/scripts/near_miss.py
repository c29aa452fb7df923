"""The tile GEMM's near misses of 0.7/density: block widths 128 and 64, tile heights 64 and
128, both schedules, balanced with 1/4/8 fewest steps; by turns with a 1 GiB flush."""
import json
import os
import sys
from pathlib import Path

import cupy as cp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.spartan_machinery import CONV_CASES, GEMM_TILE  # noqa: E402
from spartan_py.sparsity import SparsityMonitor, coarsen_counts, dense_matmul, tile_list  # noqa: E402
from spartan_py.sparsity.tile_gemm import _gpu_tile_matmul  # noqa: E402
from spartan_py.sparsity.tiles import TileShape  # noqa: E402
from spartan_py.sparsity.workloads import conv_layer, tiled_preactivations  # noqa: E402
from spartan_py.timing import time_interleaved  # noqa: E402

POINTS = {"alexnet/conv4": (0.05,), "vgg16/conv3_2": (0.05,), "resnet18/conv4_x": (0.05, 0.1), "resnet18/conv5_x": (0.05,),
          "resnet18/conv2_x": (0.1, 0.2)}
batches = dict(CONV_CASES)
rows_out = []
for label, densities in POINTS.items():
    m, k, n = conv_layer(label).gemm_shape(batches[label])
    w = cp.asarray((np.random.default_rng(3).standard_normal((k, n)) / np.sqrt(k)).astype(np.float32))
    c = cp.empty((m, n), dtype=cp.float32)
    for density in densities:
        pre = tiled_preactivations(m, k, density, tile=GEMM_TILE, seed=int(density * 1000), xp=cp)
        a, profile = SparsityMonitor(tile=GEMM_TILE, timed=False).epilogue(pre, out=pre)
        reference = dense_matmul(a, w)
        cases = {"cublas": lambda i: dense_matmul(a, w, out=c)}
        for r in (64, 128):
            t = tile_list(coarsen_counts(profile.tile_nnz, profile.tile, TileShape(r, 32)), a.shape, TileShape(r, 32))
            for bn in ((128, 64) if n % 128 == 0 else (64,)):
                cases[f"tiles {r}x{bn}"] = lambda i, t=t, b=(r, bn, 16): _gpu_tile_matmul(a, w, t, "fp32", c, block=b, schedule="tiles")
                for s in (1, 4, 8):
                    cases[f"bal{s} {r}x{bn}"] = (lambda i, t=t, b=(r, bn, 16), s=s:
                                                 _gpu_tile_matmul(a, w, t, "fp32", c, block=b, schedule="balanced", min_steps=s))
        for name, work in cases.items():
            for _ in range(2):
                c.fill(cp.nan)
                work(0)
                err = float(cp.abs(c - reference).max())
                assert err <= 1e-4 * float(cp.abs(reference).max()) + 1e-6, (label, density, name, err)
        times = time_interleaved(cases, rounds=15, calls=1, flush_bytes=1 << 30)
        us = {name: round(float(np.median(v)), 2) for name, v in times.items()}
        target = us["cublas"] * density / 0.7
        best = min((v, kk) for kk, v in us.items() if kk != "cublas")
        print(label, density, f"target {target:.1f}", "best", best, " ".join(f"{kk}={v:.1f}" for kk, v in us.items()), flush=True)
        rows_out.append({"layer": label, "tile_density": profile.tile_density, "us": us, "target_us": target})
Path(os.environ.get("OUT", "/tmp"), "near_miss.json").write_text(json.dumps(rows_out, indent=1))
