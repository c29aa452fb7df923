"""Tables for the report: Markdown and HTML from pandas frames, every cell readable.

A report's reader never meets ``nan``, ``None`` or an empty cell: :func:`readable` puts in
each a word saying why it is empty (a column's own reason, or :data:`MISSING`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import pandas as pd

#: What an empty cell says when its column gives no reason of its own.
MISSING = "not recorded"


def _blank(value) -> bool:
    if value is None or (isinstance(value, str) and not value.strip()):
        return True
    return isinstance(value, float) and math.isnan(value)


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def readable(frame: pd.DataFrame, missing: Mapping[str, str] | None = None) -> pd.DataFrame:
    """``frame`` as text: numbers to 4 significant digits, each empty cell (NaN, None, "")
    replaced by its column's reason in ``missing``, else :data:`MISSING`."""
    missing = missing or {}
    return pd.DataFrame(
        {
            column: [missing.get(str(column), MISSING) if _blank(v) else _cell(v) for v in frame[column]]
            for column in frame.columns
        },
        index=frame.index,
    )


def markdown_table(frame: pd.DataFrame, missing: Mapping[str, str] | None = None) -> str:
    """A frame as a GitHub Markdown table (see :func:`readable`)."""
    if frame.empty:
        return "(none)\n"
    text = readable(frame, missing)
    header = "| " + " | ".join(map(str, text.columns)) + " |\n|" + "---|" * len(text.columns) + "\n"
    body = "".join("| " + " | ".join(row) + " |\n" for row in text.itertuples(index=False))
    return header + body


def html_table(frame: pd.DataFrame, missing: Mapping[str, str] | None = None) -> str:
    """A frame as an escaped HTML table (see :func:`readable`) in a box that scrolls
    sideways when the table is wider than the page."""
    if frame.empty:
        return "<p>(none)</p>"
    table = readable(frame, missing).to_html(index=False, escape=True, border=0)
    return f"<div class='table-scroll'>{table}</div>"
