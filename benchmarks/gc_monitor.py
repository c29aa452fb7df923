"""Graph Challenge proxy: what each sparsity-monitor mode costs on both GPU kernels.

The official 1024 x 120 network with the 60000-row proxy input. Every engine below runs the
same batch; their runs take turns, round after round (order reversed every other round),
and a mode's cost is its run time minus the same kernel's run without a monitor, taken
round by round (:func:`benchmarks.harness.take_turns`, :func:`benchmarks.harness.difference`),
so that clock drift between the variants cancels. Categories are checked against the truth for every engine.

* default schedule (layers per launch 1, 1, 1, 1, 2, 4, ..., 32): ``gpu`` and
  ``gpu-merged`` with the monitor ``off``, ``fused`` and ``sampled`` (every 4th launch).
  The bar: the fused monitor adds at most 2 % to the run.
* one layer per launch, ``gpu`` only: ``off``, ``fused`` and ``software`` (the software
  monitor must see every layer's output: a counting pass, a copy of the counts to the host
  and a wait after every layer). ``software / fused`` compares the two monitors' costs at
  the same schedule; ``software_vs_default_off`` is what a user pays for the software
  monitor against an unmonitored default run.

    python -m benchmarks.gc_monitor [--data DIR] [--rounds 30] [--out DIR]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

import spartan_py as sp
from benchmarks.harness import DEFAULT_DATA, RESULTS, difference, log, take_turns, write_result
from spartan_py.engines.merged.engine import MergedEngine
from spartan_py.engines.rows.engine import RowsEngine

#: name -> (engine class, options); "<kernel>/<schedule>/<mode>"
ENGINES = {
    "gpu/default/off": (RowsEngine, {"monitor": "off"}),
    "gpu/default/fused": (RowsEngine, {"monitor": "fused"}),
    "gpu/default/sampled": (RowsEngine, {"monitor": "sampled"}),
    "gpu-merged/default/off": (MergedEngine, {"monitor": "off"}),
    "gpu-merged/default/fused": (MergedEngine, {"monitor": "fused"}),
    "gpu-merged/default/sampled": (MergedEngine, {"monitor": "sampled"}),
    "gpu/one-layer/off": (RowsEngine, {"monitor": "off", "compact_every": 1}),
    "gpu/one-layer/fused": (RowsEngine, {"monitor": "fused", "compact_every": 1}),
    "gpu/one-layer/software": (RowsEngine, {"monitor": "software", "compact_every": 1}),
}


def cost(times: dict[str, list[float]], name: str, baseline: str) -> dict:
    """``name``'s extra seconds over ``baseline`` (median and p10/p90 of the per-round
    differences) and as a percentage of the baseline's median."""
    diff = difference(times, name, baseline)
    base = float(np.median(times[baseline]))
    return {
        "extra_seconds": diff["median"],
        "extra_p10_p90_seconds": [diff["p10"], diff["p90"]],
        "baseline_seconds": base,
        "extra_pct": 100 * diff["median"] / base,
    }


def main(argv: list[str] | None = None) -> int:
    """Run every engine by turns and write ``gc_monitor-<date>.json``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    network = sp.load_network(args.data / "neuron1024")
    inputs = sp.load_inputs(args.data / "sparse-images-1024-proxy60k.tsv.gz", 1024, rows=60000)
    truth = sp.read_truth(args.data / "neuron1024-l120-categories-proxy60k.tsv")

    engines = {name: kind(network, **options) for name, (kind, options) in ENGINES.items()}
    batches = {name: engine.upload(inputs) for name, engine in engines.items()}
    passed = {}
    for name, engine in engines.items():
        for _ in range(3):  # warm-up (and the CUDA graph's capture)
            engine.run_device(batches[name])
        ids, _, _ = batches[name].final_rows(engine)
        passed[name] = bool(np.array_equal(ids + 1, truth))
    log(f"truth passed: {passed}")

    times = take_turns(
        {name: lambda name=name: engines[name].run_device(batches[name]) for name in engines}, rounds=args.rounds
    )

    costs = {}
    for kernel in ("gpu", "gpu-merged"):
        for mode in ("fused", "sampled"):
            costs[f"{kernel}/default/{mode}"] = cost(times, f"{kernel}/default/{mode}", f"{kernel}/default/off")
    costs["gpu/one-layer/fused"] = cost(times, "gpu/one-layer/fused", "gpu/one-layer/off")
    costs["gpu/one-layer/software"] = cost(times, "gpu/one-layer/software", "gpu/one-layer/off")
    costs["gpu/one-layer/software_vs_default_off"] = cost(times, "gpu/one-layer/software", "gpu/default/off")
    fused_one = costs["gpu/one-layer/fused"]["extra_seconds"]
    software_one = costs["gpu/one-layer/software"]["extra_seconds"]
    fused_default = costs["gpu/default/fused"]["extra_seconds"]
    ratios = {
        "software_over_fused_one_layer_per_launch": software_one / fused_one if fused_one > 0 else float("inf"),
        "software_vs_default_off_over_fused_default": (
            costs["gpu/one-layer/software_vs_default_off"]["extra_seconds"] / fused_default
            if fused_default > 0
            else float("inf")
        ),
    }
    for name, c in costs.items():
        log(
            f"{name}: +{c['extra_seconds'] * 1e6:.1f} us ({c['extra_pct']:+.2f} %) "
            f"over {c['baseline_seconds'] * 1e3:.3f} ms"
        )
    log(f"ratios: {ratios}")
    payload = {
        "workload": "official 1024 neurons x 120 layers, 60000-row proxy input",
        "rounds": args.rounds,
        "median_seconds": {name: float(np.median(t)) for name, t in times.items()},
        "passed_truth": passed,
        "costs": costs,
        "ratios": ratios,
        "times_seconds": times,
    }
    device = engines["gpu/default/off"].device
    path = write_result("gc_monitor", device, payload, args.out)
    log(f"wrote {path}")
    fused_pct = {k: round(costs[f"{k}/default/fused"]["extra_pct"], 2) for k in ("gpu", "gpu-merged")}
    print(
        f"RESULT fused monitor {fused_pct} %; software/fused {ratios['software_over_fused_one_layer_per_launch']:.0f}x"
    )
    return 0 if all(passed.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
