"""Graph Challenge on the CPU: file reading, the `cpu` engine and the `reference` engine.

The official 1024-neuron network, 120 layers, the 60000-row proxy input. Inference time
excludes file reading. The `cpu` engine's two paths (merged columns, its default on this
network, and the row path) and the merged path computing every row (``row_copies=False``: no
live row dropped as a copy of another) run by turns in this one process, each truth-checked.

    python -m benchmarks.gc_cpu [--data DIR] [--repeats 5] [--skip-reference] [--out DIR]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import spartan_py as sp
from benchmarks.harness import DEFAULT_DATA, RESULTS, write_result
from spartan_py.runner.store import cpu_name


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--skip-reference", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder of the result file")
    args = parser.parse_args()

    start = time.perf_counter()
    network = sp.load_network(args.data / "neuron1024")
    network_seconds = time.perf_counter() - start
    start = time.perf_counter()
    inputs = sp.load_inputs(args.data / "sparse-images-1024-proxy60k.tsv.gz", 1024, rows=60000)
    input_seconds = time.perf_counter() - start
    truth = sp.read_truth(args.data / "neuron1024-l120-categories-proxy60k.tsv")
    print(f"read network {network_seconds:.2f} s, inputs {input_seconds:.2f} s", file=sys.stderr)

    engines = {
        "merged": sp.make_engine("cpu", network),
        "rows": sp.make_engine("cpu", network, merged=False),
        "merged-every-row": sp.make_engine("cpu", network, row_copies=False),
    }
    if not engines["merged"].merged:
        raise SystemExit("the cpu engine did not take the merged path on the official network")
    seconds: dict[str, list[float]] = {name: [] for name in engines}
    outputs = {}
    for repeat in range(args.repeats + 1):  # the first run is a warm-up (page faults, thread pool)
        for name, engine in engines.items():  # by turns: a slow spell of the host hits both
            output = outputs[name] = engine.run(inputs)
            passed = bool((output.live_rows + 1 == truth).all()) and output.live_rows.size == truth.size
            if not passed:
                raise SystemExit(f"cpu engine ({name} path) FAILED the truth check")
            if repeat:
                seconds[name].append(output.seconds)
            print(f"cpu {name} run {repeat}: {output.seconds:.3f} s", file=sys.stderr)
    edges = 60000 * network.edges

    def timing(name: str) -> dict:
        median = statistics.median(seconds[name])
        executed = sum(r.executed_macs for r in outputs[name].trace)
        return {
            "median_seconds": median,
            "all_seconds": seconds[name],
            "edges_per_second": edges / median,
            "passed": True,
            "executed_macs": executed,
            "useful_macs": sum(r.useful_macs for r in outputs[name].trace),
            "gmacs_per_second": executed / median / 1e9,
        }

    cpu_median = statistics.median(seconds["merged"])

    reference = None
    if not args.skip_reference:
        ref = sp.make_engine("reference", network).run(inputs)
        reference = {
            "seconds": ref.seconds,
            "edges_per_second": edges / ref.seconds,
            "passed": bool(ref.live_rows.size == truth.size and (ref.live_rows + 1 == truth).all()),
        }
        print(f"reference: {ref.seconds:.2f} s", file=sys.stderr)

    payload = {
        "workload": "official 1024 neurons x 120 layers, 60000-row proxy input",
        "threads": engines["merged"].device,
        "cpu_model": cpu_name(),
        "read_seconds": {
            "network_120_layers": network_seconds,
            "proxy_inputs": input_seconds,
            "total": network_seconds + input_seconds,
        },
        "cpu": timing("merged"),
        "cpu_row_path": timing("rows"),
        "merged_speedup_vs_row_path": statistics.median(seconds["rows"]) / cpu_median,
        "cpu_every_row": timing("merged-every-row"),
        "row_copies_speedup": statistics.median(seconds["merged-every-row"]) / cpu_median,
        "reference": reference,
        "speedup_vs_reference": (reference["seconds"] / cpu_median) if reference else None,
    }
    path = write_result("gc_cpu", f"cpu: {cpu_name()}", payload, args.out)
    print(
        f"cpu median {cpu_median:.3f} s = {edges / cpu_median:.3e} edges/s"
        + f" (row path {statistics.median(seconds['rows']):.3f} s,"
        + f" every row computed {statistics.median(seconds['merged-every-row']):.3f} s)"
        + f" on {cpu_name()}, {engines['merged'].device}"
        + (
            f"; reference {reference['seconds']:.1f} s; speed-up {payload['speedup_vs_reference']:.1f}x"
            if reference
            else ""
        )
        + f"; read {network_seconds + input_seconds:.2f} s\nwrote {path}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
