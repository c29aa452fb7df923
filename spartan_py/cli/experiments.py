"""``spartan run`` and ``spartan report``: experiment files, their run folders and reports."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from tqdm import tqdm

from spartan_py.cli._common import log
from spartan_py.errors import InputError
from spartan_py.host.executors import open_executor
from spartan_py.runner import load_experiment, run_experiment
from spartan_py.runner.check_points import check_points
from spartan_py.runner.execute import unavailable_here
from spartan_py.runner.run_folder import REPLACE_FLAG, bind_run_folder
from spartan_py.runner.store import guessed_predictions
from spartan_py.workloads import workload_of_point


def _cmd_run(args) -> int:
    experiment, every_point = load_experiment(args.file)
    points = every_point
    if args.only:
        try:
            pattern = re.compile(args.only)
        except re.error as exc:
            raise InputError(f"--only: not a regular expression: {exc}") from None
        points = [point for point in points if pattern.search(point.label)]
        if not points:
            raise InputError(f"--only {args.only!r}: no point of {args.file} has a matching label (see --check)")
    # the files read whole, rows, tiles, saved maps: before --check says "valid", before any
    # executor starts (run_experiment checks again, from what this kept)
    check_points(points)
    if args.check:
        blocked = {point.id: unavailable_here(point) for point in points}
        cannot = sum(reason is not None for reason in blocked.values())
        plural = "s" if len(points) != 1 else ""
        here = f"; {cannot} cannot run on this machine (marked *)" if cannot else ""
        print(f"{args.file}: valid; {len(points)} point{plural}{here}")
        for point in points:
            reason = blocked[point.id]
            print(f"  {point.id}  {point.label}" + (f"  * {reason}" if reason else ""))
        return 0
    out = Path(args.out) if args.out else Path("runs") / experiment.name
    # a changed experiment refused before any executor starts (the run checks again, locked)
    if not args.replace_changed:
        bind_run_folder(out, experiment, every_point)
    log(args, f"{experiment.name}: {len(points)} points -> {out}")
    bar = tqdm(total=len(points), unit="point", disable=args.quiet, file=sys.stderr)

    answers: list[str] = []

    def on_point(point, record, skipped):
        answers.append(_answer(record))
        state = "done before" if skipped else record["status"]
        bar.set_postfix_str(f"{point.label[:40]}: {state}")
        bar.update(1)
        if record["status"] == "failed" and not skipped:
            bar.write(f"point {point.id} ({point.label}) failed: {record['error']}", file=sys.stderr)

    cluster = args.cluster if args.cluster is not None else experiment.executor.cluster

    def on_wait(holder: str) -> None:
        bar.write(f"{out} is being written by another run ({holder}): waiting for it to end", file=sys.stderr)

    with open_executor(cluster, args.workers or experiment.executor.workers) as workers:
        log(args, f"running on {workers.description}")
        summary = run_experiment(
            experiment,
            every_point,
            out,
            force=args.force,
            on_point=on_point,
            workers=workers,
            only={point.id for point in points},
            replace_changed=args.replace_changed,
            on_wait=on_wait,
        )
    bar.close()
    print(
        f"{out}: {summary.ran} points run, {summary.skipped} already done, {summary.failed} failed; "
        f"tables (*.csv) and points/ written"
    )
    guessed = guessed_predictions(out)
    if guessed:
        print(
            f"warning: {guessed[0]} of {guessed[1]} predictions in simulated.csv include launches priced by "
            "a family-wide fallback or the defaults (its column guessed)"
        )
    if args.report:
        # deferred: spartan_py.report (matplotlib.pyplot) adds ~1.5 s to `spartan --help` (python -X importtime)
        from spartan_py.report import write_report

        html_path, md_path = write_report(out)
        print(f"report: {html_path} and {md_path}")
    answered = [answer for answer in answers if answer]
    if answered:  # the run's answer last, where the eye lands
        print("answer:\n" + "\n".join(f"  {answer}" for answer in answered))
    return 0 if summary.failed == 0 else 1


def _answer(record: dict) -> str:
    """A finished point's answer in one line (its workload's :meth:`answer`), "" for none."""
    if record["status"] != "ok":
        return f"{record['label']}: failed ({record['error'][:200]})"
    answer = workload_of_point(record).answer(record["summary"])
    return f"{record['label']}: {answer}" if answer else ""


def _cmd_report(args) -> int:
    # deferred: spartan_py.report (matplotlib.pyplot) adds ~1.5 s to `spartan --help` (python -X importtime)
    from spartan_py.report import write_report

    html_path, md_path = write_report(args.dir, against=args.against, predictions=args.predictions)
    print(f"report: {html_path} and {md_path}")
    return 0


def register(commands, common) -> None:
    """Add ``run`` and ``report`` to the ``spartan`` command's subparsers."""
    experiment = commands.add_parser(
        "run", parents=[common], help="run an experiment file (YAML): every point of its sweep"
    )
    experiment.add_argument("file", help="experiment YAML (see experiments/README.md)")
    experiment.add_argument(
        "--out",
        help="run folder (default: runs/<name>); a rerun resumes unfinished points; a second run "
        "of the folder at once waits for the first (a lock), then computes only what is left",
    )
    experiment.add_argument(
        "--check",
        action="store_true",
        help="validate the file and every input its points read (files whole, rows, tiles, saved maps) "
        "and list its points; run nothing",
    )
    experiment.add_argument("--force", action="store_true", help="recompute points already finished")
    experiment.add_argument(
        "--only",
        metavar="REGEX",
        help="run only the points whose label matches (see --check); config.json keeps every point",
    )
    experiment.add_argument(
        REPLACE_FLAG,
        action="store_true",
        help="the experiment was edited since --out was written: drop the folder's points it no longer has "
        "(and their rows) and compute the changed points (without it such a folder is refused)",
    )
    experiment.add_argument("--report", action="store_true", help="write the report when done")
    experiment.add_argument(
        "--cluster",
        help="run the points as Dask tasks: local, local-cuda, or a scheduler "
        "address tcp://host:8786 (default: the file's executor.cluster, else no Dask)",
    )
    experiment.add_argument("--workers", type=int, help="worker processes (default: the file's executor.workers, 1)")
    experiment.add_argument("--quiet", action="store_true", help="no progress bar")
    experiment.set_defaults(handler=_cmd_run)

    report = commands.add_parser("report", parents=[common], help="write report.html and report.md for a run folder")
    report.add_argument("dir", help="a folder written by `spartan run`")
    report.add_argument(
        "--against",
        help="the same experiment's run folder from the GPU the cost model was fitted on: "
        "adds the cross-machine fidelity tables",
    )
    report.add_argument("--predictions", help="with --against: the blind predictions file written before this run")
    report.set_defaults(handler=_cmd_report)
