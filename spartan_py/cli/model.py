"""``spartan model ...``: the cost model's upkeep on measured runs.

Run from the repository root: result files go to ``benchmarks/results/fidelity/`` (``--out``),
a machine's fits, spreads and validation results to its generated half ``sim/fits/<name>.yaml``
(:func:`spartan_py.costmodel.fits.write_fit`); the datasheets ``sim/<name>.yaml`` are never
written. ``calibrate`` fits a machine on part of its runs and reports the rest;
``cross-validate`` leaves each point out in turn (the 80% intervals); ``draw`` draws a
validation (or calibration) set seeded by the model's commit; ``predict`` writes the frozen
model's predictions of a drawn set, to commit before any GPU runs it; ``blank`` (on the GPU's
machine) keeps a record pass's launches with every time removed; ``compare`` matches a GPU's
measured run to the committed predictions (``regroup`` recounts an earlier comparison from its
kept trace with the current grouping of whole runs); ``release`` records a comparison as the machine's
validation; ``spreads`` stores the run-to-run spreads; ``tables`` and ``challenge`` print and
replay for the docs.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd

from spartan_py.cli._model_arguments import add_subcommands
from spartan_py.costmodel import load_machine
from spartan_py.costmodel.fidelity import HOLDOUT_POINTS, run_traces
from spartan_py.costmodel.fidelity_tables import fidelity_tables
from spartan_py.costmodel.fits import update_fit
from spartan_py.costmodel.intervals import error_spreads
from spartan_py.costmodel.machine import machine_path, write_machine
from spartan_py.costmodel.maintain import (
    calibrate_runs,
    compare_machines,
    cross_validate,
    keep_trace,
    measured_records,
    shown,
    with_algorithms,
    with_validation,
)
from spartan_py.costmodel.release import (
    blank_run,
    blind_for,
    compare_release,
    launch_records,
    regroup,
    release_predictions,
    unrecorded_points,
    validation_entry,
)
from spartan_py.costmodel.repeatability import family_spreads, launch_spreads
from spartan_py.errors import InputError
from spartan_py.files import atomic_write_text
from spartan_py.result_files import read_result, rewrite_result, write_result
from spartan_py.runner.execute import replay_on_machines
from spartan_py.runner.store import load_points, package_commit, run_environment
from spartan_py.trace import read_trace, write_trace
from spartan_py.workloads.drawn_set import PURPOSES, draw_set
from spartan_py.workloads.graph_challenge.tables import challenge_table

# the cost model's modules are imported inside each command, as in the other groups: they pull
# pandas and SciPy, which `spartan --help` and every other command should not wait for

OUT = Path("benchmarks/results/fidelity")
#: What the frozen model is: a draw refuses while any of these has uncommitted changes.
MODEL_PATHS = ("spartan_py/costmodel", "sim")


def _commit() -> str:
    return package_commit(dirty=True) or "unknown"


def _write(args, name: str, device: str, payload: dict, *, packed: bool = False) -> Path:
    command = shlex.join(["spartan", *sys.argv[1:]])
    path = write_result(name, device, payload, args.out, commit=_commit(), command=command, packed=packed)
    print(path)
    return path


def _store(machine: str, **changes) -> None:
    """Store ``changes`` in the generated half of ``machine`` (a name in ``sim/`` or a datasheet's path)."""

    print(update_fit(machine_path(machine), **changes))


def _cmd_calibrate(args) -> int:
    runs = [(args.run, "validate-h100.trace.csv.gz"), *((p, f"{p.name}-h100.trace.csv.gz") for p in args.also)]
    traces, kept = [], []
    for path, name in runs:
        trace = measured_records(path)
        kept.append(shown(keep_trace(trace, args.out / name)) if path.is_dir() else str(path))
        traces.append(trace)
    trace = with_algorithms(pd.concat(traces, ignore_index=True), args.algorithms)
    families = tuple(args.families.split(",")) if args.families else None
    fitted, payload = calibrate_runs(
        trace,
        load_machine(args.machine, unfitted_ok=True),
        traces=kept,
        holdout=args.holdout or HOLDOUT_POINTS,
        measured_commit=args.measured_commit,
        code_commit=_commit().removesuffix("+dirty"),
        families=families,
        instances=set(args.instances.split(",")) if args.instances else None,
    )
    path = _write(args, "h100-calibration", "cpu (replays measured traces)", payload)
    entry = validation_entry(
        payload, shown(path), scope=args.scope, blind=False, commit=_commit().removesuffix("+dirty")
    )
    _release(fitted, entry, args.machine)
    return 0


def _release(machine, entry, where: str) -> None:
    """Store ``machine``'s generated half (``where``: its name or datasheet's path) with ``entry``
    as its validation of that scope."""

    released = with_validation(machine, entry, lambda result: Path(result).is_file())
    print(write_machine(released, machine_path(where)))


def _cmd_cross_validate(args) -> int:
    runs = [(str(path), with_algorithms(measured_records(path), args.algorithms)) for path in [args.run, *args.also]]

    def progress(done: int, total: int) -> None:
        print(f"  {done}/{total} points held out", file=sys.stderr, flush=True)

    payload, errors = cross_validate(
        runs,
        load_machine(args.machine),
        leave_out=[str(p) for p in args.leave_out],
        workers=args.workers,
        progress=progress,
    )
    path = _write(args, "lopo", "cpu (refits on measured traces)", payload)
    _store(args.machine, error_spread=error_spreads(errors, shown(path)))
    return 0


def _cmd_predict(args) -> int:
    failed: dict[str, str] = {}
    if args.measured:
        records = measured_records(args.records)
    else:
        records, failed = launch_records(args.records)
    machines = [load_machine(name) for name in args.machines.split(",")]
    missing = unrecorded_points(args.experiment, records, failed) if args.experiment else []
    payload = {
        "drawn_set": str(args.experiment) if args.experiment else None,
        "model_commit": _commit().removesuffix("+dirty"),
        "records_from": args.records_from,
        "points": int(records["point"].nunique()),
        "not_run": failed,
        "not_recorded": missing,
        "machines": release_predictions(records, machines, allow_measured=args.measured),
    }
    if missing:
        print(
            f"{len(missing)} points of {args.experiment} have no records, left out: {'; '.join(missing)}",
            file=sys.stderr,
        )
    _write(args, "drawn-predictions", "cpu (the cost model's replay)", payload, packed=True)
    return 0


def _cmd_compare(args) -> int:
    measured = measured_records(args.run)
    device = str(measured["device"].iloc[0])
    predictions = read_result(args.predictions)
    name, blind = blind_for(predictions, device)
    machine = load_machine(name)
    head = {"predictions": shown(args.predictions), "predictions_commit": predictions.get("model_commit")}
    if args.first_predictions and (args.first is None or args.cross):
        raise InputError("--first-predictions prices --first's run for speed-ups: name --first, and not --cross")
    first = measured_records(args.first) if args.first else None
    if args.cross:
        if first is None:
            raise InputError("--cross needs --first: the calibrated GPU's measured run of the same points")
        kept = shown(keep_trace(measured, args.out / args.keep)) if args.run.is_dir() else str(args.run)
        tables = compare_machines(
            first, measured, (load_machine(args.first_machine), machine), blind, args.holdout or HOLDOUT_POINTS
        )
        payload = {**head, "h200_device": device, "h200_trace": kept, "h100_trace": str(args.first), **tables}
        _write(args, f"{name.split('-')[0]}-fidelity", "cpu (replays measured traces)", payload)
        return 0
    figures = None
    if args.host_latency is not None:
        figures = read_result(args.host_latency)
        head["host_measured"] = {"file": str(args.host_latency), **{k: figures[k] for k in ("launch_us", "sync_us")}}
    payload = compare_release(
        measured,
        machine,
        blind,
        environment=run_environment(args.run) if args.run.is_dir() else None,
        host_figures=figures,
        first=(first, _first_predictions(args.first_machine, predictions, args.predictions, args.first_predictions))
        if first is not None
        else None,
    )
    if first is not None:
        head["first"] = {"run": shown(args.first), "predictions": shown(args.first_predictions or args.predictions)}
    if payload["unpredicted_points"]:
        missing = payload["unpredicted_points"]
        print(f"{len(missing)} measured points have no prediction, left out: {'; '.join(missing)}", file=sys.stderr)
    _write(args, f"drawn-fidelity-{name}", "cpu (the cost model's replay)", {**head, **payload}, packed=True)
    return 0


def _first_predictions(machine: str, predictions: dict, path: Path, own: Path | None) -> dict:
    """The committed predictions of the first GPU's ``machine``: in their ``own`` file where one
    is named (a set predicted for the second GPU apart), else in ``predictions`` (read from ``path``)."""
    held = (read_result(own) if own else predictions).get("machines", {})
    if machine not in held:
        raise InputError(f"holds no predictions for {machine} (only {', '.join(held)})", path=own or path)
    return held[machine]


def _cmd_regroup(args) -> int:
    result = read_result(args.result)
    measured = measured_records(args.measured)
    predictions = read_result(Path(result["predictions"]))
    name, blind = blind_for(predictions, str(measured["device"].iloc[0]))
    host = result.get("host_measured")
    first = measured_records(args.first) if args.first else None
    own = Path(result["first"]["predictions"]) if "first" in result else None
    regrouped = regroup(
        result,
        measured,
        load_machine(name),
        blind,
        host_figures=read_result(Path(host["file"])) if host else None,
        first=(first, _first_predictions(args.first_machine, predictions, Path(result["predictions"]), own))
        if first is not None
        else None,
    )
    command = shlex.join(["spartan", *sys.argv[1:]])
    regrouped["regrouped"] = {"commit": _commit(), "command": command, "measured_trace": shown(args.measured)}
    print(rewrite_result(args.result, regrouped))
    return 0


def _cmd_release(args) -> int:
    result = read_result(args.result)
    where = args.machine or result.get("machine")
    if where is None:
        raise InputError("the result names no machine; name it with --machine", path=args.result)
    machine = load_machine(where)
    blind = machine.calibration_from is not None  # nothing measured on it entered its calibration
    commit = args.commit or str(result["commit"]).removesuffix("+dirty")
    entry = validation_entry(result, shown(args.result), scope=args.scope, blind=blind, commit=commit)
    _release(machine, entry, where)
    return 0


def _cmd_blank(args) -> int:
    traces = blank_run(args.run, args.into)
    if args.delete:
        shutil.rmtree(args.run)
    print(f"{traces} traces blanked into {args.into}" + (f"; {args.run} removed" if args.delete else ""))
    return 0


def _git(*words: str) -> str:
    return subprocess.run(["git", *words], capture_output=True, text=True, check=True).stdout.strip()


def _cmd_draw(args) -> int:
    commit = args.commit
    if commit is None:
        changed = _git("status", "--porcelain", "--", *MODEL_PATHS)
        if changed:
            raise InputError(f"the model has uncommitted changes; commit them first:\n{changed}")
        commit = _git("rev-parse", "HEAD")
    purpose = "calibration" if args.calibration else "validation"
    drawn = draw_set(
        PURPOSES[purpose].seed(commit),
        graph_challenge=args.graph_challenge,
        conv=args.conv,
        training=args.training,
        commit=commit[:12],
        purpose=purpose,
    )
    suffix = "-simulated" if args.mode == "simulated" else ""
    stem = "calibrate" if args.calibration else "validate"
    out = args.into or Path("experiments") / "drawn" / f"{stem}-{commit[:12]}{suffix}.yaml"
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, drawn.experiment_text(out.stem, mode=args.mode))
    print(f"{out}: {len(drawn.cases)} points, seed {drawn.seed} (commit {commit[:12]})")
    return 0


def _cmd_spreads(args) -> int:
    traces = [run_traces(run) for run in args.runs]
    devices = {str(d) for trace in traces for d in trace["device"].unique()}
    if len(devices) != 1:
        raise InputError(f"the runs measured different GPUs: {sorted(devices)}")
    environments = [run_environment(run) or {} for run in args.runs]
    launches = launch_spreads(traces)
    families = family_spreads(launches)
    payload = {
        "runs": [str(run) for run in args.runs],
        "machines": [{"commit": env.get("commit"), "gpus": env.get("gpus")} for env in environments],
        "launches": int(len(launches)),
        "families": families.round(3).to_dict(orient="records"),
        "median_spread_by_point": launches.groupby("point")["spread_pct"].median().round(3).to_dict(),
    }
    path = _write(args, "repeatability", devices.pop(), payload)
    print(families.round(2).to_string(index=False))
    if args.store:
        spreads = {
            row["family"]: {
                "median_pct": round(float(row["median_pct"]), 3),
                "p90_pct": round(float(row["p90_pct"]), 3),
                "launches": int(row["launches"]),
                "runs": len(args.runs),
                "source": shown(path),
            }
            for row in families.to_dict(orient="records")
        }
        _store(args.machine, run_to_run_spread=spreads)
    return 0


def _cmd_tables(args) -> int:
    print(fidelity_tables(args.summary), end="")
    return 0


def _cmd_challenge(args) -> int:
    """The Graph Challenge networks' runs replayed on the current model: each point's own trace
    predicted on the machines it lists (no fitting on them); the stock-library columns kept
    from ``--stock`` (an earlier challenge.csv)."""
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
    args.out.mkdir(parents=True, exist_ok=True)
    write_trace(args.out / "traces.csv.gz", pd.concat(traces, ignore_index=True))
    atomic_write_text(args.out / "challenge.csv", table.to_csv(index=False))
    payload = {
        "model": "sim/<machine>.yaml as committed with this file",
        "traces": shown(args.out / "traces.csv.gz"),
        "stock_columns_from": str(args.stock) if args.stock else None,
        "networks": table.to_dict(orient="records"),
    }
    _write(args, "model", "cpu (replays measured traces)", payload)
    return 0


def register(commands, common) -> None:
    """Add ``model`` and its subcommands to the ``spartan`` command's subparsers."""

    model = commands.add_parser(
        "model",
        parents=[common],
        help="the cost model's upkeep: calibrate, cross-validate, draw, predict, compare, release",
    )
    handlers = {
        "calibrate": _cmd_calibrate,
        "cross-validate": _cmd_cross_validate,
        "draw": _cmd_draw,
        "predict": _cmd_predict,
        "blank": _cmd_blank,
        "compare": _cmd_compare,
        "regroup": _cmd_regroup,
        "release": _cmd_release,
        "spreads": _cmd_spreads,
        "tables": _cmd_tables,
        "challenge": _cmd_challenge,
    }
    add_subcommands(model.add_subparsers(dest="model_command", required=True), common, handlers, OUT)
