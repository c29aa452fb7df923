"""The ``spartan`` command line. The only place that prints or chooses an exit status.

Exit status: 0 success (also when a truth check fails: that is a result, reported as
``passed: false``), 2 bad input, 1 any other failure.
"""

from __future__ import annotations

import argparse
import sys

from spartan_py import __version__
from spartan_py.cli import experiments, infer, machines, maps, model
from spartan_py.errors import InputError, SpartanError

# each command group's module adds its subcommands; a new group is one module and one entry here
COMMAND_GROUPS = (infer, machines, experiments, model, maps)


def _version() -> str:
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
    for group in COMMAND_GROUPS:
        group.register(commands, common)
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
