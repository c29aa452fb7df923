"""A run folder bound to its experiment (issue 74, finding 4) and written by one run at a time
(finding 5): an edited experiment never mixes its points with the old ones, ``--only`` keeps
``config.json`` whole, and two concurrent runs compute every point once."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time

import pandas as pd
import pytest

from spartan_py.errors import InputError
from spartan_py.runner import execute, load_experiment, run_experiment
from spartan_py.runner.run_folder import LOCK_NAME, REPLACE_FLAG, run_folder_lock
from tests.conftest import checkout_env
from tests.test_cli import spartan

EXPERIMENT = """\
name: bound
workload: {network: "generated:1024:5", layers: 3, inputs: "generated:200:6"}
backend: gpu-twin
mode: simulated
machines: [h100-sxm]
sweep:
  grid: {workload.layers: [2, 3, 4]}
"""


def _point_files(out) -> set[str]:
    return {p.stem for p in (out / "points").glob("*.json")}


def test_an_edited_experiment_is_refused_naming_the_changes_then_replaced(tmp_path):
    path = tmp_path / "bound.yaml"
    path.write_text(EXPERIMENT.replace("[2, 3, 4]", "[2, 3]"))
    out = tmp_path / "run"
    first = spartan("run", path, "--out", out, "--quiet")
    assert first.returncode == 0, first.stderr
    before = _point_files(out)
    path.write_text(EXPERIMENT.replace("[2, 3, 4]", "[2, 5]").replace("layers: 3,", "layers: 7,"))
    refused = spartan("run", path, "--out", out, "--quiet")
    assert refused.returncode == 2, refused.stderr
    message = refused.stderr
    assert "sweep.grid.workload.layers: [2, 3] -> [2, 5]" in message and "workload.layers: 3 -> 7" in message
    assert "(layers=3)" in message and REPLACE_FLAG in message and "--out" in message
    assert _point_files(out) == before  # nothing run, nothing dropped
    replaced = spartan("run", path, "--out", out, "--quiet", REPLACE_FLAG)
    assert replaced.returncode == 0, replaced.stderr
    assert "1 points run, 1 already done" in replaced.stdout  # layers=2 is the same point: kept
    results = pd.read_csv(out / "results.csv")
    assert sorted(results.drop_duplicates("point")["layers"]) == [2, 5]  # no layers=3 row beside them
    assert len(_point_files(out)) == 2 and not list((out / "points").glob("*.trace.csv"))[2:]


def test_only_leaves_config_json_whole(tmp_path):
    path = tmp_path / "bound.yaml"
    path.write_text(EXPERIMENT)
    out = tmp_path / "run"
    some = spartan("run", path, "--out", out, "--quiet", "--only", "layers=3$")
    assert some.returncode == 0, some.stderr
    assert "1 points run, 0 already done" in some.stdout
    config = json.loads((out / "config.json").read_text())
    assert [p["label"] for p in config["points"]] == ["layers=2", "layers=3", "layers=4"]
    rest = spartan("run", path, "--out", out, "--quiet")
    assert "2 points run, 1 already done" in rest.stdout


def _counting(monkeypatch) -> list[str]:
    """Count the points computed (the runner's own ``run_point``), slowly enough that two runs overlap."""
    computed: list[str] = []
    real = execute.run_point

    def counted(point):
        computed.append(point.id)
        time.sleep(0.3)
        return real(point)

    monkeypatch.setattr(execute, "run_point", counted)
    return computed


def _tables(out) -> dict[str, pd.DataFrame]:
    return {p.name: pd.read_csv(p) for p in sorted(out.glob("*.csv"))}


def test_two_concurrent_runs_compute_every_point_once(tmp_path, monkeypatch):
    """Two runs of one experiment into one folder at once (threads, each with its own open
    file and the real ``fcntl.flock``): the second waits, then finds every point done."""
    path = tmp_path / "bound.yaml"
    path.write_text(EXPERIMENT)
    experiment, points = load_experiment(path)
    alone = tmp_path / "alone"
    run_experiment(experiment, points, alone)
    computed = _counting(monkeypatch)
    out, waited, summaries, errors = tmp_path / "run", [], [], []

    def one_run():
        try:
            summaries.append(run_experiment(experiment, points, out, on_wait=waited.append))
        except Exception as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=one_run) for _ in range(2)]
    for thread in threads:
        thread.start()
        time.sleep(0.1)
    for thread in threads:
        thread.join(timeout=300)
    assert not errors, errors
    assert sorted(computed) == sorted(p.id for p in points)  # each point once, by one of the runs
    assert sorted((s.ran, s.skipped) for s in summaries) == [(0, 3), (3, 0)]
    assert len(waited) == 1 and "pid" in waited[0]
    ours, theirs = _tables(out), _tables(alone)
    assert ours.keys() == theirs.keys() and "results.csv" in ours
    for name, table in ours.items():  # the simulated points' times are the cost model's: equal
        pd.testing.assert_frame_equal(table, theirs[name], check_exact=False, rtol=1e-12)


def test_the_lock_is_released_and_says_who_holds_it(tmp_path):
    told: list[str] = []
    with run_folder_lock(tmp_path):
        assert "pid" in (tmp_path / LOCK_NAME).read_text()

        def wait_for_it():
            with run_folder_lock(tmp_path, told.append):
                pass

        waiting = threading.Thread(target=wait_for_it)
        waiting.start()
        time.sleep(0.3)
        assert waiting.is_alive() and told and "pid" in told[0]
    waiting.join(timeout=10)
    assert not waiting.is_alive()


def test_another_experiment_in_the_folder_is_still_refused(tmp_path):
    path = tmp_path / "bound.yaml"
    path.write_text(EXPERIMENT.replace("[2, 3, 4]", "[2]"))
    experiment, points = load_experiment(path)
    run_experiment(experiment, points, tmp_path / "run")
    path.write_text(path.read_text().replace("name: bound", "name: other"))
    experiment, points = load_experiment(path)
    with pytest.raises(InputError, match="holds a run of experiment 'bound'"):
        run_experiment(experiment, points, tmp_path / "run", replace_changed=True)
    # a folder that is not a run folder at all: refused before the lock would make anything in it
    stray = tmp_path / "stray"
    (stray / "points").mkdir(parents=True)
    (stray / "points" / "x.json").write_text("{}")
    with pytest.raises(InputError, match="not a run folder"):
        run_experiment(experiment, points, stray, replace_changed=True)
    assert not (stray / ".lock").exists()


@pytest.mark.slow
def test_two_concurrent_spartan_runs_compute_every_point_once(tmp_path):
    """The same with two ``spartan run`` processes: one waits for the other's lock and says so."""
    path = tmp_path / "bound.yaml"
    path.write_text(EXPERIMENT)
    out = tmp_path / "run"
    command = [sys.executable, "-m", "spartan_py", "run", str(path), "--out", str(out), "--quiet"]
    with run_folder_lock(out):  # both start while the folder is held: both must wait
        runs = [
            subprocess.Popen(command, env=checkout_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ]
        runs.append(
            subprocess.Popen(command, env=checkout_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        )
        time.sleep(8)
    outputs = [run.communicate(timeout=600) for run in runs]
    assert all(run.returncode == 0 for run in runs), outputs
    said = sorted(stdout.split(": ", 1)[1].split(";")[0] for stdout, _ in outputs)
    assert said == ["0 points run, 3 already done, 0 failed", "3 points run, 0 already done, 0 failed"]
    assert sum("waiting for it to end" in stderr for _, stderr in outputs) >= 1


def test_skipped_tests_are_summarised_one_line_per_reason():
    """The test command's output names each skip reason once, with its count (finding 8)."""
    from tests.conftest import ROOT, gpu_unavailable_reason

    if gpu_unavailable_reason() is None:
        pytest.skip("a GPU is here: its tests run, none skipped for want of it")
    found = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", "tests/test_gpu_merged.py"],
        cwd=ROOT,
        env=checkout_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert found.returncode == 0, found.stdout[-3000:]
    lines = found.stdout.splitlines()
    gpu = [line for line in lines if "no GPU" in line]
    assert len(gpu) == 1 and re.match(r"SKIPPED \d{2,} tests: no GPU: ", gpu[0]), gpu
    assert not [line for line in lines if line.startswith("SKIPPED [")]


def test_the_quickstart_ends_with_its_answer(tmp_path):
    """``spartan run`` on the quickstart (shrunk) ends by printing each point's edge rate and
    its category check, last (finding 8)."""
    import yaml

    from spartan_py.config.yaml_marks import load_yaml
    from tests.conftest import ROOT
    from tests.test_experiments import small_copy

    data = small_copy(load_yaml(ROOT / "experiments" / "quickstart.yaml").data, gpu=False)
    data["workload"]["check_rows"] = 300
    path = tmp_path / "quickstart.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    done = spartan("run", path, "--out", tmp_path / "run", "--quiet")
    assert done.returncode == 0, done.stderr
    answer = done.stdout.split("answer:\n", 1)[1].splitlines()
    assert len(answer) == 2 and done.stdout.rstrip().endswith(answer[-1])
    assert re.search(r"backend=auto.*: \d(\.\d+)?e\+\d+ edges/s \(measured, cpu", answer[0]), answer
    assert re.search(r"backend=gpu-twin.*: \d(\.\d+)?e\+\d+ edges/s \(simulated on h100-sxm\)", answer[1]), answer
    assert all(re.search(r"\d+ categories; checked against the cpu engine on 300 rows: passed", a) for a in answer)
