"""The built wheel carries kernels/ and sim/ and runs a CPU inference outside the checkout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_installs_and_runs(tmp_path):
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    wheel = next(dist.glob("spartan_py-*.whl"))
    environment = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(environment)
    python = environment / "bin" / "python"
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", str(wheel)], capture_output=True, text=True, timeout=900
    )
    assert install.returncode == 0, install.stderr[-2000:]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    probe = subprocess.run(
        [
            str(python),
            "-c",
            "import spartan_py, json; from spartan_py.resources import data_folder;"
            "print(json.dumps({'module': spartan_py.__file__, 'kernels': str(data_folder('kernels')),"
            " 'sim': str(data_folder('sim'))}))",
        ],
        capture_output=True,
        text=True,
        cwd=elsewhere,
        env=env,
        timeout=300,
    )
    assert probe.returncode == 0, probe.stderr
    where = json.loads(probe.stdout)
    for key in ("module", "kernels", "sim"):
        assert str(ROOT) not in where[key] and "site-packages" in where[key]
    assert any(Path(where["kernels"]).glob("*.cu"))
    assert (Path(where["sim"]) / "fits" / "h100-sxm.yaml").is_file()  # the machines' generated halves ship too
    run = subprocess.run(
        [
            str(environment / "bin" / "spartan"),
            "infer",
            "--network",
            "generated:1024",
            "--inputs",
            "generated:200",
            "--layers",
            "10",
            "--backend",
            "cpu",
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=elsewhere,
        env=env,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["rows"] == 200
