"""Committed traces replay to the predictions the machine files gave before they were split
into datasheets and generated fits (tests/data/pinned-predictions.json, computed from those
files, not typed): any drift of a fit, a spread or the loading fails here. A deliberate change
of the model or a fit rewrites them with ``python -m tests.repin_predictions "why"``, in the
commit that makes the change."""

from __future__ import annotations

import json

import numpy as np
import pytest

from spartan_py.costmodel import load_machine, predict
from spartan_py.costmodel.fidelity import predictions
from spartan_py.trace import read_trace
from tests.conftest import ROOT

PINNED = json.loads((ROOT / "tests" / "data" / "pinned-predictions.json").read_text())["pins"]


@pytest.mark.parametrize("pin", PINNED, ids=lambda pin: f"{pin['trace'].rsplit('/', 1)[-1]}@{pin['machine']}")
def test_a_committed_trace_replays_as_before(pin):
    trace = read_trace(ROOT / pin["trace"])
    trace = trace.assign(point=trace["run"].astype(str))
    machine = load_machine(pin["machine"])
    values = predict(trace, machine)["predicted_us"].to_numpy(float)
    assert len(values) == pin["launches"] and int(np.isfinite(values).sum()) == pin["priced"]
    assert float(np.nansum(values)) == pytest.approx(pin["total_us"], rel=1e-12)
    for row, expected in pin["rows"].items():
        assert values[int(row)] == pytest.approx(expected, rel=1e-12), row
    if pin["whole_run"] is not None:  # the 80% interval: the error spread as it was
        found = predictions(trace, machine)  # a pin of a conv candidate: its per-kernel interval
        run = {**found["whole_runs"], **found["candidate_runs"]}[pin["whole_run"]["run"]]
        for key in ("predicted_us", "low_us", "high_us"):
            assert run[key] == pytest.approx(pin["whole_run"][key], rel=1e-9), key
