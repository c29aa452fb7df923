"""docs/extending.md's backend steps, followed with a toy backend, which then runs through
``spartan run`` and ``spartan infer`` without any of them naming it (issue 52); and its
workload steps, followed with a toy workload run through ``spartan run`` and ``spartan
report`` (issue 72)."""

from __future__ import annotations

import json
import re
from typing import Literal

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from pydantic import PositiveInt

from spartan_py import cli
from spartan_py.engines import BACKENDS, backends_taking
from spartan_py.engines.base import Engine, EngineOutput
from spartan_py.engines.reference import reference_layer
from spartan_py.trace import TraceRecord
from spartan_py.workloads import WORKLOADS
from spartan_py.workloads.base import ReportPart, Workload, WorkloadSection, point_of_kind
from tests.conftest import ROOT


class ToyEngine(Engine):
    """Step 1: an Engine subclass (dense float64 layers, the monitor option echoed in ``device``)."""

    name = "toy"
    takes_options = ("monitor", "compact_every")  # step 2

    def __init__(self, network, *, monitor: str = "fused", compact_every: str | int = "doubling"):
        super().__init__(network)
        self.monitor, self.compact_every = monitor, compact_every

    @property
    def device(self) -> str:
        return f"toy (monitor {self.monitor}, compact_every {self.compact_every})"

    def run(self, inputs, *, run_id: str = "") -> EngineOutput:
        activations = sp.csr_matrix(inputs, dtype=np.float64)
        live, nnz = [], []
        for weights in self.network.weights:
            activations = reference_layer(activations, weights, self.network.bias, self.network.clamp)
            live.append(int(np.count_nonzero(np.diff(activations.indptr))))
            nnz.append(activations.nnz)
        rows = np.flatnonzero(np.diff(activations.indptr))
        return EngineOutput(rows, sp.csr_matrix(activations, dtype=np.float32), live, nnz, 1e-3, self.device)


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setitem(BACKENDS, "toy", "tests.test_extending:ToyEngine")  # step 3: one line in the registry


def test_the_docs_name_every_class_attribute_a_backend_sets():
    steps = (ROOT / "docs" / "extending.md").read_text().split("## A machine")[0]
    for attribute in ("takes_options", "cpu_twin", "uses_gpu", "trace_families", "supported_neurons", "stock_library"):
        assert f"`{attribute}`" in steps and hasattr(Engine, attribute), attribute
    assert "`spartan_py.engines.BACKENDS`" in steps


def test_a_toy_backend_runs_through_spartan_run(toy, tmp_path, capsys):
    path = tmp_path / "toy.yaml"
    path.write_text(
        "name: toy\nworkload: {network: generated:1024, layers: 4, inputs: generated:60}\n"
        "monitor: software\ncompact_every: 2\nsweep:\n  grid: {backend: [toy, reference]}\n"
    )
    out = tmp_path / "run"
    assert cli.main(["run", str(path), "--out", str(out), "--quiet"]) == 0, capsys.readouterr().err
    points = {p["config"]["backend"]: p for p in (json.loads(f.read_text()) for f in (out / "points").glob("*.json"))}
    assert points["toy"]["status"] == "ok"
    assert points["toy"]["summary"]["device"] == "toy (monitor software, compact_every 2)"  # the options reached it
    assert points["toy"]["summary"]["categories"] == points["reference"]["summary"]["categories"]
    assert points["toy"]["summary"]["live_rows_by_layer"] == points["reference"]["summary"]["live_rows_by_layer"]


def test_a_toy_backend_is_known_to_the_cli_and_the_schema(toy, capsys):
    from spartan_py.runner.schema import Experiment

    args = ["infer", "--network", "generated:1024", "--layers", "3", "--inputs", "generated:20", "--backend", "toy"]
    assert cli.main([*args, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["backend"] == "toy"
    schema = Experiment.model_json_schema()
    assert "toy" in schema["properties"]["monitor"]["description"]
    assert "toy" not in schema["properties"]["chain_rows"]["description"]


def test_the_schemas_backend_text_is_the_engine_classes():
    from spartan_py.runner.schema import Experiment

    schema = Experiment.model_json_schema()["properties"]
    for option in ("monitor", "chain_rows", "input_counts", "compact_every", "rows_per_tile", "time_limit_seconds"):
        named = re.search(r"\(backends: ([^)]*)\)$", schema[option]["description"]).group(1).split(", ")
        assert named == backends_taking(option), option
    assert "gpu-merged" in backends_taking("monitor")  # written by hand it said "(gpu, gpu-twin)"


def test_the_runner_has_no_per_backend_branch():
    source = (ROOT / "spartan_py" / "runner" / "execute.py").read_text()
    assert not re.search(r"takes_\w+_options|takes_input_counts|stock_library", source)
    assert not re.search(r"""backend\s*==\s*["']""", source)


def test_engine_time_repeats_after_warm_up(toy):
    from spartan_py import generate_inputs, generate_network
    from spartan_py.engines import make_engine

    engine = make_engine("cpu", generate_network(1024, layers=3, seed=0))
    seconds = engine.time(generate_inputs(50, 1024, seed=1), repeats=4, warmup=1)
    assert len(seconds) == 4 and all(s > 0 for s in seconds)


class ToySection(WorkloadSection):
    """Workload step 1: the ``workload:`` section (a row of ``size`` squares)."""

    kind: Literal["toy"]
    size: PositiveInt = 4

    def short_label(self) -> str:
        return f"{self.size} squares"


class ToyWorkload(Workload):
    """Workload step 2: the class, its attributes and its methods."""

    kind = "toy"
    section = ToySection
    options = ()
    backends = ("auto",)
    always_tables = ("toy.csv",)

    @classmethod
    def check(cls, experiment) -> None:
        if experiment.workload.size > 1000:
            raise ValueError("a toy workload squares at most 1000 numbers")

    @classmethod
    def run_point(cls, experiment, point_id: str):
        squares = [n * n for n in range(experiment.workload.size)]
        summary = {
            "workload": cls.kind,
            "backend": experiment.backend,
            "device": "toy",
            "simulated": False,
            "seconds": 1e-3,
            "squares": squares,
        }
        record = TraceRecord(run=point_id, layer=0, kernel="toy.square")
        return summary, [1e-3], [record]

    @classmethod
    def tables(cls, points: list[dict]) -> dict[str, pd.DataFrame]:
        rows = [
            {"point": p["id"], "n": n, "square": square}
            for p in points
            if point_of_kind(p, cls.kind)
            for n, square in enumerate(p["summary"]["squares"])
        ]
        return {"toy.csv": pd.DataFrame(rows)}

    @classmethod
    def report(cls, out, points, traces) -> ReportPart:
        return ReportPart(sections=[("Toy squares", cls.tables(points)["toy.csv"])])


@pytest.fixture
def toy_workload(monkeypatch):
    monkeypatch.setitem(WORKLOADS, "toy", "tests.test_extending:ToyWorkload")  # workload step 3


def test_the_docs_name_every_attribute_a_workload_sets():
    steps = (ROOT / "docs" / "extending.md").read_text().split("## A workload")[1].split("## A machine")[0]
    for attribute in ("section", "options", "backends", "always_tables", "run_point", "check", "tables", "report"):
        assert f"`{attribute}" in steps and (hasattr(Workload, attribute) or attribute in Workload.__annotations__), (
            attribute
        )
    assert "`spartan_py.workloads.WORKLOADS`" in steps


def test_a_toy_workload_runs_through_spartan_run(toy_workload, tmp_path, capsys):
    path = tmp_path / "toy.yaml"
    path.write_text("name: toy\nworkload: {kind: toy}\nsweep:\n  grid: {workload.size: [3, 5]}\n")
    out = tmp_path / "run"
    assert cli.main(["run", str(path), "--out", str(out), "--quiet"]) == 0, capsys.readouterr().err
    points = [json.loads(f.read_text()) for f in (out / "points").glob("*.json")]
    assert sorted(p["label"] for p in points) == ["size=3", "size=5"]
    assert all(p["status"] == "ok" for p in points)
    table = pd.read_csv(out / "toy.csv")
    assert sorted(table.groupby("point")["square"].max()) == [4, 16]
    assert not (out / "results.csv").exists()  # no Graph Challenge point: none of its tables, never an empty file
    assert cli.main(["report", str(out)]) == 0, capsys.readouterr().err
    assert "## Toy squares" in (out / "report.md").read_text()


def test_a_toy_workload_is_checked_by_its_class(toy_workload, tmp_path, capsys):
    path = tmp_path / "toy.yaml"
    path.write_text("name: toy\nworkload: {kind: toy, size: 5000}\nbackend: cpu\nprecision: tf32\n")
    assert cli.main(["run", str(path), "--check"]) == 2
    err = capsys.readouterr().err
    assert "a toy workload runs on auto, not 'cpu'" in err
    assert "precision is an option of conv_layers workloads; a toy workload takes none of them" in err
    assert "a toy workload squares at most 1000 numbers" not in err  # field errors come first
    path.write_text("name: toy\nworkload: {kind: toy, size: 5000}\n")
    assert cli.main(["run", str(path), "--check"]) == 2
    assert "a toy workload squares at most 1000 numbers" in capsys.readouterr().err
