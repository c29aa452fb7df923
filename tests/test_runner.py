"""The experiment runner and the report: validation, sweeps, resume, failures, figures."""

from __future__ import annotations

import base64
import json
import re
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest

from spartan_py.config.validate import ConfigError
from spartan_py.errors import InputError
from spartan_py.report import write_report
from spartan_py.runner import load_experiment, run_experiment
from spartan_py.runner.store import load_points
from spartan_py.trace import read_trace
from tests.conftest import ROOT, checkout_env
from tests.test_cli import spartan

BAD = ROOT / "tests" / "data" / "bad-experiments"
SMALL = """\
name: small
workload:
  network: generated:1024:3
  layers: 12
  inputs: generated:400:4
machines: [h100-sxm, t4, t4+tile-8]
sweep:
  grid:
    backend: [cpu, gpu-twin, gpu]
    monitor: [fused, off]
"""


@pytest.mark.parametrize(
    "name, expected",
    [
        ("unknown-key", r"line 7, unknown field `repeets`; did you mean `repeats`\?"),
        ("wrong-type", r"line 4, field `workload.layers`: Input should be a valid integer"),
        ("missing-file", r"line 3, field `workload.network`: .*not found"),
        ("empty", r"the file is empty"),
        ("zero-points", r"line 5, field `sweep`: .*empty list: the sweep would have zero points"),
        ("bad-sweep", r"line 7, sweep.grid: unknown field `workload.layrs`; did you mean `workload.layers`\?"),
        (
            "conv-options",
            r"line 4, field `workload.layers`: .*unknown convolution layer 'alexnet/conv9'(.|\n)*"
            r"line 6, field `tile`: Tuple should have at most 2 items",
        ),
    ],
)
def test_bad_experiment_files(name, expected):
    path = BAD / f"{name}.yaml"
    with pytest.raises(InputError) as info:
        load_experiment(path)
    assert str(path) in str(info.value)
    assert re.search(expected, str(info.value)), str(info.value)


def test_every_problem_at_once(tmp_path):
    path = tmp_path / "e.yaml"
    path.write_text("name: two\nworkload:\n  inputs: generated:10\n  layres: 3\nbackend: gpu-magic\nrepeats: 0\n")
    with pytest.raises(ConfigError) as info:
        load_experiment(path)
    assert len(info.value.problems) == 3


def test_sweep_points_and_zip(tmp_path):
    path = tmp_path / "z.yaml"
    path.write_text(
        "name: z\nworkload: {network: generated:1024, inputs: generated:10}\nsweep:\n"
        "  grid: {backend: [cpu, reference]}\n  zip: {workload.layers: [2, 3, 4], repeats: [1, 2, 3]}\n"
    )
    experiment, points = load_experiment(path)
    assert len(points) == 6
    assert {(p.experiment.workload.layers, p.experiment.repeats) for p in points} == {(2, 1), (3, 2), (4, 3)}
    assert len({p.id for p in points}) == 6
    again = load_experiment(path)[1]
    assert [p.id for p in again] == [p.id for p in points]  # ids are stable: a rerun finds its points
    path.write_text(
        "name: z\nworkload: {network: generated:1024, inputs: generated:10}\n"
        "sweep:\n  zip: {backend: [cpu], repeats: [1, 2]}\n"
    )
    with pytest.raises(ConfigError, match="one length"):
        load_experiment(path)


def test_run_resume_failures_and_report(tmp_path):
    path = tmp_path / "small.yaml"
    path.write_text(SMALL)
    experiment, points = load_experiment(path)
    out = tmp_path / "run"
    summary = run_experiment(experiment, points, out)
    assert summary.ran == 6 and summary.skipped == 0
    records = {p.id: json.loads((out / "points" / f"{p.id}.json").read_text()) for p in points}
    gpu = [r for r in records.values() if r["config"]["backend"] == "gpu"]
    from spartan_py.engines import unavailable_reason

    if unavailable_reason("gpu"):  # no GPU here: those points failed, were recorded, and the run went on
        assert summary.failed == 2 and all(r["status"] == "failed" and "CuPy" in r["error"] for r in gpu)
    ok = [r for r in records.values() if r["status"] == "ok"]
    assert len(ok) >= 4
    environment = json.loads((out / "environment.json").read_text())
    assert environment["cpu"] and environment["cpu"] != "unknown" and environment["cpu_count"] >= 1
    results = pd.read_csv(out / "results.csv")
    assert len(results) == 12 * len(ok) and set(results["layer"]) == set(range(1, 13))
    simulated = pd.read_csv(out / "simulated.csv")
    twin = simulated[simulated["label"].str.contains("gpu-twin")]
    assert set(twin["machine"]) == {"h100-sxm", "t4", "t4+tile-8"}
    assert twin[twin["machine"] == "t4"]["predicted_seconds"].isna().all()  # the tile does not fit a T4
    assert (twin[twin["machine"] == "h100-sxm"]["predicted_seconds"] > 0).all()
    cpu = simulated[simulated["label"].str.contains("backend=cpu")]
    assert cpu["predicted_seconds"].isna().all() and cpu["note"].str.contains("no GPU kernels").all()

    # resume: nothing to do; a lost point is redone alone; --force redoes everything
    first = out / "points" / f"{ok[0]['id']}.json"
    stamp = first.stat().st_mtime_ns
    again = run_experiment(experiment, points, out)
    assert again.ran == summary.failed and again.skipped == 6 - summary.failed
    assert first.stat().st_mtime_ns == stamp
    first.unlink()
    once = run_experiment(experiment, points, out)
    assert once.ran == 1 + summary.failed and first.is_file()
    assert run_experiment(experiment, points, out, force=True).ran == 6

    html_path, md_path = write_report(out)
    page = html_path.read_text()
    images = re.findall(r"src='data:image/png;base64,([^']+)'", page)
    assert len(images) >= 4
    import matplotlib.image

    for encoded in images:
        data = base64.b64decode(encoded)
        assert data.startswith(b"\x89PNG\r\n\x1a\n")
        picture = tmp_path / "check.png"
        picture.write_bytes(data)
        assert matplotlib.image.imread(picture).shape[0] > 100
    for link in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md_path.read_text()):
        assert (out / link).is_file()
    assert "Profiling overhead" in page and "What if" in page and "Tile utilization" in page
    assert "simulated" in page.lower()


def test_report_needs_a_run_folder(tmp_path):
    with pytest.raises(InputError, match="not a run folder"):
        write_report(tmp_path)


def _run_command(path, out) -> tuple[list[str], dict[str, str]]:
    """``spartan run FILE --out OUT --quiet`` as a subprocess of this checkout: command and environment."""
    return [sys.executable, "-m", "spartan_py", "run", str(path), "--out", str(out), "--quiet"], checkout_env()


def test_killed_run_resumes(tmp_path):
    """Kill the runner after its first point; a second start finishes the rest, none twice."""
    path = tmp_path / "k.yaml"
    path.write_text(
        "name: k\nworkload: {network: generated:1024:5, layers: 10, inputs: generated:300:6}\nbackend: cpu\n"
        "sweep:\n  grid: {workload.layers: [4, 5, 6, 7, 8, 9]}\n"
    )
    out = tmp_path / "run"
    command, env = _run_command(path, out)
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and len(list((out / "points").glob("*.json"))) < 1:
        assert process.poll() is None, process.communicate()[1].decode()[-2000:]  # it died on its own
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    done_before = {p.name: p.stat().st_mtime_ns for p in (out / "points").glob("*.json")}
    assert 1 <= len(done_before) < 6
    finished = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert finished.returncode == 0, finished.stderr
    assert f"{6 - len(done_before)} points run, {len(done_before)} already done" in finished.stdout
    after = {p.name: p.stat().st_mtime_ns for p in (out / "points").glob("*.json")}
    assert len(after) == 6 and all(after[name] == stamp for name, stamp in done_before.items())
    assert len(pd.read_csv(out / "results.csv").drop_duplicates("point")) == 6


def test_only_runs_the_points_whose_label_matches(tmp_path):
    """``spartan run --only REGEX`` runs the matching points; a rerun without it does the rest."""
    path = tmp_path / "o.yaml"
    path.write_text(
        "name: o\nworkload: {network: generated:1024:5, layers: 4, inputs: generated:200:6}\nbackend: cpu\n"
        "sweep:\n  grid: {workload.layers: [3, 4, 5]}\n"
    )
    out = tmp_path / "run"
    command = ["run", path, "--out", out, "--quiet"]
    some = spartan(*command, "--only", "layers=[34]$")
    assert some.returncode == 0, some.stderr
    assert "2 points run, 0 already done" in some.stdout
    rest = spartan(*command)
    assert "1 points run, 2 already done" in rest.stdout
    none = spartan(*command, "--only", "no such label")
    assert none.returncode == 2 and "no point" in none.stderr


def test_conv_layers_points_measured_and_simulated(tmp_path):
    path = tmp_path / "conv.yaml"
    path.write_text(
        "name: conv\nworkload:\n  kind: conv_layers\n  layers: [alexnet/conv3, resnet18/conv5_x]\n"
        "  batch: 1\n  density: 0.05\ntile: 32\nmachines: [h100-sxm, t4]\n"
        "sweep:\n  grid:\n    mode: [measured, simulated]\n"
    )
    experiment, points = load_experiment(path)
    summary = run_experiment(experiment, points, tmp_path / "run")
    assert (summary.ran, summary.failed) == (2, 0)
    table = pd.read_csv(tmp_path / "run" / "dense-layers.csv")
    assert not (tmp_path / "run" / "results.csv").exists()  # no Graph Challenge point: no 1-byte table of it
    assert len(table) == 4 and set(table["layer"]) == {"alexnet/conv3", "resnet18/conv5_x"}
    assert (table["tile_sparse_max_rel_diff"] < 1e-5).all() and (table["chosen_max_rel_diff"] < 1e-5).all()
    assert (table["K_padded"] % 32 == 0).all() and (table["K_padded"] >= table["K"]).all()
    simulated = table[table["simulated"]]
    assert set(simulated["timed_on"]) == {"h100-sxm"} and simulated["monitor_us"].isna().all()
    measured = table[~table["simulated"]]
    assert (measured["dense_us"] > 0).all() and (measured["monitor_us"] >= 0).all()
    # what the policy chose is what its time is: the chosen kernel's own time (simulated: its prediction)
    for row in simulated.itertuples():
        own = {"dense": row.dense_us, "tile_sparse": row.tile_sparse_us + row.tile_list_us}
        if row.kernel in own:
            assert row.chosen_us == pytest.approx(own[row.kernel], rel=1e-9)
    # utilization at a tile is useful / executed: never above the density over the tile density
    assert (table["utilization"] <= table["density"] / table["tile_density"] + 1e-9).all()
    replay = pd.read_csv(tmp_path / "run" / "simulated.csv")
    assert replay["predicted_seconds"].notna().all() and (replay["predicted_seconds"] > 0).all()
    _, md_path = write_report(tmp_path / "run")
    assert "(tile-sweep.png)" in md_path.read_text() and (tmp_path / "run" / "tile-sweep.png").is_file()


def test_fields_of_the_other_workload_kind_are_refused(tmp_path):
    path = tmp_path / "mixed.yaml"
    path.write_text("name: mixed\nworkload:\n  kind: conv_layers\nrows_per_tile: 8\ncompact_every: 2\n")
    with pytest.raises(ConfigError) as info:
        load_experiment(path)
    assert "line 4, field `rows_per_tile`" in str(info.value) and "line 5, field `compact_every`" in str(info.value)
    path.write_text("name: mixed\nworkload:\n  layers: 3\ntile: 8\nprecision: tf32\n")
    with pytest.raises(ConfigError) as info:
        load_experiment(path)
    assert "line 4, field `tile`" in str(info.value) and "line 5, field `precision`" in str(info.value)
    assert "conv_layers workloads" in str(info.value)


def test_sweep_cases_mix_workload_kinds(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(
        "name: c\nworkload: {network: generated:1024, inputs: generated:10, layers: 2}\nsweep:\n"
        "  grid: {repeats: [1, 2]}\n  cases:\n    - {backend: cpu}\n"
        "    - {backend: cpu, workload: {kind: conv_layers, layers: [alexnet/conv2], batch: 1}, trace: all}\n"
    )
    experiment, points = load_experiment(path)
    assert len(points) == 4
    assert sorted(p.experiment.workload.kind for p in points) == ["conv_layers"] * 2 + ["graph_challenge"] * 2
    assert any("1 conv layers" in p.label for p in points)
    path.write_text(path.read_text().replace("trace: all}", "trace: all, tile: [7, 7, 7]}"))
    with pytest.raises(ConfigError, match=r"line 7"):
        load_experiment(path)
    path.write_text(path.read_text().replace("tile: [7, 7, 7]", "bakend: gpu"))
    with pytest.raises(ConfigError, match=r"sweep.cases\[1\]: unknown field `bakend`; did you mean `backend`"):
        load_experiment(path)
    path.write_text(path.read_text().replace("grid: {repeats: [1, 2]}", "grid: {backend: [cpu, reference]}"))
    with pytest.raises(ConfigError, match="both cases and grid"):
        load_experiment(path)


def test_merged_kernel_options_reach_the_engine(tmp_path):
    """``chain_rows`` goes to the merged engines (here the simulated twins, whose traces name
    the kernels their GPU engines would run) and not to others; ``input_counts`` to both
    kernels' engines."""
    path = tmp_path / "m.yaml"
    path.write_text(
        "name: m\nworkload: {network: generated:1024:5, layers: 12, inputs: generated:300:6}\nmode: simulated\n"
        "machines: [h100-sxm]\ncompact_every: 4\n"
        "sweep:\n  cases:\n    - {backend: gpu-merged}\n"
        "    - {backend: gpu-merged, chain_rows: 0, input_counts: false}\n    - {backend: gpu, chain_rows: 1}\n"
        "    - {backend: gpu, input_counts: false}\n"
    )
    experiment, points = load_experiment(path)
    run_experiment(experiment, points, tmp_path / "run")
    kinds = {}
    for point in load_points(tmp_path / "run"):
        trace = read_trace(tmp_path / "run" / "points" / f"{point['id']}.trace.csv")
        launches = trace[trace["kernel"].isin(["gpu.gc_merged", "gpu.gc_layer"])]
        kinds[point["label"]] = [variant[:1] for variant in launches["variant"]]
    assert kinds == {
        "backend=gpu-merged": ["P", "C", "C"],
        "backend=gpu-merged, chain_rows=0, input_counts=False": ["B", "R", "R"],
        "backend=gpu, chain_rows=1": ["P", "R", "R"],
        "backend=gpu, input_counts=False": ["R", "R", "R"],
    }, kinds
