"""``spartan machines`` and ``spartan simulate``: the described GPUs and replays of traces on them."""

from __future__ import annotations

import json
from pathlib import Path

from spartan_py.cli._common import duration, duration_range
from spartan_py.costmodel import load_machine, load_variants, machine_names
from spartan_py.costmodel.releases import entries, trust_lines
from spartan_py.costmodel.simulate import read_replayable_trace, replay_summary
from spartan_py.costmodel.whole_runs import WORKLOAD_NAMES
from spartan_py.files import json_ready
from spartan_py.runner.store import run_environment
from spartan_py.trace import check_trace_path, write_trace


def _cmd_machines(args) -> int:
    rows: list[dict] = []
    for name in machine_names():
        machine = load_machine(name)
        specs = machine.specs
        fitted = [k for k, v in machine.calibration.items() if v.records > 0]
        carried = [k for k, v in machine.calibration.items() if v.records == 0]
        rows.append(
            {
                "name": name,
                "description": machine.description,
                "sm_count": specs.sm_count,
                "memory_bandwidth_gb_s": specs.memory_bandwidth_gb_s,
                "fp32_tflops": specs.fp32_tflops,
                "calibrated": fitted,
                "carried_over": carried,
                "validated": machine.validated,
                # blind releases first, newest first; each with its kind and calibration mark
                "validation": [entry.as_dict() for entry in entries(machine)],
                "trust_lines": trust_lines(machine),
                "status": machine.validation_summary(),
            }
        )
    variants = {v.name: f"{v.status()}: {v.description}" for v in load_variants().values()}
    if args.json:
        print(json.dumps(json_ready({"machines": rows, "variants": variants})))
        return 0
    for row in rows:  # at most three lines a machine: its specs, then its trust lines
        calibration = "calibrated" if row["calibrated"] else ("carried over" if row["carried_over"] else "uncalibrated")
        validated = "VALIDATED" if row["validated"] else "not validated"
        print(
            f"{row['name']:<12} {row['sm_count']:>4} SMs {row['memory_bandwidth_gb_s']:>6.0f} GB/s "
            f"{row['fp32_tflops']:>5.1f} FP32 TFLOPS  {calibration:<13} {validated:<13} {row['description']}"
        )
        for line in row["trust_lines"]:
            print(f"{'':<12} {line}")
    print("variants (MACHINE+VARIANT):")
    for name, text in variants.items():
        print(f"  {name}: {text}")
    return 0


def _run_line(entry: dict, run: str, us: float | None) -> str:
    label = run or "(unnamed)"
    if us is None:
        return f"  run {label}: no total: {entry['unpriced_by_run'][run]}"
    span = entry["interval_us_by_run"].get(run)
    if span is None:
        return f"  run {label}: {duration(us)} (kernel launches)"
    return (
        f"  run {label}: {duration(us)} (kernel launches; 80% interval "
        f"{duration_range(span['low_us'], span['high_us'])}, spread of {span['from']})"
    )


def _beside_line(us: float | None, beside: dict[str, dict]) -> str:
    """The launches a run's total leaves out (copies, synchronisations, ...), and their share."""
    parts = [
        f"{kernel} {'no price' if total['predicted_us'] is None else duration(total['predicted_us'])} "
        f"({total['launches']})"
        for kernel, total in beside.items()
    ]
    prices = [total["predicted_us"] for total in beside.values()]
    share = ""
    if us is not None and all(p is not None for p in prices) and us + sum(prices) > 0:
        share = f"; {100 * sum(prices) / (us + sum(prices)):.0f}% of the run's predicted time"
    return f"    beside it, not in that total: {', '.join(parts)}{share}"


def _error_line(row: dict) -> str:
    inside = {True: ", inside its 80% interval", False: ", outside its 80% interval", None: ""}[row["inside_interval"]]
    partial = "" if row["records"] == row["launches"] else f" ({row['records']} of {row['launches']} launches measured)"
    return (
        f"  run {row['run']}: measured {duration(row['measured_us'])}, model error {row['error_pct']:+.1f}%"
        f"{inside}{partial}"
    )


def _print_replay(entry: dict) -> None:
    print(f"{entry['machine']}: {entry['trust']}")
    if entry["host"]:
        print(f"  host assumed: {entry['host']} (sim/hosts/)")
    print(f"  {entry['interval_status']}")
    for run, us in entry["predicted_us_by_run"].items():
        print(_run_line(entry, run, us))
        if run in entry["beside_by_run"]:
            print(_beside_line(us, entry["beside_by_run"][run]))
    for difference in entry["assumption_differences"]:
        print(f"  warning: the run's GPU reports {difference}")
    for kind, families in entry["guessed"].items():
        print(f"  warning: totals include launches priced by {kind} parameters: {', '.join(families)}")
    if entry["left_out"]:
        families = ", ".join(f"{k} ({v})" for k, v in entry["left_out"].items())
        print(f"  left out of every total (the model does not describe them): {families}")
    for note in entry["notes"]:
        print(f"  note: {note}")
    if entry["measured_on"] and not entry["compared"]:
        why = "the what-if is not that GPU" if entry["what_if"] else "not this machine"
        print(f"  measured on {', '.join(entry['measured_on'])}: {why}, so no error against it")
    for row in entry.get("error_by_run", []):
        print(_error_line(row))
    for name, count in entry.get("by_workload", {}).items():  # Graph Challenge and conv runs apart
        without = count["runs"] - count["with_interval"]
        inside = (
            f"{count['inside_interval']} of {count['with_interval']} inside their 80% interval"
            + (f" ({without} without one)" if without else "")
            if count["with_interval"]
            else "none with an interval"
        )
        print(
            f"  {WORKLOAD_NAMES[name]}: {count['within_10pct']} of {count['runs']} runs within 10%, {inside}, "
            f"median |error| {count['median_abs_pct']:.1f}%"
        )


def _cmd_simulate(args) -> int:
    if args.out:
        check_trace_path(args.out)
    trace = read_replayable_trace(args.trace)
    environment = run_environment(args.trace)
    results = []
    for name in args.machine:
        entry, predicted = replay_summary(trace, name, args.host, environment)
        results.append(entry)
        if args.out:
            out = (
                args.out
                if len(args.machine) == 1
                else args.out.with_name(f"{args.out.stem}-{entry['machine']}{args.out.suffix}")
            )
            write_trace(out, predicted)
    if args.json:
        print(json.dumps(json_ready(results)))
        return 0
    for entry in results:
        _print_replay(entry)
    return 0


def register(commands, common) -> None:
    """Add ``machines`` and ``simulate`` to the ``spartan`` command's subparsers."""
    machines = commands.add_parser(
        "machines", parents=[common], help="list the described GPUs (sim/) and what-if variants"
    )
    machines.add_argument("--json", action="store_true")
    machines.set_defaults(handler=_cmd_machines)

    simulate = commands.add_parser(
        "simulate", parents=[common], help="replay a recorded trace on described GPUs (cost model)"
    )
    simulate.add_argument(
        "trace",
        help="a trace file (CSV or Parquet) from `spartan infer --trace-out` or a benchmark, "
        "or a `spartan run` folder (every point's trace)",
    )
    simulate.add_argument("--machine", action="append", required=True, help="NAME or NAME+VARIANT; repeat for several")
    simulate.add_argument(
        "--host",
        help="assume this host (sim/hosts/NAME.yaml: its launch and sync latencies) instead of each machine's own",
    )
    simulate.add_argument("--out", type=Path, help="write the predicted trace here (one file per machine if several)")
    simulate.add_argument("--json", action="store_true")
    simulate.set_defaults(handler=_cmd_simulate)
