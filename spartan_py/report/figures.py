"""The report's figures (matplotlib, Agg), each returned as PNG bytes or None when the run
has nothing to show for it."""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import (  # noqa: E402
    EngFormatter,
    FuncFormatter,
    LogLocator,
    MaxNLocator,
    NullFormatter,
    ScalarFormatter,
)

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


#: Line styles and markers cycled over a plot's series, so that one line drawn over another
#: (two backends with equal live rows) still shows both.
_STYLES = [("-", "o"), ("--", "s"), (":", "^"), ("-.", "v"), ((0, (5, 1, 1, 1)), "D")]


def live_rows_by_layer(results: pd.DataFrame) -> bytes | None:
    """Live rows and activation density by layer, one line per point (each its own line
    style and markers, the later ones thinner, so that equal series stay visible)."""
    if results.empty:
        return None
    figure, (rows_axes, density_axes) = plt.subplots(1, 2, figsize=(10, 3.8))
    groups = list(results.groupby("label", sort=False))
    for number, (label, rows) in enumerate(groups):
        style, marker = _STYLES[number % len(_STYLES)]
        look = {
            "linestyle": style,
            "marker": marker,
            "markevery": max(1, len(rows) // 8) + number,  # markers of equal series fall apart
            "markersize": 4,
            "linewidth": max(0.8, 2.2 - 0.5 * number),
            "label": label,
        }
        rows_axes.plot(rows["layer"], rows["live_rows"], **look)
        density_axes.plot(rows["layer"], rows["density"], **look)
    rows_axes.set(yscale="log", xlabel="layer", ylabel="live rows", title="live rows by layer")
    density_axes.set(yscale="log", xlabel="layer", ylabel="non-zeros / (rows x neurons)", title="activation density")
    _few_log_labels(rows_axes, density_axes)
    rows_axes.legend(fontsize=7)
    return _png(figure)


def _few_log_labels(*panels) -> None:
    """Label a log y axis at 1, 2 and 5 of each decade, as plain numbers (matplotlib's own
    choice leaves a range under two decades with one label, or crowds it with minor ones)."""
    for axes in panels:
        axes.yaxis.set_major_locator(LogLocator(subs=(1, 2, 5), numticks=12))
        axes.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        axes.yaxis.set_minor_formatter(NullFormatter())


#: The edge-rate figure's panels: what the bars of each are, in order.
_RATE_PANELS = {
    "measured": "measured on this machine (a clock)",
    "simulated": "simulated by the cost model (not a clock)",
    "published": "published runs (their own hardware)",
}


def edge_rate(results: pd.DataFrame, *, proxy_workload: bool) -> bytes | None:
    """Edges per second of each point, one panel per kind of figure (measured, simulated,
    published: never two kinds on one axis), each panel on its own linear scale.

    Horizontal bars, so that each point's whole label (workload, backend) can be read."""
    if results.empty:
        return None
    ours = results.drop_duplicates("point")
    bars: dict[str, list[tuple[str, float]]] = {kind: [] for kind in _RATE_PANELS}
    for row in ours.itertuples():
        bars["simulated" if row.simulated else "measured"].append(
            (f"{row.label} [{row.backend}]", row.edges_per_second)
        )
    if proxy_workload:
        bars["published"] = [(f"{r['name']} ({r['includes']})", r["edges_per_second"]) for r in published_rates()]
    shown = {kind: rows for kind, rows in bars.items() if rows}
    heights = [len(rows) + 1.2 for rows in shown.values()]
    figure, panels = plt.subplots(
        len(shown),
        1,
        figsize=(9, max(2.8, 0.9 + 0.34 * sum(heights))),
        gridspec_kw={"height_ratios": heights},
        squeeze=False,
        layout="constrained",
    )
    colour = {"measured": "tab:blue", "simulated": "tab:orange", "published": "tab:grey"}
    for axes, (kind, rows) in zip(panels[:, 0], shown.items()):
        positions = np.arange(len(rows))[::-1]  # the first point on top
        rates = [rate for _, rate in rows]
        axes.barh(positions, rates, color=colour[kind], height=0.6)
        axes.set_yticks(positions, [name for name, _ in rows], fontsize=7)
        axes.set_ylim(-0.7, len(rows) - 0.3)
        axes.xaxis.set_major_locator(MaxNLocator(nbins=4))
        axes.xaxis.set_major_formatter(EngFormatter(unit="edges/s", places=1))
        axes.tick_params(axis="x", labelsize=7)
        axes.set_xlim(0, max(rates) * 1.25)
        for y, rate in zip(positions, rates):
            axes.annotate(f"{rate:.3g}", (rate, y), xytext=(3, 0), textcoords="offset points", va="center", fontsize=7)
        axes.set_title(f"edge rate: {_RATE_PANELS[kind]}", fontsize=9)
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
    """Useful / executed multiply-adds of the tiled kernel against tile height; None where
    no workload ran more than one tile height (one dot says nothing a table does not)."""
    if utilization.empty or utilization.groupby("workload")["block_rows"].nunique().max() < 2:
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
