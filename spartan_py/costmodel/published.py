"""The validation figures the docs quote, made from the machine files (one source).

The results page includes :data:`TABLE_PATH` and ``docs/cost-model.md`` :data:`RELEASES_PATH`
(committed Markdown tables); a test regenerates them with :func:`trust_table` and
:func:`release_table` and fails when they differ, so the docs, ``spartan machines`` and
``spartan_py.trust`` always quote the same figures with the same scope, Graph Challenge and
conv whole runs apart. Rewrite them after a machine file's ``validation:`` changes::

    python -m spartan_py.costmodel.published
"""

from __future__ import annotations

from pathlib import Path

from spartan_py.costmodel.machine import Machine, load_machine, load_variants, machine_names
from spartan_py.costmodel.releases import DEVELOPMENT, DRAWN_SET, KIND_ORDER, entries, entry_text
from spartan_py.costmodel.whole_runs import WORKLOAD_NAMES, WORKLOADS
from spartan_py.files import atomic_write_text

TABLE_PATH = Path("docs") / "snippets" / "trust-table.md"
"""Where the committed table lives, relative to the repository (outside the docs' nav)."""
RELEASES_PATH = Path("docs") / "snippets" / "releases-table.md"
"""Where the committed table of drawn releases lives (docs/cost-model.md includes it)."""


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


def _workload_cells(entry) -> list[str]:
    cells = []
    for name in WORKLOADS:
        w = entry.validation.workloads.get(name)
        if w is None:
            cells += ["-", "-", "-"]
            continue
        inside = f"{w.inside_interval} of {w.with_interval}" if w.with_interval else "none committed"
        cells += [f"{w.within_10pct} of {w.runs}", f"{w.median_abs_error_pct:.1f}%", inside]
    return cells


def release_table() -> str:
    """Every drawn release measured on a validated machine, newest first, one row a release and
    GPU: its kind (blind, held out; whether its traces became calibration data since), then per
    workload its whole runs within 10%, their median error and how many of those with a
    committed 80% interval hold their measurement; candidate runs never counted."""
    header = ["drawn set", "GPU", "kind"]
    for name in WORKLOADS:
        header += [f"{WORKLOAD_NAMES[name]} within 10%", "median", "in 80% interval"]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    rows = []
    for name in machine_names():
        for entry in entries(load_machine(name)):
            if entry.kind == DEVELOPMENT:
                continue
            mark = " (now calibration data)" if entry.calibration_data else ""
            drawn = DRAWN_SET.search(entry.validation.scope)
            # the set's file, not its bare hash: a hash would read as a commit
            name = f"`validate-{drawn.group(1)}`" if drawn else entry.name()
            cells = [name, entry.validation.device, entry.kind + mark, *_workload_cells(entry)]
            rows.append((entry.stamp, "| " + " | ".join(cells) + " |"))
    lines += [row for _, row in sorted(rows, key=lambda r: r[0], reverse=True)]
    return "\n".join(lines) + "\n"


def main() -> None:
    """Rewrite the committed tables (run from the repository's root)."""

    atomic_write_text(TABLE_PATH, trust_table())
    atomic_write_text(RELEASES_PATH, release_table())


if __name__ == "__main__":
    main()
