"""What a whole run is: what a user runs and times as a whole, one Graph Challenge point's
inference (every launch of its engine) or one conv point's step (one conv layer's, or a
network's, launches, every candidate the point times included). A conv point's **candidate
runs** (one kernel family over the point's launches: the policy's one- or two-launch
candidates) are a per-kernel view only, never counted as whole runs. Graph Challenge and conv
runs are reported apart (:data:`WORKLOADS`); the kind of each run is what its error spread is
judged by."""

from __future__ import annotations

import pandas as pd

from spartan_py.costmodel.families import (
    EPILOGUE,
    EXPAND,
    GC_LAYER,
    GC_MERGED,
    MONITOR_PASS,
    SCATTER_ROWS,
    TIMED_FAMILIES,
)

WHOLE_RUN_FAMILIES = (*TIMED_FAMILIES, EPILOGUE, MONITOR_PASS)
"""The families a whole run's time sums: the layer kernels and every dense-layer kernel
(copies and host syncs are reported as families of their own)."""
GC_FAMILIES = (GC_LAYER, GC_MERGED, SCATTER_ROWS, EXPAND)
"""The Graph Challenge engines' timed launches: a point with them is a Graph Challenge run."""

GRAPH_CHALLENGE = "graph-challenge"
CONV = "conv"
WORKLOADS = (GRAPH_CHALLENGE, CONV)
"""The workloads whose whole runs are counted apart, in the order tables list them."""
WORKLOAD_NAMES = {GRAPH_CHALLENGE: "Graph Challenge", CONV: "conv"}
"""Each workload as prose and tables write it."""
WORKLOAD_SHORT = {GRAPH_CHALLENGE: "GC", CONV: "conv"}
"""Each workload in a short line (``spartan machines``)."""
WITHIN_PCT = 10.0
"""The whole-run bar: within 10% of the measurement."""
CANDIDATE_SEPARATOR = " / "
"""Between a conv point and a family in a candidate run's name (``point / gpu.compact``)."""


def run_names(frame: pd.DataFrame) -> pd.Series:
    """The whole run each launch belongs to: its point."""
    return frame["point"].astype(str)


def candidate_names(frame: pd.DataFrame) -> pd.Series:
    """The candidate run each launch of a conv point belongs to (``point / family``); ``None``
    for a Graph Challenge point's launches, which have no candidates."""
    gc_points = set(frame.loc[frame["kernel"].isin(GC_FAMILIES), "point"])
    names = frame["point"].astype(str) + CANDIDATE_SEPARATOR + frame["kernel"].astype(str)
    return names.where(~frame["point"].isin(gc_points), None)


def workload(kernels: pd.Series) -> str:
    """:data:`GRAPH_CHALLENGE` for a run that launches a Graph Challenge engine's kernels, else :data:`CONV`."""
    return GRAPH_CHALLENGE if set(kernels) & set(GC_FAMILIES) else CONV


def run_kind(kernels: pd.Series) -> str:
    """The kind of a whole run from the families it launches: a Graph Challenge run by its layer
    kernel (``graph-challenge/gpu.gc_layer``), a conv run ``conv``."""
    present = set(kernels)
    for layer in (GC_MERGED, GC_LAYER):
        if layer in present:
            return f"{GRAPH_CHALLENGE}/{layer}"
    return CONV


def whole_from_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """Runs listed with ``run``, ``measured_us`` and ``predicted_us`` (a result file's rows, as
    written before candidate runs were told apart) summed into whole runs: a candidate run
    (``point / family``) into its conv point. Returns ``run``, ``workload``, ``measured_us``,
    ``predicted_us`` and ``error_pct``. A row's ``workload`` is kept where it has one; a point
    without candidates is a Graph Challenge run (a conv point's launches were listed by family)."""
    point = rows["run"].astype(str).str.split(CANDIDATE_SEPARATOR, n=1, regex=False).str[0]
    has_candidates = rows["run"].astype(str).str.contains(CANDIDATE_SEPARATOR, regex=False)
    told = rows["workload"] if "workload" in rows else pd.Series(None, index=rows.index, dtype=object)
    kind = told.where(told.notna(), has_candidates.map({True: CONV, False: GRAPH_CHALLENGE}))
    frame = pd.DataFrame(
        {"run": point, "workload": kind, "measured_us": rows["measured_us"], "predicted_us": rows["predicted_us"]}
    )
    totals = frame.groupby(["run", "workload"], sort=False)[["measured_us", "predicted_us"]].sum().reset_index()
    totals["error_pct"] = 100 * (totals["predicted_us"] - totals["measured_us"]) / totals["measured_us"]
    return totals


def workload_figures(runs: pd.DataFrame) -> dict[str, dict]:
    """Per workload of ``runs`` (``workload``, ``error_pct``; ``inside`` where judged): whole runs,
    how many within :data:`WITHIN_PCT`, median and worst absolute error, and how many of those with
    an interval hold their measurement. Only workloads present."""
    found = {}
    for name in WORKLOADS:
        group = runs[runs["workload"] == name]
        if group.empty:
            continue
        error = group["error_pct"].abs()
        judged = group["inside"].dropna() if "inside" in group else pd.Series(dtype=bool)
        found[name] = {
            "runs": int(len(group)),
            "within_10pct": int((error <= WITHIN_PCT).sum()),
            "within_10pct_share": round(float((error <= WITHIN_PCT).mean()), 4),
            "median_abs_pct": round(float(error.median()), 2),
            "worst_pct": round(float(error.max()), 2),
            "inside_interval": int(judged.astype(bool).sum()) if len(judged) else None,
            "with_interval": int(len(judged)),
        }
    return found
