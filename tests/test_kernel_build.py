"""Every CUDA source in kernels/ compiles with nvcc for sm_80 and sm_90 (no GPU needed)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from spartan_py.resources import data_folder

SOURCES = sorted(data_folder("kernels").glob("*.cu"))


def test_there_are_kernels():
    assert SOURCES, "kernels/ holds no .cu file"


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_nvcc_compiles(source, arch, tmp_path):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc not on PATH")
    run = subprocess.run(
        [nvcc, "-std=c++17", f"-arch={arch}", "-cubin", "-Xptxas", "-warn-spills", "-o", str(tmp_path / "k.cubin"), str(source)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "spill" not in run.stderr.lower(), run.stderr
