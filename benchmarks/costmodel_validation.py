"""Calibrate the cost model on measured H100 traces and validate it on held-out ones (issue 5).

Reads a trace and its result file from ``benchmarks/collect_traces.py``; fits the H100's
free parameters on :data:`CALIBRATION_RUNS`; predicts every other run (other layer counts,
input sizes, a tile height and a monitor mode never fitted); writes the error tables, a
measured-vs-predicted plot and the replay speed to ``costmodel-validation-<date>.{json,md,png}``.
With ``--write`` it also stores the fitted parameters in ``sim/h100-sxm.yaml`` and carries
the efficiencies over to the other machines in ``sim/`` (marked as carried over). CPU only.

    python benchmarks/costmodel_validation.py --trace benchmarks/results/traces-....csv [--write]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._results import RESULTS, cpu_name, write_result  # noqa: E402
from spartan_py.costmodel import (  # noqa: E402
    calibrate,
    carry_over,
    kernel_error_table,
    load_machine,
    load_variants,
    machine_names,
    plot_measured_vs_predicted,
    predict,
    run_error_table,
    write_calibration,
)
from spartan_py.costmodel.families import GC_LAYER
from spartan_py.costmodel.machine import machine_path  # noqa: E402
from spartan_py.costmodel.families import TIMED_FAMILIES  # noqa: E402
from spartan_py.report.tables import markdown_table  # noqa: E402
from spartan_py.trace import read_trace  # noqa: E402

#: Runs the parameters are fitted on: three network sizes (three kernel shapes) and two
#: tile heights of the 1024-neuron kernel. Everything else in the trace is held out.
CALIBRATION_RUNS = (
    "official-l120-r60000",
    "gen1024-l120-r60000",
    "gen4096-l120-r20000",
    "gen16384-l120-r6000",
    "official-l120-r60000-tile8",
)


def replay_speed(trace: pd.DataFrame, machine, variants) -> dict:
    """Seconds to replay a 1920-launch trace, and a 1000-point what-if sweep."""
    launches = trace[trace["kernel"] == GC_LAYER]
    big = launches.sample(n=1920, replace=True, random_state=0).reset_index(drop=True)
    start = time.perf_counter()
    predict(big, machine)
    one = time.perf_counter() - start
    official = trace[trace["run"] == CALIBRATION_RUNS[0]]
    machines = [load_machine(name) for name in machine_names()]
    points = 0
    start = time.perf_counter()
    for scale in np.linspace(0.5, 4.0, 36):
        for target in machines:
            for variant in [None, *variants.values()]:
                if points == 1000:
                    break
                scaled = target.with_specs(memory_bandwidth_gb_s=target.specs.memory_bandwidth_gb_s * scale)
                predict(official, scaled, variant)
                points += 1
    sweep = time.perf_counter() - start
    return {"replay_1920_launches_s": one, "sweep_points": points, "sweep_s": sweep}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, required=True)
    parser.add_argument("--meta", type=Path, help="the trace's result file (default: the newest traces-*.json beside it)")
    parser.add_argument("--machine", default="h100-sxm")
    parser.add_argument("--write", action="store_true", help="store the fitted parameters in sim/")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    meta_path = args.meta or sorted(args.trace.parent.glob("traces-*.json"))[-1]
    meta = json.loads(meta_path.read_text())
    trace = read_trace(args.trace)
    unknown = set(CALIBRATION_RUNS) - set(trace["run"])
    if unknown:
        raise SystemExit(f"runs missing from {args.trace}: {sorted(unknown)}")
    fitted_on = trace["run"].isin(CALIBRATION_RUNS)
    source = f"fit on {args.trace.name} (runs {', '.join(CALIBRATION_RUNS)}; commit {meta['commit']}, {meta['device']})"
    machine = calibrate(trace[fitted_on], load_machine(args.machine), source=source)

    predicted = predict(trace, machine)
    held_out = predicted[~fitted_on]
    kernels = kernel_error_table(held_out)
    kernels_fit = kernel_error_table(predicted[fitted_on])
    runs = run_error_table(predicted, TIMED_FAMILIES)
    runs["held_out"] = ~runs["run"].isin(CALIBRATION_RUNS)
    runs["what_differs"] = runs["run"].map(lambda r: meta["cases"][r]["role"].removeprefix("holdout: ") if r not in CALIBRATION_RUNS else "fitted")
    runs["graph_replay_us"] = runs["run"].map(lambda r: meta["cases"][r]["graph_replay_median_us"])
    runs["error_vs_replay_pct"] = 100 * (runs["predicted_us"] - runs["graph_replay_us"]) / runs["graph_replay_us"]
    speed = replay_speed(trace, machine, load_variants())

    stamp = time.strftime("%Y%m%d-%H%M%S")
    plot = plot_measured_vs_predicted(
        held_out, args.out / f"costmodel-validation-{stamp}.png", title=f"{machine.name}: held-out launches and copies"
    )
    held = runs[runs["held_out"]]
    summary = {
        "held_out_median_abs_error_pct_by_kernel": dict(zip(kernels["kernel"], kernels["median_abs_error_pct"])),
        "held_out_max_whole_run_abs_error_pct": float(held["abs_error_pct"].max()),
        "held_out_max_whole_run_abs_error_vs_replay_pct": float(held["error_vs_replay_pct"].abs().max()),
        "held_out_median_whole_run_abs_error_pct": float(held["abs_error_pct"].median()),
    }
    payload = {
        "trace": args.trace.name, "trace_result": meta_path.name, "trace_commit": meta["commit"],
        "trace_device": meta["device"], "calibration_runs": list(CALIBRATION_RUNS), "machine": machine.name,
        "calibration": {k: v.model_dump() for k, v in machine.calibration.items()}, "summary": summary,
        "kernel_errors_held_out": kernels.to_dict(orient="records"),
        "kernel_errors_fitted": kernels_fit.to_dict(orient="records"), "run_errors": runs.to_dict(orient="records"),
        "replay_speed": {**speed, "cpu": cpu_name()}, "plot": plot.name,
    }  # fmt: skip
    result = write_result("costmodel-validation", meta["device"] + " (traces); fit on " + cpu_name(), payload, args.out)
    columns = ["run", "what_differs", "records", "measured_us", "predicted_us", "error_pct", "graph_replay_us", "error_vs_replay_pct"]
    report = (
        f"# Cost model validation ({machine.name})\n\nTrace `{args.trace.name}` (commit {meta['commit']}, {meta['device']}). "
        f"Fitted on {', '.join(CALIBRATION_RUNS)}.\n\n## Held-out records, per kernel\n\n{markdown_table(kernels)}\n"
        f"## Whole runs (kernel launches; measured = per-launch events summed, and one CUDA-graph replay)\n\n"
        f"{markdown_table(runs[columns])}\n## Fitted records, per kernel\n\n{markdown_table(kernels_fit)}\n"
        f"Replay: a 1920-launch trace in {speed['replay_1920_launches_s']:.3f} s; {speed['sweep_points']} what-if "
        f"points in {speed['sweep_s']:.1f} s on {cpu_name()}.\n\n![measured vs predicted]({plot.name})\n"
    )  # fmt: skip
    (args.out / f"{result.stem}.md").write_text(report)
    print(report)
    if args.write:
        write_calibration(machine_path(machine.name), machine.calibration)
        for name in machine_names():
            if name != machine.name:
                target = carry_over(machine, load_machine(name))
                write_calibration(machine_path(name), target.calibration)
        print(f"wrote the calibration into sim/ ({len(machine_names())} machines)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
