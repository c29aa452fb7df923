"""The ``spartan`` command line. The only place that prints or chooses an exit status.

Exit status: 0 success (also when a truth check fails: that is a result, reported as
``passed: false``), 2 bad input, 1 any other failure.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

from spartan_py.costmodel.machine import DEFAULT_MACHINE
from spartan_py.engines import backend_choices
from spartan_py.errors import InputError, SpartanError
from spartan_py.files import json_ready
from spartan_py.shard_rows import DEFAULT_BALANCE, SHARD_BALANCES


def _log(args, message: str) -> None:
    if not args.quiet:
        print(message, file=sys.stderr, flush=True)


def _cmd_infer_sharded(args) -> int:
    from spartan_py.executors import open_executor
    from spartan_py.graph_challenge.writers import write_truth
    from spartan_py.shard import infer_sharded

    if args.mode != "measured" or args.trace_out:
        raise InputError("--shards runs measured inference only (no --mode simulated, no --trace-out)")
    with open_executor(args.cluster, args.workers or args.shards) as workers:
        _log(
            args, f"running {args.shards} shards of {args.inputs} on {workers.description}, backend {args.backend} ..."
        )
        result = infer_sharded(
            args.network,
            args.inputs,
            workers=workers,
            shards=args.shards,
            backend=args.backend,
            layers=args.layers,
            rows=args.rows,
            truth=args.truth,
            balance=args.balance,
        )
    if args.categories_out:
        write_truth(args.categories_out, result.categories)
    if args.json:
        print(json.dumps(json_ready(result.summary())))
    else:
        verdict = {None: "no truth given", True: "PASSED", False: "FAILED"}[result.passed]
        print(
            f"backend {result.backend} in {len(result.shard_rows)} shards ({', '.join(sorted(set(result.devices)))}): "
            f"{result.neurons} neurons x {result.layers} layers, {result.rows} rows -> {result.categories.size} "
            f"categories ({verdict})\ninference {result.seconds:.3f} s (slowest shard), "
            f"{result.edges_per_second:.3e} edges/s; {result.wall_seconds:.2f} s wall with loading"
        )
    return 0


def _backend_name(text: str) -> str:
    """``--backend``'s value, or argparse's error naming the closest backend."""
    choices = backend_choices()
    if text in choices:
        return text
    import difflib

    close = difflib.get_close_matches(text, choices, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise argparse.ArgumentTypeError(f"unknown backend {text!r}; {hint}(choose from {', '.join(choices)})")


def _check_request(args) -> None:
    """Refuse a backend that cannot run the network before anything is loaded (exit 2)."""
    from spartan_py.api import network_neurons
    from spartan_py.engines import check_backend, twin_backend

    if args.machine is not None and args.mode != "simulated":
        raise InputError(
            f"--machine {args.machine} names a simulated GPU: add --mode simulated "
            "(a measured run times the hardware here, whatever machine is named)"
        )
    if args.mode == "simulated" and args.machine is None:
        args.machine = DEFAULT_MACHINE

    backend = twin_backend(args.backend) if args.mode == "simulated" else args.backend
    check_backend(backend, network_neurons(args.network))


def _cmd_infer(args) -> int:
    from spartan_py.api import infer, resolve_inputs, resolve_network

    _check_request(args)
    if args.shards > 1 or args.cluster:
        return _cmd_infer_sharded(args)
    from spartan_py.graph_challenge.formats import read_truth
    from spartan_py.graph_challenge.writers import write_truth

    started = time.perf_counter()
    _log(args, f"loading network {args.network} ...")
    network = resolve_network(args.network, args.layers)
    _log(args, f"loading inputs {args.inputs} ...")
    inputs = resolve_inputs(args.inputs, network.neurons, rows=args.rows)
    truth = read_truth(args.truth) if args.truth else None
    load_seconds = time.perf_counter() - started
    where = (
        f"backend {args.backend}" if args.mode == "measured" else f"the gpu kernel's CPU twin, timed for {args.machine}"
    )
    _log(args, f"running {network.layers} layers x {inputs.shape[0]} rows on {where} ...")
    machine = args.machine if args.mode == "simulated" else None
    result = infer(
        network, inputs, backend=args.backend, truth=truth, load_seconds=load_seconds, mode=args.mode, machine=machine
    )
    if args.categories_out:
        write_truth(args.categories_out, result.categories)
    if args.trace_out:
        from spartan_py.trace import write_trace

        write_trace(args.trace_out, result.predicted_trace if result.predicted_trace is not None else result.trace)
    summary = result.summary()
    if args.json:
        print(json.dumps(json_ready(summary)))
    else:
        verdict = {None: "no truth given", True: "PASSED", False: "FAILED"}[result.passed]
        timing = " (SIMULATED: predicted by the cost model, not measured)" if result.machine else ""
        print(
            f"backend {result.backend} on {result.device}{timing}: {result.neurons} neurons x {result.layers} layers, "
            f"{result.rows} rows -> {result.categories.size} categories ({verdict})\n"
            f"inference {result.seconds:.3f} s, {result.edges_per_second:.3e} edges/s "
            f"(loading {result.load_seconds:.2f} s, preparing {result.prepare_seconds:.2f} s)"
        )
        for kind, families in summary["guessed"].items():
            print(f"warning: the time includes launches priced by {kind} parameters: {', '.join(families)}")
    return 0


def _cmd_machines(args) -> int:
    from spartan_py.costmodel import load_machine, load_variants, machine_names

    rows = []
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
                "validation": [v.model_dump() for v in machine.validation],
                "status": machine.validation_summary(),
            }
        )
    variants = {v.name: f"{v.description} ({v.status()})" for v in load_variants().values()}
    if args.json:
        print(json.dumps(json_ready({"machines": rows, "variants": variants})))
        return 0
    for row in rows:
        calibration = "calibrated" if row["calibrated"] else ("carried over" if row["carried_over"] else "uncalibrated")
        validated = "VALIDATED" if row["validated"] else "not validated"
        print(
            f"{row['name']:<12} {row['sm_count']:>4} SMs {row['memory_bandwidth_gb_s']:>6.0f} GB/s "
            f"{row['fp32_tflops']:>5.1f} FP32 TFLOPS  {calibration:<13} {validated:<13} {row['description']}"
        )
        print(f"{'':<12} {row['status']}")
    print("variants (MACHINE+VARIANT):")
    for name, text in variants.items():
        print(f"  {name}: {text}")
    return 0


def _cmd_simulate(args) -> int:
    from spartan_py.costmodel.simulate import read_replayable_trace, replay_summary
    from spartan_py.runner.store import run_environment
    from spartan_py.trace import write_trace

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
        print(f"{entry['machine']}: {entry['trust']}")
        if entry["host"]:
            print(f"  host assumed: {entry['host']} (sim/hosts/)")
        print(f"  {entry['interval_status']}")
        for run, us in entry["predicted_us_by_run"].items():
            label = run or "(unnamed)"
            if us is None:
                print(f"  run {label}: no total: {entry['unpriced_by_run'][run]}")
            elif run in entry["interval_us_by_run"]:
                span = entry["interval_us_by_run"][run]
                print(
                    f"  run {label}: {us / 1e3:.3f} ms (kernel launches; 80% interval "
                    f"{span['low_us'] / 1e3:.3f}-{span['high_us'] / 1e3:.3f} ms, spread of {span['from']})"
                )
            else:
                print(f"  run {label}: {us / 1e3:.3f} ms (kernel launches)")
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
            print(f"  measured on {', '.join(entry['measured_on'])}: not this machine, so no error against it")
        for row in entry.get("error_by_run", []):
            print(
                f"  run {row['run']}: measured {row['measured_us'] / 1e3:.3f} ms, model error {row['error_pct']:+.1f}%"
            )
    return 0


def _cmd_run(args) -> int:
    from spartan_py.runner import load_experiment, run_experiment

    experiment, points = load_experiment(args.file)
    if args.only:
        try:
            pattern = re.compile(args.only)
        except re.error as exc:
            raise InputError(f"--only: not a regular expression: {exc}") from None
        points = [point for point in points if pattern.search(point.label)]
        if not points:
            raise InputError(f"--only {args.only!r}: no point of {args.file} has a matching label (see --check)")
    if args.check:
        from spartan_py.runner.execute import unavailable_here

        blocked = {point.id: unavailable_here(point) for point in points}
        cannot = sum(reason is not None for reason in blocked.values())
        plural = "s" if len(points) != 1 else ""
        here = f"; {cannot} cannot run on this machine (marked *)" if cannot else ""
        print(f"{args.file}: valid; {len(points)} point{plural}{here}")
        for point in points:
            reason = blocked[point.id]
            print(f"  {point.id}  {point.label}" + (f"  * {reason}" if reason else ""))
        return 0
    out = Path(args.out) if args.out else Path("runs") / experiment.name
    _log(args, f"{experiment.name}: {len(points)} points -> {out}")
    from tqdm import tqdm

    bar = tqdm(total=len(points), unit="point", disable=args.quiet, file=sys.stderr)

    def on_point(point, record, skipped):
        state = "done before" if skipped else record["status"]
        bar.set_postfix_str(f"{point.label[:40]}: {state}")
        bar.update(1)
        if record["status"] == "failed" and not skipped:
            bar.write(f"point {point.id} ({point.label}) failed: {record['error']}", file=sys.stderr)

    from spartan_py.executors import open_executor

    cluster = args.cluster if args.cluster is not None else experiment.executor.cluster
    with open_executor(cluster, args.workers or experiment.executor.workers) as workers:
        _log(args, f"running on {workers.description}")
        summary = run_experiment(experiment, points, out, force=args.force, on_point=on_point, workers=workers)
    bar.close()
    print(
        f"{out}: {summary.ran} points run, {summary.skipped} already done, {summary.failed} failed; "
        f"tables (*.csv) and points/ written"
    )
    from spartan_py.runner.store import guessed_predictions

    guessed = guessed_predictions(out)
    if guessed:
        print(
            f"warning: {guessed[0]} of {guessed[1]} predictions in simulated.csv include launches priced by "
            "a family-wide fallback or the defaults (its column guessed)"
        )
    if args.report:
        from spartan_py.report import write_report

        html_path, md_path = write_report(out)
        print(f"report: {html_path} and {md_path}")
    return 0 if summary.failed == 0 else 1


def _cmd_report(args) -> int:
    from spartan_py.report import write_report

    html_path, md_path = write_report(args.dir, against=args.against, predictions=args.predictions)
    print(f"report: {html_path} and {md_path}")
    return 0


def _version() -> str:
    from spartan_py import __version__

    return __version__


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``spartan`` command."""
    parser = argparse.ArgumentParser(prog="spartan", description="Activation-sparsity studies on GPUs.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of unexpected errors")
    parser.add_argument("--version", action="version", version=f"spartan {_version()}")
    # --debug is taken after the subcommand too (the error hint says "run with --debug");
    # SUPPRESS keeps a subcommand's absent flag from overwriting the one given before it
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks")
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("infer", parents=[common], help="Sparse DNN Graph Challenge inference")
    run.add_argument(
        "--network",
        required=True,
        help="directory of n{N}-l{i}.tsv[.gz]|.mtx files, generated:N[:SEED] or generated-unmergeable:N[:SEED]",
    )
    run.add_argument("--inputs", required=True, help="input rows file (TSV triples or .mtx), or generated:ROWS[:SEED]")
    run.add_argument("--layers", type=int, help="layers to run (default: all files; 120 for a generated network)")
    run.add_argument("--rows", type=int, help="input row count (default: the largest row index in the file)")
    run.add_argument(
        "--backend",
        default="auto",
        type=_backend_name,
        metavar="{" + ",".join(backend_choices()) + "}",
        help="default: auto (GPU if present, else CPU)",
    )
    run.add_argument("--truth", help="truth categories file to check against")
    run.add_argument("--categories-out", help="write the categories (1-based rows) to this file")
    run.add_argument(
        "--mode",
        default="measured",
        choices=("measured", "simulated"),
        help="simulated: run the GPU kernel's CPU twin and take times from the cost model",
    )
    run.add_argument(
        "--machine", help=f"sim/ machine for --mode simulated (NAME or NAME+VARIANT; default {DEFAULT_MACHINE})"
    )
    run.add_argument("--trace-out", help="write the kernel trace (CSV or .parquet); predicted times in simulated mode")
    run.add_argument("--json", action="store_true", help="print one JSON object")
    run.add_argument("--quiet", action="store_true", help="no progress messages on stderr")
    run.add_argument(
        "--shards",
        type=int,
        default=1,
        help="split the rows into this many shards run at once "
        "(one per worker; on GPUs, one per GPU) and merge them exactly",
    )
    run.add_argument(
        "--cluster",
        help="run the shards on Dask: local, local-cuda (a worker per GPU) or a scheduler "
        "address tcp://host:8786 (default: local processes)",
    )
    run.add_argument("--workers", type=int, help="worker processes for --shards (default: one per shard)")
    run.add_argument(
        "--balance", choices=SHARD_BALANCES, default=DEFAULT_BALANCE, help="--shards' rows: by work, or blocks"
    )
    run.set_defaults(handler=_cmd_infer)

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

    experiment = commands.add_parser(
        "run", parents=[common], help="run an experiment file (YAML): every point of its sweep"
    )
    experiment.add_argument("file", help="experiment YAML (see experiments/README.md)")
    experiment.add_argument("--out", help="run folder (default: runs/<name>); a rerun resumes unfinished points")
    experiment.add_argument("--check", action="store_true", help="validate the file and list its points; run nothing")
    experiment.add_argument("--force", action="store_true", help="recompute points already finished")
    experiment.add_argument("--only", metavar="REGEX", help="run only the points whose label matches (see --check)")
    experiment.add_argument("--report", action="store_true", help="write the report when done")
    experiment.add_argument(
        "--cluster",
        help="run the points as Dask tasks: local, local-cuda, or a scheduler "
        "address tcp://host:8786 (default: the file's executor.cluster, else no Dask)",
    )
    experiment.add_argument("--workers", type=int, help="worker processes (default: the file's executor.workers, 1)")
    experiment.add_argument("--quiet", action="store_true", help="no progress bar")
    experiment.set_defaults(handler=_cmd_run)

    report = commands.add_parser("report", parents=[common], help="write report.html and report.md for a run folder")
    report.add_argument("dir", help="a folder written by `spartan run`")
    report.add_argument(
        "--against",
        help="the same experiment's run folder from the GPU the cost model was fitted on: "
        "adds the cross-machine fidelity tables",
    )
    report.add_argument("--predictions", help="with --against: the blind predictions file written before this run")
    report.set_defaults(handler=_cmd_report)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point: parse ``argv``, run the command, map errors to exit statuses."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except InputError as exc:
        print(f"spartan: error: {exc}", file=sys.stderr)
        return 2
    except SpartanError as exc:
        print(f"spartan: error: {exc}", file=sys.stderr)
        return 1
    except MemoryError:
        print("spartan: error: out of host memory; try fewer rows or a smaller network", file=sys.stderr)
        return 1
    except Exception as exc:  # last resort: one line, not a traceback, unless --debug
        if args.debug:
            raise
        print(f"spartan: error: unexpected {type(exc).__name__}: {exc} (run with --debug for details)", file=sys.stderr)
        return 1
