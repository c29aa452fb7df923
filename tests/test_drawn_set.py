"""Drawn validation sets: seeded by the model's commit, inside the stated ranges, loadable."""

from __future__ import annotations

import pytest

from spartan_py.errors import InputError
from spartan_py.runner import load_experiment
from spartan_py.workloads.conv.layers import conv_layer
from spartan_py.workloads.drawn_set import (
    BATCH_RANGE,
    DENSITY_RANGE,
    GC_WIDTHS,
    LAYERS_RANGE,
    ROWS_RANGE,
    draw_set,
    seed_from_commit,
)

COMMIT = "2d322ff71021a8b3c4d5e6f708192a3b4c5d6e7f"


def test_the_seed_is_the_commit_s_hash():
    assert seed_from_commit(COMMIT) == int(COMMIT[:16], 16)
    assert seed_from_commit(COMMIT.upper() + "\n") == seed_from_commit(COMMIT)
    for bad in ("2d322ff", "not-a-commit-hash-at-all", ""):
        with pytest.raises(InputError, match="commit hash"):
            seed_from_commit(bad)


def test_a_draw_is_repeatable_and_another_seed_draws_another_set():
    one, again = draw_set(seed_from_commit(COMMIT)), draw_set(seed_from_commit(COMMIT))
    assert one.cases == again.cases and len(one.cases) == 48
    assert draw_set(seed_from_commit(COMMIT) + 1).cases != one.cases


def test_points_cover_the_stated_ranges():
    cases = draw_set(7, graph_challenge=200, conv=200).cases
    gc = [c for c in cases if "kind" not in c["workload"]]
    conv = [c for c in cases if c["workload"].get("kind") == "conv_layers"]
    assert len(gc) == len(conv) == 200
    families = {c["workload"]["network"].split(":")[0] for c in gc}
    widths = {int(c["workload"]["network"].split(":")[1]) for c in gc}
    assert families == {"generated", "generated-unmergeable"} and widths == set(GC_WIDTHS)
    assert {c["backend"] for c in gc} == {"gpu", "gpu-merged"}
    layers = [c["workload"]["layers"] for c in gc]
    rows = [int(c["workload"]["inputs"].split(":")[1]) for c in gc]
    assert LAYERS_RANGE[0] <= min(layers) < 120 and 1000 < max(layers) <= LAYERS_RANGE[1]  # log-uniform: both ends
    assert ROWS_RANGE[0] <= min(rows) < 10000 and 40000 < max(rows) <= ROWS_RANGE[1]
    batches = [c["workload"]["batch"] for c in conv]
    densities = [c["workload"]["density"] for c in conv]
    assert BATCH_RANGE[0] == min(batches) and max(batches) == BATCH_RANGE[1]
    assert DENSITY_RANGE[0] <= min(densities) < 0.05 and 0.5 < max(densities) <= DENSITY_RANGE[1]
    assert {c["precision"] for c in conv} == {"fp32", "tf32"}
    for case in conv:
        conv_layer(case["workload"]["layers"][0])  # a known layer


def test_the_experiment_file_loads_with_every_point(tmp_path):
    drawn = draw_set(seed_from_commit(COMMIT), commit=COMMIT[:12])
    path = tmp_path / "drawn.yaml"
    path.write_text(drawn.experiment_text("drawn"))
    assert f"seed {drawn.seed}, from commit {COMMIT[:12]}" in path.read_text()
    experiment, points = load_experiment(path)
    assert len(points) == 48 and experiment.machines == ["h100-sxm", "h200-sxm"]
    kinds = [p.experiment.workload.kind for p in points]
    assert kinds.count("graph_challenge") == 16 and kinds.count("conv_layers") == 32


def test_training_points_come_after_the_others_and_leave_them_unchanged(tmp_path):
    """Training-step points are drawn last: a draw with them starts with the draw without them
    (every committed set regenerates), and each is a training step of one known layer."""
    seed = seed_from_commit(COMMIT)
    plain, with_training = draw_set(seed), draw_set(seed, training=6, purpose="calibration")
    assert with_training.cases[:48] == plain.cases and len(with_training.cases) == 54
    added = with_training.cases[48:]
    assert {c["workload"]["step"] for c in added} == {"training"} and all("trace" not in c for c in added)
    for case in added:
        conv_layer(case["workload"]["layers"][0])
    small = draw_set(seed, graph_challenge=1, conv=1, training=2, purpose="calibration")
    path = tmp_path / "calibrate.yaml"
    path.write_text(small.experiment_text("calibrate"))
    points = load_experiment(path)[1]
    assert points[0].experiment.workload.kind == "graph_challenge"
    assert [p.experiment.workload.step for p in points[1:]] == ["forward", "training", "training"]
    with pytest.raises(InputError, match="at least one point"):
        draw_set(1, graph_challenge=0, conv=0, training=0)
    with pytest.raises(InputError, match="at least one point"):
        draw_set(1, training=-1)


def test_spartan_model_draw_writes_the_file_for_a_given_commit(tmp_path, capsys):
    from spartan_py.cli import main as spartan

    def main(words):
        return spartan(["model", "draw", *words])

    out = tmp_path / "set.yaml"
    assert main(["--commit", COMMIT, "--graph-challenge", "2", "--conv", "3", "--into", str(out)]) == 0
    assert "5 points" in capsys.readouterr().out
    assert len(load_experiment(out)[1]) == 5
    simulated = tmp_path / "set-simulated.yaml"
    assert (
        main(
            [
                "--commit",
                COMMIT,
                "--graph-challenge",
                "2",
                "--conv",
                "3",
                "--mode",
                "simulated",
                "--into",
                str(simulated),
            ]
        )
        == 0
    )
    points = load_experiment(simulated)[1]
    measured = load_experiment(out)[1]
    assert [p.values["workload"] for p in points] == [p.values["workload"] for p in measured]  # the same points
    assert {p.experiment.mode for p in points} == {"simulated"}
    with pytest.raises(InputError, match="at least one point"):
        draw_set(1, graph_challenge=0, conv=0)


def test_drawn_points_run_on_their_backend():
    """Every Graph Challenge point names a backend that runs its width: the rows kernel stops at
    16384 neurons, so a drawn 65536-neuron point is merged (the first draw of a550aca's seed gave
    four 65536-neuron `gpu` points that could only fail), and never unmergeable, whose merged rows
    do not fit a block."""
    from spartan_py.engines import runs_width
    from spartan_py.workloads.drawn_set import draw_set

    for seed in range(20):
        for case in draw_set(seed, graph_challenge=16, conv=0).cases:
            family, width = case["workload"]["network"].split(":")
            assert runs_width(case["backend"], int(width)), case
            # a merged row of an unmergeable 65536-neuron network does not fit a block (a550aca's set held two)
            assert (family, width, case["backend"]) != ("generated-unmergeable", "65536", "gpu-merged"), case


def test_a_calibration_draw_has_its_own_seed_and_says_what_it_is_for(tmp_path):
    from spartan_py.workloads.drawn_set import calibration_seed

    assert calibration_seed(COMMIT) != seed_from_commit(COMMIT)
    assert calibration_seed(COMMIT) == calibration_seed(COMMIT.upper())
    drawn = draw_set(calibration_seed(COMMIT), graph_challenge=2, conv=2, purpose="calibration")
    assert drawn.cases != draw_set(seed_from_commit(COMMIT), graph_challenge=2, conv=2).cases
    path = tmp_path / "calibrate.yaml"
    path.write_text(drawn.experiment_text("calibrate", machines=("h100-sxm",)))
    assert "fitted on" in path.read_text() and "nothing is tuned on" not in path.read_text()
    experiment, points = load_experiment(path)
    assert experiment.machines == ["h100-sxm"] and len(points) == 4
    with pytest.raises(InputError, match="validation, calibration"):
        draw_set(1, purpose="tuning")
