"""Graph Challenge rates on generated networks (1024 to 65536 neurons, 120 to 1920 layers).

For each case NEURONSxLAYERSxROWS: the merged-column engine (``gpu-merged``) and, where it
applies and its set-up is affordable, the rows kernel (``gpu``); both time a whole inference
with CUDA events, inputs and weights on the device, median of ``--repeats`` after warm-up.
Checks: the two engines' categories agree (where both ran) and no poisoned element is left;
``--streamed`` cases also run with the weights streamed from pinned host memory under a
small device budget and must give the same categories. Floors next to each result:
device-memory bytes of the schedule / measured copy bandwidth, and the merged multiply-adds
at one shared-memory operand per clock per lane.

    python benchmarks/gc_gpu_generated.py [--cases 1024x120x60000,...] [--repeats 5] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

import spartan_py as sp
from benchmarks.harness import RESULTS, Sweep, log, sweep_rows, write_result
from spartan_py.engines.merged.engine import MergedEngine
from spartan_py.engines.rows.engine import RowsEngine
from spartan_py.timing import copy_bandwidth

DEFAULT_CASES = ",".join(
    [
        "1024x120x60000",
        "1024x480x60000",
        "1024x1920x60000",
        "4096x120x60000",
        "4096x480x60000",
        "4096x1920x60000",
        "16384x120x20000",
        "16384x480x20000",
        "16384x1920x20000",
        "65536x120x6000",
        "65536x1920x6000",
    ]
)
#: Cases the rows kernel also runs (its per-layer planning is serial; bigger ones take minutes).
ROWS_KERNEL_CASES = ("1024x120x60000", "1024x480x60000", "4096x120x60000", "16384x120x20000")


def run_engine(engine, inputs, repeats: int) -> dict:
    """Time ``engine`` on ``inputs`` (one batch); the result's categories and counts."""
    batch = engine.upload(inputs)
    times = engine.time(batch, repeats=repeats, warmup=1)
    counts = batch.counts.get()
    ids, values, _ = batch.final_rows(engine)
    engine.run_device(batch, per_layer_times=True)
    trace = engine.batch_trace(batch, counts, batch.nnz_counts.get(), inputs.nnz, run_id="bench")
    return {"times": times, "counts": counts, "ids": ids, "poison": int(np.isnan(values).sum()), "trace": trace}


def main(argv: list[str] | None = None) -> int:
    """Time every case and write ``gc_gpu_generated-<date>.json``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=DEFAULT_CASES, help="NEURONSxLAYERSxROWS, comma-separated")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--streamed", default="65536x1920x6000", help="cases also run with streamed weights")
    parser.add_argument("--stream-budget-mib", type=int, default=256)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    import cupy as cp

    bandwidth = copy_bandwidth()
    props = cp.cuda.runtime.getDeviceProperties(0)
    smem_rate = props["multiProcessorCount"] * 32 * props["clockRate"] * 1e3
    device, ok = None, True

    def measure(case: str) -> dict:
        """One generated network: ``gpu-merged`` timed and checked (and streamed, and the rows kernel, where asked)."""
        nonlocal device, ok
        neurons, layers, rows = (int(v) for v in case.split("x"))
        t0 = time.perf_counter()
        network = sp.generate_network(neurons, layers, seed=0)
        inputs = sp.generate_inputs(rows, neurons, seed=0)
        edges = rows * neurons * 32 * layers
        engine = MergedEngine(network)
        device = engine.device
        setup = time.perf_counter() - t0
        got = run_engine(engine, inputs, args.repeats)
        secs = statistics.median(got["times"])
        counts = got["counts"]
        live_in = counts[:-1]
        merged_macs = int(
            sum(int(r) * layer.plan.steps * layer.width for r, layer in zip(live_in, engine.merged.layers))
        )
        moved = sum(r.bytes_read + r.bytes_written for r in got["trace"] if "copy" not in r.kernel)
        entry = {
            "case": case,
            "neurons": neurons,
            "layers": layers,
            "rows": rows,
            "engine": "gpu-merged",
            "median_seconds": secs,
            "min_seconds": min(got["times"]),
            "repeats": len(got["times"]),
            "edges_per_second": edges / secs,
            "categories": int(counts[-1]),
            "live_fraction_end": int(counts[-1]) / rows,
            "live_fraction_range": [float(counts[1:].min()) / rows, float(counts[1:].max()) / rows],
            "row_layers": int(live_in.sum()),
            "merge_factor": engine.merged.factor,
            "poison_left": got["poison"],
            "floor": {
                "bytes": moved,
                "memory_s": moved / bandwidth,
                "merged_macs": merged_macs,
                "smem_s": merged_macs / smem_rate,
            },
            "weights_bytes": engine.weights.total_bytes,
            "weights_streamed": engine.weights.streamed,
            "setup_seconds": setup,
        }
        entry["gap_vs_memory_floor"] = secs / entry["floor"]["memory_s"]
        entry["gap_vs_smem_floor"] = secs / entry["floor"]["smem_s"]
        ok &= got["poison"] == 0
        log(
            f"{case}: merged {secs * 1e3:.2f} ms ({entry['edges_per_second']:.3e} edges/s), "
            f"categories {entry['categories']}, "
            f"live {entry['live_fraction_range'][0]:.2%}-{entry['live_fraction_range'][1]:.2%}, floors memory "
            f"{entry['floor']['memory_s'] * 1e3:.3f} ms / smem {entry['floor']['smem_s'] * 1e3:.3f} ms, "
            f"set-up {setup:.0f} s"
        )
        if case in args.streamed.split(","):
            budget = args.stream_budget_mib << 20
            streamed = MergedEngine(network, weight_budget_bytes=budget, merged=engine.merged)
            s_got = run_engine(streamed, inputs, max(2, args.repeats // 2))
            same = bool(np.array_equal(s_got["ids"], got["ids"]))
            entry["streamed"] = {
                "budget_bytes": budget,
                "median_seconds": statistics.median(s_got["times"]),
                "same_categories": same,
                "poison_left": s_got["poison"],
                "streamed": streamed.weights.streamed,
            }
            ok &= same and s_got["poison"] == 0 and streamed.weights.streamed
            log(
                f"  streamed under {args.stream_budget_mib} MiB: "
                f"{entry['streamed']['median_seconds'] * 1e3:.2f} ms, same categories {same}"
            )
            del streamed, s_got
        merged_ids = got["ids"]
        del engine, got
        cp.get_default_memory_pool().free_all_blocks()
        if case in ROWS_KERNEL_CASES:
            rows_engine = RowsEngine(network)
            r_got = run_engine(rows_engine, inputs, args.repeats)
            r_secs = statistics.median(r_got["times"])
            entry["rows_kernel"] = {
                "median_seconds": r_secs,
                "edges_per_second": edges / r_secs,
                "categories": int(r_got["counts"][-1]),
                "same_categories_as_merged": bool(np.array_equal(r_got["ids"], merged_ids)),
            }
            ok &= entry["rows_kernel"]["same_categories_as_merged"] and r_got["poison"] == 0
            log(
                f"  rows kernel {r_secs * 1e3:.2f} ms ({edges / r_secs:.3e} edges/s), "
                f"categories {int(r_got['counts'][-1])}"
            )
            del rows_engine, r_got
            cp.get_default_memory_pool().free_all_blocks()
        print(json.dumps(entry), flush=True)  # each case as it finishes, should a later one not
        return entry

    results = sweep_rows(Sweep({"case": args.cases.split(",")}), measure, progress=False)
    path = write_result(
        "gc_gpu_generated", device, {"cases": results, "copy_bandwidth_bytes_per_s": bandwidth}, args.out
    )
    log(f"wrote {path}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
