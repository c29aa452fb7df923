"""The report's what-if tables: each point's predicted time on each simulated machine (one
row per point, one column per machine), and how far each machine's figures can be trusted,
said once per machine (the prediction table links to it)."""

from __future__ import annotations

import pandas as pd

#: The heading of the trust table (the what-if table links to it).
TRUST_HEADING = "Trust of each simulated machine"


def _prediction(row) -> str:
    if pd.isna(row.predicted_seconds):
        return f"not predicted: {row.note}" if row.note else "not predicted"
    text = f"{row.predicted_seconds:.4g}"
    if not pd.isna(row.low_seconds) and not pd.isna(row.high_seconds):
        text += f" ({row.low_seconds:.3g} to {row.high_seconds:.3g})"
    if row.guessed:
        text += f"; guessed: {row.guessed}"
    return text


def _own(row) -> str:
    how = "simulated" if row.own_simulated else "measured"
    return f"{row.own_seconds:.4g} ({how}, {row.own_device})"


def what_if_table(simulated: pd.DataFrame) -> pd.DataFrame:
    """One row per point: its own time and, per machine, the predicted seconds with the 80%
    interval, or why there is none (a point that ran on the CPU records no GPU kernels)."""
    frame = simulated.assign(
        prediction=[_prediction(row) for row in simulated.itertuples()],
        own=[_own(row) for row in simulated.itertuples()],
    )
    table = frame.pivot_table(
        index=["label", "own"], columns="machine", values="prediction", aggfunc="first", sort=False
    )
    table = table.reindex(columns=list(dict.fromkeys(frame["machine"])))
    table.columns.name = None
    return table.reset_index().rename(columns={"own": "own seconds"})


def trust_table(simulated: pd.DataFrame) -> pd.DataFrame:
    """One row per simulated machine: how far its predictions can be trusted."""
    return simulated.drop_duplicates("machine")[["machine", "trust"]].reset_index(drop=True)
