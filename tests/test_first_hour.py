"""What a new user meets in the first hour (issue 51): each defect found on a fresh clone,
with a test that failed before its fix. The CLI runs in this process (``cli.main``), as the
``spartan`` command would, so that these stay fast."""

from __future__ import annotations

import json
import os
import stat
import warnings
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from spartan_py import cli
from spartan_py.errors import InputError
from spartan_py.graph_challenge.writers import write_triples

TINY = """\
name: {name}
workload:
  network: generated:1024
  layers: 3
  inputs: generated:40
backend: cpu
machines: [h100-sxm]
"""


def spartan(capsys, *args: str) -> tuple[int, str, str]:
    """``spartan ARGS`` in this process: (exit status, stdout, stderr)."""
    status = cli.main([str(a) for a in args])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def tiny_run(tmp_path: Path, capsys, name: str = "tiny", out: Path | None = None) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(TINY.format(name=name))
    out = out or tmp_path / name
    status, _, err = spartan(capsys, "run", path, "--out", out, "--quiet", "--report")
    assert status == 0, err
    return out


# 1. files the tool writes take the mode the umask gives


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_written_files_take_the_umask_mode(tmp_path, capsys, umask_022):
    out = tiny_run(tmp_path, capsys)
    trace = tmp_path / "trace.csv"
    categories = tmp_path / "cats.tsv"
    status, _, err = spartan(
        capsys,
        *("infer", "--network", "generated:1024", "--layers", "3", "--inputs", "generated:40"),
        *("--backend", "gpu-twin", "--mode", "simulated", "--trace-out", trace, "--categories-out", categories),
    )
    assert status == 0, err
    written = [p for p in out.rglob("*") if p.is_file()] + [trace, categories]
    assert any(p.suffix == ".png" for p in written) and any(p.name == "report.html" for p in written)
    modes = {p.relative_to(tmp_path).as_posix(): stat.S_IMODE(p.stat().st_mode) for p in written}
    assert set(modes.values()) == {0o644}, modes


def test_atomic_writes_follow_a_stricter_umask(tmp_path):
    from spartan_py.files import atomic_write_text

    old = os.umask(0o077)
    try:
        path = atomic_write_text(tmp_path / "private.txt", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


# 2. report --against a CPU-only run; --debug after the subcommand


def test_report_against_a_cpu_only_run_says_why(tmp_path, capsys):
    cpu_run = tiny_run(tmp_path, capsys, "cpu-a")
    other = tiny_run(tmp_path, capsys, "cpu-b")
    status, _, err = spartan(capsys, "report", cpu_run, "--against", other)
    assert status == 2
    assert "no measured GPU launches" in err and "IndexError" not in err and "unexpected" not in err


def test_debug_is_taken_after_the_subcommand(capsys):
    args = cli.build_parser().parse_args(["report", "somewhere", "--debug"])
    assert args.debug is True
    args = cli.build_parser().parse_args(["--debug", "report", "somewhere"])
    assert args.debug is True  # the subcommand's absent flag leaves the main one alone
    assert cli.build_parser().parse_args(["machines"]).debug is False


# 3. a run folder of another experiment


def test_run_into_another_experiments_folder_is_refused(tmp_path, capsys):
    out = tiny_run(tmp_path, capsys, "first")
    path = tmp_path / "second.yaml"
    path.write_text(TINY.format(name="second"))
    status, _, err = spartan(capsys, "run", path, "--out", out, "--quiet")
    assert status == 2
    assert "'first'" in err and "choose another --out" in err
    assert len(list((out / "points").glob("*.json"))) == 1  # nothing of the second was added


# 4. every mistake of a YAML file at once, in our words


def test_three_mistakes_in_one_pass_without_pydantic_wording(tmp_path, capsys):
    path = tmp_path / "three.yaml"
    path.write_text(
        "name: three\nworkload:\n  network: generated:1024\n  inputs: generated:10\n  layers: 3\n"
        "backend: cpu\nrepeats: -1\nsweep:\n  grid:\n    workload.layrs: [2, 3]\n"
        "  zip:\n    repeats: [1, 2]\n    backend: [cpu]\n"
    )
    status, _, err = spartan(capsys, "run", path, "--check")
    assert status == 2
    assert "3 problems" in err
    assert "line 7, field `repeats`" in err
    assert "did you mean `workload.layers`" in err
    assert "repeats has 2, backend has 1" in err
    assert "Value error" not in err and "(got dict)" not in err


# 5. --rows takes the first rows of a larger input


def test_rows_takes_the_first_rows_of_a_larger_file(tmp_path):
    from spartan_py import load_inputs

    matrix = sp.random(300, 1024, density=0.01, format="csr", dtype=np.float32, random_state=0)
    matrix.data[:] = 1
    path = write_triples(tmp_path / "inputs.tsv", matrix)
    first = load_inputs(path, 1024, rows=100)
    assert first.shape == (100, 1024)
    assert (first != matrix[:100]).nnz == 0
    with pytest.raises(InputError, match="rows 400: the inputs hold 300 rows"):  # issue 74: never padded silently
        load_inputs(path, 1024, rows=400)


def test_inputs_named_for_another_width_are_refused(tmp_path, capsys):
    matrix = sp.csr_matrix(np.eye(4, 1024, dtype=np.float32))
    path = write_triples(tmp_path / "sparse-images-1024.tsv", matrix)
    status, _, err = spartan(
        capsys, "infer", "--network", "generated:4096", "--layers", "2", "--inputs", path, "--backend", "cpu"
    )
    assert status == 2 and "for 1024-neuron networks" in err


# 7. simulate: a run folder, a run's table, a CPU-only trace


def test_simulate_takes_a_run_folder_and_refuses_tables_and_cpu_traces(tmp_path, capsys):
    path = tmp_path / "twin.yaml"
    path.write_text(TINY.format(name="twin").replace("backend: cpu", "backend: gpu-twin\nmode: simulated"))
    out = tmp_path / "twin"
    assert spartan(capsys, "run", path, "--out", out, "--quiet")[0] == 0
    status, text, err = spartan(capsys, "simulate", out, "--machine", "h200-sxm")
    assert status == 0, err
    assert " (kernel launches; 80% interval " in text
    status, _, err = spartan(capsys, "simulate", out / "results.csv", "--machine", "h200-sxm")
    assert status == 2 and "run's table, not a kernel trace" in err and "missing columns" not in err
    cpu_run = tiny_run(tmp_path, capsys, "cpu")
    (cpu_trace,) = (cpu_run / "points").glob("*.trace.csv")
    status, _, err = spartan(capsys, "simulate", cpu_trace, "--machine", "h200-sxm")
    assert status == 2 and "no GPU kernel launch to replay" in err


# 8. --check says which points cannot run here


def test_check_marks_points_that_need_a_gpu(tmp_path, capsys):
    from spartan_py.engines import unavailable_reason

    path = tmp_path / "mixed.yaml"
    path.write_text(TINY.format(name="mixed") + "sweep:\n  grid:\n    backend: [cpu, gpu]\n")
    status, text, _ = spartan(capsys, "run", path, "--check")
    assert status == 0
    if unavailable_reason("gpu"):
        assert "2 points; 1 cannot run on this machine" in text
        assert sum("  * " in line for line in text.splitlines()) == 1
    else:
        assert "cannot run" not in text


# 9. the report's figures


def test_edge_rate_figure_draws_long_labels_without_warnings():
    import pandas as pd

    from spartan_py.report import figures

    results = pd.DataFrame(
        {
            "point": ["a", "b", "c"],
            "label": ["backend=cpu, network=generated:1024, layers=120, inputs=generated:60000"] * 3,
            "backend": ["cpu", "cpu", "gpu-twin"],
            "simulated": [False, False, True],
            "edges_per_second": [1e11, 2e11, 3e13],
        }
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        png = figures.edge_rate(results, proxy_workload=False)
    assert png is not None and png.startswith(b"\x89PNG")
    import io

    import matplotlib.image

    height, width = matplotlib.image.imread(io.BytesIO(png)).shape[:2]
    assert height > 150 and width >= 900  # one row per bar, room for the whole label


# 12. the rest of the first hour


def test_machine_without_simulated_mode_is_refused(capsys):
    status, _, err = spartan(
        capsys, "infer", "--network", "generated:1024", "--inputs", "generated:10", "--machine", "a100-sxm"
    )
    assert status == 2 and "add --mode simulated" in err


def test_report_of_a_missing_folder_says_not_found(tmp_path, capsys):
    status, _, err = spartan(capsys, "report", tmp_path / "nonexistent")
    assert status == 2 and "folder not found" in err


def test_misspelt_backend_gets_a_suggestion(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.build_parser().parse_args(["infer", "--network", "x", "--inputs", "y", "--backend", "gpu-merge"])
    assert exit_info.value.code == 2
    assert "did you mean 'gpu-merged'?" in capsys.readouterr().err


def test_environment_names_the_package_commit_not_the_working_directory(tmp_path, monkeypatch):
    import subprocess

    from spartan_py.runner import store

    other = tmp_path / "other-repo"
    other.mkdir()
    subprocess.run(["git", "init", "-q", str(other)], check=True)
    author = ["-c", "user.email=a@b", "-c", "user.name=a"]
    subprocess.run(["git", "-C", str(other), *author, "commit", "-q", "--allow-empty", "-m", "x"], check=True)
    monkeypatch.chdir(other)
    monkeypatch.delenv("SPARTAN_COMMIT", raising=False)
    theirs = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert store.environment()["commit"] != theirs
    monkeypatch.setattr(store, "__file__", str(other / "site-packages" / "spartan_py" / "runner" / "store.py"))
    assert store.package_commit() is None  # an installed copy: no commit, never another repository's


@pytest.mark.slow
def test_first_inference_is_not_charged_for_compilation(tmp_path):
    """A fresh Numba cache: the first run's compilation is preparation, not inference."""
    import subprocess
    import sys

    from tests.conftest import checkout_env

    env = checkout_env() | {"NUMBA_CACHE_DIR": str(tmp_path / "numba-cache")}
    args = [sys.executable, "-m", "spartan_py", "infer", "--network", "generated:1024", "--layers", "20"]
    args += ["--inputs", "generated:2000", "--backend", "cpu", "--json", "--quiet"]
    cold = json.loads(subprocess.run(args, capture_output=True, text=True, env=env, check=True).stdout)
    warm = json.loads(subprocess.run(args, capture_output=True, text=True, env=env, check=True).stdout)
    assert cold["prepare_seconds"] > cold["seconds"]  # compiling went to preparation
    assert cold["seconds"] < 5 * warm["seconds"] + 0.05, (cold["seconds"], warm["seconds"])


# 10. the docs' own extra; the API page shows no Sphinx roles


def test_docs_extra_and_readme_say_how_to_build_the_docs():
    import tomllib

    from tests.conftest import ROOT

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(requirement.startswith("mkdocs") for requirement in extras["docs"])
    assert "'.[docs]'" in (ROOT / "README.md").read_text()


def test_sphinx_roles_are_shown_as_code_on_the_docs_site():
    import importlib.util

    from tests.conftest import ROOT

    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "scripts" / "docs_hooks.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    html = "see :func:<code>~spartan_py.engines.make_engine</code> and :data:<code>BACKENDS</code>"
    assert hooks.clean(html) == "see <code>make_engine</code> and <code>BACKENDS</code>"
    assert "scripts/docs_hooks.py" in (ROOT / "mkdocs.yml").read_text()


# 11. one source for the validation figures


def test_docs_trust_table_is_the_machine_files_figures():
    from spartan_py.costmodel.machine import load_machine
    from spartan_py.costmodel.published import TABLE_PATH, trust_table
    from tests.conftest import ROOT

    committed = (ROOT / TABLE_PATH).read_text()
    assert committed == trust_table(), "stale: run python -m spartan_py.costmodel.published"
    assert f'--8<-- "{TABLE_PATH.as_posix()}"' in (ROOT / "docs" / "results.md").read_text()
    h100 = load_machine("h100-sxm").validation[0]
    assert f"whole runs within {h100.whole_run_error_pct:.1f}%" in committed
    assert f"whole runs within {h100.whole_run_error_pct:.1f}%" in load_machine("h100-sxm").validation_summary()


# 6. one rule for every engine's check: differing rows decided in float64


def test_rows_on_an_unstable_fixed_point_are_named_and_forgiven():
    from spartan_py.graph_challenge.check import compare_categories
    from spartan_py.graph_challenge.network import Network

    # row 1: 0.5 + 0.5 - 1 is exactly zero in float64 (dies); row 2 lives with a wide margin
    weights = sp.csr_matrix(np.array([[0.5, 0, 0, 0], [0.5, 1.0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]], np.float32))
    network = Network(4, (weights,), bias=-1.0)
    inputs = sp.csr_matrix(np.array([[1, 1, 0, 0], [0, 3, 0, 0]], np.float32))
    same = compare_categories(network, inputs, np.array([2]), np.array([2]))
    assert same.equal and same.passed and same.describe() == "identical"
    borderline = compare_categories(network, inputs, np.array([1, 2]), np.array([2]))
    assert not borderline.equal and borderline.passed
    (verdict,) = borderline.differing
    assert (verdict.row, verdict.is_category, verdict.layer, verdict.borderline) == (1, False, 1, True)
    assert "row 1" in borderline.describe() and "borderline" in borderline.describe()
    wrong = compare_categories(network, inputs, np.array([1]), np.array([2]))  # row 2 dropped: a real error
    assert not wrong.passed and "beyond float32 rounding" in wrong.describe()


def test_quickstart_checks_every_row_by_that_rule():
    from spartan_py.runner import load_experiment
    from tests.conftest import ROOT

    experiment, _ = load_experiment(ROOT / "experiments" / "quickstart.yaml")
    assert experiment.workload.check_rows == 60000


def test_compile_cache_groups_run_the_kernels_they_name():
    from spartan_py import compile_cache

    assert set(compile_cache.GROUPS) == {"cpu", "generated", "rest"}
    assert compile_cache.main(["cpu"]) == 0  # compiled or loaded from Numba's cache
    with pytest.raises(SystemExit, match="unknown group 'gpu'"):
        compile_cache.main(["gpu"])
