"""Parameters a reviewer believes (issue 73, items 2 and 3): which parameters a family frees,
shared or per instance; the committed fit's counts, none at a bound, enough records each; the
row-block kernels' latency, which faster DRAM does not speed up."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from spartan_py.costmodel.families import COMPACT, GC_MERGED, dense_gemm, tile_gemm
from spartan_py.costmodel.machine import FamilyCalibration, load_machine
from spartan_py.costmodel.model import predict
from spartan_py.costmodel.parameter_table import TABLE_PATH, parameter_table
from spartan_py.costmodel.parameters import (
    MIN_RECORDS_PER_PARAMETER,
    count_parameters,
    near_bound,
    owned,
    roles,
)

ROOT = Path(__file__).resolve().parents[1]


def test_the_docs_quote_the_fits_counts():
    committed = (ROOT / TABLE_PATH).read_text()
    assert committed == parameter_table(), "stale: run python -m spartan_py.costmodel.parameter_table"
    assert '--8<-- "docs/snippets/parameter-counts.md"' in (ROOT / "docs" / "cost-model.md").read_text()


def test_the_h100_fit_has_no_parameter_at_a_bound_and_five_records_each():
    counts = count_parameters(load_machine("h100-sxm"))
    assert counts.near_bound == 0
    assert counts.min_family_records_per_parameter >= MIN_RECORDS_PER_PARAMETER
    assert counts.min_entry_records_per_parameter >= MIN_RECORDS_PER_PARAMETER
    assert counts.free < 200  # the fit before shared parameters freed 339


def test_every_h100_entry_says_what_it_frees_and_shares():
    """Each entry of the committed fit names its free parameters; an instance's others are its
    family's values, the same in every instance of it."""
    machine = load_machine("h100-sxm")
    for key, params in machine.calibration.items():
        if "/" not in key:
            continue
        family = machine.calibration[key.split("/", 1)[0]]
        assert params.free_parameters or params.shared_parameters, key
        for name in params.shared_parameters:
            assert getattr(params, name) == getattr(family, name), (key, name)


def _records(**columns) -> pd.DataFrame:
    return pd.DataFrame({"blocks": [0, 0], "fused_layers": [1, 1], **columns})


def test_roles_follow_what_the_records_can_tell():
    library = roles(dense_gemm("fp32"), _records())
    assert library is not None and not {"wave_overhead_us", "saturating_warps", "step_overhead_us"} & set(library.own)
    one_layer = roles(tile_gemm("fp32"), _records(blocks=[10, 20]))
    assert (
        one_layer is not None and "wave_overhead_us" in one_layer.shared and "step_overhead_us" not in one_layer.shared
    )
    layered = roles(GC_MERGED, _records(blocks=[10, 20], fused_layers=[1, 8]))
    assert layered is not None and "shared_step_us" in layered.shared and "step_overhead_us" in layered.own
    assert layered.own[0] == "compute_efficiency"
    assert owned(layered, 4) == () and owned(layered, 9) == ("compute_efficiency",)
    assert owned(layered, 25) == ("compute_efficiency", "wave_overhead_us", "weight_load_cost")
    compaction = roles(COMPACT, _records())
    assert compaction is not None and not compaction.shared and "block_round_trips" in compaction.own
    assert near_bound("launch_us", 0.0) and near_bound("compute_efficiency", 0.9995) and not near_bound("overlap", 0.5)


def _row_move(rows: int, width: int) -> dict:
    """A row compaction's expansion record: ``rows`` live rows of ``width`` floats scattered
    into a zeroed matrix of as many rows."""
    return dict(
        run="r",
        layer=0,
        kernel=COMPACT,
        variant="expand_rows",
        rows_in=rows,
        rows_out=rows,
        bytes_read=4 * rows * width,
        bytes_written=8 * rows * width,
    )


def test_narrow_rows_are_latency_bound_and_gain_little_from_faster_dram():
    """A block per row (``move_rows``): a million rows of 64 floats wait their blocks' round
    trips, which the H200's DRAM does not shorten; 50000 rows of 2304 floats move their bytes,
    which it does. The speed-up follows from the datasheets, not from a fitted constant."""
    params = FamilyCalibration(
        launch_us=6.0,
        compute_efficiency=1.0,
        memory_efficiency=1.0,
        block_round_trips=3.0,
        row_round_trips=1.0,
        source="test",
    )
    h100, h200 = (load_machine(name) for name in ("h100-sxm", "h200-sxm"))
    h100 = h100.model_copy(update={"calibration": {COMPACT: params}})
    h200 = h200.model_copy(update={"calibration": {COMPACT: params}})
    frame = pd.DataFrame([_row_move(1_000_000, 64), _row_move(50_000, 2304)])
    for column in ("cols", "blocks", "executed_macs", "fused_layers", "block_threads", "block_shared_bytes"):
        frame[column] = 0
    narrow, wide = (predict(frame, h100)["predicted_us"] / predict(frame, h200)["predicted_us"]).tolist()
    datasheet = h200.specs.memory_bandwidth_gb_s / h100.specs.memory_bandwidth_gb_s
    assert narrow < 1.15
    assert wide == pytest.approx(datasheet, rel=0.06)


def test_a_later_merged_launch_pays_its_layers_cold_once_a_launch_while_l2_keeps_them():
    """``cold_layer_us``: a later merged launch's first wave waits on DRAM for each layer it
    reads unstaged (``benchmarks/results/ncu-merged-later-h100.json``); later waves find the
    layers in L2 while the launch's reuse distance (its layers and a wave's rows) fits a half of
    it, and wait on DRAM again where it does not (the 65536-neuron network's 32 layers, 49 MB,
    with a wave's rows: the sixth drawn set's H100 launches of 7 waves, 13-14% slow when priced once).
    Only the later launches' instances free the term, and the H100's fitted value of the
    256-column instance is what ~22-25 dependent round trips a layer at DRAM rather than L2
    latency (~0.2-0.3 us more each) come to."""
    from spartan_py.costmodel.memory_terms import cold_waves
    from spartan_py.costmodel.parameters import reads_layers_cold
    from spartan_py.trace import read_trace

    assert reads_layers_cold("R16S8T1024xW256") and reads_layers_cold("R1T1024xW16384:unmerged")
    assert not reads_layers_cold("R16xW256") and not reads_layers_cold("C1xW64") and not reads_layers_cold("P16xW256")
    layered = roles(GC_MERGED, _records(blocks=[10, 20], fused_layers=[1, 8]))
    assert layered is not None and "cold_layer_us" in owned(layered, 32, "R16S8T1024xW256")
    assert "cold_layer_us" not in owned(layered, 200, "R16xW256")
    h100 = load_machine("h100-sxm")

    def saved_us(row: pd.DataFrame, blocks: list[int], key: str) -> list[float]:
        frame = pd.concat([row.assign(blocks=b) for b in blocks], ignore_index=True)
        warm_fit = h100.calibration[key].model_copy(update={"cold_layer_us": 0})
        warm = h100.model_copy(update={"calibration": {**h100.calibration, key: warm_fit}})
        return (predict(frame, h100)["predicted_us"] - predict(frame, warm)["predicted_us"]).tolist()

    fifth = read_trace(ROOT / "benchmarks/results/fidelity/drawn-a0959e4-h100.trace.csv.gz")
    small = fifth[fifth["variant"].str.startswith("R16S8T1024xW256") & (fifth["blocks"] == 33)].iloc[[0]]
    key = "gpu.gc_merged/R16S8T1024xW256"
    cold = h100.calibration[key].cold_layer_us
    assert 2.0 < cold < 10.0
    layers = float(small["fused_layers"].iloc[0])
    assert saved_us(small, [33, 1020], key) == pytest.approx([layers * cold, layers * cold])

    sixth = read_trace(ROOT / "benchmarks/results/fidelity/drawn-7e917c5-h100.trace.csv.gz")
    wide = sixth[
        sixth["variant"].str.startswith("R4S2T1024xW4096-") & (sixth["blocks"] == 831) & (sixth["fused_layers"] == 32)
    ].iloc[[0]]
    key = "gpu.gc_merged/R4S2T1024xW4096"
    cold = h100.calibration[key].cold_layer_us
    assert cold > 0
    one_wave, seven_waves = saved_us(wide, [95, 831], key)
    assert one_wave == pytest.approx(32 * cold)
    assert seven_waves == pytest.approx(7 * 32 * cold)
    assert cold_waves(wide, np.array([7.0]), h100.specs.model_copy(update={"l2_cache_mib": 1e6})).tolist() == [1.0]
    # its 16-layer launch (25 MB of layers, 8 MB of a wave's rows a half) outgrows a half of the
    # L2, which every SM's reads fill, not the whole 50 MiB
    sixteen = sixth[sixth["variant"].str.startswith("R4S2T1024xW4096-") & (sixth["blocks"] == 834)].iloc[[0]]
    assert cold_waves(sixteen, np.array([7.0]), h100.specs).tolist() == [7.0]
    assert cold_waves(sixteen, np.array([7.0]), h100.specs.model_copy(update={"l2_partitions": None})).tolist() == [1.0]


def test_a_merged_launch_reads_rows_as_wide_as_the_launch_before_wrote_them():
    """The layers' bytes of a later merged launch are what it reads beyond its rows, and its rows
    are as wide as the launch before it in the run wrote them, not as those it writes: a 16384-
    neuron network's launch of layers 7-10 reads rows twice as wide as it writes; taken as its
    own, its 0.28 MiB of layers would read as 17 MiB and tip the L2 at more rows."""
    from spartan_py.costmodel.memory_terms import rows_read_bytes
    from spartan_py.trace import read_trace

    trace = read_trace(ROOT / "benchmarks/results/fidelity/calibrate-instances-h100.trace.csv.gz")
    merged = trace[trace["kernel"] == GC_MERGED].reset_index(drop=True)
    read = rows_read_bytes(merged)
    launch = merged["variant"].str.startswith("R8S4T1024xW1024-layers7-10") & merged["run"].str.contains(
        "generated:16384"
    )
    row = merged[launch].iloc[0]
    layers = (row["bytes_read"] - read[launch].iloc[0]) / 2**20
    own = (row["bytes_read"] - row["rows_in"] * (row["bytes_written"] - row["monitor_bytes"]) / row["rows_out"]) / 2**20
    assert layers == pytest.approx(0.277, abs=0.01)
    assert own > 10
    first = merged.groupby("run")["layer"].transform("min") == merged["layer"]
    assert read[first].isna().all()  # a run's first launch has none before it
    assert rows_read_bytes(pd.DataFrame({"kernel": [GC_MERGED], "rows_in": [3]})).isna().all()  # no run, no layer
    assert "rows_read_bytes" not in predict(merged.head(3), load_machine("h100-sxm"))  # a helper, not an output
