"""What every ``spartan`` command shares: progress messages and argument types."""

from __future__ import annotations

import argparse
import difflib
import sys

from spartan_py.engines import backend_choices


def log(args, message: str) -> None:
    """Print a progress message on stderr unless ``--quiet`` was given."""
    if not args.quiet:
        print(message, file=sys.stderr, flush=True)


def backend_name(text: str) -> str:
    """``--backend``'s value, or argparse's error naming the closest backend."""
    choices = backend_choices()
    if text in choices:
        return text
    close = difflib.get_close_matches(text, choices, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise argparse.ArgumentTypeError(f"unknown backend {text!r}; {hint}(choose from {', '.join(choices)})")
