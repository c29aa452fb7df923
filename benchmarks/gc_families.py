"""Both generated network families on every GPU backend, next to the stock libraries.

For each case FAMILY:NEURONSxLAYERS (``generated``: RadiX-Net structure, which merges 16 to
1; ``generated-unmergeable``: no two equal columns) with 60000 generated input rows: our
kernels (``gpu``, ``gpu-merged``) are timed with CUDA events on device-resident inputs,
median of ``--repeats`` after warm-up; the four stock paths the same way through
``Engine.run`` (median of ``--baseline-repeats``). Every backend's categories are checked
against the ``cpu`` engine's (the reference backend here); a mismatch of ours fails the run,
a stock path's is recorded (and that path is not counted as correct). The file records
what ``auto`` picks and whether that is the fastest correct backend of the case.

    python -m benchmarks.gc_families [--cases generated:1024x120,...] [--repeats 20] [--out DIR]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np

import spartan_py as sp
from benchmarks.gc_gpu import time_ours
from benchmarks.harness import RESULTS, log, write_result
from spartan_py.api import resolve_network
from spartan_py.engines import engine_class, gpu_backend_for

DEFAULT_CASES = "generated:1024x120,generated:4096x120,generated-unmergeable:1024x120,generated-unmergeable:4096x120"
OURS = ("gpu", "gpu-merged")
STOCK = ("gpu-cusparse-spgemm", "gpu-cusparse-spmm", "gpu-cublas-dense", "gpu-dense-compact")


def time_kernel(engine, inputs, repeats: int) -> tuple[list[float], np.ndarray]:
    """CUDA-event times of ``repeats`` runs after three warm-ups (as ``gc_gpu``), and the live rows."""
    times, batch = time_ours(engine, inputs, repeats)
    ids, values, _ = batch.final_rows(engine)
    if np.isnan(values).any():
        raise RuntimeError(f"{engine.name}: poisoned final rows")
    return times, np.sort(ids)


def time_stock(engine, inputs, repeats: int, budget_seconds: float) -> tuple[list[float], np.ndarray]:
    """``Engine.run`` times (events inside) of up to ``repeats`` runs after one warm-up, fewer
    (at least 3) where they would take longer than ``budget_seconds``."""
    warm = engine.run(inputs)
    runs = max(3, min(repeats, int(budget_seconds / max(warm.seconds, 1e-6))))
    outputs = [engine.run(inputs) for _ in range(runs)]
    return [o.seconds for o in outputs], outputs[-1].live_rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=DEFAULT_CASES, help="FAMILY:NEURONSxLAYERS, comma-separated")
    parser.add_argument("--rows", type=int, default=60000)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--baseline-repeats", type=int, default=20)
    parser.add_argument(
        "--baseline-budget", type=float, default=10.0, help="seconds per stock path and case (at least 3 runs)"
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    import cupy

    cases, device, ok = [], "?", True
    for case in args.cases.split(","):
        family, shape = case.split(":")
        neurons, layers = (int(v) for v in shape.split("x"))
        network = resolve_network(f"{family}:{neurons}", layers)
        inputs = sp.generate_inputs(args.rows, neurons, seed=0)
        edges = args.rows * network.edges
        started = time.perf_counter()
        reference = sp.make_engine("cpu", network).run(inputs).live_rows
        log(f"{case}: cpu reference {time.perf_counter() - started:.1f} s, {reference.size} categories")
        entry: dict = {
            "case": case,
            "family": family,
            "neurons": neurons,
            "layers": layers,
            "rows": args.rows,
            "categories": int(reference.size),
            "auto_picks": gpu_backend_for(network),
            "backends": {},
        }
        for name in OURS + STOCK:
            try:
                engine = engine_class(name)(network)
                device = engine.device
                if name in STOCK:
                    times, live = time_stock(engine, inputs, args.baseline_repeats, args.baseline_budget)
                else:
                    times, live = time_kernel(engine, inputs, args.repeats)
            except Exception as exc:  # a backend that cannot run a case is reported, not fatal
                entry["backends"][name] = {"error": f"{type(exc).__name__}: {exc}"}
                log(f"  {name}: {entry['backends'][name]['error']}")
                continue
            median = statistics.median(times)
            same = bool(np.array_equal(live, reference))
            ok &= same or name in STOCK  # a stock path's mismatch is recorded, ours fails the run
            entry["backends"][name] = {
                "median_seconds": median,
                "p10_seconds": float(np.percentile(times, 10)),
                "p90_seconds": float(np.percentile(times, 90)),
                "repeats": len(times),
                "edges_per_second": edges / median,
                "same_categories_as_cpu": same,
                "stock_library": name in STOCK,
            }
            log(f"  {name}: {median * 1e3:.3f} ms ({edges / median:.3e} edges/s), categories match cpu: {same}")
            del engine
            cupy.get_default_memory_pool().free_all_blocks()
        timed = {n: b for n, b in entry["backends"].items() if "median_seconds" in b and b["same_categories_as_cpu"]}
        fastest = min(timed, key=lambda n: timed[n]["median_seconds"])
        stock = [n for n in timed if timed[n]["stock_library"]]
        fastest_stock = min(stock, key=lambda n: timed[n]["median_seconds"]) if stock else None
        entry["fastest"] = fastest
        entry["auto_is_fastest"] = entry["auto_picks"] == fastest
        entry["fastest_stock"] = fastest_stock
        entry["speedup_vs_fastest_stock"] = (
            timed[fastest_stock]["median_seconds"] / timed[fastest]["median_seconds"] if fastest_stock else None
        )
        log(
            f"  fastest {fastest}, auto picks {entry['auto_picks']}, "
            f"{entry['speedup_vs_fastest_stock'] or float('nan'):.1f}x the fastest stock path ({fastest_stock})"
        )
        cases.append(entry)
    path = write_result("gc_families", device, {"cases": cases}, args.out)
    log(f"wrote {path}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
