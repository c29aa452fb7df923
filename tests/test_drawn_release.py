"""A drawn release's record pass: the launches come back from the GPU with no time in them,
and the frozen model's predictions are made only from such records."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from spartan_py.costmodel import load_machine
from spartan_py.costmodel.release import blank_run, launch_records, release_predictions
from spartan_py.errors import InputError
from spartan_py.trace import read_trace, write_trace

ROOT = Path(__file__).resolve().parents[1]
KEPT = ROOT / "benchmarks" / "results" / "fidelity" / "drawn-c905126-h200.trace.csv.gz"


def _measured_run(folder: Path) -> str:
    """A run folder of one measured point (a committed H200 trace's first point)."""
    trace = read_trace(KEPT)
    label = str(trace["run"].iloc[0])
    points = folder / "points"
    points.mkdir(parents=True)
    (points / "p1.json").write_text(json.dumps({"label": label, "status": "ok", "seconds": 0.001234}))
    write_trace(points / "p1.trace.csv", trace[trace["run"] == label])
    return label


def _predict(run: Path):
    records, failed = launch_records(run)
    return {
        "points": int(records["point"].nunique()),
        "not_run": failed,
        "machines": release_predictions(records, [load_machine("h100-sxm")]),
    }


def test_predictions_refuse_records_that_carry_times(tmp_path):
    _measured_run(tmp_path / "run")
    with pytest.raises(InputError, match="carry measured times"):
        _predict(tmp_path / "run")


def test_a_blanked_record_pass_keeps_the_launches_and_no_time(tmp_path):
    label = _measured_run(tmp_path / "run")
    assert blank_run(tmp_path / "run", tmp_path / "out") == 1
    kept = json.loads((tmp_path / "out" / "points" / "p1.json").read_text())
    assert kept == {"label": label, "status": "ok", "error": None}  # no seconds
    before = read_trace(tmp_path / "run" / "points" / "p1.trace.csv")
    after = read_trace(tmp_path / "out" / "points" / "p1.trace.csv")
    assert after["measured_us"].isna().all() and before["measured_us"].notna().all()
    assert after.drop(columns="measured_us").equals(before.drop(columns="measured_us"))
    payload = _predict(tmp_path / "out")
    assert payload["points"] == 1 and payload["not_run"] == {}
    runs = payload["machines"]["h100-sxm"]["whole_runs"]
    assert runs and all(np.isfinite(r["predicted_us"]) and r["predicted_us"] > 0 for r in runs.values())
