"""The cost model's memory-hierarchy terms: time through DRAM (bandwidth and Little's law),
a row-block kernel's dependent round trips, and how many of a merged launch's waves read its
layers from DRAM rather than L2."""

from __future__ import annotations

import numpy as np
import pandas as pd

from spartan_py.costmodel.families import GC_MERGED, KernelFamily
from spartan_py.costmodel.machine import FamilyCalibration, Machine, Specs


def dram_time_us(machine: Machine, params: FamilyCalibration, moved_bytes: np.ndarray) -> np.ndarray:
    """Microseconds to move ``moved_bytes`` through DRAM.

    With a fitted ``bytes_in_flight_kib`` (a memory-bound family), Little's law: the family keeps
    that many bytes of requests in flight, each round trip takes the machine's memory latency,
    so it moves them at ``in flight / latency`` at most; the transfer itself runs at the share of
    the datasheet bandwidth a large copy reaches (``streaming_efficiency``) times the family's
    ``memory_efficiency``. Per byte the two add (a round trip is the latency plus the time its
    bytes take on the bus), and a launch that moves less than one round's worth still waits one
    latency. Neither term depends on the GPU the parameters were fitted on, so a GPU with faster
    DRAM speeds up only the transfer. Without it, bytes at ``memory_efficiency`` of the peak.
    """
    specs = machine.specs
    if params.bytes_in_flight_kib <= 0 or specs.memory_latency_ns is None:
        return moved_bytes / (specs.memory_bandwidth_gb_s * 1e3 * params.memory_efficiency)
    transfer = moved_bytes / (
        specs.memory_bandwidth_gb_s * 1e3 * (specs.streaming_efficiency or 1.0) * params.memory_efficiency
    )
    rounds = np.where(moved_bytes > 0, np.maximum(1.0, moved_bytes / (params.bytes_in_flight_kib * 1024)), 0.0)
    return transfer + rounds * specs.memory_latency_ns / 1e3


#: Bytes a thread of a row-block kernel loads at once (a float4): a block's row takes one
#: step per ``threads x 16`` bytes.
ROW_BLOCK_LOAD_BYTES = 16


def row_block_rounds(
    machine: Machine, family: KernelFamily, params: FamilyCalibration, rows: pd.DataFrame
) -> np.ndarray:
    """DRAM round trips one after another of a launch of ``family``'s row-block kernel
    (:attr:`~spartan_py.costmodel.families.KernelFamily.row_block_threads`): its blocks, one per
    moved row (the fewer of ``rows_in`` and ``rows_out``), run in waves of as many as the SMs hold;
    each waits ``block_round_trips`` (its row's id, its first loads) and ``row_round_trips`` per
    step of its row (``threads x 16`` bytes of ``bytes_read`` over the rows). None of it is
    DRAM bandwidth: latency on the chip and in the memory, the same on a GPU with faster DRAM."""
    specs = machine.specs
    threads = family.row_block_threads
    moved = np.minimum(rows["rows_in"].to_numpy(float), rows["rows_out"].to_numpy(float))
    moved = np.where(moved > 0, moved, 0.0)
    resident = specs.sm_count * min(specs.max_threads_per_sm // threads, specs.max_blocks_per_sm)
    waves = np.ceil(moved / resident)
    steps = np.ceil(rows["bytes_read"].to_numpy(float) / np.maximum(moved, 1) / (threads * ROW_BLOCK_LOAD_BYTES))
    return waves * (params.block_round_trips + params.row_round_trips * steps)


def rows_read_bytes(frame: pd.DataFrame) -> pd.Series:
    """Per merged-kernel record (``gpu.gc_merged``), the bytes of the rows it reads: its
    ``rows_in`` rows as wide as the launch before it in the run wrote them (a chain launch's
    writes, which add the expanded rows, and a run's first launch give none: NaN)."""
    out = pd.Series(np.nan, index=frame.index)
    needed = ("kernel", "run", "layer", "variant", "rows_in", "rows_out", "bytes_written", "monitor_bytes")
    if any(name not in frame for name in needed):
        return out
    merged = frame[frame["kernel"] == GC_MERGED]
    if merged.empty:
        return out
    ordered = merged.assign(_row=merged.index).sort_values("layer", kind="stable")
    written = ordered["bytes_written"] - ordered["monitor_bytes"]
    width = (written / ordered["rows_out"].where(ordered["rows_out"] > 0)).where(
        ~ordered["variant"].astype(str).str.startswith("C")
    )
    by_run = ordered.assign(_width=width).groupby("run", sort=False)
    before = by_run["_width"].shift(1).where(by_run["layer"].shift(1) < ordered["layer"])  # a run kept twice
    out.loc[ordered["_row"].to_numpy()] = (ordered["rows_in"] * before).to_numpy()
    return out


def cold_waves(rows: pd.DataFrame, waves: np.ndarray, specs: Specs) -> np.ndarray:
    """How many of each launch's waves wait on DRAM for its layers' loads: the first, and every
    later one when L2 cannot keep the layers from one wave to the next.

    Between a wave's read of a layer and the next wave's, the launch touches its other layers
    and that wave's rows in and out (and the monitor's counts); under least-recently-used
    replacement the layer is still in L2 only if that reuse distance fits it. Where the L2 is
    split in partitions that each cache for their own SMs (``l2_partitions``), every partition
    holds all the layers (every SM reads them) and its share of the rows, in its share of the
    capacity. The layers' bytes are what the launch reads beyond its rows: ``rows_read_bytes``
    (:func:`rows_read_bytes`, which :func:`~spartan_py.costmodel.model.predict` adds), else rows
    as wide as those the launch writes.
    """

    def column(name: str) -> np.ndarray:
        return rows[name].to_numpy(float) if name in rows else np.zeros(len(rows))

    read, monitor, rows_in, rows_out = (column(n) for n in ("bytes_read", "monitor_bytes", "rows_in", "rows_out"))
    written = column("bytes_written") - monitor
    as_written = np.where(rows_out > 0, rows_in * written / np.maximum(rows_out, 1), 0.0)
    before = rows["rows_read_bytes"].to_numpy(float) if "rows_read_bytes" in rows else np.full(len(rows), np.nan)
    rows_read = np.where(np.isfinite(before), before, as_written)
    layers_bytes = np.clip(read - rows_read, 0, None)
    per_wave = (read - layers_bytes + written + monitor) / np.maximum(waves, 1)
    parts = specs.l2_partitions or 1  # every SM reads the layers: each part holds them; the rows split
    spilled = layers_bytes + per_wave / parts > specs.l2_cache_mib * 2**20 / parts
    return 1 + np.maximum(waves - 1, 0) * spilled
