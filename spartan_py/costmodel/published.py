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

TABLE_PATH = Path("docs") / "snippets" / "trust-table.md"
"""Where the committed table lives, relative to the repository (outside the docs' nav)."""


UNVALIDATED = "**not validated**: the calibration carried over from another GPU"


def _status(machine: Machine) -> str:
    if not machine.validation:
        return UNVALIDATED
    kinds = {"blind" if v.blind else "fitted here" for v in machine.validation}
    return f"**validated** ({', '.join(sorted(kinds))})"


def _figures(machine: Machine) -> str:
    if not machine.validation:
        return "what-if estimates"
    return "; ".join(
        f"{v.scope} on {v.device} at `{v.commit[:7]}`: {v.figures()} (`{v.result}`)" for v in machine.validation
    )


def trust_table() -> str:
    """The Markdown table of every machine and variant: its status and its figures with their scope."""
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
    from spartan_py.files import atomic_write_text

    atomic_write_text(TABLE_PATH, trust_table())


if __name__ == "__main__":
    main()
