"""The arguments of ``spartan model``'s subcommands (:mod:`spartan_py.cli.model`)."""

from __future__ import annotations

from pathlib import Path

ALGORITHMS_HELP = "cublas_algos-*.json.gz: cuBLAS records that name no algorithm get the one it holds"
HOLDOUT_HELP = "the points left out of the fit and reported (a regular expression; default the calibration set's)"
SCOPE_HELP = "the runs the figures cover, as the machine's validation entry names them (one entry each)"


def add_subcommands(sub, common, handlers: dict, out: Path) -> None:
    """Add each subcommand of ``spartan model`` with its arguments and its handler."""

    def add(name: str, help_text: str, *, results: bool = True):
        parser = sub.add_parser(name, parents=[common], help=help_text, description=help_text)
        if results:
            parser.add_argument("--out", type=Path, default=out, help=f"where result files go (default {out})")
        parser.set_defaults(handler=handlers[name])
        return parser

    cal = add("calibrate", "fit a machine on part of its measured runs, report the rest, store the fit")
    cal.add_argument("run", type=Path, help="a run folder of the calibration experiment, or its kept trace")
    cal.add_argument("--also", type=Path, action="append", default=[], help="further runs (folders or kept traces)")
    cal.add_argument("--families", help="refit only these kernel families (comma-separated); the rest keep their fit")
    cal.add_argument("--algorithms", type=Path, help=ALGORITHMS_HELP)
    cal.add_argument("--instances", help="fit only these instances (comma-separated); the families' own fits stay")
    cal.add_argument("--machine", default="h100-sxm", help="the machine to fit (refused for one validated blind)")
    cal.add_argument("--holdout", help=HOLDOUT_HELP)
    cal.add_argument("--measured-commit", required=True, help="the commit the GPU runs were made at")
    cal.add_argument(
        "--scope", default="held-out points of validate-h200.yaml and calibrate-wide.yaml", help=SCOPE_HELP
    )

    lopo = add("cross-validate", "leave each point out of the fit in turn: the machine's 80%% intervals")
    lopo.add_argument("run", type=Path, help="a calibration run folder or kept trace")
    lopo.add_argument("--also", type=Path, action="append", default=[], help="further calibration runs")
    lopo.add_argument("--machine", default="h100-sxm")
    lopo.add_argument("--workers", type=int, default=2)
    lopo.add_argument("--algorithms", type=Path, help=ALGORITHMS_HELP)
    lopo.add_argument(
        "--leave-out", type=Path, action="append", default=[], help="leave out only these runs' points (default: all)"
    )

    draw = add("draw", "draw a validation (or calibration) set seeded by the model's commit", results=False)
    draw.add_argument("--commit", help="the model's commit (default: HEAD, which must hold the model unchanged)")
    draw.add_argument("--graph-challenge", type=int, default=16, help="Graph Challenge points (default 16)")
    draw.add_argument("--conv", type=int, default=32, help="dense-layer points (default 32)")
    draw.add_argument("--training", type=int, default=0, help="training-step points, drawn after the others")
    draw.add_argument(
        "--mode", choices=("measured", "simulated"), default="measured", help="simulated: the same points, predicted"
    )
    draw.add_argument("--calibration", action="store_true", help="a calibration set (fitted on, H100 only)")
    draw.add_argument(
        "--into", type=Path, help="experiment file (default experiments/drawn/validate-<commit>[-simulated].yaml)"
    )

    pre = add("predict", "the frozen model's predictions of a drawn set, per machine: commit before measuring")
    pre.add_argument("records", type=Path, help="a simulated run of the drawn set, or a measured run's blanked records")
    pre.add_argument(
        "--experiment", type=Path, help="the drawn (measured) experiment file; its points without records are named"
    )
    pre.add_argument("--machines", default="h100-sxm,h200-sxm")
    pre.add_argument("--records-from", required=True, help="where the records came from, in words (kept in the file)")
    pre.add_argument(
        "--measured",
        action="store_true",
        help="the records are one GPU's measured launches (a run folder or kept trace) standing for another's",
    )

    blank = add("blank", "(on the GPU's machine) a record pass's launches with every time removed", results=False)
    blank.add_argument("run", type=Path, help="the record pass's run folder (measured)")
    blank.add_argument("into", type=Path, help="where its blanked records go")
    blank.add_argument("--delete", action="store_true", help="remove the run folder afterwards")

    cmp_ = add("compare", "a GPU's measured run against the committed predictions")
    cmp_.add_argument("run", type=Path, help="a GPU's run folder (or kept trace) of the predicted points")
    cmp_.add_argument("--predictions", type=Path, required=True)
    cmp_.add_argument("--host-latency", type=Path, help="host_latency-*.json measured on that GPU's machine")
    cmp_.add_argument("--first", type=Path, help="the calibration GPU's run of the same points (speed-ups)")
    cmp_.add_argument("--first-machine", default="h100-sxm")
    cmp_.add_argument(
        "--first-predictions", type=Path, help="the predictions of --first's machine, where --predictions lacks them"
    )
    cmp_.add_argument("--cross", action="store_true", help="cross-machine tables with a reverse fit (needs --first)")
    cmp_.add_argument("--holdout", help=f"with --cross: {HOLDOUT_HELP}")
    cmp_.add_argument("--keep", default="validate-h200.trace.csv.gz", help="with --cross: the measured trace kept")

    reg = add(
        "regroup",
        "recount a drawn set's comparison with whole runs told apart (Graph Challenge, conv), in place",
        results=False,
    )
    reg.add_argument("result", type=Path, help="a drawn set's comparison (drawn-fidelity-*.json.gz)")
    reg.add_argument("--measured", type=Path, required=True, help="the kept trace of the run it compared")
    reg.add_argument("--first", type=Path, help="the calibration GPU's kept trace of the same set (speed-ups)")
    reg.add_argument("--first-machine", default="h100-sxm")

    rel = add("release", "record a comparison's figures as the machine's validation", results=False)
    rel.add_argument("result", type=Path, help="a comparison's result file (drawn-fidelity-*, h200-fidelity-*)")
    rel.add_argument("--scope", required=True, help=SCOPE_HELP)
    rel.add_argument("--machine", help="the machine compared (default: the one the result names)")
    rel.add_argument("--commit", help="the commit of the measurement (default: the result file's)")

    spreads = add("spreads", "run-to-run spread per family from runs on separately started machines")
    spreads.add_argument("runs", type=Path, nargs="+", help="run folders of one experiment file, one per machine")
    spreads.add_argument("--machine", default="h100-sxm", help="the machine the runs measured")
    spreads.add_argument("--store", action="store_true", help="store the spreads in the machine's generated half")

    tab = add("tables", "print a cross-machine comparison as the docs' Markdown tables", results=False)
    tab.add_argument("summary", type=Path, help="an h200-fidelity-*.json file")

    cha = add("challenge", "replay a Graph Challenge run on the current model", results=False)
    cha.add_argument("run", type=Path, help="a run folder of experiments/graph-challenge-all.yaml")
    cha.add_argument("--stock", type=Path, help="challenge.csv whose stock-library columns to keep")
    cha.add_argument("--out", type=Path, default=Path("benchmarks/results/gc-all-h100"), help="the replay's folder")
