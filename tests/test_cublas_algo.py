"""cuBLAS's algorithm in the records: the variant's form, nothing invented where it cannot be
asked, and on a GPU the same choice cuBLASLt's own log reports for the legacy call."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from spartan_py.costmodel.families import dense_gemm
from spartan_py.sparsity.cublas_algo import CublasAlgo, heuristic_algo, with_algorithms
from spartan_py.trace import TraceRecord


def gemm_record(m: int, n: int, k: int, precision: str = "tf32", variant: str = "") -> TraceRecord:
    return TraceRecord(
        run="r",
        layer=1,
        kernel=dense_gemm(precision),
        variant=variant,
        rows_in=m,
        rows_out=m,
        cols=n,
        executed_macs=m * n * k,
        device="policy",
    )


def test_variant_round_trip_and_role_suffix():
    algo = CublasAlgo(tile_rows=64, tile_cols=256, splits=8, cluster="1x4x1", waves=0.93)
    assert algo.variant == "lt-64x256-s8-c1x4x1-w0.93"
    assert CublasAlgo.from_variant(algo.variant) == algo
    assert CublasAlgo.from_variant(algo.variant + "/weight_grad") == algo  # a training step's role
    assert CublasAlgo.from_variant("balanced-64x32") is None
    assert CublasAlgo.from_variant("") is None


def test_records_keep_their_variant_where_no_gpu_answers(monkeypatch):
    """No GPU (or no cuBLASLt): no algorithm is made up; other kernels and named variants untouched."""
    monkeypatch.setattr("spartan_py.sparsity.cublas_algo._library", lambda: None)
    heuristic_algo.cache_clear()
    records = [gemm_record(784, 512, 4608), gemm_record(784, 512, 4608, variant="3xtf32")]
    assert with_algorithms(records) == records


@pytest.mark.gpu
def test_heuristic_matches_cublaslt_log_of_the_legacy_call(tmp_path):
    """The ctypes query asks what cublasGemmEx asks: tile, split-K and cluster as cuBLASLt's
    log (CUBLASLT_LOG_LEVEL=5) names them for dense_matmul's call, shapes of three regimes."""
    shapes = [
        (490, 512, 4608, False),
        (2156, 512, 4608, False),
        (8232, 512, 4608, False),
        (44688, 512, 4608, False),
        (784, 512, 4608, False),
        (3136, 256, 2304, True),
    ]
    script = (
        "import json, sys, cupy\n"
        "from spartan_py.sparsity.tile_gemm import dense_matmul\n"
        "for m, n, k, t in json.loads(sys.argv[1]):\n"
        "    a = cupy.ones((k, m) if t else (m, k), cupy.float32); w = cupy.ones((k, n), cupy.float32)\n"
        "    dense_matmul(a, w, precision='tf32', transposed_a=t); cupy.cuda.Device().synchronize()\n"
    )
    log = tmp_path / "lt.log"
    env = dict(os.environ, CUBLASLT_LOG_LEVEL="5", CUBLASLT_LOG_FILE=str(log))
    subprocess.run([sys.executable, "-c", script, json.dumps(shapes)], env=env, check=True)
    logged = [line for line in log.read_text().splitlines() if "[Trace][cublasLtSSSMatmul]" in line]
    assert len(logged) == len(shapes)
    for (m, n, k, transposed), line in zip(shapes, logged, strict=True):
        tile = re.search(r"tile=MATMUL_TILE_(\d+)x(\d+)", line)
        splits = re.search(r"numSplitsK=(-?\d+)", line)
        cluster = re.search(r"clusterShape=CLUSTER_SHAPE_(\w+)\]", line)
        algo = heuristic_algo(m, n, k, "tf32", transposed)
        assert algo is not None and tile is not None
        assert (algo.tile_cols, algo.tile_rows) == (int(tile.group(1)), int(tile.group(2))), line
        assert algo.splits == (max(int(splits.group(1)), 1) if splits else 1), line
        if cluster is not None:
            assert algo.cluster == cluster.group(1), line


@pytest.mark.gpu
def test_records_name_the_algorithm_on_a_gpu():
    from dataclasses import replace

    heuristic_algo.cache_clear()
    timed = replace(gemm_record(8232, 512, 4608), measured_us=12.5)
    (named,) = with_algorithms([timed])
    algo = CublasAlgo.from_variant(named.variant)
    assert algo is not None and algo.waves > 0
    assert replace(named, variant="") == timed  # a description added, nothing else changed
