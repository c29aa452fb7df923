"""The ``spartan`` command line. The only place that prints or chooses an exit status.

Exit status: 0 success (also when a truth check fails: that is a result, reported as
``passed: false``), 2 bad input, 1 any other failure.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from spartan_py.engines import BACKEND_CHOICES
from spartan_py.errors import InputError, SpartanError


def _log(args, message: str) -> None:
    if not args.quiet:
        print(message, file=sys.stderr, flush=True)


def _cmd_infer(args) -> int:
    from spartan_py.api import infer, resolve_inputs, resolve_network
    from spartan_py.graph_challenge.formats import read_truth, write_truth

    started = time.perf_counter()
    _log(args, f"loading network {args.network} ...")
    network = resolve_network(args.network, args.layers)
    _log(args, f"loading inputs {args.inputs} ...")
    inputs = resolve_inputs(args.inputs, network.neurons, rows=args.rows)
    truth = read_truth(args.truth) if args.truth else None
    load_seconds = time.perf_counter() - started
    _log(args, f"running {network.layers} layers x {inputs.shape[0]} rows on backend {args.backend} ...")
    result = infer(network, inputs, backend=args.backend, truth=truth, load_seconds=load_seconds)
    if args.categories_out:
        write_truth(args.categories_out, result.categories)
    summary = result.summary()
    if args.json:
        print(json.dumps(summary))
    else:
        verdict = {None: "no truth given", True: "PASSED", False: "FAILED"}[result.passed]
        print(
            f"backend {result.backend} on {result.device}: {result.neurons} neurons x {result.layers} layers, "
            f"{result.rows} rows -> {result.categories.size} categories ({verdict})\n"
            f"inference {result.seconds:.3f} s, {result.edges_per_second:.3e} edges/s "
            f"(loading {result.load_seconds:.2f} s, preparing {result.prepare_seconds:.2f} s)"
        )
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``spartan`` command."""
    parser = argparse.ArgumentParser(prog="spartan", description="Activation-sparsity studies on GPUs.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of unexpected errors")
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("infer", help="Sparse DNN Graph Challenge inference")
    run.add_argument("--network", required=True, help="directory of n{N}-l{i}.tsv[.gz]|.mtx files, or generated:N[:SEED]")
    run.add_argument("--inputs", required=True, help="input rows file (TSV triples or .mtx), or generated:ROWS[:SEED]")
    run.add_argument("--layers", type=int, help="layers to run (default: all files; 120 for a generated network)")
    run.add_argument("--rows", type=int, help="input row count (default: the largest row index in the file)")
    run.add_argument("--backend", default="auto", choices=BACKEND_CHOICES, help="default: auto (GPU if present, else CPU)")
    run.add_argument("--truth", help="truth categories file to check against")
    run.add_argument("--categories-out", help="write the categories (1-based rows) to this file")
    run.add_argument("--json", action="store_true", help="print one JSON object")
    run.add_argument("--quiet", action="store_true", help="no progress messages on stderr")
    run.set_defaults(handler=_cmd_infer)
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
