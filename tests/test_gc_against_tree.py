"""The by-turns comparison of two trees (benchmarks/gc_against_tree.py): its turns, its summary
and its failures."""

from pathlib import Path

import pytest

from benchmarks import gc_against_tree as bench


def _round(gpu_ms: float, merged_ms: float, truth: bool = True) -> dict:
    return {"gpu": {"median_ms": gpu_ms, "truth": truth}, "gpu-merged": {"median_ms": merged_ms, "truth": truth}}


def test_change_is_the_median_over_rounds_against_the_bar():
    rounds = {
        "baseline": [_round(1.00, 0.40), _round(1.10, 0.41), _round(1.02, 0.39)],
        "this": [_round(1.01, 0.43), _round(1.03, 0.44), _round(0.90, 0.42)],
    }
    engines = bench.summarise(rounds, 3)
    assert engines["gpu"]["change_pct"] == pytest.approx(100 * (1.01 / 1.02 - 1))
    assert engines["gpu"]["within_bar"]
    assert engines["gpu-merged"]["change_pct"] == pytest.approx(100 * (0.43 / 0.40 - 1))
    assert not engines["gpu-merged"]["within_bar"]


def test_a_wrong_category_fails_the_bar_whatever_the_time():
    rounds = {"baseline": [_round(1.0, 0.4)], "this": [_round(1.0, 0.4, truth=False)]}
    assert not any(e["within_bar"] for e in bench.summarise(rounds, 1).values())


def test_a_missing_round_fails_the_bar_and_none_gives_no_figure():
    short = {"baseline": [_round(1.0, 0.4), _round(1.0, 0.4)], "this": [_round(1.0, 0.4)]}
    engines = bench.summarise(short, 2)
    assert engines["gpu"]["change_pct"] == pytest.approx(0.0)
    assert not engines["gpu"]["every_round_ran"] and not engines["gpu"]["within_bar"]
    engines = bench.summarise({"baseline": [], "this": [_round(1.0, 0.4)]}, 1)
    assert engines["gpu"]["change_pct"] is None and not engines["gpu"]["truth_every_round"]


def test_trees_take_turns_and_a_wrong_package_is_a_failure(tmp_path):
    trees = {"baseline": tmp_path / "old", "this": tmp_path / "new"}
    order = []

    def run(tree: Path) -> dict:
        order.append(tree.name)
        module = tree / "spartan_py" / "__init__.py"
        if len(order) == 3:  # the third run imports the other tree's package
            module = trees["baseline"] / "spartan_py" / "__init__.py"
        return {"module": str(module), **_round(1.0, 0.4)}

    results, failures = bench.take_rounds(trees, 3, run)
    assert order == ["old", "new", "new", "old", "old", "new"]
    assert failures == [{"round": 1, "tree": "this", "error": failures[0]["error"]}]
    assert "not the tree's spartan_py" in failures[0]["error"]
    assert [len(results["baseline"]), len(results["this"])] == [3, 2]


def test_a_failing_worker_is_recorded_not_raised(tmp_path):
    result = bench.run_round(tmp_path, tmp_path / "no-data", repeats=1, timeout_s=60)
    assert "error" in result and "exit" in result["error"]


def test_a_baseline_without_the_package_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        bench.main(["--baseline", str(tmp_path), "--baseline-commit", "x"])
    assert "spartan_py/__init__.py" in capsys.readouterr().err


def test_result_pages_headlines_name_what_was_refitted_and_the_bar():
    """The results page's lines for this session's kinds of file: a calibration of every family
    says so (its ``families_refitted`` is the string "all"), a tree comparison shows its bar."""
    import json

    from spartan_py.report.results_headlines import headlines
    from spartan_py.result_files import read_result
    from tests.conftest import ROOT

    results = ROOT / "benchmarks" / "results"
    fit = read_result(results / "fidelity" / "h100-calibration-20261207-115935.json.gz")
    assert fit["families_refitted"] == "all" and headlines(fit)[0].startswith("Refitted: every family;")
    turns = json.loads((results / "gc_against_tree-20261207-054747.json").read_text())
    assert any(line.endswith("| yes | yes |") for line in headlines(turns))
