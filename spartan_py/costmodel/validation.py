"""How far the model is from measurement: the per-kernel error table."""

from __future__ import annotations

import pandas as pd


def kernel_error_table(predicted: pd.DataFrame) -> pd.DataFrame:
    """Per kernel (and variant family): records, median / 90th percentile / max absolute error %."""
    frame = predicted[
        predicted["measured_us"].notna() & predicted["predicted_us"].notna() & (predicted["measured_us"] > 0)
    ]
    error = (frame["predicted_us"] - frame["measured_us"]).abs() / frame["measured_us"] * 100
    grouped = error.groupby(frame["kernel"])
    table = pd.DataFrame(
        {
            "records": grouped.size(),
            "median_abs_error_pct": grouped.median(),
            "p90_abs_error_pct": grouped.quantile(0.9),
            "max_abs_error_pct": grouped.max(),
            "measured_us": frame.groupby("kernel")["measured_us"].sum(),
            "predicted_us": frame.groupby("kernel")["predicted_us"].sum(),
        }
    )
    return table.reset_index()
