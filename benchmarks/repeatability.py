"""Run-to-run spread per kernel family: one experiment file run on separately started machines
of one kind (``experiments/repeatability.yaml``, three H100s), compared launch by launch
(:mod:`spartan_py.costmodel.repeatability`). Writes ``benchmarks/results/repeatability-*.json``
and, with ``--store``, the machine file's ``run_to_run_spread``, which the validation tables
show beside each family's error (and host-bound families are judged by). Usage::

    spartan run experiments/repeatability.yaml --out RUN1     # on each machine, started apart
    python -m benchmarks.repeatability RUN1 RUN2 RUN3 --machine h100-sxm --store
"""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks._results import set_machine_header
from benchmarks.harness import RESULTS, ROOT, write_result
from spartan_py.costmodel.fidelity import run_traces
from spartan_py.costmodel.repeatability import family_spreads, launch_spreads
from spartan_py.errors import InputError
from spartan_py.runner.store import run_environment


def main(argv: list[str] | None = None) -> int:
    """Compare the runs, write the result file (and the machine file's spreads with ``--store``)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", type=Path, nargs="+", help="run folders of one experiment file, one per machine")
    parser.add_argument("--machine", default="h100-sxm", help="the sim/ machine the runs measured")
    parser.add_argument("--store", action="store_true", help="write the spreads into sim/<machine>.yaml")
    args = parser.parse_args(argv)
    traces = [run_traces(run) for run in args.runs]
    devices = {str(d) for trace in traces for d in trace["device"].unique()}
    if len(devices) != 1:
        raise InputError(f"the runs measured different GPUs: {sorted(devices)}")
    environments = [run_environment(run) or {} for run in args.runs]
    launches = launch_spreads(traces)
    families = family_spreads(launches)
    totals = launches.groupby("point")["spread_pct"].median()
    payload = {
        "runs": [str(run) for run in args.runs],
        "machines": [{"commit": env.get("commit"), "gpus": env.get("gpus")} for env in environments],
        "launches": int(len(launches)),
        "families": families.round(3).to_dict(orient="records"),
        "median_spread_by_point": totals.round(3).to_dict(),
    }
    path = write_result("repeatability", devices.pop(), payload, RESULTS)
    if args.store:
        spreads = {
            row["family"]: {
                "median_pct": round(float(row["median_pct"]), 3),
                "p90_pct": round(float(row["p90_pct"]), 3),
                "launches": int(row["launches"]),
                "runs": len(args.runs),
                "source": str(path.relative_to(ROOT)),
            }
            for row in families.to_dict(orient="records")
        }
        set_machine_header(ROOT / "sim" / f"{args.machine}.yaml", "run_to_run_spread", spreads)
    print(families.round(2).to_string(index=False))
    print(path.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
