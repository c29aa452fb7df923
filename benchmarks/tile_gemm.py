"""Tile-sparse GEMM against its floor, dense cuBLAS and cuSPARSE's block-sparse SpMM.

For each conv-layer GEMM shape of the Spartan sweep and each tile density, after checking
every product against cuBLAS, the kernels take turns (an L2 flush before each):

- dense cuBLAS, FP32 and TF32;
- this project's tile-sparse GEMM, FP32 and TF32 (the tile list timed apart), and the FP32
  kernel listing its tiles from the monitor's counts in its own launch, in the schedule the
  policy's records give it (what the policy runs);
- cuSPARSE Blocked-ELL SpMM with 32- and 64-wide blocks in FP32, and 32-wide in FP16
  (float32 accumulation; TF32 is not among the library's Blocked-ELL types), the
  conversion from the dense activations timed apart;
- the adaptive policy's pick for the layer, as a run would call it (decision included).

Each point gets its floor: A's non-zero tiles, W and C moved once at the measured copy
bandwidth, or the useful multiply-adds at the FP32 (TF32) peak, whichever is longer (and,
timed like the kernels, one launch that only writes C: what that floor's largest part costs
in this harness, after the flush, launch included); and
whether the policy's pick meets the bar of issue 24 (0.7 / density over cuBLAS or within
1.6x the floor; never more than 5% slower than the fastest of cuBLAS and Blocked-ELL).

    python3 -m benchmarks.tile_gemm --out benchmarks/results
    python3 -m benchmarks.tile_gemm --table benchmarks/results/tile-gemm-<date>.json   # the docs' table
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks._conv_cases import CONV_CASES, DENSITIES, GEMM_TILE, SWEEP_ROUNDS
from benchmarks.harness import RESULTS, CudaTimer, Sweep, log, medians, sweep_rows, write_result
from spartan_py.costmodel import load_machine
from spartan_py.sparsity import (
    DEFAULT_TF32_GEMM_TILE,
    KernelPolicy,
    SparsityMonitor,
    TileCounts,
    coarsen_counts,
    dense_matmul,
    tile_list,
    tile_sparse_matmul,
)
from spartan_py.sparsity.blocked_ell import blocked_ell_matmul, to_blocked_ell
from spartan_py.sparsity.candidates import tile_gemm_schedule
from spartan_py.timing import copy_bandwidth
from spartan_py.workloads.conv.layers import conv_layer, tiled_preactivations

#: (name, block side, value type) of the Blocked-ELL variants timed at every point.
BELL_VARIANTS = (("bell32_fp32", 32, "float32"), ("bell64_fp32", 64, "float32"), ("bell32_fp16", 32, "float16"))
#: The bar of issue 24: speed-up over cuBLAS of 0.7 / density, or within this factor of the floor.
FLOOR_FACTOR = 1.6
#: ... and never slower than the fastest of cuBLAS and Blocked-ELL by more than this.
BASELINE_SLACK = 1.05


def floor_us(m: int, k: int, n: int, tile_density: float, bandwidth: float, peak_flops: float) -> dict:
    """The point's floors (us): memory (A's non-zero tiles, W, C once at ``bandwidth``),
    compute (useful multiply-adds at ``peak_flops``) and the larger of the two."""
    memory = 1e6 * 4 * (tile_density * m * k + k * n + m * n) / bandwidth
    compute = 1e6 * 2 * m * k * n * tile_density / peak_flops
    return {"memory": memory, "compute": compute, "floor": max(memory, compute)}


def sweep_point(
    cp, timer, label: str, batch: int, density: float, policy: KernelPolicy, peaks: dict, bandwidth: float
) -> dict:
    """One (layer, density) point: every product checked, then timed by turns."""
    m, k, n = conv_layer(label).gemm_shape(batch)
    w = cp.asarray((np.random.default_rng(3).standard_normal((k, n)) / np.sqrt(k)).astype(np.float32))
    c = cp.empty((m, n), dtype=cp.float32)
    pre = tiled_preactivations(m, k, density, tile=GEMM_TILE, seed=int(density * 1000), xp=cp)
    a, profile = SparsityMonitor(tile=GEMM_TILE, mode="fused", timed=False).epilogue(pre, out=pre)
    tiles = tile_list(profile.tile_nnz, a.shape, GEMM_TILE)
    own = TileCounts(a.shape, GEMM_TILE, profile.tile_nnz)
    nnz, active, live = policy.profile_counts(profile)
    own_schedule = tile_gemm_schedule(
        policy.records("tile_sparse", m, k, n, nnz=nnz, tiles_active=active, live_rows=live)[-1]
    )
    tf32_tiles = tile_list(
        coarsen_counts(profile.tile_nnz, profile.tile, DEFAULT_TF32_GEMM_TILE), a.shape, DEFAULT_TF32_GEMM_TILE
    )
    ref = dense_matmul(a, w)
    scale = float(cp.abs(ref).max()) + 1e-6

    errors = {}

    def check(name: str, product, tolerance: float) -> None:
        errors[name] = error = float(cp.abs(product[:m] - ref).max()) / scale
        assert error <= tolerance, f"{label} d={density} {name}: max error {error:.2e} of the largest output"

    check("tile_fp32", tile_sparse_matmul(a, w, tiles, out=c), 1e-4)
    check("tile_fp32_counts", tile_sparse_matmul(a, w, own, schedule=own_schedule, out=c), 1e-4)
    check("tile_tf32", tile_sparse_matmul(a, w, tf32_tiles, precision="tf32", out=c), 3e-3)
    bell = {}
    for name, block, dtype in BELL_VARIANTS:
        ell = to_blocked_ell(a, block, counts=profile.tile_nnz, tile=profile.tile, dtype=dtype)
        w_ell = cp.ascontiguousarray(
            w if ell.shape[1] == k else cp.pad(w, ((0, ell.shape[1] - k), (0, 0))), dtype=dtype
        )
        out = cp.empty((ell.shape[0], n), dtype=cp.float32)
        # cuSPARSE's FP32 Blocked-ELL product rounds like TF32 (3e-4 of the largest output measured)
        check(name, blocked_ell_matmul(ell, w_ell, out=out), 3e-3)
        bell[name] = (block, dtype, ell, w_ell, out)
    decision = policy.choose(profile, n)
    cases = {
        "cublas_fp32": lambda i: dense_matmul(a, w, out=c),
        "cublas_tf32": lambda i: dense_matmul(a, w, precision="tf32", out=c),
        "tile_fp32": lambda i: tile_sparse_matmul(a, w, tiles, out=c),
        "tile_fp32_counts": lambda i: tile_sparse_matmul(a, w, own, schedule=own_schedule, out=c),
        "tile_tf32": lambda i: tile_sparse_matmul(a, w, tf32_tiles, precision="tf32", out=c),
        "tile_list": lambda i: tile_list(profile.tile_nnz, a.shape, GEMM_TILE),
        "write_c": lambda i: c.fill(0),  # one launch writing C alone: the memory floor as this harness sees it
        "adaptive": lambda i: policy.run(policy.choose(profile, n), a, w, profile, out=c),
    }
    for name, (block, dtype, ell, w_ell, out) in bell.items():
        cases[name] = lambda i, ell=ell, w_ell=w_ell, out=out: blocked_ell_matmul(ell, w_ell, out=out)
        cases[name + "_convert"] = lambda i, block=block, dtype=dtype: to_blocked_ell(
            a, block, counts=profile.tile_nnz, tile=profile.tile, dtype=dtype
        )
    us = medians(timer.by_turns(cases, rounds=SWEEP_ROUNDS, calls=1, flush_bytes=1 << 30))
    floors = floor_us(m, k, n, profile.tile_density, bandwidth, peaks["fp32"])
    floors_tf32 = floor_us(m, k, n, tf32_tiles.tile_density, bandwidth, peaks["tf32"])
    row = {
        "layer": label,
        "M": m,
        "K": k,
        "N": n,
        "density": profile.density,
        "tile_density": profile.tile_density,
        "floor_us": floors["floor"],
        "floor_memory_us": floors["memory"],
        "floor_compute_us": floors["compute"],
        "floor_tf32_us": floors_tf32["floor"],
        **{f"{name}_us": value for name, value in us.items()},
        **{f"{name}_max_error": value for name, value in errors.items()},
    }
    for name, (_, _, ell, _, _) in bell.items():
        row[f"{name}_stored_fraction"] = ell.stored_fraction
        row[f"{name}_with_convert_us"] = us[name] + us[name + "_convert"]
    row["tile_fp32_over_floor"] = us["tile_fp32"] / floors["floor"]
    row["tile_fp32_with_list_over_floor"] = (us["tile_fp32"] + us["tile_list"]) / floors["floor"]
    row["tile_fp32_counts_schedule"] = own_schedule
    row["write_c_over_floor"] = us["write_c"] / floors["floor"]
    row["tile_fp32_counts_over_floor"] = us["tile_fp32_counts"] / floors["floor"]
    row["tile_tf32_over_floor"] = us["tile_tf32"] / floors_tf32["floor"]
    row["adaptive_kernel"] = decision.kernel
    row["adaptive_over_floor"] = us["adaptive"] / floors["floor"]
    row["adaptive_speedup"] = us["cublas_fp32"] / us["adaptive"]
    row["target_speedup"] = 0.7 / density
    row["bar_speedup_or_floor"] = bool(
        row["adaptive_speedup"] >= row["target_speedup"] or row["adaptive_over_floor"] <= FLOOR_FACTOR
    )
    fp32_baselines = {"cublas_fp32": us["cublas_fp32"]} | {
        f"{name}_with_convert": row[f"{name}_with_convert_us"] for name in bell if bell[name][1] == "float32"
    }
    fastest = min(fp32_baselines, key=fp32_baselines.__getitem__)
    row["fastest_fp32_baseline"] = fastest
    row["adaptive_over_fastest_baseline"] = us["adaptive"] / fp32_baselines[fastest]
    row["bar_baselines"] = bool(row["adaptive_over_fastest_baseline"] <= BASELINE_SLACK)
    row["adaptive_over_fastest_bell_spmm_only"] = us["adaptive"] / min(
        us[name] for name in bell if bell[name][1] == "float32"
    )
    return row


def markdown(result: Path) -> str:
    """The docs' table of a result file: per point the times (us), the floor and the pick."""
    import json

    rows = json.loads(result.read_text())["sweep"]
    lines = [
        "| layer | tile density | cuBLAS FP32 | cuBLAS TF32 | Blocked-ELL 32 (TF32-level) | + conversion "
        "| tile TF32 + list | tile FP32 + list | tile FP32 from counts | floor | write C | from counts / floor "
        "| policy pick | pick, decision included | bars |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | --- |",
    ]
    for r in rows:
        bars = ("yes" if r["bar_speedup_or_floor"] else "no") + " / " + ("yes" if r["bar_baselines"] else "no")
        lines.append(
            f"| {r['layer']} | {r['tile_density']:.2f} | {r['cublas_fp32_us']:.0f} | {r['cublas_tf32_us']:.0f} "
            f"| {r['bell32_fp32_us']:.0f} | {r['bell32_fp32_with_convert_us']:.0f} "
            f"| {r['tile_tf32_us'] + r['tile_list_us']:.0f} | {r['tile_fp32_us'] + r['tile_list_us']:.0f} "
            f"| {r['tile_fp32_counts_us']:.0f} | {r['floor_us']:.0f} "
            f"| {r['write_c_us']:.0f} "
            f"| {r['tile_fp32_counts_over_floor']:.2f} "
            f"| {r['adaptive_kernel']} | {r['adaptive_us']:.0f} | {bars} |"
        )
    return "\n".join(lines)


def _logged(row: dict) -> dict:
    log(
        f"{row['layer']} d={row['density']:.3g}: cublas {row['cublas_fp32_us']:.0f} us, tile {row['tile_fp32_us']:.0f} "
        f"(+list {row['tile_list_us']:.0f}; from counts {row['tile_fp32_counts_us']:.0f}), "
        f"bell32 {row['bell32_fp32_us']:.0f} "
        f"(+conv {row['bell32_fp32_convert_us']:.0f}), bell32 fp16 {row['bell32_fp16_us']:.0f}, "
        f"floor {row['floor_us']:.0f}; policy {row['adaptive_kernel']} {row['adaptive_us']:.0f} us "
        f"(bars: {row['bar_speedup_or_floor']}, {row['bar_baselines']})"
    )
    return row


def main(argv: list[str] | None = None) -> int:
    """Time the sweep (layer x density) and write ``tile-gemm-<date>.json``, or print a file's table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--table", type=Path, help="print the markdown table of this result file and stop")
    parser.add_argument("--quick", action="store_true", help="two layers, three densities (a smoke run)")
    parser.add_argument("--machine", default="h100-sxm", help="the policy's cost-model machine")
    args = parser.parse_args(argv)
    if args.table:
        print(markdown(args.table))
        return 0
    import cupy as cp

    cases = dict(CONV_CASES[:2] if args.quick else CONV_CASES)
    densities = (0.02, 0.2, 1.0) if args.quick else DENSITIES
    specs = load_machine(args.machine).specs
    peaks = {"fp32": specs.fp32_tflops * 1e12, "tf32": specs.tf32_tflops * 1e12}
    bandwidth = copy_bandwidth()
    policy = KernelPolicy(args.machine)
    timer = CudaTimer(min_warmup_ms=20)
    timer.median(lambda: dense_matmul(cp.ones((4096, 4096), cp.float32), cp.ones((4096, 4096), cp.float32)))
    started = time.perf_counter()
    rows = sweep_rows(
        Sweep({"layer": list(cases), "density": densities}),
        lambda layer, density: _logged(sweep_point(cp, timer, layer, cases[layer], density, policy, peaks, bandwidth)),
        progress=False,
    )
    payload = {
        "sweep": rows,
        "copy_bandwidth_bytes_per_s": bandwidth,
        "peak_flops": peaks,
        "policy_machine": args.machine,
        "points": len(rows),
        "bar_speedup_or_floor_met": sum(r["bar_speedup_or_floor"] for r in rows),
        "bar_baselines_met": sum(r["bar_baselines"] for r in rows),
        "seconds": time.perf_counter() - started,
    }
    path = write_result("tile-gemm", timer.device(), payload, args.out)
    log(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
