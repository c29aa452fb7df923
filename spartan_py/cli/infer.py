"""``spartan infer``: Graph Challenge inference, measured or simulated, on one device or sharded."""

from __future__ import annotations

import json
import time

from spartan_py.api import check_request, infer, network_neurons, resolve_inputs, resolve_network
from spartan_py.cli._common import backend_name, duration, duration_range, log
from spartan_py.costmodel.machine import DEFAULT_MACHINE
from spartan_py.costmodel.simulate import simulated_run_facts
from spartan_py.engines import backend_choices, check_backend, twin_backend
from spartan_py.errors import InputError
from spartan_py.files import json_ready
from spartan_py.graph_challenge.formats import read_truth
from spartan_py.graph_challenge.writers import write_truth
from spartan_py.host.executors import open_executor
from spartan_py.scale_out.rows import DEFAULT_BALANCE, SHARD_BALANCES
from spartan_py.scale_out.shard import infer_sharded
from spartan_py.trace import check_trace_path, trace_formats, write_trace


def _cmd_infer_sharded(args) -> int:
    if args.mode != "measured" or args.trace_out:
        raise InputError("--shards runs measured inference only (no --mode simulated, no --trace-out)")
    with open_executor(args.cluster, args.workers or args.shards) as workers:
        log(args, f"running {args.shards} shards of {args.inputs} on {workers.description}, backend {args.backend} ...")
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
            f"categories ({verdict})\ninference {duration(result.seconds * 1e6)} (slowest shard), "
            f"{result.edges_per_second:.3e} edges/s; {result.wall_seconds:.2f} s wall with loading"
        )
    return 0


def _check_request(args) -> None:
    """Refuse a backend that cannot run the network before anything is loaded (exit 2)."""

    if args.machine is not None and args.mode != "simulated":
        raise InputError(
            f"--machine {args.machine} names a simulated GPU: add --mode simulated "
            "(a measured run times the hardware here, whatever machine is named)"
        )
    if args.mode == "simulated" and args.machine is None:
        args.machine = DEFAULT_MACHINE

    if args.trace_out:
        check_trace_path(args.trace_out)
    backend = twin_backend(args.backend) if args.mode == "simulated" else args.backend
    check_backend(backend, network_neurons(args.network))
    # rows, layers, the layer files' names (their contents are read, and checked, on loading)
    check_request(args.network, args.inputs, layers=args.layers, rows=args.rows, read_files=False)


def _cmd_infer(args) -> int:
    _check_request(args)
    if args.shards > 1 or args.cluster:
        return _cmd_infer_sharded(args)

    started = time.perf_counter()
    log(args, f"loading network {args.network} ...")
    network = resolve_network(args.network, args.layers)
    log(args, f"loading inputs {args.inputs} ...")
    inputs = resolve_inputs(args.inputs, network.neurons, rows=args.rows)
    truth = read_truth(args.truth) if args.truth else None
    load_seconds = time.perf_counter() - started
    where = (
        f"backend {args.backend}" if args.mode == "measured" else f"the gpu kernel's CPU twin, timed for {args.machine}"
    )
    log(args, f"running {network.layers} layers x {inputs.shape[0]} rows on {where} ...")
    machine = args.machine if args.mode == "simulated" else None
    result = infer(
        network, inputs, backend=args.backend, truth=truth, load_seconds=load_seconds, mode=args.mode, machine=machine
    )
    if args.categories_out:
        write_truth(args.categories_out, result.categories)
    if args.trace_out:
        write_trace(args.trace_out, result.predicted_trace if result.predicted_trace is not None else result.trace)
    summary = result.summary()
    if result.predicted_trace is not None:
        summary.update(simulated_run_facts(result.predicted_trace, args.machine))
    if args.json:
        print(json.dumps(json_ready(summary)))
        return 0
    verdict = {None: "no truth given", True: "PASSED", False: "FAILED"}[result.passed]
    timing = " (SIMULATED: predicted by the cost model, not measured)" if result.machine else ""
    what_if = f"{summary['what_if']}: " if summary.get("what_if") else ""  # said first: no such hardware
    print(
        f"{what_if}backend {result.backend} on {result.device}{timing}: {result.neurons} neurons x "
        f"{result.layers} layers, {result.rows} rows -> {result.categories.size} categories ({verdict})"
    )
    seconds = f"inference {duration(result.seconds * 1e6)}"
    if result.predicted_trace is not None:
        seconds += " predicted" + _interval_words(summary)
    print(
        f"{seconds}, {result.edges_per_second:.3e} edges/s "
        f"(loading {result.load_seconds:.2f} s, preparing {result.prepare_seconds:.2f} s)"
    )
    if result.predicted_trace is not None:
        print(f"trust: {summary['trust']}")
    for kind, families in summary["guessed"].items():
        print(f"warning: the time includes launches priced by {kind} parameters: {', '.join(families)}")
    return 0


def _interval_words(summary: dict) -> str:
    """`` (80% interval 31.2-37.9 us, spread of ...)``, or why the prediction has none."""
    bounds = summary["interval_seconds"]
    if bounds is None:
        return f" ({summary['interval_status']})"
    return f" (80% interval {duration_range(bounds[0] * 1e6, bounds[1] * 1e6)}, spread of {summary['interval_from']})"


def register(commands, common) -> None:
    """Add ``infer`` to the ``spartan`` command's subparsers."""
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
        type=backend_name,
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
    run.add_argument(
        "--trace-out", help=f"write the kernel trace ({trace_formats()}); predicted times in simulated mode"
    )
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
