"""Spartan machinery on a GPU: correctness against the CPU, profiling overhead by monitor
mode, tile-sparse GEMM against cuBLAS over tile density, tile utilization, and an adaptive
MLP end to end. Writes ``spartan-machinery-<date>.{json,md}`` and a trace CSV of every timed
kernel (for calibrating the cost model's GEMM families) into ``--out``.

    python3 -m benchmarks.spartan_machinery --out benchmarks/results
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd

from benchmarks._conv_cases import CONV_CASES, DENSITIES
from benchmarks._spartan_checks import check_against_cpu, profiling_overhead
from benchmarks._spartan_mlp import mlp_end_to_end, sampled_drift, utilization
from benchmarks._spartan_sweep import density_sweep
from benchmarks.harness import RESULTS, CudaTimer, log, write_result
from spartan_py.report.tables import markdown_table
from spartan_py.sparsity import KernelPolicy
from spartan_py.timing import copy_bandwidth
from spartan_py.trace import to_frame, write_trace


def main(argv: list[str] | None = None) -> int:
    """Run every part on the current GPU and write ``spartan-machinery-<date>.{json,md}`` and the trace."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--quick", action="store_true", help="two layers, four densities (a smoke run)")
    parser.add_argument("--machine", default="h100-sxm", help="the policy's cost-model machine")
    args = parser.parse_args(argv)
    import cupy as cp

    from spartan_py.sparsity.digits import load_digits, shifted_copies, train_mlp

    cases = CONV_CASES[:2] if args.quick else CONV_CASES
    densities = (0.01, 0.1, 0.5, 1.0) if args.quick else DENSITIES
    timer = CudaTimer(min_warmup_ms=20)
    device = timer.device()
    policy = KernelPolicy(args.machine)
    started = time.perf_counter()
    checks = check_against_cpu(cp)
    log(f"checks passed ({time.perf_counter() - started:.0f} s)")
    overhead, records = profiling_overhead(cp, timer, cases)
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
    e2e = mlp_end_to_end(cp, timer, mlp, x_big, policy)
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
