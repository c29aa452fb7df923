"""A/B: tile GEMM kernels at HEAD (scratch/tile_gemm_old.cu) vs the working tree, on the conv
shapes at a few tile densities: checked against cuBLAS, then timed by turns (1 GiB flush)."""
import json
import os
import sys
from pathlib import Path

import cupy as cp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import spartan_py.sparsity.gpu_kernels as gk  # noqa: E402
from benchmarks.spartan_machinery import CONV_CASES, GEMM_TILE  # noqa: E402
from spartan_py.sparsity import SparsityMonitor, coarsen_counts, dense_matmul, tile_list  # noqa: E402
from spartan_py.sparsity.tile_gemm import _gpu_tile_matmul, fp32_block_width  # noqa: E402
from spartan_py.sparsity.tiles import TileShape  # noqa: E402
from spartan_py.sparsity.workloads import conv_layer, tiled_preactivations  # noqa: E402
from spartan_py.timing import time_interleaved  # noqa: E402

root = Path(__file__).resolve().parents[1]
SOURCES = {"old": (root / "scratch" / "tile_gemm_old.cu").read_text(), "new": (root / "kernels" / "tile_gemm.cu").read_text()}
KERNELS = {}
for version, src in SOURCES.items():
    names = {("fp32", *sh): "tile_gemm_f32<{}, {}, {}>".format(*sh) for sh in gk.F32_SHAPES}
    names |= {("fp32-balanced", *sh): "tile_gemm_f32_balanced<{}, {}, {}>".format(*sh) for sh in gk.F32_SHAPES}
    names[("tf32",)] = "tile_gemm_tf32"
    mod = cp.RawModule(code=src, options=("-std=c++17", "-DTILE_GEMM_NO_EXPLICIT_INSTANCES"), name_expressions=list(names.values()))
    KERNELS[version] = {key: mod.get_function(name) for key, name in names.items()}
CURRENT = ["old"]
gk.gemm_kernels = lambda device_id: KERNELS[CURRENT[0]]


RESIDENT = {}


def resident(device_id, key):
    if (CURRENT[0], key) in RESIDENT:
        return RESIDENT[(CURRENT[0], key)]
    kernel = KERNELS[CURRENT[0]][key]
    per_sm = cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(kernel.kernel.ptr, gk.f32_block_threads(*key[1:3]), 0)
    RESIDENT[(CURRENT[0], key)] = max(1, per_sm) * cp.cuda.runtime.getDeviceProperties(device_id)["multiProcessorCount"]
    return RESIDENT[(CURRENT[0], key)]


gk.resident_grid = resident
DENSITIES = tuple(float(v) for v in os.environ.get("DENSITIES", "0.01,0.02,0.05,0.1,1.0").split(","))
rows = []
for label, batch in CONV_CASES:
    m, k, n = conv_layer(label).gemm_shape(batch)
    w = cp.asarray((np.random.default_rng(3).standard_normal((k, n)) / np.sqrt(k)).astype(np.float32))
    c = cp.empty((m, n), dtype=cp.float32)
    for density in DENSITIES:
        pre = tiled_preactivations(m, k, density, tile=GEMM_TILE, seed=int(density * 1000), xp=cp)
        a, profile = SparsityMonitor(tile=GEMM_TILE, timed=False).epilogue(pre, out=pre)
        tiles = {r: tile_list(coarsen_counts(profile.tile_nnz, profile.tile, TileShape(r, 32)), a.shape, TileShape(r, 32)) for r in (64, 128)}
        reference = dense_matmul(a, w)
        cases = {"cublas": lambda i: dense_matmul(a, w, out=c)}
        for version in ("old", "new"):
            for r in (64, 128):
                for sched in ("tiles", "balanced") if version == "old" else ("balanced",):
                    def work(i, v=version, t=tiles[r], b=(r, fp32_block_width(n), 16), s=sched):
                        CURRENT[0] = v
                        _gpu_tile_matmul(a, w, t, "fp32", c, block=b, schedule=s)
                    cases[f"{version} {sched} {r}"] = work
        for name, work in cases.items():
            for _ in range(2):
                c.fill(cp.nan)
                work(0)
                err = float(cp.abs(c - reference).max())
                assert err <= 1e-4 * float(cp.abs(reference).max()) + 1e-6, (label, density, name, err)
        t = time_interleaved(cases, rounds=10, calls=1, flush_bytes=1 << 30)
        us = {name: round(float(np.median(v)), 2) for name, v in t.items()}
        row = {"layer": label, "tile_density": profile.tile_density, "us": us, "target_us": us["cublas"] * density / 0.7}
        print(label, density, " ".join(f"{k}={v:.1f}" for k, v in us.items()), f"target={row['target_us']:.1f}", flush=True)
        rows.append(row)
        a = pre = None
Path(os.environ.get("OUT", "/tmp"), "gemm_ab.json").write_text(json.dumps(rows, indent=1))
