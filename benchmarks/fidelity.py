"""The cost model's fidelity on the H100 and on a GPU it has never seen (the H200).

Three steps, each run from the repository root on this (CPU) machine, over the run folders
that ``spartan run experiments/validate-h200.yaml`` wrote on each GPU:

    python benchmarks/fidelity.py calibrate RUN_H100   # fit the H100 on part of its run, report the rest, freeze
    python benchmarks/fidelity.py predict RUN_H100     # the H200's launches predicted before any H200 run
    python benchmarks/fidelity.py compare RUN_H100 RUN_H200 --predictions FILE   # blind error, speed-ups, reverse fit

``calibrate`` fits every family on the points not matched by ``--holdout`` and reports the
held-out points' errors, stores the fit in ``sim/h100-sxm.yaml`` (named there as frozen; the
H200 and the what-if machines derive theirs from it when loaded, ``calibration_from``) and
keeps the H100 trace in ``benchmarks/results/fidelity/``. ``lopo`` leaves each point out of
the fit in turn and stores the held-out spreads (the 80% intervals) in the machine file.
``predict`` writes the H200 predictions, to be committed before the H200 is measured.
``compare`` writes the summary the docs cite; ``tables FILE`` prints that summary as the
Markdown tables of docs/cost-model.md. ``challenge RUN`` replays the Graph Challenge
networks' runs (experiments/graph-challenge-all.yaml) on the current model.
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

import pandas as pd

from benchmarks._results import RESULTS, ROOT, commit, set_machine_header, write_result
from spartan_py.costmodel import calibrate, load_machine, predict, write_calibration
from spartan_py.costmodel.calibrate import check_may_calibrate
from spartan_py.costmodel.fidelity import (
    HOLDOUT_POINTS,
    compare,
    family_errors,
    predictions,
    run_traces,
    summary,
    whole_run_errors,
)
from spartan_py.errors import InputError
from spartan_py.files import atomic_write_text
from spartan_py.trace import read_trace, write_trace

OUT = RESULTS / "fidelity"
H100_RECORDS = (OUT / "validate-h100-47a7d1c.trace.csv.gz").relative_to(ROOT)


def _tables(predicted) -> dict:
    return {
        "families": family_errors(predicted).round(3).to_dict(orient="records"),
        "whole_runs": whole_run_errors(predicted).round(3).to_dict(orient="records"),
        "summary": summary(predicted),
    }


def _measured(path: Path):
    """Measured launches of a ``spartan run`` folder, or of a trace file kept here (its runs
    are the points)."""
    if path.is_dir():
        return run_traces(path)
    trace = read_trace(path)
    return trace.assign(point=trace["run"])


def _with_algorithms(trace: pd.DataFrame, table: Path | None) -> pd.DataFrame:
    """``trace``'s cuBLAS records given their algorithm from ``table`` (``benchmarks/cublas_algos.py``)
    where they name none; unchanged without one."""
    if table is None:
        return trace
    from benchmarks.cublas_algos import load_table, with_algorithm_table

    return with_algorithm_table(trace, load_table(table))


def _keep(trace, name: str) -> Path:
    """Keep a run folder's measured launches here as a trace (its points as runs)."""
    kept = OUT / name
    write_trace(kept, trace.drop(columns="point").assign(run=trace["point"]))
    return kept


def cmd_calibrate(args) -> dict:
    OUT.mkdir(parents=True, exist_ok=True)
    runs = [
        (args.run, "validate-h100.trace.csv.gz"),
        *((extra, f"{extra.name}-h100.trace.csv.gz") for extra in args.also),
    ]
    traces, kept = [], []
    for path, name in runs:
        trace = _measured(path)
        kept.append(str(_keep(trace, name).relative_to(ROOT)) if path.is_dir() else str(path))
        traces.append(trace)
    trace = _with_algorithms(pd.concat(traces, ignore_index=True), args.algorithms)
    device = str(trace["device"].iloc[0])
    held = trace["point"].str.contains(args.holdout)
    fit_points, held_points = sorted(trace.loc[~held, "point"].unique()), sorted(trace.loc[held, "point"].unique())
    source = f"fit on {' + '.join(kept)} ({len(fit_points)} points; {device}; commit {args.measured_commit})"
    families = tuple(args.families.split(",")) if args.families else None
    target = load_machine(args.machine)
    check_may_calibrate(target, device)  # not a machine validated blind, nor another GPU's runs
    instances = set(args.instances.split(",")) if args.instances else None
    # named instances alone: the families' own fits stay as they are
    h100 = calibrate(
        trace[~held], target, source=source, families=families, instances=instances, family_wide=instances is None
    )
    sim = ROOT / "sim"
    write_calibration(sim / f"{args.machine}.yaml", h100.calibration)
    head = commit().removesuffix("+dirty")
    refitted = f"{', '.join(families)} refitted" if families else "every family"
    if instances:
        refitted = f"instances {', '.join(sorted(instances))} of {', '.join(families or ['every family'])} fitted"
    others = "; the other families as their own source says" if families else ""
    set_machine_header(
        sim / f"{args.machine}.yaml",
        "calibration_frozen",
        f"{refitted}: {source}; fitted by benchmarks/fidelity.py calibrate on the code of commit {head}{others}; "
        "not refitted since",
    )
    return {
        "device": device,
        "fit_points": fit_points,
        "held_out_points": held_points,
        "holdout_pattern": args.holdout,
        "traces": kept,
        "families_refitted": list(families) if families else "all",
        "fit": _tables(predict(trace[~held], h100)),
        "held_out": _tables(predict(trace[held], h100)),
    }


def _held_out(job):
    """One point's held-out runs: its families refitted on the other points, warm from the
    committed fit, the compiled instances it launches with their own fits again."""
    from spartan_py.costmodel.families import record_instances
    from spartan_py.costmodel.intervals import held_out_runs

    trace, machine, point = job
    launches = trace[trace["point"] == point]
    instances = set(record_instances(launches)) - {""}

    def refit(others, fitted, families):
        return calibrate(
            others, fitted, source="leave-one-point-out", families=families, instances=instances, warm=True
        )

    return held_out_runs(trace, machine, point, refit)


def cmd_lopo(args) -> dict:
    """Leave each point of the calibration runs out of the fit in turn; the spreads of the
    held-out whole runs become the machine file's ``error_spread`` (its 80% intervals). With
    ``--leave-out``, only the points of those runs are left out (the others stay in every fit):
    a drawn calibration set's points, which stand for the points a validation draw will hold."""
    from concurrent.futures import ProcessPoolExecutor

    from spartan_py.costmodel.intervals import run_error_frame

    runs = [args.run, *args.also]
    traces = [_measured(path) for path in runs]
    trace = _with_algorithms(pd.concat(traces, ignore_index=True), args.algorithms)
    trace = trace[trace["measured_us"].notna() & (trace["measured_us"] > 0)]
    machine = load_machine(args.machine)
    unknown = [str(path) for path in args.leave_out if path not in runs]
    if unknown:
        raise InputError(f"--leave-out names runs not given as the run or --also: {', '.join(unknown)}")
    chosen = [t for path, t in zip(runs, traces, strict=True) if not args.leave_out or path in args.leave_out]
    left_out = set(pd.concat(chosen)["point"])
    points = [p for p in trace["point"].unique() if p in left_out]
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        rows = []
        for done, found in enumerate(pool.map(_held_out, [(trace, machine, p) for p in points]), start=1):
            rows += found
            print(f"  {done}/{len(points)} points held out", flush=True)
    errors = run_error_frame(rows)
    return {
        "machine": args.machine,
        "traces": [str(path) for path in runs],
        "points": len(points),
        "left_out_of": [str(path) for path in args.leave_out] or "every trace",
        "runs": errors.round(4).to_dict(orient="records"),
    }, errors


def cmd_predict(args) -> dict:
    trace = _measured(args.h100)
    machine = load_machine(args.machine)
    blind = predictions(trace, machine)
    return {
        "model": f"sim/{machine.name}.yaml as committed with this file: datasheet specs, calibration carried "
        "over from the frozen sim/h100-sxm.yaml",
        "code_commit": commit().removesuffix("+dirty"),
        "records_from": f"{args.h100} (the launches the H100 ran; the H200 runs the same points)",
        "calibration_frozen": load_machine("h100-sxm").calibration_frozen,
        **blind,
    }


def cmd_compare(args) -> dict:
    h100 = _measured(args.h100)
    h200 = _measured(args.run_h200)
    kept = OUT / args.keep
    if args.run_h200.is_dir():
        write_trace(kept, h200.drop(columns="point").assign(run=h200["point"]))
    blind = json.loads(Path(args.predictions).read_text())
    found = compare(h100, h200, load_machine("h100-sxm"), load_machine("h200-sxm"), blind)
    return {
        "predictions": str(args.predictions),
        "h200_device": str(h200["device"].iloc[0]),
        "h200_trace": str(kept.relative_to(ROOT)) if args.run_h200.is_dir() else str(args.run_h200),
        "h100_trace": str(args.h100),
        "h200_blind": _tables(found.blind),
        "h200_current_model": _tables(found.now),
        "h100_all_points": _tables(found.first),
        "reverse_whole_runs": whole_run_errors(found.reverse).round(3).to_dict(orient="records"),
        **{name: table.round(3).to_dict(orient="records") for name, table in found.tables.items()},
    }


def _run_name(run: str) -> str:
    """A validation run's label as the docs' tables write it."""
    point, _, family = run.partition(" / ")
    fields = dict(f.split("=", 1) for f in point.split(", ") if "=" in f)
    network = next((f.split(" layers")[0] for f in point.split(", ") if f.startswith("generated:")), None)
    if family:
        density = point.rsplit("density ", 1)[1]
        return f"{fields['precision'].upper()}, density {density} / `{family}`"
    return f"`{fields['backend']}`, " + (network or "official 1024 x 120 proxy")


def _pct(value: float) -> str:
    return f"{value:+.1f}%"


def fidelity_tables(summary_file: Path) -> str:
    """The per-family, whole-run, speed-up and reverse tables of a ``compare`` summary as Markdown
    (the H200 after-fix column reads "as blind" where the current model predicts the same)."""
    raw = summary_file.read_bytes()
    found = json.loads(gzip.decompress(raw) if summary_file.suffix == ".gz" else raw)
    lines = [
        "| family | H100 held out: launches, median, p90 (%) "
        "| H200 blind: launches, median, p90 (%) | H200 after fix |",
        "| --- | --- | --- | --- |",
    ]
    for row in found["families"]:

        def errors(column: str, bold: bool = False) -> str:
            launches, median, p90 = (row.get(f"{column} {k}") for k in ("launches", "median_pct", "p90_pct"))
            if launches is None:
                return "-"
            return f"{launches}, **{median:.1f}**, {p90:.1f}" if bold else f"{launches}, {median:.1f}, {p90:.1f}"

        blind, now = errors("h200-sxm blind"), errors("h200-sxm now")
        after = "as blind" if now == blind else now.split(", ", 1)[1]
        lines.append(
            f"| `{row['family']}` | {errors('h100-sxm held out')} | {errors('h200-sxm blind', bold=True)} | {after} |"
        )
    lines += ["", "| whole run | H100 (role) | H200 blind | H200 after fix |", "| --- | --- | --- | --- |"]
    runs = sorted(found["whole_runs"], key=lambda r: (" / " in r["run"], r["run"]))
    for row in runs:
        blind, now = row["h200-sxm blind error_pct"], row["h200-sxm now error_pct"]
        after = "as blind" if _pct(now) == _pct(blind) else _pct(now)
        lines.append(
            f"| {_run_name(row['run'])} | {_pct(row['h100-sxm error_pct'])} ({row['h100-sxm role']}) "
            f"| **{_pct(blind)}** | {after} |"
        )
    lines += ["", "| family | measured H100 -> H200 speed-up | predicted |", "| --- | --- | --- |"]
    lines += [
        f"| `{r['family']}` | {r['measured_speedup']:.2f}x | {r['predicted_speedup']:.2f}x |" for r in found["speedups"]
    ]
    lines += ["", "| family | launches | median % | p90 % |", "| --- | --- | --- | --- |"]
    prefix = "h100-sxm from h200-sxm fit"
    for r in found["reverse_families"]:
        launches, median, p90 = (r[f"{prefix} {k}"] for k in ("launches", "median_pct", "p90_pct"))
        lines.append(f"| `{r['family']}` | {launches} | {median:.1f} | {p90:.1f} |")
    worst = max(found["reverse_whole_runs"], key=lambda r: abs(r["error_pct"]))
    lines += ["", f"Whole runs: worst {_pct(worst['error_pct'])} ({_run_name(worst['run'])})."]
    return "\n".join(lines) + "\n"


def cmd_challenge(args) -> dict:
    """The Graph Challenge networks' runs replayed on the current model: each point's own
    trace predicted on the listed machine that describes its GPU (no fitting on them); the
    stock-library columns are kept from ``--stock`` (an earlier challenge.csv)."""
    from spartan_py.runner.execute import replay_on_machines
    from spartan_py.runner.store import load_points
    from spartan_py.workloads.graph_challenge.tables import challenge_table

    points = load_points(args.run)
    traces = []
    for point in points:
        trace_path = args.run / "points" / f"{point['id']}.trace.csv"
        if point["status"] != "ok" or not trace_path.is_file():
            continue
        trace = read_trace(trace_path)
        point["machines"] = replay_on_machines(trace, point["config"]["machines"])  # as the runner does
        traces.append(trace.assign(run=point["label"]))
    table = challenge_table(points)
    if args.stock:
        stock = pd.read_csv(args.stock)
        columns = ["stock_backend", "stock_seconds", "stock_not_finished"]
        table = table.drop(columns=[*columns, "speedup_vs_stock"]).merge(
            stock[["neurons", "layers", *columns]], on=["neurons", "layers"], how="left"
        )
        table["speedup_vs_stock"] = table["stock_seconds"] / table["seconds"]
    folder = RESULTS / args.name
    folder.mkdir(parents=True, exist_ok=True)
    write_trace(folder / "traces.csv.gz", pd.concat(traces, ignore_index=True))
    atomic_write_text(folder / "challenge.csv", table.to_csv(index=False))
    return {
        "model": "sim/<machine>.yaml as committed with this file",
        "traces": str((folder / "traces.csv.gz").relative_to(ROOT)),
        "stock_columns_from": str(args.stock) if args.stock else None,
        "networks": table.to_dict(orient="records"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    cal = sub.add_parser("calibrate")
    cal.add_argument("run", type=Path, help="the H100 run folder of validate-h200.yaml, or its kept trace")
    cal.add_argument(
        "--also", type=Path, action="append", default=[], help="further H100 runs (folders or kept traces)"
    )
    cal.add_argument("--families", help="refit only these kernel families (comma-separated); the rest keep their fit")
    algorithms_help = "cublas_algos-*.json.gz: cuBLAS records that name no algorithm get the one it holds"
    cal.add_argument("--algorithms", type=Path, help=algorithms_help)
    cal.add_argument("--instances", help="fit only these instances (comma-separated); the families' own fits stay")
    cal.add_argument("--machine", default="h100-sxm", help="the machine file to fit (refused for one validated blind)")
    cal.add_argument("--holdout", default=HOLDOUT_POINTS)
    cal.add_argument("--measured-commit", required=True, help="the commit the GPU run was made at")
    scope_help = "the runs the figures cover, as the machine file's validation entry names them (one entry each)"
    cal.add_argument(
        "--scope", default="held-out points of validate-h200.yaml and calibrate-wide.yaml", help=scope_help
    )
    h100_help = "the H100's launches of validate-h200.yaml at the code being predicted (a kept trace or run folder)"
    pre = sub.add_parser("predict")
    pre.add_argument("--machine", default="h200-sxm")
    pre.add_argument("--h100", type=Path, default=H100_RECORDS, help=h100_help)
    cmp_ = sub.add_parser("compare")
    cmp_.add_argument("run_h200", type=Path, help="the H200 run folder, or its kept trace")
    cmp_.add_argument("--predictions", type=Path, required=True)
    cmp_.add_argument("--h100", type=Path, default=H100_RECORDS, help=h100_help)
    cmp_.add_argument("--keep", default="validate-h200.trace.csv.gz", help="name of the H200 trace kept here")
    cmp_.add_argument("--scope", default="validate-h200.yaml", help=scope_help)
    lopo = sub.add_parser("lopo", help="leave-one-point-out error spreads: the machine's 80%% intervals")
    lopo.add_argument("run", type=Path, help="an H100 calibration run folder or kept trace")
    lopo.add_argument("--also", type=Path, action="append", default=[], help="further calibration runs")
    lopo.add_argument("--machine", default="h100-sxm")
    lopo.add_argument("--workers", type=int, default=2)
    lopo.add_argument("--algorithms", type=Path, help=algorithms_help)
    lopo.add_argument(
        "--leave-out", type=Path, action="append", default=[], help="leave out only these runs' points (default: all)"
    )
    tab = sub.add_parser("tables", help="print a compare summary as the docs' Markdown tables")
    tab.add_argument("summary", type=Path, help="an h200-fidelity-*.json file")
    cha = sub.add_parser("challenge")
    cha.add_argument("run", type=Path, help="a run folder of experiments/graph-challenge-all.yaml")
    cha.add_argument("--stock", type=Path, help="challenge.csv whose stock-library columns to keep")
    cha.add_argument("--name", default="gc-all-h100", help="folder under benchmarks/results")
    args = parser.parse_args()
    if args.command == "tables":
        print(fidelity_tables(args.summary), end="")
        return 0
    if args.command == "lopo":
        from spartan_py.costmodel.intervals import error_spreads

        payload, errors = cmd_lopo(args)
        path = write_result("lopo", "cpu (refits on measured traces)", payload, OUT)
        spreads = error_spreads(errors, str(path.relative_to(ROOT)))
        set_machine_header(
            ROOT / "sim" / f"{args.machine}.yaml",
            "error_spread",
            {kind: spread.model_dump() for kind, spread in spreads.items()},
        )
        print(path.relative_to(ROOT))
        return 0
    commands = {"calibrate": cmd_calibrate, "predict": cmd_predict, "compare": cmd_compare, "challenge": cmd_challenge}
    payload = commands[args.command](args)
    name = {"calibrate": "h100-calibration", "predict": "h200-predictions", "compare": "h200-fidelity"}.get(
        args.command, "model"
    )
    out = RESULTS / args.name if args.command == "challenge" else OUT
    path = write_result(name, "cpu (replays measured traces)", payload, out)
    if args.command in ("calibrate", "compare"):  # the machine file states its validation
        machine, tables, blind = {
            "calibrate": ("h100-sxm", payload.get("held_out"), False),
            "compare": ("h200-sxm", payload.get("h200_blind"), True),
        }[args.command]
        device = payload.get("device") or payload.get("h200_device")
        entry = {
            "scope": args.scope,
            "device": device,
            "blind": blind,
            "result": str(path.relative_to(ROOT)),
            "commit": commit().removesuffix("+dirty"),
            "whole_run_error_pct": round(tables["summary"]["whole_run_error_pct"], 2),
            "per_launch_median_error_pct": round(tables["summary"]["per_launch_median_error_pct"], 2),
        }
        # an entry per scope: a new measurement of the same runs replaces its entry; others stay
        # while their result file does (a round whose files went to git history is history too)
        kept = [
            v.model_dump()
            for v in load_machine(machine).validation
            if v.scope != args.scope and (ROOT / v.result).is_file()
        ]
        set_machine_header(ROOT / "sim" / f"{machine}.yaml", "validation", [*kept, entry])
    print(path.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
