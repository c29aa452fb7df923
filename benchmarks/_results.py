"""Where results go and what each result file records: kept for the scripts that import
these names from here; their one home is :mod:`benchmarks.harness`."""

from __future__ import annotations

from benchmarks.harness import DEFAULT_DATA, RESULTS, ROOT, command_line, commit, write_result

__all__ = ["DEFAULT_DATA", "RESULTS", "ROOT", "command_line", "commit", "write_result"]
