"""The analytical cost model: predict each trace record's time on a described GPU.

For a kernel record (terms in microseconds; see ``sim/README.md`` for the derivation)::

    predicted = launch + max(compute, memory) + (1 - hidden) x min(compute, memory)
    hidden    = overlap x (1 - 1 / co-resident blocks per SM)   (overlap, for a kernel that prefetches)
    memory    = (bytes_read + bytes_written) / (DRAM bandwidth x memory_efficiency), or for a
                memory-bound family with a fitted ``bytes_in_flight_kib`` (Little's law, :func:`dram_time_us`)
                bytes / (DRAM bandwidth x streaming_efficiency) + memory latency x max(1, bytes / in flight)
                (+ memory latency x the round trips a block of a row-block kernel waits, :func:`row_block_rounds`)
    compute   = waves x ((MACs + weight_load_cost x weight loads) per work item / rate per work item
                         + fused_layers x (step_overhead + shared_step x share of SMs busy)
                         + wave_overhead)
              + fused_layers x cold_layer x cold waves   (a later launch's first wave waits on DRAM
                                             for each layer's loads; later waves find them in L2
                                             unless the launch's reuse distance outgrows it: :func:`cold_waves`)
    rate per work item = SM rate x min(1, resident warps / saturating_warps) / co-resident blocks
    waves     = ceil(blocks / (SMs x co-resident blocks per SM))   (a "balanced" record, whose blocks
                are work items spread evenly: at least 1, not rounded up)

A cuBLAS record that names the kernel cuBLAS ran (its variant: :mod:`spartan_py.costmodel.library_gemm`)
is priced by that kernel's tiles once its family has a fit of that instance.

The rate per work item is the SM's peak on the unit the kernel is bound by (shared-memory
operand loads for ``gpu.gc_layer``, FP32/TF32/BF16 pipes for GEMMs) times
``compute_efficiency``, shared by the blocks resident on the SM. Occupancy comes from the
block's threads and shared memory against the SM's limits, and from the residency the
kernel was launched with (``resident_blocks_per_sm``: registers limit it); a block that needs more shared
memory than the machine allows cannot run (NaN, with the reason in ``note``). Copies cost
``launch + bytes / (link bandwidth x memory_efficiency)``; a host sync costs the machine's
sync latency. A block that loads its tile, computes and stores in turn hides nothing of
its own memory time; co-resident blocks hide each other's, up to ``overlap`` (fitted, from
1: our kernels run one block per SM, so their traces hardly constrain it). A block that
loads its next step while it computes this one (a family that ``prefetches``: the tensor-core
tile GEMMs) hides ``overlap`` of its memory time even alone on its SM; a library's
launch, whose records carry no geometry (cuBLAS, cuSPARSE: they pick their own tiling and run
many blocks per SM), hides ``overlap`` of it, which its fit decides. ``launch``, the
two efficiencies, ``step_overhead``, ``shared_step`` (a layer's staging through L2, which
the busy SMs share), ``wave_overhead`` (a block's fixed start and finish, on the chip: its rows
in and out of a launch), ``weight_load_cost`` and ``saturating_warps`` (an SM
with fewer resident warps issues too few instructions to reach the rate: blocks of one
warp, as the tile GEMM's 16-row instances) are fitted per kernel family and machine, and
per compiled instance for the layer kernels (:mod:`spartan_py.costmodel.calibrate`);
uncalibrated families use the datasheet latency and :data:`DEFAULT_EFFICIENCY`, and are marked ``calibrated = False``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from spartan_py.costmodel.families import (
    FAMILIES,
    FUSED_MONITOR_SHARE,
    GC_LAYER,
    KernelFamily,
    calibration_key,
    named_algorithm,
    record_instances,
)
from spartan_py.costmodel.hosts import load_host
from spartan_py.costmodel.library_gemm import ALGORITHM_INSTANCE, algorithm_terms
from spartan_py.costmodel.machine import FamilyCalibration, Machine, Variant, apply_variant
from spartan_py.costmodel.memory_terms import cold_waves, dram_time_us, row_block_rounds, rows_read_bytes

DEFAULT_EFFICIENCY = {"compute": 0.5, "memory": 0.8}

PREDICTION_COLUMNS = (
    "predicted_us",
    "launch_us",
    "compute_us",
    "memory_us",
    "waves",
    "blocks_per_sm",
    "bound",
    "calibrated",
    "note",
)


def family_of(kernel: str) -> KernelFamily | None:
    """The family of a kernel name, or None when the model does not cover it."""
    return FAMILIES.get(kernel)


def family_parameters(machine: Machine, kernel: str, instance: str = "") -> tuple[FamilyCalibration, bool]:
    """(parameters, calibrated?) of a kernel family (or of one compiled instance of it, when
    the machine has that instance's own fit) on a machine."""
    fitted = machine.calibration.get(calibration_key(kernel, instance)) if instance else None
    fitted = fitted or machine.calibration.get(kernel)
    if fitted is not None:
        return fitted, True
    default = FamilyCalibration(
        launch_us=machine.specs.launch_latency_us,
        compute_efficiency=DEFAULT_EFFICIENCY["compute"],
        memory_efficiency=DEFAULT_EFFICIENCY["memory"],
        source="uncalibrated defaults",
    )
    return default, False


def calibrated_apart(machine: Machine, kernel: str, instance: str) -> bool:
    """Whether ``machine`` holds a fit of ``kernel``'s ``instance`` of its own."""
    return bool(instance) and calibration_key(kernel, instance) in machine.calibration


GUESSED_KINDS = ("family-wide fallback", "default")
"""The calibration kinds (see :func:`calibration_kind`) whose parameters were never fitted to what they price."""


def calibration_kind(machine: Machine, kernel: str, instance: str = "") -> str:
    """How a prediction of ``kernel`` (``instance``) on ``machine`` had its parameters: "fitted" on
    this machine's runs; "carried over" from another machine's fit; "family-wide fallback" (the
    family's fit standing in for a compiled instance with none of its own); "default" (the
    uncalibrated defaults); "none" (a kernel the model does not describe)."""
    if family_of(kernel) is None:
        return "none"
    own = machine.calibration.get(calibration_key(kernel, instance)) if instance else None
    params = own or machine.calibration.get(kernel)
    if params is None:
        return "default"
    if instance and own is None and any(key.startswith(f"{kernel}/") for key in machine.calibration):
        return "family-wide fallback"  # other instances have fits of their own; this one has not
    return "fitted" if params.records > 0 else "carried over"


def unit_rate_per_sm(machine: Machine, family: KernelFamily) -> float:
    """Peak multiply-adds per second of one SM on the family's unit (NaN if the machine lacks it)."""
    specs = machine.specs
    if family.unit == "smem":
        return specs.shared_memory_bytes_per_clock_per_sm * specs.boost_clock_mhz * 1e6 / family.bytes_per_mac
    tflops = {"fp32": specs.fp32_tflops, "tf32": specs.tf32_tflops, "bf16": specs.bf16_tflops}.get(family.unit)
    return np.nan if tflops is None else tflops * 1e12 / 2 / specs.sm_count


def apply_variant_to_records(frame: pd.DataFrame, variant: Variant | None) -> pd.DataFrame:
    """Records as they would be under the variant: no monitor traffic, other tile heights
    (of the Graph Challenge layer kernel, whose work item is a tile of activation rows; a
    dense-layer GEMM's block shape is the library's or the tile list's, not the variant's)."""
    if variant is None:
        return frame
    frame = frame.copy()
    if variant.hardware_monitor:
        frame["bytes_written"] -= frame["monitor_bytes"]
        frame["monitor_bytes"] = 0
    if variant.block_rows:
        tiled = (frame["kernel"] == GC_LAYER) & (frame["blocks"] > 0) & (frame["block_rows"] > 0)
        old_rows = frame.loc[tiled, "block_rows"].astype(float)
        old_blocks = frame.loc[tiled, "blocks"].astype(float)
        new_blocks = np.ceil(frame.loc[tiled, "rows_in"] / variant.block_rows)
        scale = (new_blocks * variant.block_rows) / (old_blocks * old_rows)
        frame.loc[tiled, "executed_macs"] = np.round(frame.loc[tiled, "executed_macs"] * scale).astype(np.int64)
        # each tile loads every weight of a layer it computes
        loads = frame.loc[tiled, "weight_loads"] * new_blocks / old_blocks
        frame.loc[tiled, "weight_loads"] = np.round(loads).astype(np.int64)
        # the block holds the tile it was built for, which a launch of few rows fills only in
        # part: its shared memory is a tile row (outputs and 32 zero padding columns) a row
        row_bytes = (frame.loc[tiled, "cols"].astype(np.int64) + 32) * 4
        frame.loc[tiled, "block_shared_bytes"] = (row_bytes * variant.block_rows).astype(np.int64)
        frame.loc[tiled, "blocks"] = new_blocks.astype(np.int64)
        frame.loc[tiled, "block_rows"] = variant.block_rows
    return frame


def _predict_kernels(
    rows: pd.DataFrame, machine: Machine, family: KernelFamily, params: FamilyCalibration, by_algorithm: bool = False
) -> dict:
    specs = machine.specs
    n = len(rows)
    launch = np.full(n, params.launch_us)
    memory = dram_time_us(machine, params, (rows["bytes_read"] + rows["bytes_written"]).to_numpy(float))
    blocks = rows["blocks"].to_numpy(float)
    executed = rows["executed_macs"].to_numpy(float)
    note = np.full(n, "", dtype=object)
    rate = unit_rate_per_sm(machine, family) * params.compute_efficiency / 1e6  # MACs per microsecond per SM
    if family.unit == "memory":
        compute, waves, per_sm, hidden = np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n)
        if family.row_block_threads and params.bytes_in_flight_kib <= 0 and specs.memory_latency_ns is not None:
            # the bytes at the share of the datasheet bandwidth a large copy reaches, and each
            # block's round trips (not a share of the bytes in flight: the blocks hold them)
            moved_bytes = (rows["bytes_read"] + rows["bytes_written"]).to_numpy(float)
            streaming = specs.memory_bandwidth_gb_s * 1e3 * (specs.streaming_efficiency or 1.0)
            rounds = row_block_rounds(machine, family, params, rows)
            memory = moved_bytes / (streaming * params.memory_efficiency) + rounds * specs.memory_latency_ns / 1e3
    else:
        shared = rows["block_shared_bytes"].to_numpy(float)
        threads = np.maximum(rows["block_threads"].to_numpy(float), 1)
        by_threads = np.floor(specs.max_threads_per_sm / threads)
        by_shared = np.where(shared > 0, np.floor(specs.shared_memory_per_sm_kib * 1024 / (shared + 1024)), np.inf)
        occupancy = np.minimum(np.minimum(by_threads, by_shared), specs.max_blocks_per_sm)
        launched = rows["resident_blocks_per_sm"].to_numpy(float)  # as launched: registers limit it too
        if family.register_bound_threads_per_sm:  # records that name none: the launch bound's
            bound = np.floor(family.register_bound_threads_per_sm / threads)
            launched = np.where(launched > 0, launched, bound)
        occupancy = np.where(launched > 0, np.minimum(occupancy, launched), occupancy)
        geometry = blocks > 0
        per_sm = np.where(geometry, np.maximum(np.minimum(occupancy, np.ceil(blocks / specs.sm_count)), 1), 0)
        waves = blocks / (specs.sm_count * np.maximum(per_sm, 1))
        # a balanced launch spreads its work items evenly over the resident blocks: no last partial wave
        balanced = (
            rows["variant"].fillna("").astype(str).str.startswith("balanced").to_numpy()
            if "variant" in rows
            else np.zeros(n, bool)
        )
        waves = np.where(geometry, np.where(balanced, np.maximum(waves, 1), np.ceil(waves)), 0)
        # a partial wave moves its bytes at the share of bandwidth its resident blocks get
        resident = np.minimum(blocks, specs.sm_count * np.maximum(per_sm, 1))
        memory = np.where(geometry, memory * waves * resident / np.maximum(blocks, 1), memory)
        # weights loaded: counted by the kernel (compacted tiles load all of a layer's for the
        # rows they keep), else one per block_rows multiply-adds (a work item reuses each)
        counted = rows["weight_loads"].to_numpy(float)
        loads = np.where(counted > 0, counted, executed / np.maximum(rows["block_rows"].to_numpy(float), 1))
        work = executed + params.weight_load_cost * loads
        warps = np.ceil(threads / 32) * np.maximum(per_sm, 1)
        fill = np.minimum(1.0, warps / params.saturating_warps) if params.saturating_warps > 0 else np.ones(n)
        per_item = np.where(geometry, work / np.maximum(blocks, 1) / (rate * fill / np.maximum(per_sm, 1)), 0)
        busy = resident / (specs.sm_count * np.maximum(per_sm, 1))  # share of the SMs staging at once
        step = params.step_overhead_us + params.shared_step_us * busy
        layers = rows["fused_layers"].to_numpy(float)
        steps = layers * step + params.wave_overhead_us
        cold = layers * params.cold_layer_us
        if params.cold_layer_us > 0:
            cold = cold * cold_waves(rows, waves, specs)
        compute = np.where(geometry, waves * (per_item + steps) + cold, executed / (rate * specs.sm_count))
        too_big = shared > specs.shared_memory_per_block_kib * 1024
        note[too_big] = f"needs more shared memory per block than the {specs.shared_memory_per_block_kib:g} KiB allowed"
        if np.isnan(rate):
            note[:] = f"{machine.name} has no {family.unit} unit"
        bad = too_big | np.isnan(np.full(n, rate))
        compute = np.where(bad, np.nan, compute)
        # a library's launch (no geometry: cuBLAS, cuSPARSE) runs many blocks per SM
        alone = geometry & (not family.prefetches)  # nothing of a block's own memory time hides
        hidden = params.overlap * np.where(alone, 1 - 1 / np.maximum(per_sm, 1), 1.0)
        if by_algorithm:  # the kernel cuBLAS ran, from the record's algorithm
            algos = [named_algorithm(v) for v in rows["variant"]]
            terms = algorithm_terms(rows, algos, specs.sm_count, specs.l2_cache_mib * 2**20)
            waves = terms["waves"]
            compute = np.where(bad, np.nan, waves * terms["unit_macs"] / rate)
            memory = dram_time_us(machine, params, terms["moved_bytes"])
    body = np.maximum(compute, memory) + (1 - hidden) * np.minimum(compute, memory)
    predicted = launch + body
    bound = np.where(compute >= memory, "compute", "memory")
    bound = np.where(launch > body, "latency", bound)
    return {
        "predicted_us": predicted,
        "launch_us": launch,
        "compute_us": compute,
        "memory_us": memory,
        "waves": waves,
        "blocks_per_sm": per_sm,
        "bound": bound,
        "note": note,
    }


def host_shift_us(machine: Machine, host: str | None = None) -> tuple[float, float]:
    """(per launch, per host synchronisation) microseconds that running on ``host`` (default
    the machine's ``host``) adds to the machine's fitted costs, which include the latencies of
    its ``calibration_host``; (0, 0) when either is not named or they are the same host."""
    target = host or machine.host
    if target is None or machine.calibration_host is None or target == machine.calibration_host:
        return 0.0, 0.0
    there, fitted = load_host(target), load_host(machine.calibration_host)
    return there.launch_us - fitted.launch_us, there.sync_us - fitted.sync_us


def host_added_us(family: KernelFamily, shift: tuple[float, float], host_syncs: np.ndarray) -> np.ndarray:
    """What another host adds to each record of ``family`` (``shift``: :func:`host_shift_us`):
    a host synchronisation record, the round trips it counts (``host_syncs``); any other, the
    launch latency once and the round trip of each synchronisation its work holds."""
    if family.unit == "sync":
        return host_syncs * shift[1]
    return np.full(len(host_syncs), shift[0] + family.host_syncs * shift[1])


def _predict_family(
    rows: pd.DataFrame,
    machine: Machine,
    kernel: str,
    variant: Variant | None,
    instance: str = "",
    shift: tuple[float, float] = (0.0, 0.0),
) -> dict:
    family = family_of(kernel)
    n = len(rows)
    empty = {
        "predicted_us": np.full(n, np.nan),
        "launch_us": np.full(n, np.nan),
        "compute_us": np.full(n, np.nan),
        "memory_us": np.full(n, np.nan),
        "waves": np.zeros(n),
        "blocks_per_sm": np.zeros(n),
        "bound": np.full(n, "", dtype=object),
        "calibrated": np.zeros(n, bool),
    }
    if family is None:
        return {**empty, "note": np.full(n, f"no cost model for kernel {kernel}", dtype=object)}
    params, calibrated = family_parameters(machine, kernel, instance)
    result = {**empty, "calibrated": np.full(n, calibrated), "note": np.full(n, "", dtype=object)}
    if family.monitor_pass and variant is not None and variant.hardware_monitor:
        zero = np.zeros(n)
        return {
            **result,
            "predicted_us": zero,
            "launch_us": zero,
            "compute_us": zero,
            "memory_us": zero,
            "bound": np.full(n, "none", dtype=object),
            "note": np.full(n, "hardware monitor", dtype=object),
        }
    specs = machine.specs
    if family.unit == "link":
        transfer = rows["bytes_read"].to_numpy(float) / (specs.pcie_gb_s * 1e3 * params.memory_efficiency)
        launch = np.full(n, params.launch_us)
        return {
            **result,
            "predicted_us": launch + transfer,
            "launch_us": launch,
            "compute_us": np.zeros(n),
            "memory_us": transfer,
            "bound": np.full(n, "link", dtype=object),
        }
    syncs = rows["host_syncs"].to_numpy(float) if "host_syncs" in rows else np.zeros(n)
    added = host_added_us(family, shift, syncs)  # another host's latencies than the fit's
    if family.unit == "sync":
        per_sync = params.launch_us if calibrated else specs.sync_latency_us
        latency = syncs * per_sync + added
        return {
            **result,
            "predicted_us": latency,
            "launch_us": latency,
            "compute_us": np.zeros(n),
            "memory_us": np.zeros(n),
            "bound": np.full(n, "latency", dtype=object),
        }
    # a library GEMM's records that name their algorithm are priced by it once they have a fit of their own
    by_algorithm = (
        family.library_gemm and instance == ALGORITHM_INSTANCE and calibrated_apart(machine, kernel, instance)
    )
    predicted = _predict_kernels(rows, machine, family, params, by_algorithm)
    predicted["launch_us"] = predicted["launch_us"] + added
    predicted["predicted_us"] = predicted["predicted_us"] + added
    return {**result, **predicted}


def predict(
    trace: pd.DataFrame, machine: Machine, variant: Variant | None = None, host: str | None = None
) -> pd.DataFrame:
    """The trace with the model's prediction and its terms as extra columns.

    Rows the model does not cover (CPU kernels, baselines without counts) get NaN and a
    ``note`` saying why. ``variant`` applies a what-if change (see ``sim/variants.yaml``);
    ``host`` names the host (``sim/hosts/``) to assume instead of the machine's own
    (:func:`host_shift_us`); the ``host`` column says which was assumed.
    """
    machine = apply_variant(machine, variant)
    shift = host_shift_us(machine, host)
    frame = apply_variant_to_records(trace, variant).reset_index(drop=True)
    added = "rows_read_bytes" not in frame  # a caller predicting the same records often passes it
    if added:
        frame["rows_read_bytes"] = rows_read_bytes(frame)
    columns = {name: np.empty(len(frame), dtype=object) for name in PREDICTION_COLUMNS}
    kinds = np.full(len(frame), "none", dtype=object)
    instances = record_instances(frame)
    for (kernel, instance), rows in frame.groupby(
        [frame["kernel"], pd.Series(instances, index=frame.index)], sort=False
    ):
        values = _predict_family(rows, machine, kernel, variant, instance, shift)
        for name in PREDICTION_COLUMNS:
            columns[name][rows.index.to_numpy()] = values[name]
        kinds[rows.index.to_numpy()] = calibration_kind(machine, kernel, instance)
        if variant is not None and variant.hardware_monitor and kernel in FUSED_MONITOR_SHARE:
            fused = rows.index[(rows["monitor_mode"] == "fused").to_numpy()].to_numpy()
            columns["predicted_us"][fused] = columns["predicted_us"][fused] * (1 - FUSED_MONITOR_SHARE[kernel])
            columns["note"][fused] = "hardware monitor: the fused monitor's measured share removed"
    out = frame.drop(columns="rows_read_bytes") if added else frame.copy()
    out["calibration"] = kinds.astype(str)
    for name in PREDICTION_COLUMNS:
        out[name] = columns[name]
    numeric = ["predicted_us", "launch_us", "compute_us", "memory_us", "waves", "blocks_per_sm"]
    out[numeric] = out[numeric].astype(float)
    out["calibrated"] = out["calibrated"].astype(bool)
    out["bound"] = out["bound"].astype(str)
    out["note"] = out["note"].astype(str)
    out["machine"] = machine.name + (f"+{variant.name}" if variant is not None else "")
    out["host"] = host or machine.host or ""
    return out


def run_totals(predicted: pd.DataFrame, kernels: tuple[str, ...] | None = None) -> pd.DataFrame:
    """Per run: measured and predicted microseconds summed over the records that have both.

    ``kernels`` limits the sums (e.g. to the launches an engine's ``seconds`` covers).
    """
    frame = predicted[predicted["predicted_us"].notna() & predicted["measured_us"].notna()]
    if kernels is not None:
        frame = frame[frame["kernel"].isin(kernels)]
    grouped = frame.groupby("run", sort=False)
    totals = pd.DataFrame(
        {
            "records": grouped.size(),
            "measured_us": grouped["measured_us"].sum(),
            "predicted_us": grouped["predicted_us"].sum(),
        }
    )
    totals["error_pct"] = 100 * (totals["predicted_us"] - totals["measured_us"]) / totals["measured_us"]
    return totals.reset_index()
