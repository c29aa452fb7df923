"""Predicted against measured speed-ups between two GPUs, per kernel family, on pairs of
committed traces of the same points (development data: the fit never reads the second GPU's).

A pair is one experiment measured on both GPUs (``drawn-a550aca-h100`` and ``-h200``); its
launches are matched by what they ran (run, layer, kernel, variant, rows and bytes, in order),
so that each family's speed-up compares the same launches. Per family with at least
:data:`~spartan_py.costmodel.fidelity.MIN_FAMILY_LAUNCHES` matched launches: the measured
speed-up (sum of the first GPU's times over the second's) beside the model's, and each GPU's
per-launch median error.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from spartan_py.costmodel.families import FAMILIES
from spartan_py.costmodel.fidelity import MIN_FAMILY_LAUNCHES
from spartan_py.costmodel.machine import Machine
from spartan_py.costmodel.model import predict
from spartan_py.trace import read_trace

FIDELITY = Path("benchmarks/results/fidelity")

DEVELOPMENT_PAIRS: dict[str, tuple[str, str]] = {
    "development set": ("validate-h100-47a7d1c", "validate-h200-231cc66"),
    "first drawn set": ("drawn-a550aca-h100", "drawn-a550aca-h200"),
    "second drawn set": ("drawn-b4398c7-h100", "drawn-b4398c7-h200"),
}
"""Committed H100 and H200 traces of the same points whose errors were seen before (the
development set and the first two drawn sets, development data since the third draw). The
newest drawn set is left out: no model change may cite its errors before the next draw."""

_MATCH = ["run", "layer", "kernel", "variant", "rows_in", "rows_out", "bytes_read", "bytes_written"]


def matched_launches(first: pd.DataFrame, second: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The launches of ``first`` and ``second`` that ran the same thing (the n-th of equal
    records matched to the n-th), each measured, in the same order."""

    def numbered(frame: pd.DataFrame) -> pd.DataFrame:
        frame = frame[frame["kernel"].isin(list(FAMILIES)) & (frame["measured_us"] > 0)].reset_index(drop=True)
        return frame.assign(_nth=frame.groupby(_MATCH, dropna=False).cumcount())

    a, b = numbered(first), numbered(second)
    keys = a[[*_MATCH, "_nth"]].merge(b[[*_MATCH, "_nth"]], on=[*_MATCH, "_nth"])
    a = a.merge(keys, on=[*_MATCH, "_nth"]).drop(columns="_nth")
    b = b.merge(keys, on=[*_MATCH, "_nth"]).drop(columns="_nth")
    return a, b


def family_speedups(first: pd.DataFrame, second: pd.DataFrame, machines: tuple[Machine, Machine]) -> pd.DataFrame:
    """Per family of the matched launches: ``launches``, ``measured`` and ``predicted``
    speed-up of the second GPU, ``off_pct`` (predicted over measured, less 1) and each GPU's
    per-launch median absolute error (``first_median_pct``, ``second_median_pct``)."""
    a, b = matched_launches(first, second)
    a = predict(a, machines[0])
    b = predict(b, machines[1])
    rows = []
    for family, part in a.groupby("kernel"):
        other = b.loc[part.index]
        priced = part["predicted_us"].notna() & other["predicted_us"].notna()
        if priced.sum() < MIN_FAMILY_LAUNCHES:
            continue
        pa, pb = part[priced], other[priced]
        measured = pa["measured_us"].sum() / pb["measured_us"].sum()
        predicted = pa["predicted_us"].sum() / pb["predicted_us"].sum()
        rows.append(
            {
                "family": family,
                "launches": int(priced.sum()),
                "measured": measured,
                "predicted": predicted,
                "off_pct": 100 * (predicted / measured - 1),
                "first_median_pct": _median_pct(pa),
                "second_median_pct": _median_pct(pb),
            }
        )
    return pd.DataFrame(rows)


def _median_pct(frame: pd.DataFrame) -> float:
    return float(np.median(np.abs(frame["predicted_us"] / frame["measured_us"] - 1)) * 100)


def development_speedups(machines: tuple[Machine, Machine], root: Path = Path(".")) -> pd.DataFrame:
    """:func:`family_speedups` over every pair of :data:`DEVELOPMENT_PAIRS` (column ``pair``:
    its name)."""
    tables = []
    for name, (first, second) in DEVELOPMENT_PAIRS.items():
        a = read_trace(root / FIDELITY / f"{first}.trace.csv.gz")
        b = read_trace(root / FIDELITY / f"{second}.trace.csv.gz")
        tables.append(family_speedups(a, b, machines).assign(pair=name))
    return pd.concat(tables, ignore_index=True)
