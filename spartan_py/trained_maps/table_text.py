"""Spartan's table as Markdown, from what ``spartan maps table`` writes (``table.json``): the
step measured per network, training point and precision; the bound and Spartan's hardware at
each grain; the profiling overhead. The CLI prints it; the Spartan page includes it through
:mod:`spartan_py.report.maps_tables`."""

from __future__ import annotations

import math
from pathlib import Path

from spartan_py.errors import InputError
from spartan_py.report.cells import markdown_table
from spartan_py.result_files import read_summary
from spartan_py.trained_maps.figures import pyplot, save_png
from spartan_py.trained_maps.table_record import TABLE_GRAINS

#: Spartan's profiling-overhead figure: software profiling over its hardware monitor
SPARTAN_PROFILING_RATIO = 52.5
#: how the tables name each network
NETWORK_NAMES = {"alexnet": "AlexNet", "vgg16": "VGG-16", "vgg16_bn": "VGG-16 (BN)", "resnet18": "ResNet-18"}


def load_table(path: str | Path) -> dict:
    """``spartan maps table``'s ``table.json`` (plain or gzipped), checked for its schema."""
    table = read_summary(path)
    if not isinstance(table, dict) or not str(table.get("schema", "")).startswith("spartan-table/"):
        raise InputError("expected a table.json of spartan maps table (schema spartan-table/N)", path=path)
    return table


def _num(value, digits: int = 4, missing: str = "not run") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return missing
    return f"{value:.{digits}g}"


def _pct(value) -> str:
    if value is None or not math.isfinite(value):
        return "not priced"
    return f"{value:+.1%}"


def _point(record: dict) -> str:
    return f"{record['training_point']} (step {record['step']}, {record['test_accuracy']:.1%})"


def step_rows(records: list[dict]) -> list[str]:
    """The measured step: dense by cuBLAS (GEMMs + im2col + col2im) and by cuDNN, adaptive,
    its ratio to the faster dense one, the model's cuBLAS GEMMs and its error, the H200's
    blind prediction, the largest difference from cuBLAS, Spartan's figure."""
    rows = []
    for r in records:
        if "error" in r:
            rows.append((NETWORK_NAMES.get(r["network"], r["network"]), "failed", r["error"][:80], *["-"] * 10))
            continue
        h200 = r["predicted_ms"].get("h200-sxm")
        rows.append(
            (
                NETWORK_NAMES.get(r["network"], r["network"]),
                _point(r),
                r["precision"].upper(),
                f"{_num(r['dense_cublas_step_ms'])} ({_num(r['dense_cublas_gemms_ms'])})",
                _num(r["dense_cudnn_ms"]),
                _num(r["adaptive_ms"]),
                _num(r["adaptive_over_faster_dense"], 3),
                f"{r['cudnn_layers']}/{r['layers']}",
                f"{_num(r['model_dense_gemms_ms'])} ({_pct(r['model_dense_error'])})",
                _num(h200, missing="not predicted"),
                f"{_num(r['max_rel_diff'], 2)} / {_num(r['cudnn_max_rel_diff'], 2)}",
                f"{r['sparse_picks']}/{r['gemms']}",
                f"{r['spartan_published']:g}",
            )
        )
    header = (
        "network", "point (step, accuracy)", "precision", "dense cuBLAS ms (GEMMs)", "dense cuDNN ms", "adaptive ms",
        "adaptive / faster dense", "layers on cuDNN", "model: cuBLAS GEMMs ms (error)", "H200 predicted ms",
        "max diff from cuBLAS: adaptive / cuDNN", "sparse picks", "Spartan",
    )  # fmt: skip
    return markdown_table(header, rows)


def grain_rows(records: list[dict]) -> list[str]:
    """Per grain, the bound of the maps (dense work over live work, CHW columns) and Spartan's
    hardware priced on the measured cuBLAS GEMMs: ``bound / what-if``."""
    rows = []
    for r in records:
        if "error" in r:
            continue
        cells = [f"{r['bound']['chw'][g]:.2f} / {r['whatif'][g]['speedup']:.2f}" for g in TABLE_GRAINS]
        rows.append((NETWORK_NAMES.get(r["network"], r["network"]), _point(r), r["precision"].upper(), *cells,
                     f"{r['spartan_published']:g}"))  # fmt: skip
    return markdown_table(("network", "point", "precision", *TABLE_GRAINS, "Spartan"), rows)


def profiling_rows(records: list[dict]) -> list[str]:
    """Software monitor over the fused one over the whole step, per network and precision:
    the median over its training points and their range, beside Spartan's 52.5x."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in records:
        if "error" not in r:
            groups.setdefault((r["network"], r["precision"]), []).append(r)
    rows = []
    for (network, precision), mine in groups.items():
        ratios = sorted(r["profiling_ratio"] for r in mine if math.isfinite(r["profiling_ratio"] or math.nan))
        fused = [r["monitor_ms"] for r in mine]
        shown = f"{ratios[len(ratios) // 2]:.0f}x ({ratios[0]:.0f}-{ratios[-1]:.0f}x)" if ratios else "not measured"
        rows.append(
            (
                NETWORK_NAMES.get(network, network),
                precision.upper(),
                len(mine),
                f"{min(fused):.3g}-{max(fused):.3g}",
                shown,
                f"{SPARTAN_PROFILING_RATIO:g}x",
            )
        )
    header = ("network", "precision", "runs", "fused monitor ms a step", "software / fused (range)", "Spartan")
    return markdown_table(header, rows)


def table_lines(table: dict) -> str:
    """The three tables of ``table`` (``table.json``'s content) as Markdown."""
    records = table.get("records", [])
    if not records:
        return "No step was measured (table.json has no records)."
    return "\n".join(
        [
            *step_rows(records),
            "",
            "Bound / Spartan's hardware by grain (CHW columns; the what-if on the measured cuBLAS GEMMs):",
            "",
            *grain_rows(records),
            "",
            "Profiling overhead over the whole step:",
            "",
            *profiling_rows(records),
        ]
    )


def _ms_or_0(us) -> float:
    """Microseconds as milliseconds, 0 where not measured (a bar of no length)."""
    return us / 1e3 if us is not None and math.isfinite(us) else 0.0


def step_figures(table: dict, out: str | Path, point: str = "late") -> list[Path]:
    """One PNG per network (``step-NETWORK.png`` in ``out``): where the step's time goes, layer
    by layer, at ``point``, FP32 and TF32 side by side: cuBLAS's GEMMs with im2col and col2im
    stacked, cuDNN's three calls, and the adaptive step."""
    plt = pyplot()

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    records = [r for r in table.get("records", []) if r.get("training_point") == point]
    for network in dict.fromkeys(r["network"] for r in records):
        mine = [r for r in records if r["network"] == network]
        fig, axes = plt.subplots(1, len(mine), figsize=(6 * len(mine), 0.35 * len(mine[0]["per_layer"]) + 1.8))
        for ax, record in zip(list(getattr(axes, "flat", [axes])), mine, strict=True):
            layers = record["per_layer"]
            ys = range(len(layers))
            gemms = [_ms_or_0(layer["cublas_us"]) for layer in layers]
            im2col = [_ms_or_0(layer.get("im2col_us")) for layer in layers]
            col2im = [_ms_or_0(layer.get("col2im_us")) for layer in layers]
            ax.barh([y - 0.27 for y in ys], gemms, 0.26, color="C0", label="cuBLAS GEMMs")
            ax.barh([y - 0.27 for y in ys], im2col, 0.26, left=gemms, color="C9", label="im2col")
            left = [g + i for g, i in zip(gemms, im2col, strict=True)]
            ax.barh([y - 0.27 for y in ys], col2im, 0.26, left=left, color="C8", label="col2im")
            ax.barh(list(ys), [_ms_or_0(layer["cudnn_us"]) for layer in layers], 0.26, color="C1", label="cuDNN")
            adaptive = [_ms_or_0(layer["adaptive_us"]) for layer in layers]
            ax.barh([y + 0.27 for y in ys], adaptive, 0.26, color="C2", label="adaptive (without the monitor)")
            ax.set_yticks(list(ys), [layer["layer"].split("/", 1)[1] for layer in layers])
            ax.invert_yaxis()
            ax.set_xlabel("ms a step")
            ax.set_title(f"{NETWORK_NAMES.get(network, network)}, {point}, {record['precision'].upper()}")
            longest = max([*adaptive, *(g + i + c for g, i, c in zip(gemms, im2col, col2im, strict=True))], default=0)
            ax.set_xlim(0, 1.08 * max(longest, *(_ms_or_0(layer["cudnn_us"]) for layer in layers)) or 1)
        handles, labels = fig.axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8)
        fig.tight_layout(rect=(0, 0.08, 1, 1))
        written.append(save_png(fig, out / f"step-{network}.png"))
    return written
