"""``spartan maps reprice``: a committed table's dense GEMMs priced again on the CPU."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from spartan_py.cli import main as spartan
from spartan_py.errors import InputError
from spartan_py.sparsity.policy import KernelPolicy
from spartan_py.trained_maps.reprice import dense_gemm_price_us, read_gemms, reprice_dense_steps, table_machine
from spartan_py.workloads.conv.operands import predicted_us

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "benchmarks" / "results" / "spartan-table-maps-h100"


def _rows() -> pd.DataFrame:
    shapes = [(4096, 576, 64), (4096, 64, 576), (1024, 2304, 256)]
    rows = []
    for precision in ("fp32", "tf32"):
        for m, k, n in shapes:
            rows.append(
                dict(network="vgg16", training_point="late", precision=precision, M=m, K=k, N=n, dense_us=100.0)
            )
    return pd.DataFrame(rows)


def test_each_step_sums_its_gemms_prices_at_their_own_precision():
    steps = reprice_dense_steps(_rows(), "h100-sxm").set_index("precision")
    for precision in ("fp32", "tf32"):
        expected = sum(
            dense_gemm_price_us(m, k, n, precision, "h100-sxm") for m, k, n in _rows()[["M", "K", "N"]].values[:3]
        )
        assert steps.loc[precision, "model_ms"] == pytest.approx(expected / 1e3)
        assert steps.loc[precision, "measured_ms"] == pytest.approx(0.3)
        assert steps.loc[precision, "error"] == pytest.approx(expected / 300.0 - 1)
    assert steps.loc["tf32", "model_ms"] < steps.loc["fp32", "model_ms"]  # TF32's tensor cores priced as such
    assert steps["table_model_ms"].isna().all()  # a frame without the run's own prices says so


@pytest.mark.parametrize("precision", ["fp32", "tf32", "fp32x3"])
def test_a_gemm_is_priced_as_the_training_step_prices_its_dense_candidate(precision):
    # the step's rows price the policy's dense records (workloads.conv.training); reprice must stay that record
    policy = KernelPolicy("h100-sxm", precision=precision, kernels=("dense", "tile_sparse"))
    for m, k, n in [(100352, 256, 2304), (6272, 4608, 512), (2304, 100352, 256)]:
        records = policy.records("dense", m, k, n, nnz=m * k // 3, tiles_active=7, live_rows=m // 2)
        assert dense_gemm_price_us(m, k, n, precision, "h100-sxm") == pytest.approx(predicted_us(records, "h100-sxm"))


def test_another_machine_prices_the_same_rows_apart():
    h100 = reprice_dense_steps(_rows(), "h100-sxm")["model_ms"]
    h200 = reprice_dense_steps(_rows(), "h200-sxm")["model_ms"]
    assert (h200 != h100).any()


def test_a_frame_without_its_shapes_is_refused_by_name(tmp_path):
    with pytest.raises(InputError, match=r"columns K of"):
        reprice_dense_steps(_rows().drop(columns=["K"]), "h100-sxm", tmp_path / "gemms.csv")
    with pytest.raises(InputError, match="gemms.csv"):
        read_gemms(tmp_path)
    with pytest.raises(InputError, match="no such file"):
        read_gemms(tmp_path / "gemms.csv")


def test_a_folder_without_its_table_asks_for_the_machine(tmp_path, capsys):
    _rows().to_csv(tmp_path / "gemms.csv", index=False)
    assert table_machine(tmp_path) is None
    assert spartan(["maps", "reprice", str(tmp_path)]) != 0
    assert "--machine" in capsys.readouterr().err
    assert spartan(["maps", "reprice", str(tmp_path), "--machine", "h200-sxm"]) == 0
    assert "priced on h200-sxm now" in capsys.readouterr().out


def test_the_committed_table_reprices_from_the_command_line(capsys):
    assert table_machine(COMMITTED) == "h100-sxm"  # the machine its run priced on, the default
    assert table_machine(COMMITTED / "gemms.csv.gz") == "h100-sxm"  # named by its file too
    assert spartan(["maps", "reprice", str(COMMITTED)]) == 0
    out = capsys.readouterr().out
    assert "priced on h100-sxm now" in out
    steps = [line for line in out.splitlines() if line.startswith("  ")]
    gemms, _ = read_gemms(COMMITTED)
    assert len(steps) == len(gemms.groupby(["network", "training_point", "precision"]))
    assert any(line.startswith("  vgg16 late tf32: measured") for line in steps)
