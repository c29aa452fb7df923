"""Bound against granularity, one figure per network and training point, from a
``spartan maps capture`` summary (matplotlib, Agg backend)."""

from __future__ import annotations

from pathlib import Path

from spartan_py.errors import InputError
from spartan_py.result_files import read_summary
from spartan_py.sparsity.granularity import GRAINS
from spartan_py.trained_maps.job import SCHEMA

_STYLE = {"chw": "-", "nhwc": "--"}


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend, imported when a figure is first drawn."""
    # deferred: matplotlib.pyplot adds ~1.9 s to `spartan --help` (python -X importtime), which
    # imports the modules that draw for `spartan maps`
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # deferred with matplotlib, after its backend is chosen

    return plt


#: Resolution of every PNG the trained-maps figures write.
FIGURE_DPI = 110


def save_png(fig, path: Path) -> Path:
    """Write ``fig`` to ``path`` at :data:`FIGURE_DPI` and close it; returns ``path``."""
    fig.savefig(path, dpi=FIGURE_DPI)
    pyplot().close(fig)
    return path


def load_summary(path: str | Path) -> dict:
    """A job's JSON summary (plain or gzipped, ``.gz``), checked for its schema."""
    summary = read_summary(path)
    if not isinstance(summary, dict) or summary.get("schema") != SCHEMA:
        raise InputError(f"expected a summary with schema {SCHEMA!r} (written by spartan maps capture)", path=path)
    return summary


def bound_figures(summary: dict, out: str | Path) -> list[Path]:
    """One PNG per network and point (``NETWORK-POINT.png`` in ``out``): the bound (dense
    work over live work, summed over the post-ReLU convolutions) of each GEMM and of the whole
    step at every grain, both column orders, and the step's bound with the maps thinned to each
    sensitivity sparsity. Returns the paths written."""
    plt = pyplot()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    xs = list(range(len(GRAINS)))
    for network, record in summary.get("networks", {}).items():
        for point, data in record.get("points", {}).items():
            fig, ax = plt.subplots(figsize=(8, 4.5))
            bounds = data["network"]["relu_inputs"]
            for gemm, color in (("forward", "C0"), ("weight_grad", "C1"), ("input_grad", "C2"), ("step", "k")):
                for order, style in _STYLE.items():
                    if gemm == "input_grad" and order == "nhwc":
                        continue  # dY has one column order
                    ys = [bounds[gemm][order][g] for g in GRAINS]
                    ax.plot(xs, ys, style, color=color, marker="o", ms=3, label=f"{gemm} ({order})")
            for color, (key, sens) in zip(("C3", "C4", "C5", "C6"), data.get("sensitivity", {}).items(), strict=False):
                ys = [sens["network"]["relu_inputs"]["step"]["chw"][g] for g in GRAINS]
                ax.plot(
                    xs, ys, ":", color=color, marker="s", ms=3, label=f"step, inputs thinned to {float(key):.0%} zeros"
                )
            ax.axhline(1.5, color="grey", lw=0.6)
            ax.set_xticks(xs, GRAINS, rotation=30)
            ax.set_yscale("log")
            ax.set_xlabel("granularity (row, (image, channel) map, tile rows x cols, element)")
            ax.set_ylabel("bound: dense work / live work")
            accuracy = data.get("test_accuracy")
            ax.set_title(f"{network}, {point} (step {data.get('step')}, test accuracy {accuracy:.3f})")
            ax.legend(fontsize=7, ncol=2)
            fig.tight_layout()
            written.append(save_png(fig, out / f"{network}-{point}.png"))
    return written
