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


def duration(us: float) -> str:
    """A time for people: microseconds below a millisecond, milliseconds below a second, else
    seconds; four significant figures at least, so a short time is never printed as zero."""
    if us < 1e3:
        return f"{us:#.4g}".rstrip(".") + " us"
    if us < 1e6:
        return f"{us / 1e3:.3f} ms"
    return f"{us / 1e6:.3f} s"


def duration_range(low_us: float, high_us: float) -> str:
    """An interval as :func:`duration` writes its ends, the unit once where both share it."""
    low, high = duration(low_us), duration(high_us)
    low_value, low_unit = low.split(" ")
    if high.endswith(f" {low_unit}"):
        return f"{low_value}-{high}"
    return f"{low} to {high}"
