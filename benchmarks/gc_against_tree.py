"""Graph Challenge proxy on ``gpu`` and ``gpu-merged``: this checkout against another tree of the
project (an earlier commit's ``git archive``), by turns on the same GPU.

The behaviour check of a change that should not change speed (the workloads issue's move: within
2% of before). Each round runs both trees once, each in a fresh process
(``benchmarks/_tree_worker.py``: the official 1024 x 120 network, the 60000-row proxy, every
engine's median of ``--repeats`` runs after warm-up, categories checked against the truth), the
order reversed every other round; a tree's figure is the median over rounds, and the change
is this tree's median over the baseline's. A round that fails or passes its time limit is
recorded and left out of the medians, and the comparison then fails the bar: it holds only
with every round of both trees run and every category right.

    git archive 25a78d2 spartan_py kernels sim | tar x -C /tmp/before
    python -m benchmarks.gc_against_tree --baseline /tmp/before --baseline-commit 25a78d2 [--rounds 4]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

from benchmarks.harness import DEFAULT_DATA, RESULTS, ROOT, log, write_result
from spartan_py.engines.shared.cuda import device_name
from spartan_py.timing import turn_order

WORKER = Path(__file__).with_name("_tree_worker.py")
#: the engines each round times (benchmarks/_tree_worker.py's BACKENDS)
BACKENDS = ("gpu", "gpu-merged")
#: the largest change of either engine's proxy median the workloads issue allows (percent)
BAR_PCT = 2.0


def run_round(tree: Path, data: Path, repeats: int, timeout_s: float) -> dict:
    """One worker's result for ``tree``, or ``{"error": ...}``."""
    try:
        done = subprocess.run(
            [sys.executable, str(WORKER), str(tree), str(data), str(repeats)],
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"past {timeout_s:.0f} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        return {"error": f"exit {done.returncode}: {done.stderr.strip()[-400:]}"}
    return json.loads(lines[-1][len("RESULT ") :])


def take_rounds(trees: dict[str, Path], rounds: int, run: Callable[[Path], dict]) -> tuple[dict, list[dict]]:
    """Each tree's results of ``run(tree)``, one a round, the trees in turn and their order
    reversed every other round; a round that failed, or imported another tree's package, is
    recorded in the failures instead."""
    results: dict[str, list[dict]] = {name: [] for name in trees}
    failures = []
    for r, name in turn_order(list(trees), rounds):
        result = run(trees[name])
        if "error" not in result and Path(result["module"]).resolve().parent.parent != trees[name]:
            result = {"error": f"imported {result['module']}, not the tree's spartan_py"}
        if "error" in result:
            failures.append({"round": r, "tree": name, "error": result["error"]})
            log(f"round {r + 1} {name}: {result['error']}")
            continue
        results[name].append(result)
        times = ", ".join(f"{b} {result[b]['median_ms']:.4f} ms" for b in BACKENDS)
        log(f"round {r + 1} {name}: {times}")
    return results, failures


def summarise(results: dict[str, list[dict]], rounds: int) -> dict:
    """Per engine: each tree's per-round medians, the median over rounds, truth in every round,
    and the change of this tree over the baseline (percent) against the bar, which only a
    comparison with all ``rounds`` rounds of both trees can meet."""
    engines = {}
    for backend in BACKENDS:
        per_tree = {name: [r[backend]["median_ms"] for r in runs if backend in r] for name, runs in results.items()}
        medians = {name: float(np.median(v)) if v else None for name, v in per_tree.items()}
        complete = all(len(v) == rounds for v in per_tree.values())
        truth = complete and all(r[backend]["truth"] for runs in results.values() for r in runs)
        base, here = medians["baseline"], medians["this"]
        change = None if base is None or here is None else 100.0 * (here / base - 1.0)
        engines[backend] = {
            "rounds_ms": per_tree,
            "median_ms": medians,
            "every_round_ran": complete,
            "truth_every_round": truth,
            "change_pct": change,
            "within_bar": change is not None and abs(change) <= BAR_PCT and truth,
        }
    return engines


def main(argv: list[str] | None = None) -> int:
    """Time both trees by turns, write the result file; exit 1 unless both engines are within
    the bar with every round run."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, required=True, help="a tree holding the earlier spartan_py/")
    parser.add_argument("--baseline-commit", required=True, help="the commit the baseline tree was made from")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--rounds", type=int, default=4, help="rounds (even: each tree goes first as often)")
    parser.add_argument("--repeats", type=int, default=30, help="timed runs per engine in a round")
    parser.add_argument("--timeout-s", type=float, default=60.0, help="one worker's time limit")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if not (args.baseline / "spartan_py" / "__init__.py").is_file():
        parser.error(f"--baseline {args.baseline}: expected a tree with spartan_py/__init__.py")
    if args.rounds < 1:
        parser.error(f"--rounds {args.rounds}: expected at least 1")
    import cupy  # optional dependency: only a GPU run gets here; named before any round runs

    device = device_name(cupy)
    trees = {"baseline": args.baseline.resolve(), "this": ROOT}
    results, failures = take_rounds(
        trees, args.rounds, lambda tree: run_round(tree, args.data, args.repeats, args.timeout_s)
    )
    engines = summarise(results, args.rounds)
    payload = {
        "baseline_commit": args.baseline_commit,
        "rounds": args.rounds,
        "repeats": args.repeats,
        "bar_pct": BAR_PCT,
        "engines": engines,
        "failures": failures,
    }
    path = write_result("gc_against_tree", device, payload, args.out)
    log(f"wrote {path}")
    print(json.dumps({b: {"change_pct": e["change_pct"], "within_bar": e["within_bar"]} for b, e in engines.items()}))
    return 0 if all(e["within_bar"] for e in engines.values()) and not failures else 1


if __name__ == "__main__":
    sys.exit(main())
