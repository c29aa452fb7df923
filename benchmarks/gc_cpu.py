"""Graph Challenge on the CPU: file reading, the `cpu` engine and the `reference` engine.

The official 1024-neuron network, 120 layers, the 60000-row proxy input. Inference time
excludes file reading; both engines run side by side in this one process.

    python benchmarks/gc_cpu.py [--data DIR] [--repeats 5] [--skip-reference]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import spartan_py as sp
from benchmarks._results import DEFAULT_DATA, cpu_name, write_result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--skip-reference", action="store_true")
    args = parser.parse_args()

    start = time.perf_counter()
    network = sp.load_network(args.data / "neuron1024")
    network_seconds = time.perf_counter() - start
    start = time.perf_counter()
    inputs = sp.load_inputs(args.data / "sparse-images-1024-proxy60k.tsv.gz", 1024, rows=60000)
    input_seconds = time.perf_counter() - start
    truth = sp.read_truth(args.data / "neuron1024-l120-categories-proxy60k.tsv")
    print(f"read network {network_seconds:.2f} s, inputs {input_seconds:.2f} s", file=sys.stderr)

    engine = sp.make_engine("cpu", network)
    cpu_seconds = []
    for repeat in range(args.repeats + 1):  # the first run is a warm-up (page faults, thread pool)
        output = engine.run(inputs)
        passed = bool((output.live_rows + 1 == truth).all()) and output.live_rows.size == truth.size
        if not passed:
            raise SystemExit("cpu engine FAILED the truth check")
        if repeat:
            cpu_seconds.append(output.seconds)
        print(f"cpu run {repeat}: {output.seconds:.3f} s", file=sys.stderr)
    cpu_median = statistics.median(cpu_seconds)
    edges = 60000 * network.edges
    executed = sum(r.executed_macs for r in output.trace)
    useful = sum(r.useful_macs for r in output.trace)

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
        "threads": engine.device,
        "read_seconds": {
            "network_120_layers": network_seconds,
            "proxy_inputs": input_seconds,
            "total": network_seconds + input_seconds,
        },
        "cpu": {
            "median_seconds": cpu_median,
            "all_seconds": cpu_seconds,
            "edges_per_second": edges / cpu_median,
            "passed": True,
            "executed_macs": executed,
            "useful_macs": useful,
            "gmacs_per_second": executed / cpu_median / 1e9,
        },
        "reference": reference,
        "speedup_vs_reference": (reference["seconds"] / cpu_median) if reference else None,
    }
    path = write_result("gc_cpu", f"cpu: {cpu_name()}", payload)
    print(
        f"cpu median {cpu_median:.3f} s = {edges / cpu_median:.3e} edges/s"
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
