"""The measured tables of the maps page and the Spartan page, read from the committed
``spartan maps`` capture and its what-ifs (``benchmarks/results/maps-h100-20261207/``) into
``docs/snippets/`` (the pages include them). Nothing is typed by hand; a test regenerates
the snippets and fails when the committed ones differ. Rewrite them after a new capture::

    python -m spartan_py.report.maps_tables
"""

from __future__ import annotations

import sys
from pathlib import Path

from spartan_py.files import atomic_write_text
from spartan_py.report.cells import markdown_table
from spartan_py.result_files import read_summary
from spartan_py.trained_maps.blind_check import blind_lines, blind_rows, finite_or_none, unmeasured_steps
from spartan_py.trained_maps.table_text import table_lines

FOLDER = Path("benchmarks") / "results" / "maps-h100-20261207"
"""The capture the pages quote, relative to the repository."""

TABLE_FOLDER = Path("benchmarks") / "results" / "spartan-table-maps-h100"
"""Where ``spartan maps table``'s H100 run (its ``table.json.gz``) is committed; until it is,
the Spartan page's table says it is not measured yet."""

H200_TABLE_FOLDER = Path("benchmarks") / "results" / "spartan-table-maps-h200"
"""Where the same job measured on an H200 is committed; its steps are held against the H100
table's blind H200 column (:mod:`spartan_py.trained_maps.blind_check`)."""

SNIPPETS = {
    "measured": Path("docs") / "snippets" / "maps-measured.md",
    "whatif": Path("docs") / "snippets" / "maps-whatif.md",
    "table": Path("docs") / "snippets" / "spartan-table.md",
}
"""The generated snippets, relative to the repository."""

GRAINS = ("64x32", "16x8", "8x8", "4x4", "element")
"""The grains the tables show, coarse to fine."""


def _step(network: dict) -> dict:
    """A point's (or sensitivity row's) whole-step bounds, every convolution, CHW columns."""
    return network["all"]["step"]["chw"]


def measured_table(summary: dict) -> list[str]:
    """Per network: accuracy, its move over the last tenth, post-ReLU element density over
    layers, the step's bound at each grain at init and late; then the sensitivity rows."""
    rows, sens_rows = [], []
    for name, record in summary["networks"].items():
        tenth = record.get("last_tenth") or {}
        for point in ("init", "late"):
            data = record["points"][point]
            dens = [layer["x_density"] for layer in data["layers"] if layer["relu_input"]]
            moved = f"{tenth['accuracy_from']:.3f} -> {tenth['accuracy_to']:.3f}" if point == "late" and tenth else ""
            rows.append(
                (
                    name,
                    f"{point} (step {data['step']})",
                    f"{data['test_accuracy']:.3f}",
                    moved,
                    f"{min(dens):.2f}-{max(dens):.2f}",
                    *(f"{_step(data['network'])[g]:.2f}" for g in GRAINS),
                )
            )
        for key, sens in record["points"]["late"].get("sensitivity", {}).items():
            sens_rows.append((name, f"{float(key):.0%}", *(f"{_step(sens['network'])[g]:.2f}" for g in GRAINS)))
    header = ("network", "point", "test accuracy", "last tenth", "element density", *GRAINS)
    return [
        *markdown_table(header, rows),
        "",
        "Sensitivity rows (late point, each post-ReLU input's smallest values zeroed to the sparsity shown):",
        "",
        *markdown_table(("network", "zeros", *GRAINS), sens_rows),
    ]


def whatif_table(runs: dict[str, dict]) -> list[str]:
    """Speed-up (ideal in brackets) per network, precision and grain, late point, beside
    Spartan's figure; the captured maps and the maps zeroed to 90%."""
    rows = []
    for precision, data in runs.items():
        cells: dict[tuple[str, str], dict[str, dict]] = {}
        for row in data["rows"]:
            if row["point"] == "late" and row["maps"] in ("captured", "zeroed to 90%"):
                cells.setdefault((row["network"], row["maps"]), {})[row["grain"]] = row
        for (network, maps), by in cells.items():
            published = next(iter(by.values()))["spartan_published"]
            shown = tuple(f"{by[g]['speedup']:.2f} ({by[g]['ideal_speedup']:.2f})" if g in by else "-" for g in GRAINS)
            rows.append((network, maps, precision, *shown, f"{published:g}"))
    return markdown_table(("network", "maps", "precision", *GRAINS, "Spartan's figure"), rows)


def _table_in(root: Path, folder: Path) -> Path | None:
    """``folder``'s (under ``root``) ``table.json.gz``, else its ``table.json``, else None."""
    for name in ("table.json.gz", "table.json"):
        if (root / folder / name).is_file():
            return root / folder / name
    return None


def table_snippet(root: Path, folder: Path = TABLE_FOLDER, h200_folder: Path = H200_TABLE_FOLDER) -> str:
    """The Spartan page's table from ``folder``'s ``table.json.gz`` (under ``root``), or the
    words "not measured yet" where there is none; then the H200 line and, where
    ``h200_folder`` holds the job measured on an H200, its blind check."""
    note = f"<!-- Generated by `python -m spartan_py.report.maps_tables` from {folder.as_posix()}: do not edit. -->"
    path = _table_in(root, folder)
    if path is None:
        missing = (
            f"**Not measured yet.** No `table.json.gz` in `{folder.as_posix()}`: the table is filled from the "
            "summary `spartan maps table` writes once it has run on a GPU."
        )
        return "\n".join([note, "", missing]) + "\n"
    table = read_summary(path)
    h200_path = _table_in(root, h200_folder)
    if h200_path is None:
        return "\n".join([note, "", table_lines(table), "", h200_line(table)]) + "\n"
    measured = read_summary(h200_path)
    rows = blind_rows(table, measured, "h200-sxm", (path, h200_path))
    said = f"The same job on an H200 (`{h200_folder.as_posix()}`), against the column above:"
    check = [said, "", *blind_lines(rows, "h200-sxm", unmeasured_steps(table, measured))]
    return "\n".join([note, "", table_lines(table), "", h200_line(table, measured), "", *check]) + "\n"


def h200_line(table: dict, h200_table: dict | None = None) -> str:
    """What ``table`` (``table.json``'s content) holds of the H200: the steps timed on one (not
    simulated, an H200 in ``timed_on``; ``h200_table``'s too, the job run on an H200) or "not
    measured yet", and whether the H200 column's predictions are there."""
    records = [r for r in table.get("records", []) if "error" not in r]
    timed = records + [r for r in (h200_table or {}).get("records", []) if "error" not in r]
    measured = [r for r in timed if not r.get("simulated") and "H200" in str(r.get("timed_on", "")).upper()]
    predicted = sum(finite_or_none(r.get("predicted_ms", {}).get("h200-sxm")) is not None for r in records)
    devices = ", ".join(sorted({str(r["timed_on"]) for r in measured}))
    shown = f"measured on {len(measured)} of {len(records)} steps ({devices})" if measured else "not measured yet"
    said = f"the model's, for {predicted} of {len(records)} steps" if predicted else "no model predictions"
    return f"H200: {shown}; the H200 predicted column: {said}."


def render(root: Path) -> dict[str, str]:
    """The snippets' text, by key of :data:`SNIPPETS`."""
    folder = root / FOLDER
    summary = read_summary(folder / "summary.json.gz")
    runs = {p: read_summary(folder / f"whatif-{p}.json.gz") for p in ("fp32", "tf32")}
    note = f"<!-- Generated by `python -m spartan_py.report.maps_tables` from {FOLDER.as_posix()}: do not edit. -->"
    return {
        "measured": "\n".join([note, "", *measured_table(summary)]) + "\n",
        "whatif": "\n".join([note, "", *whatif_table(runs)]) + "\n",
        "table": table_snippet(root),
    }


def write_snippets(root: Path) -> list[Path]:
    """Write :data:`SNIPPETS` under ``root`` (atomically)."""
    return [atomic_write_text(root / SNIPPETS[key], text) for key, text in render(root).items()]


if __name__ == "__main__":
    for written in write_snippets(Path(sys.argv[1]) if len(sys.argv) > 1 else Path.cwd()):
        print(written)
