"""The validation figures the docs quote, made from the machine files (one source).

``docs/cost-model.md`` includes :data:`TABLE_PATH` (a committed Markdown table); a test
regenerates it with :func:`trust_table` and fails when the two differ, so the docs,
``spartan machines`` and ``spartan_py.trust`` always quote the same figures with the same
scope. Rewrite it after a machine file's ``validation:`` changes::

    python -m spartan_py.costmodel.published
"""

from __future__ import annotations

from pathlib import Path

from spartan_py.costmodel.machine import Machine, load_machine, load_variants, machine_names
from spartan_py.costmodel.releases import KIND_ORDER, entries, entry_text
from spartan_py.files import atomic_write_text

TABLE_PATH = Path("docs") / "snippets" / "trust-table.md"
"""Where the committed table lives, relative to the repository (outside the docs' nav)."""


UNVALIDATED = "**not validated**: the calibration carried over from another GPU"


def _status(machine: Machine) -> str:
    if not machine.validation:
        return UNVALIDATED
    kinds = [kind for kind in KIND_ORDER if any(e.kind == kind for e in entries(machine))]
    return f"**validated** ({', '.join(kinds)})"


def _figures(machine: Machine) -> str:
    if not machine.validation:
        return "what-if estimates"
    return "; ".join(entry_text(e, commit=True) for e in entries(machine))


def trust_table() -> str:
    """The Markdown table of every machine and variant: its status and its figures with their scope,
    each set of runs' kind first (:mod:`spartan_py.costmodel.releases`), blind releases and newest first."""
    lines = ["| machine | status | figures (scope, device, commit, result file) |", "| --- | --- | --- |"]
    unvalidated = []
    for name in machine_names():
        machine = load_machine(name)
        if machine.validation:
            lines.append(f"| `{name}` | {_status(machine)} | {_figures(machine)} |")
        else:
            unvalidated.append(f"`{name}`")
    if unvalidated:
        lines.append(f"| {', '.join(unvalidated)} | {UNVALIDATED} | what-if estimates |")
    for variant in load_variants().values():
        lines.append(f"| any `+{variant.name}` | {variant.status()} | never measured |")
    return "\n".join(lines) + "\n"


def main() -> None:
    """Rewrite the committed table (run from the repository's root)."""

    atomic_write_text(TABLE_PATH, trust_table())


if __name__ == "__main__":
    main()
