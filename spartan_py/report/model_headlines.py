"""The headline figures of the cost model's result files (calibrations, drawn releases,
cross-machine rounds, leave-one-point-out spreads), as Markdown lines read from their data.

Whole runs are whole (:mod:`spartan_py.costmodel.whole_runs`): Graph Challenge inferences and
conv points' steps are counted apart, never pooled; a conv point's candidate runs appear only
as the per-kernel view. A file written before the two were told apart lists a conv point's
candidates as runs of their own: they are summed back into their point here (a regrouping of
the file's own rows, no new figure).
"""

from __future__ import annotations

import pandas as pd

from spartan_py.costmodel.whole_runs import WORKLOAD_NAMES, WORKLOADS, whole_from_rows, workload_figures


def _g(value: float) -> str:
    return f"{value:.3g}"


def by_workload(figures: dict | None, rows: list[dict]) -> dict[str, dict]:
    """Per workload its whole runs' figures: as the file states them (``figures``, keyed by
    workload), else summed from its ``rows`` (runs with measured and predicted microseconds)."""
    if figures and set(WORKLOADS) & set(figures):
        return {name: figures[name] for name in WORKLOADS if name in figures}
    return workload_figures(whole_from_rows(pd.DataFrame(rows)))


def workload_text(figures: dict[str, dict], *, intervals: bool = False) -> str:
    """``Graph Challenge: 5 of 16 whole runs within 10%, ...; conv: ...`` (with ``intervals``, how
    many of those with a committed interval hold their measurement)."""
    parts = []
    for name, f in figures.items():
        inside = ""
        if intervals:
            inside = (
                f", {f['inside_interval']} of {f['with_interval']} inside their 80% interval"
                if f.get("with_interval")
                else ", no interval committed for them"
            )
        parts.append(
            f"{WORKLOAD_NAMES[name]}: {f['within_10pct']} of {f['runs']} whole runs within 10%{inside}, "
            f"median |error| {_g(f['median_abs_pct'])}%, worst {_g(f['worst_pct'])}%"
        )
    return "; ".join(parts)


def _summary(name: str, tables: dict) -> str:
    figures = by_workload(tables["summary"].get("by_workload"), tables["whole_runs"])
    return (
        f"{name}: {workload_text(figures)}; per-launch median error at most "
        f"{_g(tables['summary']['per_launch_median_error_pct'])}% per family."
    )


def _calibration(data: dict) -> list[str]:
    families = data["families_refitted"]  # a list of families, or "all" (spartan model calibrate)
    refit = "every family" if families in ("all", []) else ", ".join(f"`{f}`" for f in families)
    return [
        f"Refitted: {refit}; {len(data['fit_points'])} fitted points, {len(data['held_out_points'])} held out.",
        "",
        "- " + _summary("Fitted", data["fit"]),
        "- " + _summary("Held out", data["held_out"]),
    ]


def _candidates(data: dict) -> str:
    """The conv points' candidate runs per family: the per-kernel view, never whole runs."""
    told = ", ".join(f"`{c['family']}` {c['within_10pct']}/{c['candidate_runs']}" for c in data.get("candidates", []))
    return f"Per kernel (a conv point's candidate runs, not whole runs), within 10%: {told}." if told else ""


def _drawn_fidelity(data: dict) -> list[str]:
    blind = data["blind"]
    held = blind.get("families_within_bar", blind.get("families_within_15pct"))
    figures = by_workload(blind, data["whole_runs"])
    lines = [
        f"`{data['machine']}` against predictions committed before the measurement (at "
        f"{data['predictions_commit'][:7]}): {workload_text(figures, intervals=set(WORKLOADS) <= set(blind))}; "
        f"{held} of {blind.get('families_held', len(data['families']))} families within their bar.",
    ]
    if _candidates(data):
        lines += ["", _candidates(data)]
    if "regrouped" in data:
        lines += [
            "",
            f"Recounted with whole runs told apart at {data['regrouped']['commit'][:7]}: "
            f"`{data['regrouped']['command']}` (the same measurements and committed predictions).",
        ]
    return lines


def _drawn_predictions(data: dict) -> list[str]:
    return [
        f"Drawn set `{data['drawn_set']}`: {data['points']} points, model frozen at {data['model_commit'][:7]}, "
        f"machines {', '.join(f'`{m}`' for m in data['machines'])}."
    ]


def _h200_fidelity(data: dict) -> list[str]:
    return [
        "- " + _summary("H200, blind", data["h200_blind"]),
        "- " + _summary("H200, the current model", data["h200_current_model"]),
        "- " + _summary("H100, every point", data["h100_all_points"]),
    ]


def _lopo(data: dict) -> list[str]:
    runs = pd.DataFrame(data["runs"])
    if "view" in runs:
        runs = runs[runs["view"] == "whole"]
    figures = workload_figures(whole_from_rows(runs))
    return [f"{data['points']} points left out one at a time: {workload_text(figures)}."]


MODEL_EXTRACTORS = {
    "h100-calibration": _calibration,
    "drawn-fidelity-h100-sxm": _drawn_fidelity,
    "drawn-fidelity-h200-sxm": _drawn_fidelity,
    "drawn-predictions": _drawn_predictions,
    "h200-fidelity": _h200_fidelity,
    "lopo": _lopo,
}
"""Headline figures of the cost model's result files by their ``benchmark`` field."""
