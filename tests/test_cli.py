"""The command line, run as a user would: ``python -m spartan_py`` from the checkout."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys

import pytest

from spartan_py import cli
from tests.conftest import ROOT, checkout_env


def spartan(*args, cwd=None) -> subprocess.CompletedProcess:
    """``spartan ARGS`` run in this process (``cli.main``, as the entry point calls it), with
    its exit status and output; ``python -m spartan_py`` itself is run as a process by
    ``test_api_surface.test_version_flag`` and :func:`spartan_process`."""
    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                status = cli.main([str(a) for a in args])
            except SystemExit as exc:  # argparse's usage errors
                status = exc.code if isinstance(exc.code, int) else 1
    finally:
        os.chdir(here)
    return subprocess.CompletedProcess(["spartan", *args], status, out.getvalue(), err.getvalue())


def spartan_process(*args, cwd=None) -> subprocess.CompletedProcess:
    """``python -m spartan_py ARGS`` as a process of its own, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "spartan_py", *args],
        capture_output=True,
        text=True,
        env=checkout_env(),
        cwd=cwd,
        timeout=600,
    )


def test_infer_json_generated(tmp_path):
    out = tmp_path / "cats.tsv"
    run = spartan_process(
        "infer",
        "--network",
        "generated:1024:1",
        "--inputs",
        "generated:500:2",
        "--layers",
        "20",
        "--backend",
        "cpu",
        "--json",
        "--categories-out",
        str(out),
    )
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    for key in (
        "backend",
        "device",
        "neurons",
        "layers",
        "rows",
        "categories",
        "passed",
        "seconds",
        "load_seconds",
        "edges_per_second",
        "live_rows_by_layer",
    ):
        assert key in result
    assert (result["backend"], result["neurons"], result["layers"], result["rows"]) == ("cpu", 1024, 20, 500)
    assert result["passed"] is None and len(result["live_rows_by_layer"]) == 20
    assert result["edges_per_second"] == pytest.approx(500 * 20 * 32768 / result["seconds"])
    assert len(out.read_text().split()) == result["categories"] > 0

    # the categories written are a valid truth file: the same run passes against them
    again = spartan(
        "infer",
        "--network",
        "generated:1024:1",
        "--inputs",
        "generated:500:2",
        "--layers",
        "20",
        "--backend",
        "reference",
        "--json",
        "--truth",
        str(out),
    )
    assert json.loads(again.stdout)["passed"] is True


def test_failed_truth_is_a_result_not_an_error(tmp_path):
    (tmp_path / "t.tsv").write_text("1\n2\n3\n")
    run = spartan(
        "infer",
        "--network",
        "generated:1024",
        "--inputs",
        "generated:50",
        "--layers",
        "3",
        "--backend",
        "cpu",
        "--truth",
        str(tmp_path / "t.tsv"),
    )
    assert run.returncode == 0 and "FAILED" in run.stdout


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--network", "/no/such/dir", "--inputs", "generated:5"], "network directory not found"),
        (["--network", "generated:1000", "--inputs", "generated:5"], "generated networks have 1024"),
        (["--network", "generated:1024", "--inputs", "generated:x"], "N and SEED must be integers"),
        (["--network", "generated:1024", "--inputs", "/no/inputs.tsv"], "file not found"),
    ],
)
def test_bad_input_exits_2(args, fragment):
    run = spartan("infer", *args, "--layers", "2", "--backend", "cpu")
    assert run.returncode == 2
    assert fragment in run.stderr and "Traceback" not in run.stderr


@pytest.mark.parametrize("network", ["generated:65536", "folder"])
def test_a_network_the_backend_cannot_run_is_refused_before_loading(tmp_path, network):
    if network == "folder":  # an official-format folder: its width comes from the file names
        (tmp_path / "n65536-l1.tsv").write_text("not read\n")
        network = str(tmp_path)
    run = spartan(
        "infer", "--network", network, "--layers", "1920", "--inputs", "generated:60000", "--backend", "gpu-twin"
    )
    assert run.returncode == 2, run.stderr
    assert "runs networks of 1024, 4096, 16384 neurons, not 65536; use cpu" in run.stderr
    assert "loading network" not in run.stderr and "Traceback" not in run.stderr


def test_malformed_inputs_file_names_line(tmp_path):
    (tmp_path / "in.tsv").write_text("1\t1\t1\n1\t2\n")
    run = spartan("infer", "--network", "generated:1024", "--inputs", str(tmp_path / "in.tsv"), "--layers", "2")
    assert run.returncode == 2
    assert f"{tmp_path / 'in.tsv'}:2: found 2 field" in run.stderr


def test_unknown_backend_is_rejected():
    run = spartan("infer", "--network", "generated:1024", "--inputs", "generated:5", "--backend", "tpu")
    assert run.returncode == 2 and "unknown backend 'tpu'" in run.stderr and "gpu-merged" in run.stderr


def test_official_truth_from_cli(gc_data):
    run = spartan(
        "infer",
        "--network",
        str(gc_data / "neuron1024"),
        "--inputs",
        str(gc_data / "sparse-images-1024-first1200.tsv.gz"),
        "--rows",
        "1200",
        "--truth",
        str(gc_data / "neuron1024-l120-categories-first1200.tsv"),
        "--backend",
        "cpu",
        "--json",
    )
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert result["passed"] is True and result["categories"] == 19 and result["layers"] == 120


@pytest.mark.gpu
def test_auto_picks_the_gpu():
    run = spartan("infer", "--network", "generated:1024", "--inputs", "generated:300", "--layers", "6", "--json")
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert result["backend"] == "gpu-merged" and "NVIDIA" in result["device"]  # RadiX-Net: 1/16 distinct columns


def test_simulated_infer_then_simulate_other_machines(tmp_path):
    trace = tmp_path / "trace.csv"
    run = spartan(
        "infer",
        "--network",
        "generated:1024:1",
        "--inputs",
        "generated:800:2",
        "--layers",
        "24",
        "--mode",
        "simulated",
        "--machine",
        "v100-sxm2",
        "--trace-out",
        str(trace),
        "--json",
        "--quiet",
    )
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert result["simulated"] is True and result["machine"] == "v100-sxm2"
    assert result["device"] == "simulated:v100-sxm2" and result["seconds"] > 0
    run = spartan(
        "simulate", str(trace), "--machine", "h100-sxm", "--machine", "t4", "--machine", "t4+tile-8", "--json"
    )
    assert run.returncode == 0, run.stderr
    entries = {e["machine"]: e for e in json.loads(run.stdout)}
    assert set(entries) == {"h100-sxm", "t4", "t4+tile-8"}
    h100 = entries["h100-sxm"]["predicted_us_by_run"][""]
    assert 0 < h100 < result["seconds"] * 1e6  # the H100 beats the V100 on the same trace
    assert entries["t4"]["predicted_us_by_run"][""] is None
    assert any("shared memory" in note for note in entries["t4"]["notes"])
    assert entries["t4+tile-8"]["predicted_us_by_run"][""] > h100
    text = spartan(
        "infer",
        "--network",
        "generated:1024:1",
        "--inputs",
        "generated:100:2",
        "--layers",
        "4",
        "--mode",
        "simulated",
        "--quiet",
    )
    assert "SIMULATED" in text.stdout


@pytest.mark.parametrize(
    "args, fragment",
    [
        (("simulate", "nope.csv", "--machine", "h100-sxm"), "trace file not found"),
        (("simulate", "tests/data/golden-trace.csv", "--machine", "h300"), "unknown machine 'h300'"),
        (
            (
                "infer",
                "--network",
                "generated:1024",
                "--inputs",
                "generated:10",
                "--mode",
                "simulated",
                "--backend",
                "cpu",
            ),
            "no twin",
        ),
    ],
)
def test_simulate_bad_input_exits_2(args, fragment):
    run = spartan(*args, cwd=ROOT)
    assert run.returncode == 2, run.stderr
    assert fragment in run.stderr


def test_machines_lists_every_file():
    run = spartan("machines", "--json")
    assert run.returncode == 0, run.stderr
    listed = json.loads(run.stdout)
    names = {m["name"] for m in listed["machines"]}
    assert {"h100-sxm", "a100-sxm", "v100-sxm2", "a40", "t4", "rtx-a6000", "rtx-2080-ti"} <= names
    assert "hw-monitor" in listed["variants"] and "does not exist" in listed["variants"]["hw-monitor"]
    validated = {m["name"]: m["validated"] for m in listed["machines"]}
    assert validated["h100-sxm"] and validated["h200-sxm"] and not validated["a100-sxm"]
    text = spartan("machines")
    assert "VALIDATED" in text.stdout and "not validated" in text.stdout and "what-if estimates" in text.stdout
