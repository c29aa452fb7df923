"""Rewrite tests/data/pinned-predictions.json after a deliberate change of the model or a fit:
the same traces, machines and sampled rows, their predictions now (run from the repository's
root, and say in the commit what changed and why)::

    python -m tests.repin_predictions "what changed"
"""

from __future__ import annotations

import json
import sys

import numpy as np

from spartan_py.costmodel import load_machine, predict
from spartan_py.costmodel.fidelity import predictions
from spartan_py.files import atomic_write_text
from spartan_py.trace import read_trace
from tests.conftest import ROOT

PATH = ROOT / "tests" / "data" / "pinned-predictions.json"


def repin(pin: dict) -> dict:
    """``pin`` with its figures replayed by the model and machine files as they are now."""
    trace = read_trace(ROOT / pin["trace"])
    trace = trace.assign(point=trace["run"].astype(str))
    machine = load_machine(pin["machine"])
    values = predict(trace, machine)["predicted_us"].to_numpy(float)
    out = {
        **pin,
        "launches": len(values),
        "priced": int(np.isfinite(values).sum()),
        "total_us": float(np.nansum(values)),
        "rows": {row: float(values[int(row)]) for row in pin["rows"]},
    }
    if pin["whole_run"] is not None:
        found = predictions(trace, machine)  # a pin of a conv candidate: its per-kernel interval
        run = {**found["whole_runs"], **found["candidate_runs"]}[pin["whole_run"]["run"]]
        figures = {key: run[key] for key in ("predicted_us", "low_us", "high_us")}
        out["whole_run"] = {"run": pin["whole_run"]["run"], **figures}
    return out


def main(why: str) -> None:
    """Rewrite the pins, ``why`` kept in the file's ``made_by``."""
    data = json.loads(PATH.read_text())
    data["pins"] = [repin(pin) for pin in data["pins"]]
    data["made_by"] = f"{data['made_by']}; repinned by python -m tests.repin_predictions: {why}"
    atomic_write_text(PATH, json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    main(" ".join(sys.argv[1:]) or "not said")
