"""``spartan report DIR``: a self-contained HTML page and a Markdown twin with PNG figures."""

from __future__ import annotations

import base64
import html
import json
import re
from pathlib import Path

import pandas as pd

from spartan_py.costmodel.families import FAMILIES
from spartan_py.costmodel.fidelity import compare, run_traces
from spartan_py.costmodel.machine import Machine, load_machine, machine_for_device
from spartan_py.costmodel.model import predict
from spartan_py.costmodel.simulate import resolve_machine
from spartan_py.costmodel.validation import kernel_error_table
from spartan_py.costmodel.whole_runs import WORKLOAD_NAMES
from spartan_py.errors import InputError
from spartan_py.files import atomic_write_bytes, atomic_write_text
from spartan_py.report import figures
from spartan_py.report.tables import html_table, markdown_table
from spartan_py.report.what_if import TRUST_HEADING, trust_table, what_if_table
from spartan_py.runner.store import device_machine, in_sweep_order, load_points, simulated_table
from spartan_py.trace import read_trace
from spartan_py.workloads import workload_classes


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


def _fidelity(out: Path, against: Path, predictions: Path | None) -> tuple[list, dict]:
    """Sections and figures comparing this run with the same experiment measured on the GPU
    the model was fitted on (``against``), and with blind ``predictions`` made before it."""

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
        *(
            (
                f"{WORKLOAD_NAMES[name]} whole runs: model error on {a} and on {b} (percent)",
                runs.drop(columns="workload"),
            )
            for name, runs in tables["whole_runs"].groupby("workload", sort=False)
        ),
        (f"Speed-up {a} -> {b} per family: measured and predicted", tables["speedups"]),
        (f"Reverse: fitted on {b}, carried over to predict {a}", tables["reverse_families"]),
    ]
    figure = figures.model_error(blind_frame)
    pictures = {"fidelity-blind.png": (f"{b}: blind prediction vs measurement per launch", figure)} if figure else {}
    return sections, pictures


def _anchor(heading: str) -> str:
    """The id of a heading (as Markdown renderers make it: lower case, words joined by -)."""
    return re.sub(r"[\s-]+", "-", re.sub(r"[^\w\s-]", "", heading).strip().lower())


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
    simulated = simulated_table(points)
    traces = _traces(out, points)
    model = _measured_vs_model(traces, points)
    ok = [p for p in points if p["status"] == "ok"]
    parts = [workload.report(out, points, traces) for workload in workload_classes()]
    pictures = {name: value for part in parts for name, value in part.head_pictures.items()}
    pictures |= {
        "what-if.png": ("What if: simulated machines", figures.what_if(simulated)),
        "model-error.png": ("Measured vs simulated time per launch", figures.model_error(model)),
    }
    pictures |= {name: value for part in parts for name, value in part.pictures.items()}
    for name in [name for name, value in pictures.items() if value[1] is None]:
        (out / name).unlink(missing_ok=True)  # an earlier report's figure this one has not
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
    empty = [c for c in summary.columns if summary[c].replace("", float("nan")).isna().all()]
    summary = summary.drop(columns=empty)
    summary.attrs["missing"] = {"error": "none", "check": "not checked", "passed": "no truth file"} | {
        column: "failed: see error" for column in ("backend", "device", "simulated", "seconds", "edges_per_second")
    }
    sections = [("Points", summary)]
    sections += [section for part in parts for section in part.head_sections]
    links = {}
    if not simulated.empty:
        heading = (
            "What if: predicted seconds of the kernel launches on each machine "
            "(the 80% interval in brackets; simulated figures come from the cost model, not a clock)"
        )
        sections.append((heading, what_if_table(simulated)))
        sections.append((TRUST_HEADING, trust_table(simulated)))
        links[heading] = TRUST_HEADING
    if not model.empty:
        sections.append(("Cost model error on this run's measured launches", kernel_error_table(model)))
    sections += fidelity_sections
    sections += [section for part in parts for section in part.sections]
    experiment = config["experiment"]
    title = f"spartan_py report: {experiment['name']}"
    intro = (
        f"{experiment.get('description') or ''} {len(points)} points ({len(ok)} ok). "
        f"Environment: Python {environment.get('python')}, commit {environment.get('commit')}, "
        f"CuPy {environment.get('cupy') or 'not installed'}. "
        "Simulated figures come from the cost model (sim/README.md), not a clock."
    )
    markdown = [f"# {title}\n", intro + "\n"]
    page = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
        "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em}"
        "table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;padding:2px 6px;"
        "vertical-align:top}th{text-align:left}.table-scroll{overflow-x:auto;max-width:100%}"
        "img{max-width:100%;height:auto}h1,h2,p{overflow-wrap:anywhere}</style></head><body>",
        f"<h1>{html.escape(title)}</h1><p>{html.escape(intro)}</p>",
    ]
    for heading, frame in sections:
        see = links.get(heading)
        markdown.append(f"## {heading}\n\n{markdown_table(frame, frame.attrs.get('missing'))}")
        page.append(
            f"<h2 id='{_anchor(heading)}'>{html.escape(heading)}</h2>{html_table(frame, frame.attrs.get('missing'))}"
        )
        if see:
            said = "How far each machine's figures can be trusted:"
            markdown.append(f"{said} [{see}](#{_anchor(see)}).\n")
            page.append(f"<p>{said} <a href='#{_anchor(see)}'>{html.escape(see)}</a>.</p>")
    for name, (heading, png) in pictures.items():
        markdown.append(f"## {heading}\n\n![{heading}]({name})\n")
        encoded = base64.b64encode(png or b"").decode()
        page.append(
            f"<h2 id='{_anchor(heading)}'>{html.escape(heading)}</h2>"
            f"<img alt='{html.escape(heading)}' src='data:image/png;base64,{encoded}'>"
        )
    page.append("</body></html>")
    html_path = atomic_write_text(out / "report.html", "\n".join(page))
    md_path = atomic_write_text(out / "report.md", "\n".join(markdown))
    return html_path, md_path
