"""Spartan's hardware as a what-if (issue 77 item 3): the parts of a step's price add up to
it, skipping per element at density d approaches 1/d on a large GEMM, a dense map costs what
the dense step does, and ``spartan maps whatif`` prints, writes and draws it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from spartan_py.cli import main
from spartan_py.costmodel.spartan_hardware import (
    PARTS,
    DensePrices,
    SpartanAssumptions,
    price_layers,
)
from spartan_py.errors import InputError
from spartan_py.sparsity.granularity import ConvGeometry, layer_granularity
from spartan_py.trained_maps.job import SCHEMA
from spartan_py.trained_maps.whatif import measured_dense


def _maps(shape, density, seed):
    rng = np.random.default_rng(seed)
    return np.where(rng.random(shape) < density, rng.random(shape) + 0.1, 0).astype(np.float32)


def _layer(name, geometry: ConvGeometry, density: float, batch: int = 2, seed: int = 0) -> dict:
    g = geometry
    x = _maps((batch, g.in_channels, g.height, g.width), density, seed)
    dy = _maps((batch, g.out_channels, g.out_height, g.out_width), density, seed + 1) != 0
    return {
        "name": name, "C": g.in_channels, "H": g.height, "W": g.width, "out_channels": g.out_channels,
        "kernel": g.kernel, "stride": g.stride, "pad": g.pad, "out_h": g.out_height, "out_w": g.out_width,
        "relu_input": True, "gemms": layer_granularity(x, dy, g),
    }  # fmt: skip


SMALL = ConvGeometry(16, 32, 12, 12, kernel=3, pad=1)
WIDE = ConvGeometry(256, 1024, 28, 28, kernel=1)  # 1 x 1: im2col is the maps, its density d


@pytest.fixture(scope="module")
def prices():
    return DensePrices("h100-sxm")


@pytest.mark.parametrize("grain", ["16x8", "4x4", "row", "element"])
@pytest.mark.parametrize("choose_dense", [True, False])
def test_each_assumptions_part_adds_up_to_the_prediction(prices, grain, choose_dense):
    layers = [_layer("a", SMALL, 0.3), _layer("b", SMALL, 0.05, seed=3)]
    assumptions = SpartanAssumptions(
        grain=grain, skip_efficiency=0.8, compaction_hidden=0.25, monitor_us=1.5, choose_dense=choose_dense
    )
    price = price_layers(layers, assumptions, prices, batch=8)
    assert price.gemms == 6 and price.parts["dense"] == pytest.approx(price.dense_us)
    assert sum(price.parts[p] for p in PARTS) == pytest.approx(price.predicted_us, rel=1e-12)
    assert price.parts["skipped"] <= 0 <= price.parts["skip_missed"] <= -price.parts["skipped"]
    if not choose_dense:
        assert price.sparse_gemms == 6 and price.parts["monitor"] == pytest.approx(6 * 1.5)
    else:
        assert price.predicted_us <= price.dense_us


@pytest.mark.parametrize("density", [0.5, 0.2])
def test_per_element_at_density_d_the_gemm_speedup_approaches_one_over_d(prices, density):
    layer = _layer("wide", WIDE, density)
    layer["gemms"] = {"forward": layer["gemms"]["forward"]}
    live = layer["gemms"]["forward"]["orders"]["chw"]["element"]["live_fraction_of_work"]
    assert live == pytest.approx(density, abs=0.01)
    free = SpartanAssumptions(grain="element", compaction_free=True)
    small, ideal = (price_layers([layer], free, prices, batch=b) for b in (64, 1024))
    assert ideal.speedup == pytest.approx(ideal.ideal_speedup)
    # only the launch is not skipped: the larger the GEMM, the nearer 1/d
    assert small.speedup < ideal.speedup <= 1 / live and ideal.speedup > 0.97 / live
    engine = price_layers([layer], SpartanAssumptions(grain="element"), prices, batch=1024)
    assert 1 < engine.speedup < ideal.speedup and engine.parts["compaction"] > 0
    coarse = price_layers([layer], SpartanAssumptions(grain="64x32", compaction_free=True), prices, batch=1024)
    assert coarse.speedup < 1.05  # random maps leave no 64 x 32 tile dead


def test_a_dense_map_costs_the_dense_step(prices):
    layers = [_layer("dense", ConvGeometry(16, 32, 12, 12, kernel=3), 1.0)]  # no padding: no zero at all
    for grain in ("64x32", "8x8", "element"):
        price = price_layers(layers, SpartanAssumptions(grain=grain), prices, batch=4)
        assert price.speedup == 1.0 and price.predicted_us == price.dense_us and price.sparse_gemms == 0
        assert all(price.parts[p] == 0 for p in PARTS[1:])
        forced = price_layers(layers, SpartanAssumptions(grain=grain, choose_dense=False), prices, batch=4)
        assert forced.parts["skipped"] == 0 and forced.predicted_us == pytest.approx(
            forced.dense_us + forced.parts["compaction"]
        )


def test_the_assumptions_are_checked():
    with pytest.raises(ValueError, match="grain '3x3'"):
        SpartanAssumptions(grain="3x3")
    with pytest.raises(ValueError):
        SpartanAssumptions(grain="8x8", skip_efficiency=0)
    with pytest.raises(ValueError):
        SpartanAssumptions(grain="8x8", surprise=1)


def _summary(tmp_path) -> str:
    layers = [_layer("conv3", SMALL, 0.4), _layer("conv4", SMALL, 0.2, seed=5)]
    thinned = [_layer("conv3", SMALL, 0.1), _layer("conv4", SMALL, 0.1, seed=5)]
    point = {"step": 3, "test_accuracy": 0.5, "layers": layers, "sensitivity": {"0.9": {"layers": thinned}}}
    summary = {"schema": SCHEMA, "networks": {"alexnet": {"points": {"late": point}}}}
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(summary))
    return str(path)


def test_the_whatif_command_prints_writes_and_draws(tmp_path, capsys):
    path = _summary(tmp_path)
    out = tmp_path / "whatif"
    argv = ["maps", "whatif", path, "--grain", "16x8,4x4,element", "--batch", "4", "--out", str(out)]
    assert main([*argv, "--compaction-hidden", "0.5"]) == 0
    text = capsys.readouterr().out
    assert "| alexnet | late | captured | 16x8 |" in text and "| 3.4 |" in text
    record = json.loads((out / "whatif.json").read_text())
    assert record["assumptions"]["compaction_hidden"] == 0.5 and record["assumptions"]["monitor_us"] == 0
    assert set(record["rates"]) == {"gpu.dense_gemm.fp32", "gpu.compact/rows"}
    assert all(v.startswith(("fitted", "carried over")) for v in record["rates"].values())
    rows = record["rows"]
    assert len(rows) == 6 and {r["maps"] for r in rows} == {"captured", "zeroed to 90%"}
    for row in rows:
        assert sum(row[f"{p}_ms"] for p in PARTS) == pytest.approx(row["spartan_ms"])
    by = {(r["maps"], r["grain"]): r["ideal_speedup"] for r in rows}
    assert by[("captured", "element")] > by[("captured", "16x8")]  # finer grains skip more
    assert by[("zeroed to 90%", "element")] > by[("captured", "element")]
    assert (out / "whatif-alexnet.png").stat().st_size > 0
    assert {r["dense_measured"] for r in rows} == {"0/6"}

    # measured dense times (a training-step run's gemms.csv) replace the model's where given
    csv = tmp_path / "gemms.csv"
    csv.write_text(
        "layer,gemm,precision,batch,dense_us\nalexnet/conv3,forward,fp32,4,900\nalexnet/conv3,forward,fp32,4,1100\n"
        "alexnet/conv3,forward,tf32,4,5\nalexnet/conv3,forward,fp32,8,5\n"
    )
    assert main([*argv, "--measured", str(csv)]) == 0
    again = json.loads((out / "whatif.json").read_text())["rows"]
    for old, new in zip(rows, again, strict=True):
        assert new["dense_measured"] == "1/6" and new["dense_ms"] > old["dense_ms"] + 0.9
        assert sum(new[f"{p}_ms"] for p in PARTS) == pytest.approx(new["spartan_ms"])
    with pytest.raises(InputError, match="no rows at precision tf32 and batch 2"):
        measured_dense(csv, "tf32", 2)
    assert main(["maps", "whatif", path, "--grain", "3x3", "--out", str(out)]) == 2
    assert "grain '3x3'" in capsys.readouterr().err


def test_a_summary_without_a_requested_grain_is_refused(tmp_path, capsys):
    """A summary that lacks a grain asked for (e.g. captured before it existed): exit 2 naming it."""
    path = Path(_summary(tmp_path))
    summary = json.loads(path.read_text())
    for record in summary["networks"].values():
        for data in record["points"].values():
            for layer in data["layers"]:
                for entry in layer["gemms"].values():
                    for by_grain in entry["orders"].values():
                        by_grain.pop("8x8", None)
    path.write_text(json.dumps(summary))
    assert main(["maps", "whatif", str(path), "--grain", "8x8", "--out", str(tmp_path / "w")]) == 2
    assert "no 8x8" in capsys.readouterr().err
