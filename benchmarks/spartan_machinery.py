"""Spartan machinery on a GPU: correctness against the CPU, profiling overhead by monitor
mode, tile-sparse GEMM against cuBLAS over tile density, tile utilization, and an adaptive
MLP end to end. Writes ``spartan-machinery-<date>.{json,md}`` and a trace CSV of every timed
kernel (for calibrating the cost model's GEMM families) into ``--out``.

    python3 benchmarks/spartan_machinery.py --out benchmarks/results
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks._results import RESULTS, write_result
from spartan_py.costmodel.families import EPILOGUE, MONITOR_PASS
from spartan_py.report.tables import markdown_table
from spartan_py.sparsity import (
    DEFAULT_TF32_GEMM_TILE,
    KernelPolicy,
    SparsityMonitor,
    coarsen_counts,
    compact_rows,
    compact_tiles,
    dense_matmul,
    expand_rows,
    expand_tiles,
    matmul_error,
    tile_counts,
    tile_list,
    tile_sparse_matmul,
    tile_utilization,
)
from spartan_py.sparsity.candidates import candidate_records
from spartan_py.sparsity.gpu_kernels import F32_BLOCK_K, resident_grid
from spartan_py.sparsity.tile_gemm import block_width
from spartan_py.timing import GpuTimer, copy_bandwidth, time_interleaved
from spartan_py.trace import to_frame, write_trace
from spartan_py.workloads.conv.layers import conv_layer, feature_maps, im2col, tiled_preactivations

#: (layer, batch): shapes of the sweep; batches keep every GEMM above a full wave of blocks.
CONV_CASES = (
    ("alexnet/conv2", 128),
    ("alexnet/conv4", 128),
    ("vgg16/conv3_2", 16),
    ("vgg16/conv5_2", 64),
    ("resnet18/conv2_x", 64),
    ("resnet18/conv4_x", 64),
    ("resnet18/conv5_x", 128),
)
DENSITIES = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0)
GEMM_TILE = (64, 32)  # DEFAULT_GEMM_TILE, the policy's tile
SWEEP_ROUNDS = 10  # turns of the kernels compared at each sweep point
E2E_BATCH_ROWS = (4096, 16384)  # the end-to-end MLP run's batches
E2E_SAMPLED_EVERY = 4  # the sampled monitor's period there, in batches


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def check_against_cpu(cp) -> list[dict]:
    """Every GPU function against its CPU twin on small shapes; raises on a mismatch."""
    rng = np.random.default_rng(0)
    rows = []
    z = tiled_preactivations(300, 256, 0.3, tile=GEMM_TILE, seed=1)
    bias = rng.standard_normal(256).astype(np.float32) * 0.1
    for tile in ((8, 8), (32, 32), (128, 32), (64, 128), (1, 4)):
        for mode in ("software", "fused"):
            y_cpu, p_cpu = SparsityMonitor(tile=tile, mode=mode).epilogue(z, bias, clamp=1.5)
            y_gpu, p_gpu = SparsityMonitor(tile=tile, mode=mode).epilogue(cp.asarray(z), cp.asarray(bias), clamp=1.5)
            assert np.array_equal(y_cpu, y_gpu.get()), (tile, mode)
            assert np.array_equal(p_cpu.tile_nnz, cp.asnumpy(p_gpu.tile_nnz)), (tile, mode)
            assert np.array_equal(p_cpu.row_nnz, cp.asnumpy(p_gpu.row_nnz)), (tile, mode)
        rows.append({"check": f"epilogue+monitor {tile}", "result": "equal"})
    y = np.maximum(z, 0)
    y_dev = cp.asarray(y)
    packed = compact_rows(y_dev)
    assert np.array_equal(cp.asnumpy(expand_rows(packed)), y)
    for tile in ((128, 32), (16, 16)):
        tiles = compact_tiles(y_dev, tile)
        assert np.array_equal(cp.asnumpy(expand_tiles(tiles)), y)
        assert np.array_equal(cp.asnumpy(tiles.tiles.coords), compact_tiles(y, tile).tiles.coords)
    rows.append({"check": "compaction round trips", "result": "equal"})
    w = rng.standard_normal((256, 192)).astype(np.float32)
    for precision, tile in (("fp32", (128, 32)), ("fp32", (64, 16)), ("tf32", (128, 32))):
        tl_cpu = compact_tiles(y, tile, pack=False).tiles
        tl_gpu = compact_tiles(y_dev, tile, pack=False).tiles
        c_cpu = tile_sparse_matmul(y, w, tl_cpu, precision=precision)
        c_gpu = tile_sparse_matmul(y_dev, cp.asarray(w), tl_gpu, precision=precision)
        err = matmul_error(c_gpu, y, w)
        diff = float(np.abs(c_gpu.get() - c_cpu).max() / np.abs(c_cpu).max())
        assert diff < (1e-5 if precision == "fp32" else 2e-3), (precision, tile, diff)
        rows.append(
            {
                "check": f"tile GEMM {precision} {tile}",
                "result": f"max rel diff to CPU {diff:.1e}",
                "max_rel_error_vs_fp64": err["max_rel"],
                "rms_rel_error_vs_fp64": err["rms_rel"],
            }
        )
    policy = KernelPolicy()
    _, profile = SparsityMonitor(tile=GEMM_TILE).epilogue(cp.asarray(z), out=y_dev.copy())
    decision = policy.choose(profile, 192)
    for kernel in ("dense", "tile_sparse", "row_compact", "csr"):
        c = policy.run(replace(decision, kernel=kernel), y_dev, cp.asarray(w), profile)
        assert matmul_error(c, y, w)["max_rel"] < 1e-5, kernel
    rows.append({"check": "policy kernels", "result": "all four match fp64 within 1e-5"})
    return rows


#: Monitor tiles of the overhead measurement (rows x columns): (32, 32) is the headline;
#: the others show the cost does not hinge on the tile.
OVERHEAD_TILES = ((32, 32), (16, 32), GEMM_TILE)
#: Buffers each overhead case cycles through: more than L2 holds, so no call finds its
#: operands there.
OVERHEAD_BUFFERS = 4


def _epilogue_launcher(cp, mode, zs, ys, bias, tile):
    """``work(i)``: one launch of the epilogue kernel of ``mode`` on buffer pair
    ``i % len(zs)``, its outputs allocated beforehand, so the time is the GPU's alone."""
    from spartan_py.sparsity.gpu_kernels import epilogue_grid, launch_epilogue

    m, n = zs[0].shape
    tile_nnz = cp.empty((-(-m // tile[0]), -(-n // tile[1])), dtype=cp.int32)
    row_part = cp.empty((m, epilogue_grid(m, n)[0]), dtype=cp.int32)
    shape = (np.int32(m), np.int32(n), np.float32(np.inf), np.int32(tile[0]), np.int32(tile[1]), tile_nnz, row_part)
    return lambda i: launch_epilogue(mode, m, n, (zs[i % len(zs)], bias, ys[i % len(ys)], *shape))


def profiling_overhead(cp, cases, rounds: int = 40) -> tuple[list[dict], list]:
    """Per conv layer, what monitoring costs, in two measurements taken by turns
    (:func:`spartan_py.timing.time_interleaved`, differences round by round):

    * the epilogue kernel alone, back to back over buffers larger than L2: plain, fused
      (per monitor tile) and the software monitor's counting pass. ``fused_extra_us`` is
      fused minus plain: the fused monitor's cost, free of host noise.
    * a layer loop, cuBLAS GEMM then the epilogue through ``SparsityMonitor`` in each mode
      (off, fused, sampled, software), as a network would run it: the host's work hides
      behind the GEMM except where the software monitor waits for its counts.
      ``software_extra_us`` is software minus off there.

    ``ratio_software_over_fused`` = software_extra_us / fused_extra_us.
    """
    from spartan_py.timing import paired_difference, time_interleaved

    rows, records = [], []
    for label, batch in cases:
        m, k, n = conv_layer(label).gemm_shape(batch)
        a = cp.asarray(tiled_preactivations(m, k, 0.5, tile=GEMM_TILE, seed=2, xp=cp).clip(0, None))
        rng = np.random.default_rng(3)
        weights = [
            cp.asarray((rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)) for _ in range(OVERHEAD_BUFFERS)
        ]
        zs = [dense_matmul(a, w) for w in weights]  # real pre-activations, about half of them negative
        ys = [cp.empty_like(z) for z in zs]
        bias = cp.asarray(rng.standard_normal(n).astype(np.float32) * 0.1)
        kernel_cases = {
            "plain": _epilogue_launcher(cp, "plain", zs, ys, bias, (1, 4)),
            "count_pass": _epilogue_launcher(cp, "count", ys, ys, bias, (32, 32)),
        }
        for tile in OVERHEAD_TILES:
            kernel_cases[f"fused_{tile[0]}x{tile[1]}"] = _epilogue_launcher(cp, "fused", zs, ys, bias, tile)
        alone = time_interleaved(kernel_cases, rounds=rounds, calls=8)
        monitors = {
            mode: SparsityMonitor(tile=(32, 32), mode=mode, timed=False)
            for mode in ("off", "fused", "sampled", "software")
        }

        def layer(monitor):
            def work(i):
                dense_matmul(a, weights[i % OVERHEAD_BUFFERS], out=zs[0])
                monitor.epilogue(zs[0], bias, out=ys[0])

            return work

        loop = time_interleaved({mode: layer(mon) for mode, mon in monitors.items()}, rounds=rounds, calls=6)
        plain_us = float(np.median(alone["plain"]))
        fused = {t: paired_difference(alone[t], alone["plain"]) for t in alone if t.startswith("fused")}
        extra = fused["fused_32x32"]["median"]
        layer_us = float(np.median(loop["off"]))
        software = paired_difference(loop["software"], loop["off"])
        row = {
            "layer": label,
            "batch": batch,
            "M": m,
            "K": k,
            "N": n,
            "layer_us": layer_us,
            "epilogue_us": plain_us,
            "fused_extra_us": extra,
            "fused_extra_p10_p90_us": [fused["fused_32x32"]["p10"], fused["fused_32x32"]["p90"]],
            **{f"fused_extra_us_{t[6:]}": d["median"] for t, d in fused.items() if t != "fused_32x32"},
            "count_pass_us": float(np.median(alone["count_pass"])),
            "software_extra_us": software["median"],
            "software_extra_p10_p90_us": [software["p10"], software["p90"]],
            "fused_extra_in_layer_loop_us": paired_difference(loop["fused"], loop["off"])["median"],
            "sampled_extra_in_layer_loop_us": paired_difference(loop["sampled"], loop["off"])["median"],
            "ratio_software_over_fused": software["median"] / extra if extra > 0 else float("inf"),
            "fused_overhead_pct_of_layer": 100 * extra / layer_us,
            "software_overhead_pct_of_layer": 100 * software["median"] / layer_us,
        }
        rows.append(row)
        out_bytes = 4 * m * n
        records += [
            *[
                replace(r, measured_us=layer_us - plain_us, run=f"{label}/overhead")
                for r in candidate_records("dense", m, k, n, nnz=0, tiles_active=0, live_rows=m, tile=_tile())
            ],
            _rec(EPILOGUE, label, plain_us, bytes_read=out_bytes, bytes_written=out_bytes),
            _rec(MONITOR_PASS, label, row["count_pass_us"], bytes_read=out_bytes, monitor_mode="software"),
        ]
        log(
            f"overhead {label}: fused +{extra:.2f} us (kernel), software +{software['median']:.1f} us (layer loop), "
            f"ratio {row['ratio_software_over_fused']:.0f}x, layer {layer_us:.0f} us"
        )
        a = weights = zs = ys = kernel_cases = None  # free the buffers before the next layer
        cp.get_default_memory_pool().free_all_blocks()
    return rows, records


def _tile():
    from spartan_py.sparsity import TileShape

    return TileShape(*GEMM_TILE)


def _rec(kernel: str, label: str, us: float, **fields):
    from spartan_py.trace import TraceRecord

    return TraceRecord(run=label, layer=0, kernel=kernel, measured_us=us, device="gpu", **fields)


def gemm_floor_us(m: int, k: int, n: int, tile_density: float, bandwidth: float, peak_flops: float) -> float:
    """The least time any tile-sparse GEMM of this shape needs: reading the non-zero tiles
    of A and all of W once and writing all of C, at the measured copy bandwidth (read +
    write bytes per second), or the useful FP32 multiply-adds at the peak rate, whichever
    is longer."""
    moved = 4 * (tile_density * m * k + k * n + m * n)
    return 1e6 * max(moved / bandwidth, 2 * m * k * n * tile_density / peak_flops)


def density_sweep(
    cp, timer: GpuTimer, cases, densities, policy: KernelPolicy, bandwidth: float, peak_flops: float
) -> tuple[list[dict], list]:
    """Tile-sparse GEMM (FP32, TF32), the other candidates and the adaptive policy vs cuBLAS.
    Each point also gets its floor (:func:`gemm_floor_us`) and whether the 0.7 / density
    target is within it at all."""
    rows, records = [], []
    tile = _tile()
    for label, batch in cases:
        m, k, n = conv_layer(label).gemm_shape(batch)
        w = cp.asarray((np.random.default_rng(3).standard_normal((k, n)) / np.sqrt(k)).astype(np.float32))
        c = cp.empty((m, n), dtype=cp.float32)
        resident = resident_grid(cp.cuda.Device().id, ("fp32-balanced", tile.rows, block_width(n), F32_BLOCK_K))
        for density in densities:
            pre = tiled_preactivations(m, k, density, tile=GEMM_TILE, seed=int(density * 1000), xp=cp)
            monitor = SparsityMonitor(tile=GEMM_TILE, mode="fused", timed=False)
            a, profile = monitor.epilogue(pre, out=pre)
            tiles = tile_list(profile.tile_nnz, a.shape, tile)
            tf32_counts = coarsen_counts(
                profile.tile_nnz, profile.tile, DEFAULT_TF32_GEMM_TILE
            )  # its kernel's 128 rows
            tf32_tiles = tile_list(tf32_counts, a.shape, DEFAULT_TF32_GEMM_TILE)
            ref = dense_matmul(a, w)
            tile_sparse_matmul(a, w, tiles, out=c)
            assert float(cp.abs(c - ref).max()) <= 1e-4 * float(cp.abs(ref).max()) + 1e-6, (label, density)
            t_list = timer(lambda: tile_list(profile.tile_nnz, a.shape, tile), flush=False)
            policy.choose(profile, n)  # first decision fills the prediction cache
            first = time.perf_counter()
            policy.clear_prediction_cache()
            decision = policy.choose(profile, n)
            uncached_ms = (time.perf_counter() - first) * 1e3
            t_choose = timer(lambda: policy.choose(profile, n), flush=False)
            # the kernels compared take turns, so that clock drift between them cancels; before each,
            # 1 GiB of L2 flush (~0.35 ms on an H100) lets the host queue its work ahead, as it does
            # while the GPU runs the previous layer (the decision's host time is decision_us)
            t = time_interleaved(
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
            records += [
                replace(tile_rec, measured_us=us["tile_fp32"], run=f"{label}/{density}"),
                replace(list_rec, measured_us=t_list["median_us"], run=f"{label}/{density}"),
            ]
            tf32_common = common | dict(tiles_active=tf32_tiles.count, tile=DEFAULT_TF32_GEMM_TILE)
            tf32_rec = candidate_records("tile_sparse", m, k, n, precision="tf32", **tf32_common)[1]
            records.append(replace(tf32_rec, measured_us=us["tile_tf32"], run=f"{label}/{density}"))
            if density in (0.01, 0.1, 0.3, 1.0):
                row |= _other_candidates(cp, timer, a, w, c, profile, label, density, common, records)
            rows.append(row)
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
    return rows, records


def _other_candidates(cp, timer, a, w, c, profile, label, density, common, records) -> dict:
    """Row compaction and cuSPARSE at a few densities (timed piece by piece for calibration)."""
    import cupyx.scipy.sparse as sparse

    m, k = a.shape
    n = w.shape[1]
    out = {}
    packed = compact_rows(a, profile.row_nnz, live=profile.live_rows)
    t_gather = timer(lambda: compact_rows(a, profile.row_nnz, live=profile.live_rows))
    t_live = timer(lambda: dense_matmul(packed.values, w)) if packed.live else {"median_us": 0.0}
    part = dense_matmul(packed.values, w) if packed.live else None

    def expand():
        c.fill(0)
        if part is not None:
            c[packed.ids] = part

    t_expand = timer(expand)
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
        t_convert = timer(lambda: sparse.csr_matrix(a), repeats=5)
        csr = sparse.csr_matrix(a)
        t_spmm = timer(lambda: csr @ w, repeats=5)
        convert_rec, spmm_rec = candidate_records("csr", m, k, n, **common)
        records += [
            replace(convert_rec, measured_us=t_convert["median_us"], run=run),
            replace(spmm_rec, measured_us=t_spmm["median_us"], run=run),
        ]
        out["csr_us"] = t_convert["median_us"] + t_spmm["median_us"]
    return out


def utilization(cp, cases, mlp_activations) -> list[dict]:
    """Useful / executed multiply-adds at square tiles 8..64 on three kinds of activations."""
    rows = []
    sources = []
    for label, batch in cases[:3]:
        layer = conv_layer(label)
        for cluster in (0.0, 2.0):
            maps = feature_maps(min(batch, 8), layer.in_channels, layer.size, 0.4, cluster_px=cluster, seed=4)
            a = im2col(cp.asarray(maps), layer.kernel, layer.stride, layer.pad)
            sources.append((f"{label} im2col, 40% dense maps, cluster {cluster:g} px", a))
    for i, act in enumerate(mlp_activations):
        sources.append((f"digits MLP hidden layer {i + 1}", cp.asarray(act)))
    for name, a in sources:
        row = {"activations": name, "density": float(cp.count_nonzero(a)) / a.size}
        for size in (8, 16, 32, 64):
            row[f"util_{size}"] = tile_utilization(a, size)
            row[f"tile_density_{size}"] = float((tile_counts(a, size) > 0).mean())
        rows.append(row)
    return rows


def sampled_drift(cp, mlp, x_batches, every: int = 4) -> dict:
    """The sampled monitor's profile against the full one over successive batches."""
    from spartan_py.sparsity.adaptive import device_weights, run_mlp

    weights = device_weights(mlp, cp.asarray(x_batches[0]))
    full = SparsityMonitor(tile=GEMM_TILE, mode="fused", timed=False)
    sampled = SparsityMonitor(tile=GEMM_TILE, mode="sampled", every=every, timed=False)
    drift, tile_drift, stale = [], [], 0
    for x in x_batches:
        xd = cp.asarray(x)
        a = run_mlp(mlp, xd, monitor=full, weights=weights).profiles
        b = run_mlp(mlp, xd, monitor=sampled, weights=weights).profiles
        for pa, pb in zip(a[:-1], b[:-1]):
            stale += pb.stale
            drift.append(abs(pa.density - pb.density))
            tile_drift.append(abs(pa.tile_density - pb.tile_density))
    return {
        "every": every,
        "batches": len(x_batches),
        "stale_profiles": stale,
        "max_density_drift": max(drift),
        "mean_density_drift": float(np.mean(drift)),
        "max_tile_density_drift": max(tile_drift),
    }


def _host_us(cp, work, calls: int = 6) -> float:
    """Host microseconds to queue one ``work(i)`` (waits inside it included), the GPU idle at
    the start: where it exceeds the GPU's time the run is host-bound."""
    work(0)
    cp.cuda.Device().synchronize()
    started = time.perf_counter()
    for i in range(calls):
        work(i)
    host = (time.perf_counter() - started) / calls * 1e6
    cp.cuda.Device().synchronize()
    return host


def mlp_end_to_end(cp, mlp, x, policy) -> dict:
    """The trained MLP on all of ``x``, adaptive (fused monitor + policy) vs dense cuBLAS, by
    turns: in batches of each of :data:`E2E_BATCH_ROWS` rows, deciding from the previous
    batch's profiles (``AdaptiveMlp``, lag 1; with the fused monitor, or the sampled one
    profiling every :data:`E2E_SAMPLED_EVERY`-th batch) or from each batch's own (lag 0: the
    host waits for each layer's counts), and as one batch (``run_mlp``, lag 0). Each case's
    host time to queue it is reported too (a lag-1 host waits for the previous batch, so
    its host time follows the GPU's)."""
    from spartan_py.sparsity.adaptive import AdaptiveMlp, device_weights, run_mlp

    xd = cp.asarray(x)
    weights = device_weights(mlp, xd)

    def monitor(mode: str = "fused"):
        return SparsityMonitor(tile=GEMM_TILE, mode=mode, every=E2E_SAMPLED_EVERY, timed=False)

    cases, models = {}, {}
    for rows in E2E_BATCH_ROWS:
        batches = [xd[i : i + rows] for i in range(0, xd.shape[0], rows)]
        for name, model in (
            (f"dense_{rows}", AdaptiveMlp(mlp, weights=weights)),
            (f"adaptive_{rows}", AdaptiveMlp(mlp, policy, monitor(), weights=weights)),
            (f"adaptive_sampled_{rows}", AdaptiveMlp(mlp, policy, monitor("sampled"), weights=weights)),
            (f"adaptive_lag0_{rows}", AdaptiveMlp(mlp, policy, monitor(), weights=weights, lag=0)),
        ):
            cases[name] = lambda i, model=model, batches=batches: [model(b) for b in batches]
            models[name] = model
    whole = monitor()
    cases["dense_one_batch"] = lambda i: run_mlp(mlp, xd, weights=weights)
    cases["adaptive_one_batch"] = lambda i: run_mlp(mlp, xd, weights=weights, policy=policy, monitor=whole)
    times = time_interleaved(cases, rounds=10, calls=2)
    median = {name: float(np.median(t)) for name, t in times.items()}
    host = {name: _host_us(cp, work) for name, work in cases.items()}
    run = run_mlp(mlp, xd, weights=weights, policy=policy, monitor=whole)
    batched = models[f"adaptive_{E2E_BATCH_ROWS[-1]}"](xd[: E2E_BATCH_ROWS[-1]])
    base = run_mlp(mlp, xd, weights=weights)
    agree = float((run.logits.argmax(axis=1) == base.logits.argmax(axis=1)).mean())
    ratios = {
        f"adaptive_over_dense_{rows}": median[f"adaptive_{rows}"] / median[f"dense_{rows}"] for rows in E2E_BATCH_ROWS
    }
    ratios |= {
        f"adaptive_{kind}_over_dense_{rows}": median[f"adaptive_{kind}_{rows}"] / median[f"dense_{rows}"]
        for rows in E2E_BATCH_ROWS
        for kind in ("sampled", "lag0")
    }
    ratios["adaptive_over_dense_one_batch"] = median["adaptive_one_batch"] / median["dense_one_batch"]
    return {
        "rows": int(x.shape[0]),
        "batch_rows": list(E2E_BATCH_ROWS),
        "sizes": list(mlp.sizes),
        **{f"{name}_us": us for name, us in median.items()},
        **{
            f"{name}_p10_p90_us": [float(np.percentile(t, 10)), float(np.percentile(t, 90))]
            for name, t in times.items()
        },
        **{f"{name}_host_us": us for name, us in host.items()},
        **ratios,
        "kernels": [d.kernel for d in run.decisions],
        "reasons": [d.reason for d in run.decisions],
        "reasons_batched": [d.reason for d in batched.decisions],
        "densities": [p.density for p in run.profiles if p is not None],
        "tile_densities": [p.tile_density for p in run.profiles if p is not None],
        "argmax_agreement": agree,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--quick", action="store_true", help="two layers, four densities (a smoke run)")
    parser.add_argument("--machine", default="h100-sxm", help="the policy's cost-model machine")
    args = parser.parse_args()
    import cupy as cp

    from spartan_py.engines.shared.cuda import device_name
    from spartan_py.sparsity.digits import load_digits, shifted_copies, train_mlp

    device = device_name(cp)
    cases = CONV_CASES[:2] if args.quick else CONV_CASES
    densities = (0.01, 0.1, 0.5, 1.0) if args.quick else DENSITIES
    timer = GpuTimer(min_warmup_ms=20)
    policy = KernelPolicy(args.machine)
    started = time.perf_counter()
    checks = check_against_cpu(cp)
    log(f"checks passed ({time.perf_counter() - started:.0f} s)")
    overhead, records = profiling_overhead(cp, cases)
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    lanes = 64 if (props["major"], props["minor"]) == (8, 0) else 128  # FP32 lanes per SM (A100: 64; H100: 128)
    peak_flops = props["multiProcessorCount"] * lanes * 2 * props["clockRate"] * 1e3
    bandwidth = copy_bandwidth()
    sweep, sweep_records = density_sweep(cp, timer, cases, densities, policy, bandwidth, peak_flops)
    records += sweep_records
    data = load_digits()
    mlp = train_mlp(data, hidden=(1024, 1024, 1024), epochs=4, seed=0)
    log(f"MLP trained: test accuracy {mlp.test_accuracy:.3f} ({time.perf_counter() - started:.0f} s)")
    x_big = shifted_copies(data.x, 2)  # 25 x 1797 rows
    hidden = mlp.forward(data.x[:1024])[:-1]
    util = utilization(cp, cases, hidden)
    drift = sampled_drift(cp, mlp, list(x_big[: 16 * 2048].reshape(16, 2048, -1)), every=4)
    e2e = mlp_end_to_end(cp, mlp, x_big, policy)
    e2e["test_accuracy"] = mlp.test_accuracy
    payload = {
        "checks": checks,
        "profiling_overhead": overhead,
        "density_sweep": sweep,
        "utilization": util,
        "copy_bandwidth_bytes_per_s": bandwidth,
        "fp32_peak_flops": peak_flops,
        "sampled": drift,
        "mlp_end_to_end": e2e,
        "policy_machine": args.machine,
        "seconds": time.perf_counter() - started,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = write_result("spartan-machinery", device, payload, args.out)
    frame = to_frame(records)
    frame["device"] = device
    write_trace(path.with_suffix(".trace.csv"), frame)
    md = [
        f"# Spartan machinery on {device}",
        "",
        "## Profiling overhead",
        "",
        markdown_table(pd.DataFrame(overhead)),
        "",
        "## Density sweep",
        "",
        markdown_table(pd.DataFrame(sweep).drop(columns=["reason"])),
        "",
        "## Tile utilization",
        "",
        markdown_table(pd.DataFrame(util)),
        "",
        "## Sampled monitor",
        "",
        str(drift),
        "",
        "## MLP end to end",
        "",
        str(e2e),
        "",
    ]
    path.with_suffix(".md").write_text("\n".join(md))
    log(f"wrote {path} ({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
