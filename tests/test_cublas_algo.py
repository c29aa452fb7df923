"""cuBLAS's algorithm in the records: the variant's form, nothing invented where it cannot be
asked, and on a GPU the same choice cuBLASLt's own log reports for the legacy call."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import replace

import pandas as pd
import pytest

from spartan_py.costmodel.families import dense_gemm, instance_of
from spartan_py.costmodel.library_gemm import ALGORITHM_INSTANCE, CublasAlgo
from spartan_py.sparsity.cublas_algo import heuristic_algo, with_algorithms
from spartan_py.trace import TraceRecord, to_frame


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
    assert instance_of(dense_gemm("tf32"), algo.variant + "/weight_grad") == ALGORITHM_INSTANCE  # with a role
    assert instance_of(dense_gemm("tf32"), "3xtf32") == ""  # fp32x3's products keep the family's fit
    assert CublasAlgo.from_variant("balanced-64x32") is None
    assert CublasAlgo.from_variant("") is None


def test_tile_ids_read_as_the_callers_output_tile():
    """cuBLASLt's 256x64 (id 21) is 256 along C^T's rows, our columns: 64 output rows x 256
    columns; the undefined tile and ids past the table give no algorithm."""
    from spartan_py.sparsity.cublas_algo import output_tile

    assert output_tile(21) == (64, 256) and output_tile(24) == (128, 256) and output_tile(20) == (128, 128)
    assert output_tile(0) is None and output_tile(10_000) is None


def test_records_keep_their_variant_where_no_gpu_answers(monkeypatch):
    """No GPU (or no cuBLASLt): no algorithm is made up; other kernels and named variants untouched."""
    monkeypatch.setattr("spartan_py.sparsity.cublas_algo._library", lambda: None)
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
    timed = replace(gemm_record(8232, 512, 4608), measured_us=12.5)
    (named,) = with_algorithms([timed])
    algo = CublasAlgo.from_variant(named.variant)
    assert algo is not None and algo.waves > 0
    assert replace(named, variant="") == timed  # a description added, nothing else changed


def priced(records: list[TraceRecord], machine) -> pd.DataFrame:
    from spartan_py.costmodel import predict
    from spartan_py.trace import to_frame

    return predict(to_frame(records), machine)


def test_a_record_that_names_its_algorithm_is_priced_by_its_tiles():
    """With a fit of its own, an algorithm-naming record costs its padded tiles spread over the
    SMs and A re-read per column of tiles once A outgrows L2; without one it keeps the family's."""
    from spartan_py.costmodel import load_machine
    from spartan_py.costmodel.families import calibration_key

    h100 = load_machine("h100-sxm")
    key = calibration_key(dense_gemm("tf32"), ALGORITHM_INSTANCE)
    assert key in h100.calibration  # fitted (sim/h100-sxm.yaml), and carried to the H200
    assert key in load_machine("h200-sxm").calibration
    one_column = CublasAlgo(128, 512, 1, "1x1x1", 1.0).variant
    four_columns = CublasAlgo(128, 128, 1, "4x1x1", 1.0).variant
    small, large = 2048, 65536  # A: 37.7 MB (fits the 50 MB L2) and 1.2 GB (does not)
    rows = [gemm_record(m, 512, 4608, variant=v) for m in (small, large) for v in (one_column, four_columns)]
    out = priced(rows, h100)
    memory = out["memory_us"].to_numpy()
    assert memory[1] == pytest.approx(memory[0], rel=0.05)  # A read once either way while it fits
    assert memory[3] > 3 * memory[2]  # then once per column of tiles: four against one
    padded = priced([gemm_record(130, 512, 4608, variant=CublasAlgo(256, 512, 1, "1x1x1", 1.0).variant)], h100)
    exact = priced([gemm_record(256, 512, 4608, variant=CublasAlgo(256, 512, 1, "1x1x1", 1.0).variant)], h100)
    assert padded["compute_us"].iloc[0] == pytest.approx(exact["compute_us"].iloc[0])  # a tile's rows are paid whole
    without = h100.model_copy(update={"calibration": {k: v for k, v in h100.calibration.items() if k != key}})
    fallback = priced(rows[:1], without)["predicted_us"].iloc[0]  # the family's own form and fit
    unnamed = priced([gemm_record(small, 512, 4608)], h100)["predicted_us"].iloc[0]
    assert fallback == pytest.approx(unnamed)


def test_instances_alone_keep_the_family_fit():
    """calibrate(family_wide=False): the instance is fitted, the family's own fit stays as it was."""
    from spartan_py.costmodel import calibrate, load_machine
    from spartan_py.costmodel.families import calibration_key

    h100 = load_machine("h100-sxm")
    kernel = dense_gemm("tf32")
    records = [
        replace(gemm_record(m, n, k, variant=CublasAlgo(128, 128, 1, "2x1x1", 1.0).variant), run=f"r{m}")
        for m in (3000, 9000, 30000, 90000)
        for n, k in ((256, 2304), (512, 4608), (128, 1152), (384, 3456))  # 16: 5 records a parameter it frees
    ]
    frame = to_frame(records)
    frame["measured_us"] = priced(records, h100)["predicted_us"].to_numpy() * 1.2
    fitted = calibrate(frame, h100, source="synthetic", families=(kernel,), instances={"lt"}, family_wide=False)
    assert fitted.calibration[kernel] == h100.calibration[kernel]
    own = fitted.calibration[calibration_key(kernel, ALGORITHM_INSTANCE)]
    assert own != h100.calibration[calibration_key(kernel, ALGORITHM_INSTANCE)] and own.fit_median_error_pct < 2


def test_old_traces_take_their_algorithm_from_a_table():
    from spartan_py.costmodel.algorithm_table import with_algorithm_table

    frame = to_frame([gemm_record(784, 512, 4608), gemm_record(784, 512, 4608, variant="3xtf32"), gemm_record(5, 5, 5)])
    table = {(784, 512, 4608, "tf32", False): "lt-64x128-s1-c1x4x1-w0.85"}
    out = with_algorithm_table(frame, table)
    assert out["variant"].tolist() == ["lt-64x128-s1-c1x4x1-w0.85", "3xtf32", ""]
