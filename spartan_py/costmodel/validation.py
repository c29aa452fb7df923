"""How far the model is from measurement: error tables and a measured-vs-predicted plot."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from spartan_py.costmodel.model import run_totals


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


def run_error_table(predicted: pd.DataFrame, kernels: tuple[str, ...] | None = None) -> pd.DataFrame:
    """Per run: summed measured and predicted time and the whole-run error (see :func:`run_totals`)."""
    totals = run_totals(predicted, kernels)
    totals["abs_error_pct"] = totals["error_pct"].abs()
    return totals


def plot_measured_vs_predicted(predicted: pd.DataFrame, path: str | Path, *, title: str = "") -> Path:
    """Log-log scatter of measured vs predicted microseconds per record, one colour per kernel."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from spartan_py.files import atomic_write_bytes

    frame = predicted[
        predicted["measured_us"].notna() & predicted["predicted_us"].notna() & (predicted["measured_us"] > 0)
    ]
    figure, axes = plt.subplots(figsize=(5.5, 5))
    for kernel, rows in frame.groupby("kernel"):
        axes.scatter(rows["measured_us"], rows["predicted_us"], s=10, alpha=0.7, label=kernel)
    if len(frame):
        low = max(min(frame["measured_us"].min(), frame["predicted_us"].min()) * 0.8, 1e-3)
        high = max(frame["measured_us"].max(), frame["predicted_us"].max()) * 1.25
        line = np.array([low, high])
        axes.plot(line, line, "k-", lw=0.8, label="exact")
        axes.fill_between(line, line * 0.85, line * 1.15, color="grey", alpha=0.2, label="±15%")
    axes.set(xscale="log", yscale="log", xlabel="measured (µs)", ylabel="predicted (µs)", title=title)
    axes.legend(fontsize=7)
    figure.tight_layout()
    import io

    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=120)
    plt.close(figure)
    return atomic_write_bytes(Path(path), buffer.getvalue())
