"""Run-to-run spread: how far the same launches move between runs on separately started
machines of one kind, per kernel family; and the bar a family's per-launch error is judged by.

The same experiment file run on several machines records the same launches in the same order
(a point's trace). Each launch's spread is ``(max - min) / median`` of its measured times
across the runs; a family's spread is the median (and 90th percentile) over its launches,
kept in the machine file (``run_to_run_spread``) and shown beside the model's error.

A family whose time is mostly the host's (:attr:`~spartan_py.costmodel.families.KernelFamily.host_bound`,
decided before a set is drawn) is judged against twice its measured median spread instead of
the fixed :data:`FAMILY_MEDIAN_BAR_PCT`: no model of the GPU can be closer to such a launch
than the launch is to itself on another machine.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from spartan_py.costmodel.families import FAMILIES
from spartan_py.errors import InputError

#: The fixed bar of a family's per-launch median error (percent), the cost-model issue's.
FAMILY_MEDIAN_BAR_PCT = 15.0
#: A host-bound family's bar, in multiples of its measured median run-to-run spread.
HOST_BOUND_SPREADS = 2.0


def launch_spreads(traces: list[pd.DataFrame]) -> pd.DataFrame:
    """Per launch measured in every one of ``traces`` (two or more runs of one experiment file,
    each with ``point``, ``kernel`` and ``measured_us``): its kernel, the median time and the
    spread ``(max - min) / median`` in percent. Launches pair up by point and order within it;
    a point whose launches differ between runs (another plan) is an error naming it."""
    if len(traces) < 2:
        raise InputError(f"a run-to-run spread needs two or more runs, got {len(traces)}")
    points = set.intersection(*(set(trace["point"].astype(str)) for trace in traces))
    if not points:
        raise InputError("the runs share no point: were they made from one experiment file?")
    rows = []
    for point in sorted(points):
        runs = [trace[trace["point"].astype(str) == point].reset_index(drop=True) for trace in traces]
        kernels = [tuple(run["kernel"]) for run in runs]
        if len(set(kernels)) > 1:
            raise InputError(f"point {point}: the runs launched different kernels (another plan or code)")
        times = np.column_stack([run["measured_us"].to_numpy(float) for run in runs])
        keep = np.isfinite(times).all(axis=1) & (times > 0).all(axis=1)
        median = np.median(times[keep], axis=1)
        spread = (times[keep].max(axis=1) - times[keep].min(axis=1)) / median * 100
        rows.append(
            pd.DataFrame(
                {
                    "point": point,
                    "kernel": runs[0]["kernel"].to_numpy()[keep],
                    "median_us": median,
                    "spread_pct": spread,
                }
            )
        )
    return pd.concat(rows, ignore_index=True)


def family_spreads(launches: pd.DataFrame) -> pd.DataFrame:
    """Per modelled family of :func:`launch_spreads`' launches: how many, and the median and
    90th percentile of their spreads (percent)."""
    modelled = launches[launches["kernel"].isin(list(FAMILIES))]
    grouped = modelled.groupby("kernel")["spread_pct"]
    table = pd.DataFrame({"launches": grouped.size(), "median_pct": grouped.median(), "p90_pct": grouped.quantile(0.9)})
    return table.reset_index().rename(columns={"kernel": "family"})


def family_bar_pct(family: str, spread_median_pct: float | None) -> float:
    """The bar of ``family``'s per-launch median error (percent): twice its measured median
    spread for a host-bound family whose spread is known, else :data:`FAMILY_MEDIAN_BAR_PCT`."""
    known = FAMILIES.get(family)
    if known is not None and known.host_bound and spread_median_pct is not None and np.isfinite(spread_median_pct):
        return HOST_BOUND_SPREADS * spread_median_pct
    return FAMILY_MEDIAN_BAR_PCT
