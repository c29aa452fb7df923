"""The Graph Challenge workload class: what the runner, the tables and the report ask of it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from spartan_py.api import check_request
from spartan_py.engines import AUTO_BACKEND, twin_backend, unavailable_reason
from spartan_py.errors import InputError
from spartan_py.trace import TraceRecord
from spartan_py.workloads.base import ReportPart, Workload
from spartan_py.workloads.graph_challenge.point import run_gc_point
from spartan_py.workloads.graph_challenge.report import graph_challenge_report
from spartan_py.workloads.graph_challenge.schema import KIND, GraphChallengeWorkload
from spartan_py.workloads.graph_challenge.tables import challenge_table, results_table


class GraphChallenge(Workload):
    """Sparse DNN Graph Challenge inference: any registered backend; simulated points run
    the backend's CPU twin."""

    kind = KIND
    section = GraphChallengeWorkload
    options = ("rows_per_tile", "chain_rows", "chain_warps", "input_counts", "compact_every", "time_limit_seconds")
    always_tables = ("results.csv",)

    @classmethod
    def check(cls, experiment: Any) -> None:
        """A simulated point needs a backend with a CPU twin."""
        if experiment.mode == "simulated":
            try:
                twin_backend(experiment.backend)
            except InputError as exc:
                raise ValueError(str(exc)) from None

    @classmethod
    def unavailable_reason(cls, experiment: Any) -> str | None:
        """The backend's own reason (``auto`` always runs: on the CPU where need be)."""
        return None if experiment.backend == AUTO_BACKEND else unavailable_reason(experiment.backend)

    @classmethod
    def check_inputs(cls, experiment: Any) -> None:
        """The network's layer files, inputs and truth read whole; ``layers`` and ``rows`` in range."""
        workload = experiment.workload
        check_request(
            workload.network, workload.inputs, layers=workload.layers, rows=workload.rows, truth=workload.truth
        )

    @classmethod
    def run_point(cls, experiment: Any, point_id: str) -> tuple[dict, list[float], list[TraceRecord]]:
        """See :func:`~spartan_py.workloads.graph_challenge.point.run_gc_point`."""
        return run_gc_point(experiment, point_id)

    @classmethod
    def edges(cls, summary: dict) -> float | None:
        """The network's edges times the input rows."""
        return summary["edges"] * summary["rows"]

    @classmethod
    def answer(cls, summary: dict) -> str | None:
        """Edges per second (measured, or simulated on which machine), the categories found and
        the check's verdict: against the truth file (passed/failed) or another engine."""
        how = f"simulated on {summary['machine']}" if summary["simulated"] else f"measured, {summary['device']}"
        parts = [f"{summary['edges_per_second']:.3g} edges/s ({how})", f"{summary['categories']} categories"]
        if summary.get("passed") is not None:
            parts.append("truth: " + ("passed" if summary["passed"] else "FAILED"))
        check = summary.get("check")
        if check:
            verdict = "passed" if check["passed"] else "FAILED"
            parts.append(f"checked against the {check['backend']} engine on {check['rows']} rows: {verdict}")
        return "; ".join(parts)

    @classmethod
    def tables(cls, points: list[dict]) -> dict[str, pd.DataFrame]:
        """``results.csv`` and ``challenge.csv``."""
        return {"results.csv": results_table(points), "challenge.csv": challenge_table(points)}

    @classmethod
    def report(cls, out: Path, points: list[dict], traces: pd.DataFrame) -> ReportPart:
        """See :func:`~spartan_py.workloads.graph_challenge.report.graph_challenge_report`."""
        return graph_challenge_report(out, points, traces)
