"""Spartan's hardware what-if over a ``spartan maps capture`` summary: per network, training
point and grain, the step's predicted time on Spartan's units
(:mod:`spartan_py.costmodel.spartan_hardware`), what each assumption contributes, and
Spartan's published speed-up beside it; and the figure of speed-up against grain."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from spartan_py.costmodel.spartan_hardware import (
    PARTS,
    DensePrices,
    SpartanAssumptions,
    check_summary,
    price_layers,
)
from spartan_py.errors import InputError
from spartan_py.sparsity.granularity import GRAINS
from spartan_py.trained_maps.figures import pyplot, save_png
from spartan_py.trained_maps.models import LAYERS_NETWORK
from spartan_py.workloads.conv.layers import SPARTAN_TRAINING_SPEEDUP

#: the maps a row prices: as captured, or each sensitivity's thinned inputs
CAPTURED = "captured"


def _point_maps(data: dict) -> dict[str, list[dict]]:
    """``captured`` -> the point's layers; each sensitivity ``s`` -> its thinned post-ReLU
    layers with the point's other layers (the stem, whose input is the image) as captured."""
    out = {CAPTURED: data["layers"]}
    stems = [layer for layer in data["layers"] if not layer.get("relu_input", True)]
    for key, sens in data.get("sensitivity", {}).items():
        out[f"zeroed to {float(key):.0%}"] = [*stems, *sens["layers"]]
    return out


def measured_dense(path: str | Path, precision: str, batch: int) -> dict[tuple[str, str], float]:
    """Measured dense GEMM times from a training-step run's ``gemms.csv`` (or
    ``dense-layers.csv``): ``(layer label, gemm)`` -> the median ``dense_us`` of its rows at
    ``precision`` and ``batch``."""
    try:
        table = pd.read_csv(path)
    except (OSError, ValueError) as exc:
        raise InputError(f"not a readable CSV of a training step's GEMMs ({exc})", path=str(path)) from None
    missing = {"layer", "gemm", "precision", "batch", "dense_us"} - set(table.columns)
    if missing:
        raise InputError(f"lacks the columns {sorted(missing)} (a training step's gemms.csv has them)", path=str(path))
    rows = table[(table["precision"] == precision) & (table["batch"] == batch)]
    if rows.empty:
        raise InputError(f"has no rows at precision {precision} and batch {batch}", path=str(path))
    medians = rows.groupby(["layer", "gemm"])["dense_us"].median()
    return {(str(layer), str(gemm)): float(us) for (layer, gemm), us in medians.items()}


def _by_name(measured: dict[tuple[str, str], float], network: str) -> dict[tuple[str, str], float]:
    prefix = f"{LAYERS_NETWORK.get(network, network)}/"
    return {
        (label.removeprefix(prefix), gemm): us for (label, gemm), us in measured.items() if label.startswith(prefix)
    }


def whatif_rows(
    summary: dict,
    machine: str,
    grains: list[str],
    base: SpartanAssumptions,
    batch: int,
    path: str = "summary",
    measured: dict[tuple[str, str], float] | None = None,
) -> list[dict[str, Any]]:
    """One row per network, point, maps (captured and each sensitivity) and grain: the dense
    step's and Spartan's predicted milliseconds, the speed-up, the ideal speed-up at the grain
    (every dead unit free), each assumption's part (ms, summing to the prediction), and
    Spartan's published figure for the network. ``base``: the assumptions but the grain;
    ``measured``: dense GEMM times by ``(layer label, gemm)`` (:func:`measured_dense`) used in
    place of the cost model's where given (``dense_measured`` counts them)."""
    check_summary(summary, path, tuple(grains))
    prices = DensePrices(machine)
    rows = []
    for network, record in summary.get("networks", {}).items():
        published = SPARTAN_TRAINING_SPEEDUP.get(LAYERS_NETWORK.get(network, network))
        times = _by_name(measured or {}, network)
        for point, data in record.get("points", {}).items():
            for maps, layers in _point_maps(data).items():
                for grain in grains:
                    assumptions = base.model_copy(update={"grain": grain})
                    price = price_layers(layers, assumptions, prices, batch, times)
                    rows.append(
                        {
                            "network": network,
                            "point": point,
                            "test_accuracy": data.get("test_accuracy"),
                            "maps": maps,
                            "grain": grain,
                            "order": assumptions.order,
                            "precision": assumptions.precision,
                            "batch": batch,
                            "machine": machine,
                            "dense_ms": price.dense_us / 1e3,
                            "spartan_ms": price.predicted_us / 1e3,
                            "speedup": price.speedup,
                            "ideal_speedup": price.ideal_speedup,
                            "sparse_gemms": f"{price.sparse_gemms}/{price.gemms}",
                            "dense_measured": f"{price.measured_gemms}/{price.gemms}",
                            **{f"{part}_ms": price.parts[part] / 1e3 for part in PARTS},
                            "spartan_published": published,
                        }
                    )
    return rows


def whatif_table(rows: list[dict]) -> str:
    """The rows as a Markdown table (the CLI prints it)."""
    head = [
        "network",
        "point",
        "maps",
        "grain",
        "dense ms",
        "Spartan ms",
        "speed-up",
        "ideal",
        "sparse GEMMs",
        "measured",
    ]
    head += [f"{p} ms" for p in PARTS[1:]] + ["Spartan's figure"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in rows:
        cells = [r["network"], r["point"], r["maps"], r["grain"], f"{r['dense_ms']:.3f}", f"{r['spartan_ms']:.3f}"]
        cells += [f"{r['speedup']:.2f}", f"{r['ideal_speedup']:.2f}", r["sparse_gemms"], r["dense_measured"]]
        cells += [f"{r[f'{p}_ms']:+.3f}" for p in PARTS[1:]]
        cells.append("-" if r["spartan_published"] is None else f"{r['spartan_published']:g}")
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def whatif_figures(rows: list[dict], out: str | Path) -> list[Path]:
    """One PNG per network (``whatif-NETWORK.png`` in ``out``): predicted speed-up against
    grain, one line per point and maps, Spartan's published figure as a horizontal line."""
    plt = pyplot()

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for network in dict.fromkeys(r["network"] for r in rows):
        mine = [r for r in rows if r["network"] == network]
        grains = [g for g in GRAINS if any(r["grain"] == g for r in mine)]
        xs = {g: i for i, g in enumerate(grains)}
        fig, ax = plt.subplots(figsize=(8, 4.5))
        for key in dict.fromkeys((r["point"], r["maps"]) for r in mine):
            line = [r for r in mine if (r["point"], r["maps"]) == key]
            style = "-" if key[1] == CAPTURED else ":"
            ax.plot([xs[r["grain"]] for r in line], [r["speedup"] for r in line], style, marker="o", ms=3,
                    label=f"{key[0]}, {key[1]}")  # fmt: skip
        published = mine[0]["spartan_published"]
        if published is not None:
            ax.axhline(published, color="k", lw=1.2, label=f"Spartan's figure ({published:g}x, ImageNet, simulated)")
        ax.axhline(1.0, color="grey", lw=0.6)
        ax.set_xticks(range(len(grains)), grains, rotation=30)
        ax.set_xlabel("grain the compaction engine packs and the GEMM skips")
        ax.set_ylabel("predicted step speed-up over dense")
        first = mine[0]
        ax.set_title(f"{network}: Spartan's units on {first['machine']}, {first['precision']}, batch {first['batch']}")
        ax.legend(fontsize=7, ncol=2)
        fig.tight_layout()
        written.append(save_png(fig, out / f"whatif-{network}.png"))
    return written
