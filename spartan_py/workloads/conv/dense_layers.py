"""One point of a ``conv_layers`` experiment: each convolution layer as an im2col GEMM over
generated post-ReLU maps (or maps a user saved: ``activations``), profiled by the sparsity
monitor, multiplied by cuBLAS (NumPy on the CPU), by the tile-sparse GEMM at the point's tile,
and by the kernel the policy picks.

Per layer: the maps (``feature_maps``) are turned into the GEMM operand ``A`` by im2col,
with ``K`` padded by zero columns to a multiple of the tile's columns; the monitored
epilogue writes ``A`` (ReLU is idempotent on it) and yields its profile; ``W`` is random.
Measured mode times every kernel (CUDA events after warm-up with an L2 flush on the GPU,
the host clock on the CPU; median of ``repeats``). Simulated mode computes on the CPU and
takes every time from the cost model of ``machines[0]`` (the kernels' trace records).
"""

from __future__ import annotations

import math
import platform
import time
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from spartan_py.costmodel.families import LIST_TILES
from spartan_py.costmodel.machine import DEFAULT_MACHINE
from spartan_py.engines import resolve_backend
from spartan_py.engines.shared.cuda import device_name
from spartan_py.errors import InputError
from spartan_py.sparsity import (
    KernelPolicy,
    SparsityMonitor,
    dense_matmul,
    tile_list,
    tile_sparse_matmul,
    tile_utilization,
)
from spartan_py.sparsity.candidates import tile_gemm_schedule
from spartan_py.sparsity.cublas_algo import with_algorithms
from spartan_py.sparsity.policy import Decision
from spartan_py.sparsity.tiles import counts_utilization, tile_counts
from spartan_py.timing import GpuTimer, difference_by_turns_cpu_us, difference_by_turns_us, time_cpu
from spartan_py.trace import TraceRecord
from spartan_py.workloads.conv.operands import (
    layer_operands,
    map_columns,
    predicted_us,
    relative_diff,
    with_own_times,
)
from spartan_py.workloads.conv.schema import ConvLayersWorkload
from spartan_py.workloads.conv.trace import every_kernel_plan, every_kernel_records, tile_operand
from spartan_py.workloads.conv.training import cudnn_baseline, run_training_layer, step_totals

if TYPE_CHECKING:
    from spartan_py.runner.schema import Experiment

#: Square tile sizes whose utilization every point reports (useful / executed MACs).
UTILIZATION_TILES = (8, 16, 32, 64)


def _device(backend: str):
    """(array module, device name) for a conv backend (``auto``: the GPU when there is one)."""
    if backend == "cpu" or (backend == "auto" and resolve_backend("auto") != "gpu"):
        return np, f"CPU ({platform.processor() or platform.machine()})"
    try:
        import cupy  # an optional dependency (CuPy), GPU paths only
    except ImportError as exc:
        raise InputError("backend gpu needs CuPy (pip install -e '.[gpu-cuda13]' or '.[gpu]')") from exc

    return cupy, device_name(cupy)


#: Seconds since the last timing after which the GPU counts as idle: the next timing warms it
#: up for the clock's whole ``warmup_ms`` first (the GPU idles while the host makes a layer's
#: generated maps, seconds); the host's work between two timings of a layer (its products,
#: checks and the cost model's prices: tens of milliseconds) does not count. Before, every
#: timing of a training step warmed up for 100 ms, about half a saved-maps step's time.
IDLE_SECONDS = 0.25


class _Clock:
    """Median microseconds of a piece of work: GPU events (warm-up, L2 flush) or the host clock.
    On the GPU a timing that follows another within :data:`IDLE_SECONDS` warms up with three
    calls only (the clocks are up); one after an idle spell for ``warmup_ms`` as well."""

    def __init__(self, xp, repeats: int, *, warmup_ms: float = 20):
        self._last = -math.inf
        if xp is np:
            self._time = lambda work: time_cpu(work, repeats=repeats, warmup=1)["median_us"]
            self._difference = lambda work, baseline: difference_by_turns_cpu_us(work, baseline, rounds=repeats)
        else:
            timer = GpuTimer(min_warmup_ms=warmup_ms)

            def timed(work):
                timer.min_warmup_ms = self._warmup_ms(warmup_ms)
                return timer(work, repeats=max(repeats, 5), warmup=3)["median_us"]

            self._time = timed
            self._difference = lambda work, baseline: difference_by_turns_us(
                work, baseline, rounds=max(repeats, 5), warmup_ms=self._warmup_ms(warmup_ms)
            )

    def _warmup_ms(self, warmup_ms: float) -> float:
        return warmup_ms if time.perf_counter() - self._last > IDLE_SECONDS else 0.0

    def __call__(self, work) -> float:
        try:
            return self._time(work)
        finally:
            self._last = time.perf_counter()

    def difference(self, work, baseline) -> float:
        """Median microseconds ``work`` takes over ``baseline``, the two timed by turns."""
        try:
            return self._difference(work, baseline)
        finally:
            self._last = time.perf_counter()


def run_layer(label: str, config: Experiment, xp, clock: _Clock | None, policy) -> tuple[dict, list[TraceRecord]]:
    """One layer: its profile, utilization, kernel times and the policy's choice; plus the
    trace records of the kernels the policy's choice launched."""
    workload = config.workload
    tile = policy.tile
    a, w, (m, k_true, n) = layer_operands(label, workload, tile.cols, xp)
    k = a.shape[1]
    monitor = SparsityMonitor(tile=tile, mode=config.monitor, timed=clock is not None)
    a, profile = monitor.epilogue(a, out=a)
    # the GEMM kernels need counts even when the monitor is off: count them apart, untimed
    counted = profile if profile is not None else SparsityMonitor(tile=tile, mode="fused", timed=False).epilogue(a)[1]
    nnz, tiles_active, live = policy.profile_counts(counted)
    tiles = tile_list(counted.tile_nnz, a.shape, tile)
    c = xp.empty((m, n), dtype=xp.float32)
    reference = dense_matmul(a, w, precision=policy.precision)
    tiled = tile_sparse_matmul(a, w, tiles, precision=policy.precision)
    if config.policy == "adaptive":
        decision = policy.choose(profile, n, layer=label)
    else:
        decision = Decision(label, config.policy, reason=f"fixed by the experiment (policy: {config.policy})")
    chosen = policy.run(decision, a, w, profile)
    row = {
        "layer": label,
        **map_columns(label, workload),
        "M": m,
        "K": k_true,
        "K_padded": k,
        "N": n,
        "tile": f"{tile.rows}x{tile.cols}",
        "tile_rows": tile.rows,
        "tile_cols": tile.cols,
        "density": nnz / (m * k),
        "tile_density": tiles_active / max(np.prod(tile.grid((m, k))), 1),
        "live_row_fraction": live / m,
        "utilization": tile_utilization(a, tile),
        "kernel": decision.kernel,
        "reason": decision.reason,
        "tile_sparse_max_rel_diff": relative_diff(tiled, reference),
        "chosen_max_rel_diff": relative_diff(chosen, reference),
    }
    for size in UTILIZATION_TILES:
        counts_at_size = tile_counts(a, size)
        row[f"utilization_{size}"] = counts_utilization(counts_at_size, size)
        row[f"tile_density_{size}"] = float((counts_at_size > 0).mean())
    chosen_records, dense_records, tile_records = (
        policy.records(kernel, m, k, n, nnz=nnz, tiles_active=tiles_active, live_rows=live)
        for kernel in (decision.kernel, "dense", "tile_sparse")
    )
    # the tile GEMM lists its own tiles (FP32) or a list launch precedes it (TF32)
    list_records = [r for r in tile_records if r.kernel == LIST_TILES]
    gemm_records = [r for r in tile_records if r.kernel != LIST_TILES]
    operand = tile_operand(tile_records, tiles, counted.tile_nnz)
    if clock is None:  # simulated: the cost model's times on machines[0]
        machine = config.machines[0]
        row |= {
            "dense_us": predicted_us(dense_records, machine),
            "tile_sparse_us": predicted_us(gemm_records, machine),
            "tile_list_us": predicted_us(list_records, machine) if list_records else 0.0,
            "chosen_us": predicted_us(chosen_records, machine),
            "monitor_us": float("nan"),
        }
    else:
        row["dense_us"] = clock(lambda: dense_matmul(a, w, precision=policy.precision, out=c))
        schedule = tile_gemm_schedule(gemm_records[0])
        row["tile_sparse_us"] = clock(
            lambda: tile_sparse_matmul(a, w, operand, precision=policy.precision, schedule=schedule, out=c)
        )
        row["tile_list_us"] = clock(lambda: tile_list(counted.tile_nnz, a.shape, tile)) if list_records else 0.0
        row["chosen_us"] = clock(lambda: policy.run(decision, a, w, profile, out=c))
        row["monitor_us"] = profile.monitor_seconds * 1e6 if profile is not None else 0.0
        # launches timed on their own carry their time (row compaction and CSR were timed whole)
        own = {
            "dense": [row["dense_us"]],
            "tile_sparse": [row["tile_list_us"]] * len(list_records) + [row["tile_sparse_us"]],
        }
        if decision.kernel in own and xp is not np:  # CPU times say nothing of the GPU launches
            chosen_records = with_own_times(chosen_records, own[decision.kernel])
    if config.trace == "all" and clock is not None and xp is not np:
        chosen_records = every_kernel_records(a, w, counted, policy, clock, tiles)
    elif config.trace == "all" and clock is None:  # simulated: the same launches, priced by the model
        chosen_records = [record for _, record in every_kernel_plan(a.shape[0], a.shape[1], n, counted, policy)]
    row["speedup_tile_sparse"] = row["dense_us"] / row["tile_sparse_us"]
    row["speedup_tile_sparse_with_list"] = row["dense_us"] / (row["tile_sparse_us"] + row["tile_list_us"])
    row["speedup_chosen"] = row["dense_us"] / row["chosen_us"]
    return row, chosen_records


def run_conv_point(config: Experiment, run_id: str) -> tuple[dict, list[TraceRecord]]:
    """``(summary, trace)`` of one ``conv_layers`` point (see the module doc)."""
    simulated = config.mode == "simulated"
    xp, device = _device("cpu" if simulated else config.backend)
    machine = config.machines[0] if config.machines else DEFAULT_MACHINE
    policy = KernelPolicy(machine, precision=config.precision, tile=config.tile)
    workload = config.workload
    assert isinstance(workload, ConvLayersWorkload)
    training = workload.step == "training"
    # a training step's launches are short and many: the clocks are brought up longer first
    clock = None if simulated else _Clock(xp, config.repeats, warmup_ms=100 if training else 20)
    started = time.perf_counter()
    trace_device = f"simulated:{machine}" if simulated else ("cpu" if xp is np else device)
    rows, trace = [], []
    layers = workload.layers
    for number, label in enumerate(layers, start=1):
        if training:
            layer_rows, records = run_training_layer(label, config, xp, clock, policy, machine)
        else:
            row, records = run_layer(label, config, xp, clock, policy)
            layer_rows = [row]
            if clock is not None and xp is not np:
                records = with_algorithms(records)
        rows += layer_rows
        trace += [replace(r, run=run_id, layer=number, device=trace_device) for r in records]
    summary = {
        "workload": workload.kind,
        "step": workload.step,
        "backend": "gpu" if xp is not np else "cpu",
        "device": device,
        "simulated": simulated,
        "timed_on": machine if simulated else device,
        "seconds": sum(r["chosen_us"] for r in rows) * 1e-6,
        "dense_seconds": sum(r["dense_us"] for r in rows) * 1e-6,
        "tile_sparse_seconds": sum(r["tile_sparse_us"] + r["tile_list_us"] for r in rows) * 1e-6,
        "layers": rows,
    }
    if training:
        summary |= step_totals(rows)
        summary["cudnn_baseline"] = cudnn_baseline(xp, config.precision)
    batches = sorted({row["batch"] for row in rows})  # the maps' own (saved maps: each layer's)
    summary["batch"] = batches[0] if len(batches) == 1 else f"{batches[0]}-{batches[-1]}"
    summary["map_density"] = rows[0]["map_density"]
    summary["wall_seconds"] = time.perf_counter() - started
    return summary, trace
