"""Cells and tables of the generated Markdown pages: figures to significant digits, times in ms."""

from __future__ import annotations

from typing import Any


def sig(value: float | None, digits: int = 3) -> str:
    """``value`` to ``digits`` significant figures (``-`` for none)."""
    return "-" if value is None or value != value else f"{value:.{digits}g}"


def ms(seconds: float | None) -> str:
    """``seconds`` in milliseconds, 4 significant figures (``-`` for none)."""
    return "-" if seconds is None else sig(seconds * 1e3, 4)


def markdown_table(header: tuple[str, ...], rows: list[tuple[Any, ...]]) -> list[str]:
    """The lines of a Markdown table of ``header`` and ``rows``."""
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    return lines + ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
