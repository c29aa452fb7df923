"""The public surface a newcomer meets first: top-level names, the version, the errors a
misspelt experiment file gets, and the Spartan calls that compose."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import spartan_py as sp
from spartan_py.config.validate import ConfigError
from spartan_py.runner import load_experiment
from tests.conftest import ROOT


def test_top_level_exports_the_spartan_and_cost_model_api():
    for name in (
        "SparsityMonitor",
        "compact_tiles",
        "tile_sparse_matmul",
        "KernelPolicy",
        "load_machine",
        "predict",
        "calibrate",
        "simulate_trace",
        "DEFAULT_MACHINE",
        "infer",
    ):
        assert name in sp.__all__ and getattr(sp, name) is not None
    assert sorted(sp.__all__) == sorted(set(sp.__all__))


def test_version_flag():
    run = subprocess.run([sys.executable, "-m", "spartan_py", "--version"], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0 and run.stdout.strip() == f"spartan {sp.__version__}"


def test_tile_gemm_takes_what_compact_tiles_returns():
    rng = np.random.default_rng(0)
    a = np.zeros((64, 64), np.float32)
    a[16:32, 32:48] = rng.standard_normal((16, 16))
    w = rng.standard_normal((64, 16)).astype(np.float32)
    packed = sp.compact_tiles(a, (16, 16))
    assert np.allclose(sp.tile_sparse_matmul(a, w, packed), a @ w, atol=1e-5)
    assert np.allclose(sp.tile_sparse_matmul(a, w, packed.tiles), a @ w, atol=1e-5)
    counts = sp.TileCounts(a.shape, (16, 16), sp.sparsity.tile_counts(a, 16))
    assert np.allclose(sp.tile_sparse_matmul(a, w, counts), a @ w, atol=1e-5)
    with pytest.raises(sp.InputError, match="TileList, TileCounts, CompactTiles or None"):
        sp.tile_sparse_matmul(a, w, [(1, 2)])
    with pytest.raises(sp.InputError, match=r"do not fit a \(64, 64\) matrix"):
        sp.TileCounts(a.shape, (16, 16), np.zeros((3, 4), np.int32))


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "workload: {kind: graph-challenge}",
            "kind 'graph-challenge' is not one of graph_challenge, conv_layers; did you mean 'graph_challenge'?",
        ),
        ("workload: {network: generated:1024}\nbackend: gpu-merge", "'gpu-merge' is not one of auto, reference"),
        ("workload: {network: generated:1024}\nbackend: gpu-merge", "did you mean 'gpu-merged'?"),
        ("workload: {network: generated:1024}\nmonitor: fussed", "did you mean 'fused'?"),
    ],
)
def test_misspelt_values_get_a_did_you_mean(tmp_path, text, message):
    path = tmp_path / "x.yaml"
    path.write_text(f"name: x\n{text}\n")
    with pytest.raises(ConfigError) as info:
        load_experiment(path)
    assert message in str(info.value)


def test_an_unknown_field_lists_each_known_field_once(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text("name: x\nworkload: {network: generated:1024, zzzzzz: 3}\n")
    with pytest.raises(ConfigError) as info:
        load_experiment(path)
    listed = str(info.value).split("expected one of: ", 1)[1].split(", ")
    assert "layers" in listed and len(listed) == len(set(listed))
