"""The report's figures (matplotlib, Agg), each returned as PNG bytes or None when the run
has nothing to show for it."""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from spartan_py.report.published_runs import published_rates  # noqa: E402


def _png(figure) -> bytes:
    buffer = io.BytesIO()
    if not figure.get_layout_engine():  # figures laid out as they were made keep their own
        figure.set_layout_engine("constrained")  # no tight_layout warning on long labels
    figure.savefig(buffer, format="png", dpi=110)
    plt.close(figure)
    return buffer.getvalue()


def _bars(table: pd.DataFrame, size: tuple[float, float], *, ylabel: str, title: str) -> bytes:
    """Grouped bars: one group per row of ``table``, one bar per column, labels slanted."""
    figure, axes = plt.subplots(figsize=size)
    table.plot.bar(ax=axes, rot=30)
    axes.set_xticklabels(table.index, ha="right", fontsize=7)
    axes.set(ylabel=ylabel, title=title)
    axes.legend(fontsize=7)
    return _png(figure)


def live_rows_by_layer(results: pd.DataFrame) -> bytes | None:
    """Live rows and activation density by layer, one line per point."""
    if results.empty:
        return None
    figure, (rows_axes, density_axes) = plt.subplots(1, 2, figsize=(10, 3.8))
    for label, rows in results.groupby("label", sort=False):
        rows_axes.plot(rows["layer"], rows["live_rows"], label=label)
        density_axes.plot(rows["layer"], rows["density"], label=label)
    rows_axes.set(yscale="log", xlabel="layer", ylabel="live rows", title="live rows by layer")
    density_axes.set(yscale="log", xlabel="layer", ylabel="non-zeros / (rows x neurons)", title="activation density")
    rows_axes.legend(fontsize=7)
    return _png(figure)


def edge_rate(results: pd.DataFrame, *, proxy_workload: bool) -> bytes | None:
    """Edges per second of each point, with the published runs beside ours when comparable.

    Horizontal bars, so that each point's whole label (workload, backend) can be read; the
    title names only the colours drawn."""
    if results.empty:
        return None
    ours = results.drop_duplicates("point")
    names = [f"{row.label} [{row.backend}{', simulated' if row.simulated else ''}]" for row in ours.itertuples()]
    rates = list(ours["edges_per_second"])
    kinds = ["simulated" if s else "measured" for s in ours["simulated"]]
    if proxy_workload:
        for row in published_rates():
            names.append(f"{row['name']} ({row['includes']})")
            rates.append(row["edges_per_second"])
            kinds.append("published")
    colour = {"measured": "tab:blue", "simulated": "tab:orange", "published": "tab:grey"}
    figure, axes = plt.subplots(figsize=(9, max(2.8, 1.2 + 0.32 * len(names))), layout="constrained")
    positions = np.arange(len(names))[::-1]  # the first point on top
    axes.barh(positions, rates, color=[colour[k] for k in kinds])
    axes.set_yticks(positions, names, fontsize=7)
    shown = [f"{colour[k].removeprefix('tab:')} {k}" for k in colour if k in kinds]
    axes.set(xscale="log", xlabel="edges / s", title=f"edge rate ({', '.join(shown)})")
    return _png(figure)


def what_if(simulated: pd.DataFrame) -> bytes | None:
    """Predicted time of each point on each simulated machine."""
    if simulated.empty:  # no point lists a machine: the table has no columns either
        return None
    frame = simulated.dropna(subset=["predicted_seconds"])
    if frame.empty:
        return None
    table = frame.pivot_table(index="machine", columns="label", values="predicted_seconds", sort=False)
    if len(table.columns) > 6:  # many points: one group per point, one bar per machine
        table = table.T
    bars = len(table.index) * max(1, len(table.columns))
    return _bars(
        table.mul(1e3),
        (min(16, max(6, 0.25 * bars + 0.3 * len(table.index))), 4.5),
        ylabel="predicted ms (kernel launches)",
        title="what if: the same run on other GPUs (cost model)",
    )


def model_error(predicted: pd.DataFrame) -> bytes | None:
    """Measured vs predicted time per launch for points measured on a GPU."""
    if predicted.empty:
        return None
    frame = predicted.dropna(subset=["measured_us", "predicted_us"])
    if frame.empty:
        return None
    figure, axes = plt.subplots(figsize=(5, 4.5))
    by = "label" if frame["label"].nunique() <= 8 else "kernel"  # one colour per point while that stays legible
    for label, rows in frame.groupby(by):
        axes.scatter(rows["measured_us"], rows["predicted_us"], s=10, label=label)
    low, high = (
        frame[["measured_us", "predicted_us"]].min().min() * 0.8,
        frame[["measured_us", "predicted_us"]].max().max() * 1.25,
    )
    axes.plot([low, high], [low, high], "k-", lw=0.8)
    axes.fill_between([low, high], [low * 0.85, high * 0.85], [low * 1.15, high * 1.15], color="grey", alpha=0.2)
    axes.set(
        xscale="log",
        yscale="log",
        xlabel="measured µs",
        ylabel="predicted µs",
        title="cost model vs measurement (±15%)",
    )
    axes.legend(fontsize=7)
    return _png(figure)


def monitor_overhead(overhead: pd.DataFrame) -> bytes | None:
    """Extra time of each monitor mode over no monitor, per group of otherwise equal points."""
    if overhead.empty:
        return None
    table = overhead.pivot_table(index="group", columns="mode", values="overhead_pct", sort=False)
    return _bars(table, (6, 3.5), ylabel="% of the time without monitor", title="profiling overhead by monitor mode")


def tile_utilization(utilization: pd.DataFrame) -> bytes | None:
    """Useful / executed multiply-adds of the tiled kernel against tile height."""
    if utilization.empty:
        return None
    figure, axes = plt.subplots(figsize=(5, 3.5))
    for label, rows in utilization.groupby("workload"):
        axes.plot(rows["block_rows"], rows["utilization"], "o-", label=label)
    axes.set(xscale="log", xlabel="rows per tile", ylabel="useful / executed MACs", title="tile utilization")
    axes.legend(fontsize=7)
    return _png(figure)


def tile_sweep(layers: pd.DataFrame) -> bytes | None:
    """Dense-weight layers: tile-sparse speed-up over dense and the policy's speed-up against
    activation density, one line per tile (geometric means over layers), and utilization
    (useful / executed MACs) against square tile size, one line per density."""
    if layers.empty:
        return None
    from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

    frame = layers.assign(log_tile=np.log(layers["speedup_tile_sparse"]), log_chosen=np.log(layers["speedup_chosen"]))
    keys = ["timed_on", "tile", "map_density"]
    by_tile = frame.groupby(keys)[["log_tile", "log_chosen", "density"]].mean().reset_index()
    several_clocks = by_tile["timed_on"].nunique() > 1
    figure, (speed_axes, chosen_axes, util_axes) = plt.subplots(1, 3, figsize=(13, 3.8))
    for (timed_on, tile), rows in by_tile.groupby(["timed_on", "tile"], sort=False):
        label = f"tile {tile}" + (f" ({timed_on})" if several_clocks else "")
        speed_axes.plot(rows["density"], np.exp(rows["log_tile"]), "o-", label=label)
        chosen_axes.plot(rows["density"], np.exp(rows["log_chosen"]), "o-", label=label)
    grid = np.geomspace(max(by_tile["density"].min(), 1e-3), 0.5, 20)
    speed_axes.plot(grid, 0.7 / grid, "k--", lw=0.8, label="0.7 / density")
    for axes in (speed_axes, chosen_axes):
        axes.axhline(1.0, color="grey", lw=0.8)
        axes.set(xscale="log", yscale="log", xlabel="activation density (non-zeros / entries)")
        for axis in (axes.xaxis, axes.yaxis):
            axis.set_major_locator(LogLocator(subs=(1, 2, 5)))
            axis.set_major_formatter(ScalarFormatter())
            axis.set_minor_formatter(NullFormatter())
        axes.legend(fontsize=7)
    speed_axes.set(ylabel="dense time / tile-sparse time", title="tile-sparse GEMM vs dense")
    chosen_axes.set(ylabel="dense time / chosen kernel's time", title="the policy's choice vs dense")
    sizes = [int(c.split("_")[1]) for c in layers.columns if c.startswith("utilization_")]
    util = layers.groupby("map_density")[[f"utilization_{s}" for s in sizes]].mean()
    for density, values in util.iterrows():
        util_axes.plot(sizes, values.to_numpy(), "o-", label=f"maps {density:g} dense")
    util_axes.set(
        xscale="log",
        xlabel="square tile size",
        ylabel="useful / executed MACs (mean over layers)",
        title="tile utilization",
        ylim=(0, 1.05),
    )
    util_axes.set_xticks(sizes, [str(s) for s in sizes])
    util_axes.xaxis.set_minor_formatter(NullFormatter())
    util_axes.legend(fontsize=7)
    return _png(figure)


def training_step(layers: pd.DataFrame) -> bytes | None:
    """Where a training step's time goes: per layer, dense and adaptive time stacked by GEMM
    (forward, weight gradient, input gradient), one panel per point (at most six)."""
    if layers.empty or "gemm" not in layers or layers["gemm"].isna().all():
        return None
    steps = layers[layers["gemm"].notna()]
    points = list(dict.fromkeys(steps["point"]))[:6]
    figure, panels = plt.subplots(len(points), 1, figsize=(10, 2.2 + 0.9 * len(points) * 2), squeeze=False)
    colours = {"forward": "tab:blue", "weight_grad": "tab:orange", "input_grad": "tab:green"}
    for axes, point in zip(panels[:, 0], points):
        rows = steps[steps["point"] == point]
        names = list(dict.fromkeys(rows["layer"]))
        y = np.arange(len(names))
        for offset, column, hatch in ((-0.2, "dense_us", ""), (0.2, "chosen_us", "//")):
            left = np.zeros(len(names))
            for gemm, colour in colours.items():
                part = rows[rows["gemm"] == gemm].set_index("layer")[column].reindex(names).fillna(0).to_numpy()
                label = f"{gemm} ({'dense' if column == 'dense_us' else 'adaptive'})" if axes is panels[0, 0] else None
                axes.barh(y + offset, part / 1e3, 0.38, left=left, color=colour, hatch=hatch, label=label)
                left += part / 1e3
        axes.set_yticks(y, names, fontsize=7)
        axes.invert_yaxis()
        first = rows.iloc[0]
        networks = ", ".join(dict.fromkeys(name.split("/")[0] for name in names))
        axes.set_title(f"{networks}, {first['precision']}, map density {first['map_density']:g}", fontsize=8)
        axes.set_xlabel("ms (plain: dense; hatched: adaptive)")
    panels[0, 0].legend(fontsize=7, ncols=3, loc="lower right")
    figure.tight_layout()
    return _png(figure)
