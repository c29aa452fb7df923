"""The cost model: machine files, predictions, variants, calibration, simulated mode."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from spartan_py.api import infer, resolve_inputs, resolve_network
from spartan_py.config.validate import ConfigError
from spartan_py.costmodel import (
    calibrate,
    load_machine,
    load_variants,
    machine_names,
    predict,
    run_totals,
)
from spartan_py.costmodel.families import FAMILIES
from spartan_py.costmodel.machine import FamilyCalibration, sim_folder
from spartan_py.costmodel.model import unit_rate_per_sm
from spartan_py.costmodel.simulate import resolve_machine
from spartan_py.errors import InputError
from spartan_py.trace import read_trace, to_frame
from tests.conftest import ROOT

GOLDEN = ROOT / "tests" / "data"
SEED_PAPER_MACHINES = {"h100-sxm", "a100-sxm", "v100-sxm2", "a40", "t4", "rtx-a6000", "rtx-2080-ti"}


@pytest.fixture(scope="module")
def twin_trace() -> pd.DataFrame:
    network = resolve_network("generated:1024", 40)
    inputs = resolve_inputs("generated:2500", 1024)
    result = infer(network, inputs, backend="gpu-twin", run_id="t")
    return to_frame(result.trace)


def test_every_machine_loads_with_sources():
    assert SEED_PAPER_MACHINES <= set(machine_names())
    for name in machine_names():
        machine = load_machine(name)
        assert machine.name == name
        assert "gpu.gc_layer" in machine.calibration
        assert machine.calibration["gpu.gc_layer"].source
    h100 = load_machine("h100-sxm")
    assert h100.calibration["gpu.gc_layer"].records > 0  # fitted on measured traces
    assert load_machine("t4").calibration["gpu.gc_layer"].source.startswith("carried over from h100-sxm")


def test_machine_file_errors_name_line_and_field(tmp_path):
    text = (sim_folder() / "a40.yaml").read_text()
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        text.replace("  sm_count: 84", "  sm_cuont: 84").replace("  fp32_tflops: 37.4", "  fp32_tflops: fast")
    )
    with pytest.raises(ConfigError) as info:
        load_machine(bad)
    text = str(info.value)
    assert "unknown field `specs.sm_cuont`; did you mean `sm_count`?" in text
    assert "missing field `specs.sm_count`" in text
    assert "field `specs.fp32_tflops`" in text and "line " in text
    missing_source = tmp_path / "nosource.yaml"
    missing_source.write_text(
        "\n".join(
            line
            for line in (sim_folder() / "a40.yaml").read_text().splitlines()
            if not line.startswith("  l2_cache_mib: NVIDIA")
        )
    )
    with pytest.raises(ConfigError, match="specs without a source in `sources`: l2_cache_mib"):
        load_machine(missing_source)
    with pytest.raises(InputError, match="unknown machine 'h200'"):
        load_machine("h200")


def test_prediction_terms_and_sanity(twin_trace):
    h100 = load_machine("h100-sxm")
    out = predict(twin_trace, h100)
    launches = out[out["kernel"] == "gpu.gc_layer"]
    assert launches["predicted_us"].gt(0).all() and launches["calibrated"].all()
    expected = (
        launches["launch_us"]
        + np.maximum(launches["compute_us"], launches["memory_us"])
        + np.minimum(launches["compute_us"], launches["memory_us"])
    )  # one block per SM: nothing overlaps
    assert np.allclose(launches["predicted_us"], expected)
    assert (launches["waves"] >= 1).all()
    assert out.loc[out["kernel"] == "gpu.sync", "predicted_us"].iloc[0] == pytest.approx(h100.specs.sync_latency_us)
    # a faster machine of the same design is never slower; more rows never faster
    faster = h100.with_specs(
        memory_bandwidth_gb_s=2 * h100.specs.memory_bandwidth_gb_s, boost_clock_mhz=2 * h100.specs.boost_clock_mhz
    )
    assert (predict(twin_trace, faster)["predicted_us"] <= out["predicted_us"] + 1e-9).all()
    # the calibrated H100 is faster than the carried-over V100 on the same trace
    v100 = predict(twin_trace, load_machine("v100-sxm2"))
    assert v100.loc[v100["kernel"] == "gpu.gc_layer", "predicted_us"].sum() > launches["predicted_us"].sum()


def test_variants(twin_trace):
    h100 = load_machine("h100-sxm")
    variants = load_variants()
    base = predict(twin_trace, h100)
    monitor = predict(twin_trace, h100, variants["hw-monitor"])
    assert (monitor["bytes_written"] <= base["bytes_written"]).all()
    assert (monitor["monitor_bytes"] == 0).all() and (base["monitor_bytes"] > 0).any()
    assert (monitor["machine"] == "h100-sxm+hw-monitor").all()
    tile8 = predict(twin_trace, h100, variants["tile-8"])
    launches = tile8["kernel"] == "gpu.gc_layer"
    assert (tile8.loc[launches, "block_rows"] == 8).all()
    # more blocks than the base's tiles of 16; launches of few rows already ran smaller tiles
    wider = base.loc[launches, "block_rows"] >= 8
    assert (tile8.loc[launches, "blocks"][wider] >= base.loc[launches, "blocks"][wider]).all() and wider.any()
    t4 = predict(twin_trace, load_machine("t4"))
    assert t4.loc[t4["kernel"] == "gpu.gc_layer", "predicted_us"].isna().all()
    assert "shared memory" in t4.loc[t4["kernel"] == "gpu.gc_layer", "note"].iloc[0]
    t4_small = predict(twin_trace, load_machine("t4"), variants["tile-8"])
    assert t4_small.loc[t4_small["kernel"] == "gpu.gc_layer", "predicted_us"].gt(0).all()
    assert predict(twin_trace, h100, variants["hbm-2x"])["predicted_us"].sum() <= base["predicted_us"].sum()
    with pytest.raises(InputError, match="unknown variant"):
        resolve_machine("h100-sxm+warp-drive")


@pytest.mark.slow
def test_calibration_recovers_known_parameters(twin_trace):
    """Fit on times the model itself produced with known parameters: the fit finds them."""
    h100 = load_machine("h100-sxm")
    truth = FamilyCalibration(
        launch_us=3.0,
        compute_efficiency=0.4,
        memory_efficiency=0.6,
        step_overhead_us=1.5,
        weight_load_cost=2.0,
        source="test",
    )
    known = h100.model_copy(update={"calibration": {"gpu.gc_layer": truth}})
    frames = []
    for rows in (1000, 2500, 9000):  # several input sizes so that the terms separate
        scaled = twin_trace.copy()
        factor = rows / 2500
        for column in ("rows_in", "blocks", "executed_macs", "bytes_read", "bytes_written"):
            scaled[column] = (scaled[column] * factor).round().astype(np.int64)
        scaled["run"] = f"r{rows}"
        frames.append(scaled)
    trace = pd.concat(frames, ignore_index=True)
    trace = trace[trace["kernel"] == "gpu.gc_layer"].reset_index(drop=True)
    trace["measured_us"] = predict(trace, known)["predicted_us"]
    fitted = calibrate(trace, h100, source="synthetic").calibration["gpu.gc_layer"]
    assert fitted.fit_median_error_pct < 0.5
    assert predict(trace, h100.model_copy(update={"calibration": {"gpu.gc_layer": fitted}}))[
        "predicted_us"
    ].to_numpy() == pytest.approx(trace["measured_us"].to_numpy(), rel=0.01)
    totals = run_totals(predict(trace, known))
    assert np.allclose(totals["error_pct"], 0)


@pytest.mark.slow
def test_calibration_finds_saturating_warps_from_above():
    """A kernel of 8-warp blocks that runs slower with one block per SM than with several
    (saturating_warps 24): from the default start (4 warps) the residuals do not move with
    that parameter; the fit's second start finds it."""
    h100 = load_machine("h100-sxm")
    truth = FamilyCalibration(
        launch_us=5.0,
        compute_efficiency=0.3,
        memory_efficiency=0.5,
        step_overhead_us=2.0,
        saturating_warps=24.0,
        source="test",
    )
    known = h100.model_copy(update={"calibration": {"gpu.gc_merged": truth}})
    network = resolve_network("generated:1024", 40)
    frames = []
    for rows in (600, 2500, 9000):  # tails of one block per SM, heads of several
        result = infer(network, resolve_inputs(f"generated:{rows}", 1024), backend="gpu-merged-twin", run_id=f"r{rows}")
        frames.append(to_frame(result.trace))
    trace = pd.concat(frames, ignore_index=True)
    trace = trace[trace["kernel"] == "gpu.gc_merged"].reset_index(drop=True)
    assert set(predict(trace, known)["blocks_per_sm"]) >= {1.0, 2.0}
    trace["measured_us"] = predict(trace, known)["predicted_us"]
    fitted = calibrate(trace, h100, source="synthetic", families=("gpu.gc_merged",)).calibration["gpu.gc_merged"]
    assert fitted.fit_median_error_pct < 1.0
    assert fitted.saturating_warps > 8
    with pytest.raises(InputError, match="gpu.gc_layer"):
        calibrate(trace, h100, source="synthetic", families=("gpu.gc_layer",))


def test_block_start_and_shared_staging_terms():
    """``wave_overhead_us`` costs each wave once, whatever its layers; ``shared_step_us``
    costs each layer of a wave in proportion to the share of SMs busy (L2 staging they
    share): a launch that fills half the SMs pays half of it."""
    h100 = load_machine("h100-sxm")
    sms = h100.specs.sm_count
    base = dict(launch_us=0.0, compute_efficiency=1.0, memory_efficiency=1.0, source="test")
    rows = pd.DataFrame(
        {
            "kernel": "gpu.gc_merged",
            "variant": "",
            "rows_in": [sms * 16, sms * 8, sms * 64],
            "blocks": [sms, sms // 2, sms * 4],
            "block_rows": 16,
            "block_threads": 1024,
            "block_shared_bytes": 150_000,  # one block per SM
            "resident_blocks_per_sm": 1,
            "fused_layers": [4, 4, 1],
            "executed_macs": 0,
            "weight_loads": 0,
            "bytes_read": 0,
            "bytes_written": 0,
        }
    )

    def body(**terms):
        machine = h100.model_copy(update={"calibration": {"gpu.gc_merged": FamilyCalibration(**base, **terms)}})
        return predict(rows, machine)["predicted_us"].to_numpy()

    assert body(wave_overhead_us=7.0) == pytest.approx([7.0, 7.0, 28.0])  # 1, 1 and 4 waves
    assert body(shared_step_us=2.0) == pytest.approx([8.0, 4.0, 8.0])  # layers x 2 x share busy x waves
    with pytest.raises(ValueError):
        FamilyCalibration(**base, wave_overhead_us=-1.0)


def test_a_record_without_residency_takes_its_familys_launch_bound():
    """A merged-kernel block-tile record that names no residency (traces before session 46) is
    resident as many an SM as the kernel's launch bound holds by registers (4 blocks of 256
    threads), not the 6 its 36 KB of shared memory would allow; a record that names its
    residency, and a family without a bound, keep theirs."""
    h100 = load_machine("h100-sxm")
    sms = h100.specs.sm_count
    assert FAMILIES["gpu.gc_merged"].register_bound_threads_per_sm == 1024
    assert not FAMILIES["gpu.gc_layer"].register_bound_threads_per_sm
    rows = pd.DataFrame(
        {
            "kernel": ["gpu.gc_merged", "gpu.gc_merged", "gpu.gc_merged", "gpu.gc_layer"],
            "variant": "",
            "rows_in": sms * 24,
            "blocks": sms * 24,
            "block_rows": 1,
            "block_threads": [256, 256, 512, 256],
            "block_shared_bytes": 36_000,  # 6 blocks an SM by shared memory
            "resident_blocks_per_sm": [0, 6, 0, 0],
            "fused_layers": 1,
            "executed_macs": 0,
            "weight_loads": 0,
            "bytes_read": 0,
            "bytes_written": 0,
        }
    )
    params = FamilyCalibration(
        launch_us=0.0, compute_efficiency=1.0, memory_efficiency=1.0, wave_overhead_us=1.0, source="test"
    )
    machine = h100.model_copy(update={"calibration": {"gpu.gc_merged": params, "gpu.gc_layer": params}})
    waves = predict(rows, machine)["predicted_us"].to_numpy()  # one microsecond a wave
    assert waves == pytest.approx([6.0, 4.0, 12.0, 4.0])


def test_a_prefetching_kernel_hides_its_memory_time_alone_on_its_sm():
    """One block per SM: a layer kernel (load, compute, store in turn) pays compute plus
    memory; a TF32 tile GEMM, which loads its next step while it computes, pays the larger term
    and (1 - overlap) of the smaller."""
    h100 = load_machine("h100-sxm")
    sms = h100.specs.sm_count
    one_block = dict(
        variant="",
        rows_in=sms * 128,
        blocks=sms,
        block_rows=128,
        block_threads=256,
        block_shared_bytes=150_000,
        resident_blocks_per_sm=1,
        fused_layers=1,
        executed_macs=sms * 10**9,
        weight_loads=0,
        bytes_read=2 * 10**9,
        bytes_written=0,
    )
    rows = pd.DataFrame([{**one_block, "kernel": "gpu.gc_layer"}, {**one_block, "kernel": "gpu.tile_gemm.tf32"}])
    assert not FAMILIES["gpu.gc_layer"].prefetches and FAMILIES["gpu.tile_gemm.tf32"].prefetches
    params = FamilyCalibration(launch_us=0.0, compute_efficiency=1.0, memory_efficiency=1.0, overlap=0.75, source="t")
    machine = h100.model_copy(update={"calibration": {"gpu.gc_layer": params, "gpu.tile_gemm.tf32": params}})
    out = predict(rows, machine)
    compute, memory = out["compute_us"].to_numpy(), out["memory_us"].to_numpy()
    assert memory[0] == pytest.approx(memory[1]) and memory[0] > 0 and compute.min() > 0
    assert out["predicted_us"].iloc[0] == pytest.approx(compute[0] + memory[0])
    big, small = max(compute[1], memory[1]), min(compute[1], memory[1])
    assert out["predicted_us"].iloc[1] == pytest.approx(big + 0.25 * small)


def test_counted_weight_loads_replace_the_tile_rows_estimate():
    """Weight loads cost ``weight_load_cost`` multiply-adds each: executed / block_rows of
    them when not counted, the trace's count when it has one (a compacted tile loads all of a
    layer's weights for fewer rows)."""
    h100 = load_machine("h100-sxm")
    sms, rate = h100.specs.sm_count, unit_rate_per_sm(h100, FAMILIES["gpu.gc_layer"]) / 1e6
    executed = sms * 16 * 1024 * 32
    rows = pd.DataFrame(
        {
            "kernel": "gpu.gc_layer",
            "variant": "",
            "rows_in": sms * 16,
            "blocks": sms,
            "block_rows": 16,
            "block_threads": 1024,
            "block_shared_bytes": 150_000,
            "resident_blocks_per_sm": 1,
            "fused_layers": 1,
            "executed_macs": executed,
            "weight_loads": [0, executed // 16, executed // 4],
            "bytes_read": 0,
            "bytes_written": 0,
        }
    )
    base = dict(launch_us=0.0, compute_efficiency=1.0, memory_efficiency=1.0, source="test", weight_load_cost=2.0)
    machine = h100.model_copy(update={"calibration": {"gpu.gc_layer": FamilyCalibration(**base)}})
    got = predict(rows, machine)["predicted_us"].to_numpy()
    per_sm = executed / sms
    want = [per_sm * (1 + 2 / 16) / rate, per_sm * (1 + 2 / 16) / rate, per_sm * (1 + 2 / 4) / rate]
    assert got == pytest.approx(want)


def test_golden_replay():
    """A fixed trace on a fixed machine gives the recorded predictions (SCALE-Sim style)."""
    machine = load_machine(GOLDEN / "golden-machine.yaml")
    trace = read_trace(GOLDEN / "golden-trace.csv")
    expected = pd.read_csv(GOLDEN / "golden-predictions.csv", keep_default_na=False, na_values={"predicted_us": [""]})
    got = predict(trace, machine)
    assert got["predicted_us"].to_numpy() == pytest.approx(expected["predicted_us"].to_numpy(), rel=1e-9, nan_ok=True)
    assert list(got["bound"]) == list(expected["bound"])


def test_simulated_mode_marks_and_times():
    network = resolve_network("generated:1024", 30)
    inputs = resolve_inputs("generated:1500", 1024)
    result = infer(network, inputs, mode="simulated", machine="a100-sxm")
    assert result.simulated and result.machine == "a100-sxm" and result.backend == "gpu-twin"
    assert result.device == "simulated:a100-sxm"
    predicted = result.predicted_trace
    launches = predicted[predicted["kernel"] == "gpu.gc_layer"]
    assert result.seconds == pytest.approx(launches["predicted_us"].sum() / 1e6)
    assert predicted["measured_us"].isna().all()
    assert result.summary()["simulated"] is True
    measured = infer(network, inputs, backend="gpu-twin")
    assert np.array_equal(measured.categories, result.categories)
    with pytest.raises(InputError, match="no twin"):
        infer(network, inputs, backend="cpu", mode="simulated")
    with pytest.raises(InputError, match="cannot run this kernel configuration"):
        infer(network, inputs, mode="simulated", machine="t4")


def test_a_merged_row_holding_the_whole_layer_is_its_own_instance():
    from spartan_py.costmodel.families import UNMERGED, instance_of, record_instances

    assert instance_of("gpu.gc_merged", "R1xW4096-layers2-2", 65536) == "R1xW4096"  # merged columns
    assert instance_of("gpu.gc_merged", "R1xW4096-layers2-2", 4096) == "R1xW4096" + UNMERGED  # every neuron
    assert instance_of("gpu.gc_merged", "R1xW4096-layers2-2") == "R1xW4096"  # width not known
    assert instance_of("gpu.gc_layer", "R4xC4-layers1-4-uniform", 4096) == "R4xC4"
    # a training step's role names where the launch sat: row compaction of an input gradient is "rows"
    assert instance_of("gpu.compact", "rows/input_grad") == instance_of("gpu.compact", "rows") == "rows"
    records = pd.DataFrame(
        {"kernel": ["gpu.gc_merged", "gpu.gc_merged", "gpu.epilogue"], "variant": ["R1xW4096-a", "R1xW4096-b", "x"]}
    )
    assert record_instances(records.assign(cols=[4096, 65536, 4096])) == ["R1xW4096" + UNMERGED, "R1xW4096", ""]
    assert record_instances(records) == ["R1xW4096", "R1xW4096", ""]
    # the fitted H100 prices the two apart, and a trace without the width still replays
    h100 = load_machine("h100-sxm")
    assert "gpu.gc_merged/R1xW4096" + UNMERGED in h100.calibration
