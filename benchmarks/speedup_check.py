"""Predicted against measured H100 -> H200 speed-ups per kernel family on the committed
development pairs (:mod:`spartan_py.costmodel.speedup_check`), as a Markdown table: every family
of 5 or more matched launches, the model's speed-up and each GPU's per-launch median error.

    python -m benchmarks.speedup_check            # the machine files as committed
"""

from __future__ import annotations

import argparse

from spartan_py.costmodel.machine import load_machine
from spartan_py.costmodel.speedup_check import development_speedups


def table() -> str:
    """The Markdown table, one row per (pair, family)."""
    found = development_speedups((load_machine("h100-sxm"), load_machine("h200-sxm")))
    lines = [
        "| pair | family | launches | measured | predicted | off | H100 median | H200 median |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in found.itertuples():
        lines.append(
            f"| {row.pair} | `{row.family}` | {row.launches} | {row.measured:.2f} | "
            f"{row.predicted:.2f} | {row.off_pct:+.1f}% | {row.first_median_pct:.1f}% | {row.second_median_pct:.1f}% |"
        )
    return "\n".join(lines)


def main() -> None:
    """Print the table (``--help``: what it is)."""
    argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0]).parse_args()
    print(table())


if __name__ == "__main__":
    main()
