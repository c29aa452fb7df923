"""Where results go and what each result file records: kept for the scripts that import
these names from here; their one home is :mod:`benchmarks.harness`. ``set_machine_header``
is the cost-model scripts' own (it edits ``sim/`` machine files)."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.harness import DEFAULT_DATA, RESULTS, ROOT, command_line, commit, write_result

__all__ = ["DEFAULT_DATA", "RESULTS", "ROOT", "command_line", "commit", "set_machine_header", "write_result"]


def set_machine_header(path: Path, key: str, value) -> None:
    """Set a top-level ``key: value`` line of a machine file (before ``specs:``; JSON is YAML)."""
    from spartan_py.files import atomic_write_text

    lines = path.read_text().splitlines()
    line = f"{key}: {json.dumps(value)}"
    lines = [x for x in lines if not x.startswith(f"{key}:")]
    lines.insert(next(i for i, x in enumerate(lines) if x.startswith("specs:")), line)
    atomic_write_text(path, "\n".join(lines) + "\n")
