"""benchmarks/harness.py on the CPU: a declared sweep timed by the host timer becomes one
result file with its provenance; every benchmark script parses its arguments here."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from benchmarks import harness
from tests.conftest import ROOT


def test_a_sweep_crosses_its_parameters_first_slowest():
    sweep = harness.Sweep({"layer": ("a", "b"), "density": (0.1, 1.0, 0.5)})
    points = sweep.points()
    assert len(points) == 6
    assert points[:3] == [{"layer": "a", "density": d} for d in (0.1, 1.0, 0.5)]
    assert points[3]["layer"] == "b"
    with pytest.raises(ValueError, match="empty"):
        harness.Sweep({"layer": ("a",), "density": ()})


def test_take_turns_reverses_the_order_every_other_round():
    calls = []
    times = harness.take_turns({name: lambda name=name: calls.append(name) or 1.0 for name in "xyz"}, rounds=3)
    assert calls == list("xyzzyxxyz")
    assert times == {name: [1.0] * 3 for name in "xyz"}


def test_the_cpu_path_writes_one_result_file_with_its_provenance(tmp_path, monkeypatch):
    """The harness's whole path on the host timer: sweep, checks, median, by turns, table, file."""
    monkeypatch.setattr(sys, "argv", [str(ROOT / "benchmarks" / "example.py"), "--out", str(tmp_path)])
    monkeypatch.setenv("SPARTAN_COMMIT", "abc123def456")
    timer = harness.CpuTimer()

    def measure(n: int, op: str) -> dict:
        x = np.random.default_rng(n).standard_normal(n)
        work = {"sort": lambda: np.sort(x), "sum": lambda: x.sum()}[op]
        assert np.all(np.diff(np.sort(x)) >= 0)  # checked before timing, as the GPU scripts do
        one = timer.median(work, repeats=3)
        turns = timer.by_turns({"work": lambda i: work(), "copy": lambda i: x.copy()}, rounds=4)
        return {
            "median_us": one["median_us"],
            "turns_us": harness.medians(turns),
            "extra_us": harness.difference(turns, "work", "copy")["median"],
            "n": np.int64(n),  # NumPy scalars from a table's cells reach the file as numbers
        }

    table = harness.run_sweep(harness.Sweep({"n": (1000, 4000), "op": ("sort", "sum")}), measure, progress=False)
    assert list(table.columns[:2]) == ["n", "op"] and len(table) == 4
    path = harness.write_result("example", timer.device(), {"repeats": 3}, tmp_path, table=table)
    assert path.parent == tmp_path and path.name.startswith("example-") and path.suffix == ".json"
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # nothing half-written beside it
    data = json.loads(path.read_text())
    assert data["benchmark"] == "example"
    assert data["device"].startswith("cpu: ")
    assert isinstance(data["clocks"], list)
    assert data["date"][:4].isdigit() and data["date"].endswith("+00:00")
    assert data["commit"] == "abc123def456"
    assert data["command"] == f"python -m benchmarks.example --out {tmp_path}"
    assert data["repeats"] == 3
    assert [(p["n"], p["op"]) for p in data["points"]] == [(1000, "sort"), (1000, "sum"), (4000, "sort"), (4000, "sum")]
    assert all(p["median_us"] > 0 and set(p["turns_us"]) == {"work", "copy"} for p in data["points"])


def test_the_command_line_names_repository_paths_relatively(monkeypatch):
    line = harness.command_line(
        [str(ROOT / "benchmarks" / "col2im.py"), "--data", str(ROOT / "benchmarks" / "results")]
    )
    assert line == "python -m benchmarks.col2im --data benchmarks/results"


def test_without_an_override_the_commit_is_the_packages(monkeypatch):
    from spartan_py.runner.store import package_commit

    monkeypatch.delenv("SPARTAN_COMMIT", raising=False)
    head = package_commit()
    assert harness.commit().split("+")[0] == (head or "unknown")


def test_a_table_plots_to_a_file(tmp_path):
    import pandas as pd

    table = pd.DataFrame({"density": [0.1, 0.5, 1.0] * 2, "us": [1, 2, 3, 2, 3, 4], "layer": ["a"] * 3 + ["b"] * 3})
    path = harness.plot(table, "density", ["us"], tmp_path / "sweep.png", by="layer", log_x=True)
    assert path.read_bytes()[:4] == b"\x89PNG"


def _scripts() -> list[str]:
    return sorted(
        p.stem
        for p in (ROOT / "benchmarks").glob("*.py")
        if not p.stem.startswith("_") and p.stem != "harness" and "__main__" in p.read_text()
    )


def test_every_benchmark_script_parses_its_arguments_on_the_cpu():
    """``python -m benchmarks.X --help`` exits 0 for every script: all of them, in one interpreter."""
    probe = (
        "import runpy, sys\n"
        "failed = []\n"
        f"for name in {_scripts()!r}:\n"
        "    sys.argv = [name, '--help']\n"
        "    try:\n"
        "        runpy.run_module(f'benchmarks.{name}', run_name='__main__')\n"
        "        failed.append((name, 'no exit'))\n"
        "    except SystemExit as stop:\n"
        "        if stop.code not in (0, None):\n"
        "            failed.append((name, stop.code))\n"
        "    except Exception as error:\n"
        "        failed.append((name, repr(error)))\n"
        "print('FAILED', failed)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "FAILED []" in done.stdout, done.stdout[-3000:]
    assert len(_scripts()) >= 15


def test_a_rewritten_result_file_reads_as_before_on_the_results_page(tmp_path, monkeypatch):
    """The harness's record keeps what spartan_py.report reads: a committed file's payload,
    written again through write_result, gives the same headline figures."""
    from spartan_py.report.results_headlines import headlines

    monkeypatch.setenv("SPARTAN_COMMIT", "abc123def456")
    provenance = {"benchmark", "device", "clocks", "date", "commit", "command", "python"}
    checked = 0
    for path in sorted((ROOT / "benchmarks" / "results").glob("*.json")):
        data = json.loads(path.read_text())
        if data.get("benchmark") is None:
            continue
        payload = {k: v for k, v in data.items() if k not in provenance}
        again = json.loads(harness.write_result(data["benchmark"], data["device"], payload, tmp_path).read_text())
        assert headlines(again) == headlines(data), path.name
        assert provenance <= set(again), path.name
        checked += 1
    assert checked >= 5
