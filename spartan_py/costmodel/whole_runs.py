"""What one times as a whole: a Graph Challenge point's inference, or one kernel family over a
dense-layer point's layers; the families those sums take, and the kind of each run (by which
its error spread is judged)."""

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
"""The Graph Challenge engines' timed launches: a point with them is one whole run."""


def run_names(frame: pd.DataFrame) -> pd.Series:
    """The whole run each launch belongs to: its point, or ``point / family`` in a point
    without a Graph Challenge layer kernel (a dense-layer point)."""
    layer_points = set(frame.loc[frame["kernel"].isin(GC_FAMILIES), "point"])
    return frame["point"].where(frame["point"].isin(layer_points), frame["point"] + " / " + frame["kernel"])


def run_kind(kernels: pd.Series) -> str:
    """The kind of a whole run from the families it launches: a Graph Challenge run is judged
    by its layer kernel (``graph-challenge/gpu.gc_layer``), a dense-layer run by its family."""
    present = set(kernels)
    for layer in (GC_MERGED, GC_LAYER):
        if layer in present:
            return f"graph-challenge/{layer}"
    return str(sorted(present)[0]) if len(present) == 1 else "mixed"
