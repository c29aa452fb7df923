"""The results page's table of a ``gc_duplicate_rows`` result (``benchmarks/gc_duplicate_rows.py``):
how many of a network's live rows are distinct after chosen layers."""

from __future__ import annotations

from spartan_py.report.cells import markdown_table

#: Layers shown (a case that did not sample one shows ``-``).
SHOWN_LAYERS = (1, 2, 4, 8, 16, 24, 32)


def duplicate_rows_table(data: dict) -> list[str]:
    """Lines of Markdown: per case, distinct / live rows after each of :data:`SHOWN_LAYERS`."""
    rows = []
    for case in data["cases"]:
        by_layer = {r["layer"]: r for r in case["by_layer"]}
        cells = [
            f"{by_layer[n]['distinct_rows']} / {by_layer[n]['live_rows']}" if n in by_layer else "-"
            for n in SHOWN_LAYERS
        ]
        rows.append((case["network"], *cells))
    header = ("network, rows", *(f"layer {n}" for n in SHOWN_LAYERS))
    lead = "Distinct / live rows after a layer (exact; the SciPy reference layer in float32):"
    return [lead, "", *markdown_table(header, rows)]
