"""``spartan report DIR``: a self-contained HTML page and a Markdown twin with PNG figures."""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path

import pandas as pd

from spartan_py.costmodel.families import FAMILIES, GC_LAYER
from spartan_py.errors import InputError
from spartan_py.files import atomic_write_bytes, atomic_write_text
from spartan_py.graph_challenge.generate import generated_family
from spartan_py.report import figures
from spartan_py.report.published_runs import published_rates
from spartan_py.report.tables import html_table, markdown_table
from spartan_py.runner.store import (
    challenge_table,
    dense_layer_table,
    device_machine,
    in_sweep_order,
    is_graph_challenge,
    load_points,
    precision_table,
    results_table,
    simulated_table,
    training_step_table,
)
from spartan_py.trace import read_trace


def _traces(out: Path, points: list[dict]) -> pd.DataFrame:
    frames = []
    for point in points:
        if point["status"] == "ok" and (out / "points" / point["trace"]).is_file():
            frame = read_trace(out / "points" / point["trace"])
            frame["label"] = point["label"]
            frame["point"] = point["id"]
            frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _machine_for(point: dict) -> str:
    """The point's listed machine that describes the GPU it ran on (its first otherwise)."""
    return device_machine(point) or point["config"]["machines"][0]


def _measured_vs_model(traces: pd.DataFrame, points: list[dict]) -> pd.DataFrame:
    """Per launch, for points measured on a GPU: the prediction of the listed machine that
    describes that GPU (``device_names``), else of the first listed."""
    from spartan_py.costmodel.model import predict
    from spartan_py.costmodel.simulate import resolve_machine

    parts = []
    if traces.empty:  # no trace files (a copied run folder may leave them out)
        return pd.DataFrame()
    for point in points:
        if point["status"] != "ok" or point["summary"]["simulated"] or not point["config"]["machines"]:
            continue
        frame = traces[(traces["point"] == point["id"]) & traces["kernel"].isin(list(FAMILIES))]
        if frame.empty or frame["measured_us"].isna().all():
            continue
        machine, variant = resolve_machine(_machine_for(point))
        predicted = predict(frame.drop(columns=["label", "point"]), machine, variant)
        predicted["label"] = f"{point['label']} on {machine.name}"
        parts.append(predicted)
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def _monitor_overhead(points: list[dict]) -> pd.DataFrame:
    """Graph Challenge points that differ only in the monitor: each mode's extra time over
    none. (A conv_layers point's monitor also changes the policy's input, so its overhead is
    the per-layer ``monitor_us`` of the dense-layer table instead.)"""
    groups: dict[str, dict] = {}
    for point in points:
        if not is_graph_challenge(point):
            continue
        config = dict(point["config"])
        monitor = config.pop("monitor")
        key = json.dumps(config, sort_keys=True)
        groups.setdefault(key, {"label": point["label"]})[monitor] = point["summary"]["seconds"]
    rows = []
    for g in groups.values():
        if "off" not in g:
            continue
        for mode in ("fused", "sampled", "software"):
            if mode in g:
                extra = g[mode] - g["off"]
                fused_extra = g["fused"] - g["off"] if "fused" in g else float("nan")
                rows.append(
                    {
                        "group": g["label"],
                        "mode": mode,
                        "seconds": g[mode],
                        "off_seconds": g["off"],
                        "overhead_pct": 100 * extra / g["off"],
                        "times_fused_overhead": extra / fused_extra if fused_extra > 0 else float("nan"),
                    }
                )
    return pd.DataFrame(rows)


def _tile_utilization(traces: pd.DataFrame, points: list[dict]) -> pd.DataFrame:
    if traces.empty:
        return pd.DataFrame()
    tiled = traces[(traces["kernel"] == GC_LAYER) & (traces["executed_macs"] > 0)]
    if tiled.empty:
        return pd.DataFrame()
    workloads = {
        p["id"]: f"{p['summary']['neurons']}x{p['summary']['layers']}" for p in points if is_graph_challenge(p)
    }
    tiled = tiled.assign(workload=tiled["point"].map(workloads))
    grouped = tiled.groupby(["workload", "block_rows"])[["useful_macs", "executed_macs"]].sum().reset_index()
    grouped["utilization"] = grouped["useful_macs"] / grouped["executed_macs"]
    return grouped


#: The dense-layer table's columns shown in the report (the CSV has them all).
DENSE_LAYER_COLUMNS = [
    "label",
    "layer",
    "timed_on",
    "M",
    "K",
    "N",
    "tile",
    "density",
    "tile_density",
    "utilization",
    "monitor",
    "monitor_us",
    "dense_us",
    "tile_sparse_us",
    "tile_list_us",
    "speedup_tile_sparse",
    "kernel",
    "chosen_us",
    "speedup_chosen",
]


def _fidelity(out: Path, against: Path, predictions: Path | None) -> tuple[list, dict]:
    """Sections and figures comparing this run with the same experiment measured on the GPU
    the model was fitted on (``against``), and with blind ``predictions`` made before it."""
    from spartan_py.costmodel.fidelity import compare, run_traces
    from spartan_py.costmodel.machine import Machine, load_machine, machine_for_device

    def machine_of(trace: pd.DataFrame) -> Machine:
        device = str(trace["device"].iloc[0])
        name = machine_for_device(device)
        if name is None:
            raise InputError(f"no machine in sim/ names the device {device!r} in its device_names")
        return load_machine(name)

    here, there = run_traces(out), run_traces(against)
    blind = json.loads(Path(predictions).read_text()) if predictions else None
    fitted_on, other = machine_of(there), machine_of(here)
    found = compare(there, here, fitted_on, other, blind)
    tables = found.tables
    blind_frame = found.blind.assign(label=lambda f: f["kernel"])
    a, b = fitted_on.name, other.name
    sections = [
        (
            f"Cost model per family: {a} held out, {b} blind (predicted before it was measured), "
            f"{b} with the model now",
            tables["families"],
        ),
        (f"Whole runs: model error on {a} and on {b} (percent)", tables["whole_runs"]),
        (f"Speed-up {a} -> {b} per family: measured and predicted", tables["speedups"]),
        (f"Reverse: fitted on {b}, carried over to predict {a}", tables["reverse_families"]),
    ]
    figure = figures.model_error(blind_frame)
    pictures = {"fidelity-blind.png": (f"{b}: blind prediction vs measurement per launch", figure)} if figure else {}
    return sections, pictures


def _check_text(check: dict | None) -> str:
    """A point's category check in words (the rule of :mod:`spartan_py.graph_challenge.check`)."""
    if not check:
        return ""
    verdict = check.get("note") or ("identical" if check["equal"] else "differ")
    return f"against the {check['backend']} engine on {check['rows']} rows: {verdict}"


def write_report(
    out: str | Path, *, against: str | Path | None = None, predictions: str | Path | None = None
) -> tuple[Path, Path]:
    """Write ``report.html`` (figures embedded) and ``report.md`` (+ PNG files) into ``out``.

    ``against``: the same experiment's run folder from the GPU the cost model was fitted
    on; the report then adds the cross-machine fidelity tables (with ``predictions``, the
    blind predictions file written before this run) and a blind-prediction scatter.
    """
    out = Path(out)
    if not out.exists():
        raise InputError("folder not found; give a run folder written by `spartan run FILE --out DIR`", path=out)
    if not (out / "points").is_dir():
        raise InputError("not a run folder (no points/ inside); run `spartan run FILE --out DIR` first", path=out)
    config = json.loads((out / "config.json").read_text())
    environment = json.loads((out / "environment.json").read_text())
    points = in_sweep_order(load_points(out), config)
    results, simulated, dense_layers = results_table(points), simulated_table(points), dense_layer_table(points)
    forward_layers = dense_layers[dense_layers["gemm"] == "forward"] if "gemm" in dense_layers else dense_layers
    training, precisions = training_step_table(points), precision_table(points)
    traces = _traces(out, points)
    model = _measured_vs_model(traces, points)
    overhead = _monitor_overhead(points)
    utilization = _tile_utilization(traces, points)
    ok = [p for p in points if p["status"] == "ok"]
    proxy = any(
        p["summary"]["neurons"] == 1024
        and p["summary"]["layers"] == 120
        and p["summary"]["rows"] == 60000
        and generated_family(p["config"]["workload"]["network"]) is None
        for p in ok
        if is_graph_challenge(p)
    )  # the published runs used the official network and the proxy input
    pictures = {
        "live-rows.png": ("Live rows and density by layer", figures.live_rows_by_layer(results)),
        "edge-rate.png": ("Edge rate by backend", figures.edge_rate(results, proxy_workload=proxy)),
        "what-if.png": ("What if: simulated machines", figures.what_if(simulated)),
        "model-error.png": ("Measured vs simulated time per launch", figures.model_error(model)),
        "monitor-overhead.png": ("Profiling overhead by monitor mode", figures.monitor_overhead(overhead)),
        "tile-utilization.png": ("Tile utilization", figures.tile_utilization(utilization)),
        "tile-sweep.png": (
            "Dense-weight layers: speed-up and tile utilization against tile size and density",
            figures.tile_sweep(forward_layers),
        ),
        "training-step.png": (
            "Training step: where the time goes, by layer and GEMM",
            figures.training_step(dense_layers),
        ),
    }
    pictures = {name: value for name, value in pictures.items() if value[1] is not None}
    fidelity_sections: list = []
    if against is not None:
        fidelity_sections, fidelity_pictures = _fidelity(out, Path(against), Path(predictions) if predictions else None)
        pictures |= fidelity_pictures
    for name, (_, png) in pictures.items():
        assert png is not None
        atomic_write_bytes(out / name, png)
    summary = pd.DataFrame(
        [
            {
                "point": p["id"],
                "label": p["label"],
                "status": p["status"],
                "backend": p["summary"]["backend"] if p["status"] == "ok" else "",
                "device": p["summary"]["device"] if p["status"] == "ok" else "",
                "simulated": p["summary"]["simulated"] if p["status"] == "ok" else "",
                "categories": p["summary"].get("categories", "") if p["status"] == "ok" else "",
                "passed": p["summary"].get("passed", "") if p["status"] == "ok" else "",
                "check": _check_text(p["summary"].get("check")) if p["status"] == "ok" else "",
                "seconds": p["summary"]["seconds"] if p["status"] == "ok" else float("nan"),
                "edges_per_second": p["summary"].get("edges_per_second", float("nan"))
                if p["status"] == "ok"
                else float("nan"),
                "error": p.get("error") or "",
            }
            for p in points
        ]
    )
    empty = [c for c in summary.columns if summary[c].replace("", float("nan")).isna().all() and c != "error"]
    sections = [("Points", summary.drop(columns=empty))]
    challenge = challenge_table(points)
    if not challenge.empty:
        total = challenge["seconds"].sum()
        setup = challenge["setup_seconds"].sum()
        sections.append(
            (
                f"Graph Challenge networks ({len(challenge)}; inference {total:.3g} s in all, "
                f"set-up {setup:.3g} s; model_error: predicted / measured - 1)",
                challenge,
            )
        )
    if not simulated.empty:
        sections.append(
            (
                "What if (predicted seconds of the kernel launches, with the 80% interval: low_seconds - high_seconds)",
                simulated[
                    [
                        "label",
                        "machine",
                        "predicted_seconds",
                        "low_seconds",
                        "high_seconds",
                        "own_seconds",
                        "own_device",
                        "trust",
                        "note",
                        "guessed",
                    ]
                ],
            )
        )
    if not model.empty:
        from spartan_py.costmodel.validation import kernel_error_table

        sections.append(("Cost model error on this run's measured launches", kernel_error_table(model)))
    sections += fidelity_sections
    if not overhead.empty:
        sections.append(("Profiling overhead by monitor mode (vs none)", overhead))
    if not utilization.empty:
        sections.append(("Tile utilization", utilization))
    if not training.empty:
        sections.append(
            (
                "Training step of the conv layers (dense: cuBLAS; adaptive: the policy's picks with the "
                "monitor, lists and copies; bound: every skipped tile free; spartan_published: the paper's "
                "simulated speed-up)",
                training,
            )
        )
    if not precisions.empty:
        sections.append(
            (
                "Precision appendix: each layer's dense step (three GEMMs, µs) and largest error against float64 "
                "(|error| over |A||W|) at FP32, TF32 and fp32x3 (three TF32 products, opt-in)",
                precisions,
            )
        )
    if not dense_layers.empty:
        columns = list(DENSE_LAYER_COLUMNS)
        if "gemm" in dense_layers:  # training steps: which of a layer's GEMMs
            columns.insert(columns.index("layer") + 1, "gemm")
        sections.append(
            ("Dense-weight layers (times in µs; simulated points: the cost model of timed_on)", dense_layers[columns])
        )
    if proxy:
        sections.append(("Published runs (1024 x 120, 60000-row proxy)", pd.DataFrame(published_rates())))
    experiment = config["experiment"]
    title = f"spartan_py report: {experiment['name']}"
    intro = (
        f"{experiment.get('description') or ''} {len(points)} points ({len(ok)} ok). "
        f"Environment: Python {environment.get('python')}, commit {environment.get('commit')}, "
        f"CuPy {environment.get('cupy')}. Simulated figures come from the cost model (sim/README.md), not a clock."
    )
    markdown = [f"# {title}\n", intro + "\n"]
    page = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
        "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto}table{border-collapse:collapse;"
        "font-size:12px}td,th{border:1px solid #ccc;padding:2px 6px}img{max-width:100%}</style></head><body>",
        f"<h1>{html.escape(title)}</h1><p>{html.escape(intro)}</p>",
    ]
    for heading, frame in sections:
        markdown.append(f"## {heading}\n\n{markdown_table(frame)}")
        page.append(f"<h2>{html.escape(heading)}</h2>{html_table(frame)}")
    for name, (heading, png) in pictures.items():
        markdown.append(f"## {heading}\n\n![{heading}]({name})\n")
        encoded = base64.b64encode(png or b"").decode()
        page.append(
            f"<h2>{html.escape(heading)}</h2><img alt='{html.escape(heading)}' src='data:image/png;base64,{encoded}'>"
        )
    page.append("</body></html>")
    html_path = atomic_write_text(out / "report.html", "\n".join(page))
    md_path = atomic_write_text(out / "report.md", "\n".join(markdown))
    return html_path, md_path
