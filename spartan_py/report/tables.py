"""Tables for the report: Markdown and HTML from pandas frames."""

from __future__ import annotations

import html

import pandas as pd


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def markdown_table(frame: pd.DataFrame) -> str:
    """A frame as a GitHub Markdown table (numbers to 4 significant digits)."""
    if frame.empty:
        return "(none)\n"
    header = "| " + " | ".join(map(str, frame.columns)) + " |\n|" + "---|" * len(frame.columns) + "\n"
    body = "".join("| " + " | ".join(_cell(v) for v in row) + " |\n" for row in frame.itertuples(index=False))
    return header + body


def html_table(frame: pd.DataFrame) -> str:
    """A frame as an HTML table (escaped, numbers to 4 significant digits)."""
    if frame.empty:
        return "<p>(none)</p>"
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in frame.columns)
    rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_cell(v))}</td>" for v in row) + "</tr>"
        for row in frame.itertuples(index=False)
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"
