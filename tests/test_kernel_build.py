"""Every CUDA source in kernels/ compiles with nvcc for sm_80 and sm_90 (no GPU needed)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from spartan_py.resources import data_folder

SOURCES = sorted(data_folder("kernels").glob("*.cu"))
# Kernel instances allowed to spill, with why. Anything else that spills fails the build test.
ALLOWED_SPILLS = {
    "_Z8gc_layerILi1ELi32E": "16384 neurons with 512 threads: 32 outputs per thread; 240-352 bytes spill since "
    "the first launch may read 32 outputs from counts (measured); the default 1024-thread build does not spill",
    "_Z8gc_layerILi1ELi16E": "16384 neurons with 1024 threads: 4 bytes on sm_90 (none on sm_80) since the monitor "
    "counts natural tiles of renumbered outputs and the counts path's scatter is a function of its own (measured)",
    "_Z22tile_gemm_f32_balancedILi128ELi128ELi16E": "8 bytes on sm_80 (nvcc 13.0), none on sm_90 since 2a5deea "
    "keeps an output's end state in shared memory, at the 128-register cap of 2 blocks per SM (ptxas -v); "
    "docs/performance-notes.md has its H100 times",
    "_Z29tile_gemm_f32_balanced_countsILi128ELi128ELi16E": "4 bytes on sm_90 (nvcc 13.0) at the same 128-register "
    "cap, since the padded list is read with plain loads (5ac1ca1); the 64-row default instances do not spill",
}


def test_there_are_kernels():
    assert SOURCES, "kernels/ holds no .cu file"


@pytest.mark.parametrize("threads", [1024, 512])
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_nvcc_compiles(source, arch, threads, tmp_path):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc not on PATH")
    run = subprocess.run(
        [
            nvcc,
            "-std=c++17",
            f"-arch={arch}",
            f"-DGC_THREADS={threads}",
            "-cubin",
            "-Xptxas",
            "-v",
            "-o",
            str(tmp_path / "k.cubin"),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr
    entry = None
    for line in run.stderr.splitlines():
        if "Compiling entry function" in line:
            entry = line.split("'")[1]
        elif "bytes spill stores" in line and not line.strip().startswith("0 bytes"):
            assert any(entry.startswith(name) for name in ALLOWED_SPILLS), f"{entry} spills: {line.strip()}"
