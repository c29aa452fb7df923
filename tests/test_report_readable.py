"""A report read at a glance (issue 74, finding 7): measured and simulated never on one axis,
no tick labels over each other, no hidden series, no one-dot figure, no NaN, None or empty
cell, each heading once, trust said once per machine, no empty table file."""

from __future__ import annotations

import itertools
import re

import pandas as pd
import pytest
import yaml

from spartan_py.report import figures, write_report
from spartan_py.report.tables import MISSING, html_table, markdown_table
from spartan_py.runner import load_experiment, run_experiment


def _label_boxes(figure) -> list[tuple[str, object]]:
    """(text, window extent) of every visible tick label, axis label and title, as drawn."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(figure)  # the figure as saved (closed figures keep no canvas of their own)
    canvas.draw()
    renderer = canvas.get_renderer()
    texts = []
    for axes in figure.axes:
        for axis in (axes.xaxis, axes.yaxis):
            low, high = sorted(axis.get_view_interval())
            texts += [t.label1 for t in axis.get_major_ticks() if low <= t.get_loc() <= high]  # the ones drawn
            texts.append(axis.label)
        texts.append(axes.title)
    return [(t.get_text(), t.get_window_extent(renderer)) for t in texts if t.get_visible() and t.get_text().strip()]


def overlapping_labels(figure) -> list[tuple[str, str]]:
    """Pairs of labels of ``figure`` whose boxes intersect (by more than a pixel each way)."""
    found = []
    for (a, box_a), (b, box_b) in itertools.combinations(_label_boxes(figure), 2):
        across = min(box_a.x1, box_b.x1) - max(box_a.x0, box_b.x0)
        down = min(box_a.y1, box_b.y1) - max(box_a.y0, box_b.y0)
        if across > 1 and down > 1:
            found.append((a, b))
    return found


@pytest.fixture
def drawn(monkeypatch) -> list:
    """The figures the report's figure functions make, kept after their PNG is written."""
    kept: list = []
    real = figures._png

    def keep(figure):
        png = real(figure)
        kept.append(figure)
        return png

    monkeypatch.setattr(figures, "_png", keep)
    return kept


def _rates(rates: list[float], simulated: list[bool]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "point": [f"p{i}" for i in range(len(rates))],
            "label": [f"backend=b{i}, mode={'simulated' if s else 'measured'}" for i, s in enumerate(simulated)],
            "backend": ["cpu" if not s else "gpu-twin" for s in simulated],
            "simulated": simulated,
            "edges_per_second": rates,
        }
    )


@pytest.mark.parametrize("rates", [[1.7e12, 7.1e13], [2.1e9, 2.4e9, 9e13, 1.1e14], [3e11, 3.2e11]])
def test_edge_rate_keeps_measured_and_simulated_apart_and_its_labels_clear(drawn, rates):
    simulated = [i % 2 == 1 for i in range(len(rates))] if len(rates) != 4 else [False, False, True, True]
    assert figures.edge_rate(_rates(rates, simulated), proxy_workload=True) is not None
    (figure,) = drawn
    titles = [axes.get_title() for axes in figure.axes]
    kinds = [{kind for kind in ("measured", "simulated", "published") if kind in title} for title in titles]
    assert all(len(k) == 1 for k in kinds) and {"measured", "simulated"} <= set().union(*kinds), titles
    assert not overlapping_labels(figure)


def test_equal_series_stay_visible_in_live_rows(drawn):
    layers = range(1, 121)
    rows = [max(2000, 60000 // (1 + layer)) for layer in layers]
    results = pd.DataFrame(
        [
            {"label": label, "layer": layer, "live_rows": live, "density": live / 60000}
            for label in ("backend=auto, mode=measured", "backend=gpu-twin, mode=simulated")
            for layer, live in zip(layers, rows)
        ]
    )
    assert figures.live_rows_by_layer(results) is not None
    (figure,) = drawn
    for axes in figure.axes:
        looks = {(line.get_linestyle(), line.get_marker()) for line in axes.lines}
        assert len(looks) == len(axes.lines) == 2  # the line drawn on top does not hide the other
    assert not overlapping_labels(figure)


def test_one_tile_height_is_a_table_not_a_dot():
    one = pd.DataFrame({"workload": ["1024x120"], "block_rows": [16], "utilization": [0.61]})
    assert figures.tile_utilization(one) is None
    two = pd.DataFrame({"workload": ["1024x120"] * 2, "block_rows": [16, 32], "utilization": [0.61, 0.5]})
    assert figures.tile_utilization(two) is not None


def test_tables_say_why_a_cell_is_empty():
    frame = pd.DataFrame({"a": [1.0, float("nan")], "b": [None, "x"], "c": ["", 2.5]})
    text = markdown_table(frame, {"a": "not run on a GPU"})
    assert "not run on a GPU" in text and text.count(MISSING) == 2 and "nan" not in text and "None" not in text
    page = html_table(frame)
    assert page.startswith("<div class='table-scroll'>") and "<td></td>" not in page and "nan" not in page


def test_the_quickstart_report_reads_at_a_glance(tmp_path):
    from spartan_py.config.yaml_marks import load_yaml
    from tests.conftest import ROOT
    from tests.test_experiments import small_copy

    data = small_copy(load_yaml(ROOT / "experiments" / "quickstart.yaml").data, gpu=False)
    data["workload"]["check_rows"] = 300
    path = tmp_path / "quickstart.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    experiment, points = load_experiment(path)
    out = tmp_path / "run"
    run_experiment(experiment, points, out)
    _, md_path = write_report(out)
    text = md_path.read_text()
    cells = [c.strip() for line in text.splitlines() if line.startswith("| ") for c in line.strip("|").split("|")]
    assert cells and not {"nan", "None", "", "NaN"} & set(cells)
    assert "not predicted: backend cpu records no GPU kernels to replay" in text  # the CPU point's what-if
    headings = re.findall(r"^## (.*)$", text, re.M)
    assert len(headings) == len(set(headings)), headings
    assert "Trust of each simulated machine" in headings
    from spartan_py.costmodel.simulate import trust

    said = [trust(machine) for machine in experiment.machines]
    for line in said:  # once per machine (in the trust table), not once per point and machine
        assert text.count(line) == sum(line in other for other in said), line
    for line in text.splitlines():
        if line.startswith("| "):
            assert line.count("|") - 1 <= 15, line[:80]  # no 23-column table: split
    assert all((out / name).stat().st_size > 1 for name in ("results.csv", "simulated.csv", "challenge.csv"))


def test_no_table_is_an_empty_file(tmp_path):
    """A run whose Graph Challenge points all failed: results.csv says why in one column, not one byte."""
    from tests.conftest import gpu_unavailable_reason

    if gpu_unavailable_reason() is None:
        pytest.skip("the gpu backend runs here: its points do not fail")
    path = tmp_path / "failing.yaml"
    path.write_text(
        "name: failing\nworkload: {network: generated:1024, layers: 2, inputs: generated:20}\nbackend: gpu\n"
    )
    experiment, points = load_experiment(path)
    summary = run_experiment(experiment, points, tmp_path / "run")
    assert summary.failed == 1
    table = pd.read_csv(tmp_path / "run" / "results.csv")
    assert list(table.columns) == ["reason"] and "finished" in table["reason"][0]
    assert sorted(p.name for p in (tmp_path / "run").glob("*.csv")) == ["results.csv"]
