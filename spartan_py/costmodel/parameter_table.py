"""The H100 calibration's parameter counts as docs/cost-model.md quotes them, made from the fit.

``docs/cost-model.md`` includes :data:`TABLE_PATH`; a test regenerates it with
:func:`parameter_table` and fails when the two differ. Rewrite it after a refit::

    python -m spartan_py.costmodel.parameter_table
"""

from __future__ import annotations

from pathlib import Path

from spartan_py.costmodel.machine import load_machine
from spartan_py.costmodel.parameters import NEAR_BOUND, count_parameters
from spartan_py.files import atomic_write_text

TABLE_PATH = Path("docs") / "snippets" / "parameter-counts.md"
"""Where the committed table lives, relative to the repository (outside the docs' nav)."""

CALIBRATED = "h100-sxm"
"""The machine whose fit every other carries over."""


def parameter_table(name: str = CALIBRATED) -> str:
    """The Markdown table of ``name``'s free parameters: entries, count, near a bound, records
    per parameter (pooled, fewest of a family, fewest of an entry)."""
    counts = count_parameters(load_machine(name))
    rows = [
        ("calibration entries (families and compiled instances)", f"{counts.entries}"),
        ("free parameters", f"{counts.free}"),
        (f"of them within {NEAR_BOUND:.1%} of a bound", f"{counts.near_bound}"),
        ("records fitted (each family's once)", f"{counts.records}"),
        ("records per free parameter, all families", f"{counts.records_per_parameter:.1f}"),
        ("fewest records per free parameter of a family", f"{counts.min_family_records_per_parameter:.1f}"),
        ("fewest records per free parameter of an entry", f"{counts.min_entry_records_per_parameter:.1f}"),
    ]
    lines = [f"| `{name}` fit (sim/fits/{name}.yaml) | |", "| --- | --- |"]
    return "\n".join(lines + [f"| {label} | {value} |" for label, value in rows]) + "\n"


def main() -> None:
    """Rewrite the committed table (run from the repository's root)."""
    atomic_write_text(TABLE_PATH, parameter_table())


if __name__ == "__main__":
    main()
