"""The by-turns comparison of two trees (benchmarks/gc_against_tree.py): its summary and its worker's failures."""

import pytest

from benchmarks import gc_against_tree as bench


def _round(gpu_ms: float, merged_ms: float, truth: bool = True) -> dict:
    return {"gpu": {"median_ms": gpu_ms, "truth": truth}, "gpu-merged": {"median_ms": merged_ms, "truth": truth}}


def test_change_is_the_median_over_rounds_against_the_bar():
    rounds = {
        "baseline": [_round(1.00, 0.40), _round(1.10, 0.41), _round(1.02, 0.39)],
        "this": [_round(1.01, 0.43), _round(1.03, 0.44), _round(0.90, 0.42)],
    }
    engines = bench.summarise(rounds)
    assert engines["gpu"]["change_pct"] == pytest.approx(100 * (1.01 / 1.02 - 1))
    assert engines["gpu"]["within_bar"]
    assert engines["gpu-merged"]["change_pct"] == pytest.approx(100 * (0.43 / 0.40 - 1))
    assert not engines["gpu-merged"]["within_bar"]


def test_a_wrong_category_fails_the_bar_whatever_the_time():
    rounds = {"baseline": [_round(1.0, 0.4)], "this": [_round(1.0, 0.4, truth=False)]}
    assert not any(e["within_bar"] for e in bench.summarise(rounds).values())


def test_no_round_of_a_tree_is_no_figure():
    engines = bench.summarise({"baseline": [], "this": [_round(1.0, 0.4)]})
    assert engines["gpu"]["change_pct"] is None and not engines["gpu"]["within_bar"]


def test_a_failing_worker_is_recorded_not_raised(tmp_path):
    result = bench.run_round(tmp_path, tmp_path / "no-data", repeats=1, timeout_s=60)
    assert "error" in result and "exit" in result["error"]


def test_a_baseline_without_the_package_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        bench.main(["--baseline", str(tmp_path), "--baseline-commit", "x"])
    assert "spartan_py/__init__.py" in capsys.readouterr().err
