"""Error bars: how far a whole-run prediction may be off, from leave-one-point-out fits.

Each point of the calibration runs (one workload of one experiment file) is left out in turn;
the families it launches are refitted on the other points and its whole run predicted, with
a conv point's candidate runs beside it (:func:`lopo_run_errors`). The held-out errors of the
runs of one kind (:func:`run_kind`: a Graph Challenge run by its layer kernel, a conv run
``conv``, a candidate run by its family) give that kind's spread: the 10th and 90th
percentiles of predicted / measured, never narrower than all whole runs' pooled
(:func:`error_spreads`), kept in
the calibrated machine's file. A prediction's 80% interval divides the predicted time by those
ratios (:func:`interval_us`). A machine whose calibration is carried over gets the same spreads:
nothing measured on it enters them, so on another GPU they are a statement to check, and on a
GPU of another architecture a guess.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from spartan_py.costmodel.fits import ErrorSpread
from spartan_py.costmodel.machine import Machine
from spartan_py.costmodel.model import predict
from spartan_py.costmodel.whole_runs import WHOLE_RUN_FAMILIES, candidate_names, run_kind, run_names, workload

INTERVAL_QUANTILES = (0.1, 0.9)
"""The interval's quantiles of the held-out ratios: an 80% interval."""
MIN_RUNS = 5
"""Kinds with fewer held-out runs take the spread of every run pooled (:data:`POOLED`)."""
POOLED = "all runs"
"""The spread of every held-out whole run, for kinds with fewer than :data:`MIN_RUNS`."""
WHOLE = "whole"
CANDIDATE = "candidate"
"""A held-out run's ``view``: a whole run, or a conv point's candidate run (the per-kernel view)."""


Refit = Callable[[pd.DataFrame, Machine, tuple[str, ...]], Machine]
"""``refit(launches, machine, families)``: the machine with ``families`` fitted on ``launches``."""


def held_out_runs(trace: pd.DataFrame, machine: Machine, point: str, refit: Refit) -> list[dict]:
    """The whole run of ``point`` and its candidate runs predicted by a fit of its families on
    every other point of ``trace`` (measured launches with ``point``): run, view, kind, measured
    and predicted microseconds."""
    launches, others = trace[trace["point"] == point], trace[trace["point"] != point]
    if not set(launches["kernel"]) & set(WHOLE_RUN_FAMILIES):
        return []
    # a family no other point launches keeps the machine's fit (none to refit it on)
    families = tuple(sorted(set(launches["kernel"]) & set(WHOLE_RUN_FAMILIES) & set(others["kernel"])))
    fitted = refit(others, machine, families) if families else machine
    predicted = predict(launches.reset_index(drop=True), fitted)
    predicted = predicted[predicted["kernel"].isin(WHOLE_RUN_FAMILIES) & predicted["predicted_us"].notna()]
    rows = []
    for view, names in ((WHOLE, run_names(predicted)), (CANDIDATE, candidate_names(predicted))):
        for run, group in predicted.groupby(names, sort=False):
            rows.append(
                {
                    "point": point,
                    "run": run,
                    "view": view,
                    "workload": workload(group["kernel"]),
                    "kind": run_kind(group["kernel"]) if view == WHOLE else str(group["kernel"].iloc[0]),
                    "measured_us": float(group["measured_us"].sum()),
                    "predicted_us": float(group["predicted_us"].sum()),
                }
            )
    return rows


def lopo_run_errors(
    trace: pd.DataFrame,
    machine: Machine,
    *,
    refit: Refit,
    progress: Callable[[str], None] | None = None,
) -> pd.DataFrame:
    """:func:`held_out_runs` of every point of ``trace``, with ``ratio`` = predicted / measured."""
    measured = trace[trace["measured_us"].notna() & (trace["measured_us"] > 0)]
    rows = []
    for point in measured["point"].unique():
        if progress is not None:
            progress(str(point))
        rows += held_out_runs(measured, machine, str(point), refit)
    return run_error_frame(rows)


def run_error_frame(rows: list[dict]) -> pd.DataFrame:
    """Held-out runs as a table with ``ratio`` = predicted / measured."""
    errors = pd.DataFrame(rows, columns=["point", "run", "view", "workload", "kind", "measured_us", "predicted_us"])
    errors["ratio"] = errors["predicted_us"] / errors["measured_us"]
    return errors


def error_spreads(errors: pd.DataFrame, source: str) -> dict[str, ErrorSpread]:
    """Per kind with :data:`MIN_RUNS` or more held-out runs, and :data:`POOLED` (the whole runs'):
    the interval's ends."""
    low_q, high_q = INTERVAL_QUANTILES

    def spread(ratios: pd.Series) -> ErrorSpread:
        return ErrorSpread(
            low_ratio=round(float(np.quantile(ratios, low_q)), 4),
            high_ratio=round(float(np.quantile(ratios, high_q)), 4),
            runs=int(len(ratios)),
            source=source,
        )

    whole = errors[errors["view"].isna() | (errors["view"] == WHOLE)]  # a row without a view: a whole run
    pooled = spread(whole["ratio"])
    spreads = {POOLED: pooled}
    for kind, group in errors.groupby("kind"):
        if len(group) >= MIN_RUNS:
            own = spread(group["ratio"])
            # a handful of runs of one kind says little of its tails: never narrower than all runs'
            spreads[str(kind)] = own.model_copy(
                update={
                    "low_ratio": min(own.low_ratio, pooled.low_ratio),
                    "high_ratio": max(own.high_ratio, pooled.high_ratio),
                }
            )
    return spreads


def spread_for(machine: Machine, kind: str) -> tuple[ErrorSpread | None, str]:
    """(the spread a run of ``kind`` takes on ``machine``, which kind it is: its own or pooled);
    (None, "") when the machine has none."""
    if kind in machine.error_spread:
        return machine.error_spread[kind], kind
    if POOLED in machine.error_spread:
        return machine.error_spread[POOLED], POOLED
    return None, ""


def interval_us(predicted_us: float, spread: ErrorSpread | None) -> tuple[float, float] | None:
    """The 80% interval of a measured time given its prediction: the prediction divided by the
    spread's high and low ratios (a model that runs 10% slow at the 90th percentile puts the
    measurement down to predicted / 1.1)."""
    if spread is None or not np.isfinite(predicted_us):
        return None
    return predicted_us / spread.high_ratio, predicted_us / spread.low_ratio


def run_interval(machine: Machine, kernels: pd.Series, predicted_us: float) -> tuple[tuple[float, float] | None, str]:
    """(the 80% interval of a whole run that launched ``kernels`` and is predicted at
    ``predicted_us`` on ``machine``, or None; the kind whose spread gave it)."""
    spread, used = spread_for(machine, run_kind(kernels))
    return interval_us(predicted_us, spread), used


def run_intervals(predicted: pd.DataFrame, machine: Machine) -> pd.DataFrame:
    """Per whole run of a predicted trace (``point`` or ``run`` naming the point): the
    predicted total, its kind, the spread's kind and the 80% interval (NaN without a spread)."""
    frame = _timed(predicted)
    return _intervals(frame, run_names(frame), machine, run_kind)


def candidate_intervals(predicted: pd.DataFrame, machine: Machine) -> pd.DataFrame:
    """:func:`run_intervals` of the conv points' candidate runs, each judged by its family's spread."""
    frame = _timed(predicted)
    return _intervals(frame, candidate_names(frame), machine, lambda kernels: str(kernels.iloc[0]))


def _timed(predicted: pd.DataFrame) -> pd.DataFrame:
    frame = predicted[predicted["kernel"].isin(WHOLE_RUN_FAMILIES)]
    return frame if "point" in frame else frame.assign(point=frame["run"])


def _intervals(
    frame: pd.DataFrame, names: pd.Series, machine: Machine, kind_of: Callable[[pd.Series], str]
) -> pd.DataFrame:
    rows = []
    for run, group in frame.groupby(names, sort=False):
        total = float(group["predicted_us"].sum(min_count=1))
        kind = kind_of(group["kernel"])
        spread, used = spread_for(machine, kind)
        low, high = interval_us(total, spread) or (np.nan, np.nan)
        rows.append({"run": run, "kind": kind, "spread": used, "predicted_us": total, "low_us": low, "high_us": high})
    return pd.DataFrame(rows, columns=["run", "kind", "spread", "predicted_us", "low_us", "high_us"])
