"""Draw a validation set for the frozen cost model: the seed is the commit's hash, the points
random (spartan_py.workloads.drawn_set), the output an experiment file to commit, with the model's
predictions, before anything in it is measured.

    python -m benchmarks.draw_validation                  # seed from HEAD, refuses a model with uncommitted changes
    python -m benchmarks.draw_validation --commit 0123456789abcdef... --out experiments/drawn/x.yaml
    python -m benchmarks.draw_validation --calibration  # a calibration set (fitted on): another seed
    python -m benchmarks.draw_validation --calibration --training 12  # with training steps' three GEMMs

A calibration draw takes the same distribution of points with another seed
(``drawn_set.calibration_seed``) and is measured on the H100 only; the model is fitted on it, so it is
never a validation set.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from benchmarks._results import ROOT
from spartan_py.files import atomic_write_text
from spartan_py.workloads.drawn_set import PURPOSES, draw_set

#: What the frozen model is: a draw refuses while any of these has uncommitted changes.
MODEL_PATHS = ("spartan_py/costmodel", "sim")


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commit", help="the model's commit (default: HEAD, which must hold the model unchanged)")
    parser.add_argument("--graph-challenge", type=int, default=16, help="Graph Challenge points (default 16)")
    parser.add_argument("--conv", type=int, default=32, help="dense-layer points (default 32)")
    parser.add_argument(
        "--training", type=int, default=0, help="training-step points, drawn after the others (default 0)"
    )
    parser.add_argument(
        "--mode",
        choices=("measured", "simulated"),
        default="measured",
        help="simulated: the same points for the model's predictions (default measured)",
    )
    parser.add_argument(
        "--calibration", action="store_true", help="draw a calibration set (fitted on, H100 only) with another seed"
    )
    parser.add_argument(
        "--out", type=Path, help="experiment file (default experiments/drawn/validate-<commit>[-simulated].yaml)"
    )
    args = parser.parse_args(argv)
    commit = args.commit
    if commit is None:
        changed = _git("status", "--porcelain", "--", *MODEL_PATHS)
        if changed:
            print(f"the model has uncommitted changes; commit them first:\n{changed}", file=sys.stderr)
            return 2
        commit = _git("rev-parse", "HEAD")
    purpose = "calibration" if args.calibration else "validation"
    seed = PURPOSES[purpose].seed(commit)
    drawn = draw_set(
        seed,
        graph_challenge=args.graph_challenge,
        conv=args.conv,
        training=args.training,
        commit=commit[:12],
        purpose=purpose,
    )
    suffix = "-simulated" if args.mode == "simulated" else ""
    stem = "calibrate" if args.calibration else "validate"
    out = args.out or ROOT / "experiments" / "drawn" / f"{stem}-{commit[:12]}{suffix}.yaml"
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, drawn.experiment_text(out.stem, mode=args.mode))
    print(f"{out}: {len(drawn.cases)} points, seed {drawn.seed} (commit {commit[:12]})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
