"""The Spartan machinery's density sweep: tile-sparse GEMM (FP32, TF32), row compaction,
cuSPARSE and the adaptive policy against cuBLAS, each point with its floor
(``spartan_machinery.py``)."""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from benchmarks._conv_cases import GEMM_TILE, SWEEP_ROUNDS, gemm_tile_shape
from benchmarks.harness import CudaTimer, Sweep, log, sweep_rows
from spartan_py.sparsity import (
    DEFAULT_TF32_GEMM_TILE,
    KernelPolicy,
    SparsityMonitor,
    coarsen_counts,
    compact_rows,
    dense_matmul,
    tile_list,
    tile_sparse_matmul,
)
from spartan_py.sparsity.candidates import candidate_records
from spartan_py.sparsity.gpu_kernels import F32_BLOCK_K, resident_grid
from spartan_py.sparsity.tile_gemm import block_width
from spartan_py.workloads.conv.layers import conv_layer, tiled_preactivations


def gemm_floor_us(m: int, k: int, n: int, tile_density: float, bandwidth: float, peak_flops: float) -> float:
    """The least time any tile-sparse GEMM of this shape needs: reading the non-zero tiles
    of A and all of W once and writing all of C, at the measured copy bandwidth (read +
    write bytes per second), or the useful FP32 multiply-adds at the peak rate, whichever
    is longer."""
    moved = 4 * (tile_density * m * k + k * n + m * n)
    return 1e6 * max(moved / bandwidth, 2 * m * k * n * tile_density / peak_flops)


def density_sweep(
    cp, timer: CudaTimer, cases, densities, policy: KernelPolicy, bandwidth: float, peak_flops: float
) -> tuple[list[dict], list]:
    """Tile-sparse GEMM (FP32, TF32), the other candidates and the adaptive policy vs cuBLAS,
    a declared sweep (layer x density, :mod:`benchmarks.harness`). Each point also gets its
    floor (:func:`gemm_floor_us`) and whether the 0.7 / density target is within it at all."""
    records: list = []
    tile = gemm_tile_shape()
    batches = dict(cases)
    layer_operands: dict = {}  # the current layer's W, C and resident grid (one layer's at a time)

    def point(layer: str, density: float) -> dict:
        label, batch = layer, batches[layer]
        m, k, n = conv_layer(label).gemm_shape(batch)
        if label not in layer_operands:
            layer_operands.clear()
            w = cp.asarray((np.random.default_rng(3).standard_normal((k, n)) / np.sqrt(k)).astype(np.float32))
            c = cp.empty((m, n), dtype=cp.float32)
            resident = resident_grid(cp.cuda.Device().id, ("fp32-balanced", tile.rows, block_width(n), F32_BLOCK_K))
            layer_operands[label] = (w, c, resident)
        w, c, resident = layer_operands[label]
        pre = tiled_preactivations(m, k, density, tile=GEMM_TILE, seed=int(density * 1000), xp=cp)
        monitor = SparsityMonitor(tile=GEMM_TILE, mode="fused", timed=False)
        a, profile = monitor.epilogue(pre, out=pre)
        tiles = tile_list(profile.tile_nnz, a.shape, tile)
        tf32_counts = coarsen_counts(profile.tile_nnz, profile.tile, DEFAULT_TF32_GEMM_TILE)  # its kernel's 128 rows
        tf32_tiles = tile_list(tf32_counts, a.shape, DEFAULT_TF32_GEMM_TILE)
        ref = dense_matmul(a, w)
        tile_sparse_matmul(a, w, tiles, out=c)
        assert float(cp.abs(c - ref).max()) <= 1e-4 * float(cp.abs(ref).max()) + 1e-6, (label, density)
        t_list = timer.median(lambda: tile_list(profile.tile_nnz, a.shape, tile), flush=False)
        policy.choose(profile, n)  # first decision fills the prediction cache
        first = time.perf_counter()
        policy.clear_prediction_cache()
        decision = policy.choose(profile, n)
        uncached_ms = (time.perf_counter() - first) * 1e3
        t_choose = timer.median(lambda: policy.choose(profile, n), flush=False)
        # the kernels compared take turns, so that clock drift between them cancels; before each,
        # 1 GiB of L2 flush (~0.35 ms on an H100) lets the host queue its work ahead, as it does
        # while the GPU runs the previous layer (the decision's host time is decision_us)
        t = timer.by_turns(
            {
                "cublas_fp32": lambda i: dense_matmul(a, w, out=c),
                "tile_fp32": lambda i: tile_sparse_matmul(a, w, tiles, out=c),
                "cublas_tf32": lambda i: dense_matmul(a, w, precision="tf32", out=c),
                "tile_tf32": lambda i: tile_sparse_matmul(a, w, tf32_tiles, precision="tf32", out=c),
                "adaptive": lambda i: policy.run(policy.choose(profile, n), a, w, profile, out=c),
            },
            rounds=SWEEP_ROUNDS,
            calls=1,
            flush_bytes=1 << 30,
        )
        us = {name: float(np.median(v)) for name, v in t.items()}

        def ratio(num: str, den: str) -> float:  # median over rounds of the per-round ratio
            return float(np.median(np.asarray(t[num]) / np.asarray(t[den])))

        nnz, active, live = profile.nnz, profile.tiles_active, profile.live_rows
        row = {
            "layer": label,
            "M": m,
            "K": k,
            "N": n,
            "tile_density": profile.tile_density,
            "density": profile.density,
            "live_row_fraction": live / m,
            "cublas_fp32_us": us["cublas_fp32"],
            "tile_fp32_us": us["tile_fp32"],
            "tile_list_us": t_list["median_us"],
            "speedup_fp32": ratio("cublas_fp32", "tile_fp32"),
            "speedup_fp32_with_list": us["cublas_fp32"] / (us["tile_fp32"] + t_list["median_us"]),
            "target_speedup": 0.7 / density if density <= 0.5 else float("nan"),
            "floor_us": gemm_floor_us(m, k, n, profile.tile_density, bandwidth, peak_flops),
            "cublas_tf32_us": us["cublas_tf32"],
            "tile_tf32_us": us["tile_tf32"],
            "tile_density_tf32": tf32_tiles.tile_density,
            "speedup_tf32": ratio("cublas_tf32", "tile_tf32"),
            "adaptive_kernel": decision.kernel,
            "adaptive_us": us["adaptive"],
            "adaptive_vs_cublas": ratio("adaptive", "cublas_fp32"),
            "decision_us": t_choose["median_us"],
            "decision_uncached_ms": uncached_ms,
            "reason": decision.reason,
        }
        row["max_speedup_at_floor"] = row["cublas_fp32_us"] / row["floor_us"]
        row["target_within_floor"] = bool(density <= 0.5 and row["max_speedup_at_floor"] >= row["target_speedup"])
        common = dict(nnz=nnz, tiles_active=active, live_rows=live, tile=tile, resident_blocks=resident)
        list_rec, tile_rec = candidate_records("tile_sparse", m, k, n, **common)
        records.extend(
            [
                replace(tile_rec, measured_us=us["tile_fp32"], run=f"{label}/{density}"),
                replace(list_rec, measured_us=t_list["median_us"], run=f"{label}/{density}"),
            ]
        )
        tf32_common = common | dict(tiles_active=tf32_tiles.count, tile=DEFAULT_TF32_GEMM_TILE)
        tf32_rec = candidate_records("tile_sparse", m, k, n, precision="tf32", **tf32_common)[1]
        records.append(replace(tf32_rec, measured_us=us["tile_tf32"], run=f"{label}/{density}"))
        if density in (0.01, 0.1, 0.3, 1.0):
            row |= _other_candidates(cp, timer, a, w, c, profile, label, density, common, records)
        log(
            f"sweep {label} d={density}: cublas {row['cublas_fp32_us']:.0f} us, tile {row['tile_fp32_us']:.0f} us "
            f"(x{row['speedup_fp32']:.2f}), list {t_list['median_us']:.0f} us, "
            f"decision {t_choose['median_us']:.0f} us, "
            f"adaptive {decision.kernel} x{row['adaptive_vs_cublas']:.3f}"
        )
        if density == densities[-1]:  # cuBLAS does not skip zeros: one record per layer
            for precision in ("fp32", "tf32"):
                dense_rec = candidate_records(
                    "dense", m, k, n, nnz=0, tiles_active=0, live_rows=m, tile=tile, precision=precision
                )[0]
                records.append(replace(dense_rec, measured_us=us[f"cublas_{precision}"], run=f"{label}/dense"))
        return row

    return sweep_rows(Sweep({"layer": list(batches), "density": densities}), point, progress=False), records


def _other_candidates(cp, timer, a, w, c, profile, label, density, common, records) -> dict:
    """Row compaction and cuSPARSE at a few densities (timed piece by piece for calibration)."""
    import cupyx.scipy.sparse as sparse

    m, k = a.shape
    n = w.shape[1]
    out = {}
    packed = compact_rows(a, profile.row_nnz, live=profile.live_rows)
    t_gather = timer.median(lambda: compact_rows(a, profile.row_nnz, live=profile.live_rows))
    t_live = timer.median(lambda: dense_matmul(packed.values, w)) if packed.live else {"median_us": 0.0}
    part = dense_matmul(packed.values, w) if packed.live else None

    def expand():
        c.fill(0)
        if part is not None:
            c[packed.ids] = part

    t_expand = timer.median(expand)
    gather_rec, live_rec, expand_rec = candidate_records("row_compact", m, k, n, **common)
    run = f"{label}/{density}"
    records += [
        replace(gather_rec, measured_us=t_gather["median_us"], run=run),
        replace(expand_rec, measured_us=t_expand["median_us"], run=run),
    ]
    if packed.live:
        records.append(replace(live_rec, measured_us=t_live["median_us"], run=run))
    out["row_compact_us"] = t_gather["median_us"] + t_live["median_us"] + t_expand["median_us"]
    if density <= 0.3:
        t_convert = timer.median(lambda: sparse.csr_matrix(a), repeats=5)
        csr = sparse.csr_matrix(a)
        t_spmm = timer.median(lambda: csr @ w, repeats=5)
        convert_rec, spmm_rec = candidate_records("csr", m, k, n, **common)
        records += [
            replace(convert_rec, measured_us=t_convert["median_us"], run=run),
            replace(spmm_rec, measured_us=t_spmm["median_us"], run=run),
        ]
        out["csr_us"] = t_convert["median_us"] + t_spmm["median_us"]
    return out
