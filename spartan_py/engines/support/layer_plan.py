"""What the GPU kernel will do, worked out on the host (no CuPy needed).

Shared by the GPU engine, which uploads and launches it, and by its CPU twin
(:mod:`spartan_py.engines.gpu_twin`), which computes the same thing in the same order and
writes the same trace records: the layer plan (each output's inputs in bank-conflict-free
order), the chunk schedule (layers per launch), and the record of each launch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from spartan_py.costmodel.families import COPY_D2H, COPY_H2D, GC_LAYER, MONITOR_PASS, SYNC
from spartan_py.engines.support.bank_schedule import conflict_free_ell
from spartan_py.errors import InputError
from spartan_py.trace import TraceRecord

#: Threads per block (one kernel build each); output columns per thread = neurons / threads.
THREAD_CHOICES = (1024, 512)
#: The default: one block of 32 warps per SM (measured faster than 512; benchmarks/NOTES.md).
DEFAULT_THREADS = 1024
#: neurons -> default rows per tile (the tile, R x (neurons + 32) floats, is ~64 KiB).
ROWS_PER_TILE: dict[int, int] = {1024: 16, 4096: 4, 16384: 1}
#: Other tile heights built for 1024 neurons (``rows_per_tile=``).
EXTRA_ROWS_1024 = (12, 8, 4, 2)


def kernel_shapes(threads: int) -> list[tuple[int, int]]:
    """(rows per tile, columns per thread) of every kernel instance built for ``threads``."""
    shapes = [(rows, n // threads) for n, rows in ROWS_PER_TILE.items()]
    return shapes + [(rows, 1024 // threads) for rows in EXTRA_ROWS_1024]


def chunk_schedule(layers: int, compact_every: str | int = "doubling") -> list[int]:
    """Layers per launch of the rows kernel; live rows are compacted after each launch.

    ``"doubling"``: one layer per launch for the first four layers (where most rows of a
    sparse DNN die), then 2, 4, 8, ... layers per launch, at most 32. An integer gives
    launches of that many layers.
    """
    if isinstance(compact_every, int):
        if compact_every < 1:
            raise ValueError("compact_every must be at least 1")
        sizes = [compact_every] * (layers // compact_every)
        return sizes + ([layers % compact_every] if layers % compact_every else [])
    if compact_every != "doubling":
        raise ValueError(f"compact_every must be 'doubling' or a positive integer, not {compact_every!r}")
    sizes, size = [], 1
    while sum(sizes) < layers:
        sizes.append(min(size, layers - sum(sizes)))
        if len(sizes) >= 4:
            size = min(size * 2, 32)
    return sizes


#: Monitor modes of the gpu kernel: ``fused`` (its epilogue writes per-row, per-32-column
#: counts), ``sampled`` (fused on every k-th launch), ``software`` (monitor off in the kernel,
#: then a separate counting pass, a copy of the counts to the host and a sync after every
#: layer; this needs one layer per launch), ``off``.
GC_MONITOR_MODES = ("off", "fused", "sampled", "software")


def gc_monitor_mode(monitor: bool | str) -> str:
    """The monitor mode from a bool (True: fused) or a name in :data:`GC_MONITOR_MODES`."""
    if isinstance(monitor, bool):
        return "fused" if monitor else "off"
    if monitor not in GC_MONITOR_MODES:
        raise InputError(f"monitor must be one of {', '.join(GC_MONITOR_MODES)} (or a bool), not {monitor!r}")
    return monitor


def launch_monitored(mode: str, launch: int, every: int) -> bool:
    """Whether launch number ``launch`` writes the fused monitor's counts."""
    return mode == "fused" or (mode == "sampled" and launch % every == 0)


@dataclass
class LayerPlan:
    """One layer as the kernel reads it.

    ``index``/``weight`` (steps x n, k-major): output j's input and weight at each step, in
    bank-conflict-free order; a padding step reads one of the zero columns ``n .. n + 31``
    with weight 0. ``uniform`` is the common weight when every weight of the layer is equal
    (the kernel then skips the weight array), else None.
    """

    index: np.ndarray
    weight: np.ndarray
    uniform: float | None
    nnz: int

    @property
    def steps(self) -> int:
        """Inputs summed per output, padding included."""
        return int(self.index.shape[0])

    @property
    def device_bytes(self) -> int:
        """Bytes the layer occupies on the device (uint16 indices, float32 weights unless uniform)."""
        return self.index.size * 2 + (0 if self.uniform is not None else self.weight.size * 4)


def plan_layer(matrix: sp.spmatrix) -> LayerPlan:
    """The kernel's view of one weight matrix (rows = inputs, columns = outputs)."""
    csc = sp.csc_matrix(matrix, dtype=np.float32)
    csc.sort_indices()
    index, weight = conflict_free_ell(csc.indptr, csc.indices, csc.data, matrix.shape[0])
    values = csc.data
    uniform = float(values[0]) if values.size and np.all(values == values[0]) else None
    return LayerPlan(index.astype(np.uint16), weight, uniform, int(csc.nnz))


def launch_records(
    plans: list[LayerPlan],
    chunks: list[int],
    rows_per_tile: int,
    cols_per_thread: int,
    counts: np.ndarray,
    nnz: np.ndarray,
    input_nnz: int,
    *,
    monitor: bool | str,
    device: str,
    run_id: str = "",
    monitor_every: int = 4,
    launch_seconds: list[float] | None = None,
    tile_layers: np.ndarray | None = None,
    resident_blocks_per_sm: int = 1,
) -> list[TraceRecord]:
    """One trace record per launch of the kernel over one batch of rows.

    ``counts[l]``: live rows entering layer l (``counts[0]``: the batch's rows);
    ``nnz[l]``: non-zeros entering layer l. Rows are compacted only at a chunk's end, and a
    tile computes every layer of the chunk until all its rows are dead.
    ``tile_layers[l]``: tiles that computed layer l (the GPU counts them; the twin works
    them out for rows kept in order); without it every entering tile is counted (an upper
    bound). ``resident_blocks_per_sm``: the GPU engine's grid / SMs (one for every shipped
    kernel instance on the H100: 1024 threads and their registers fill an SM; a GPU test
    checks it). ``executed_macs`` = tiles x rows per tile x n x steps, summed over layers;
    ``useful_macs`` = one multiply-add per non-zero input activation and outgoing edge.
    ``monitor``: a mode of :data:`GC_MONITOR_MODES`; ``software`` adds, after each launch, the
    counting pass, the copy of its counts and the host syncs it costs.
    """
    mode = gc_monitor_mode(monitor)
    n = plans[0].index.shape[1] if plans else 0
    threads = n // cols_per_thread if cols_per_thread else 0
    records, start = [], 0
    for launch, length in enumerate(chunks):
        stop = start + length
        rows_in, rows_out = int(counts[start]), int(counts[stop])
        tiles = -(-rows_in // rows_per_tile)
        layers = plans[start:stop]
        read = (input_nnz * 8 + (rows_in + 1) * 4) if start == 0 else rows_in * (n * 4 + 4)
        monitored = launch_monitored(mode, launch, monitor_every)
        count_bytes = rows_out * (n // 32 + 4)  # a byte per 32-column tile, an int per row
        monitor_bytes = count_bytes * monitored
        written = rows_out * (n * 4 + 4) + monitor_bytes
        uniform = all(layer.uniform is not None for layer in layers)
        entering = [input_nnz if start == 0 else int(nnz[start])] + [int(v) for v in nnz[start + 1 : stop]]
        useful = sum(count * layer.nnz // max(n, 1) for count, layer in zip(entering, layers))
        records.append(
            TraceRecord(
                run=run_id,
                layer=start + 1,
                kernel=GC_LAYER,
                variant=f"R{rows_per_tile}xC{cols_per_thread}-layers{start + 1}-{stop}"
                + ("-uniform" if uniform else ""),
                rows_in=rows_in,
                rows_out=rows_out,
                cols=n,
                nnz_in=entering[0],
                nnz_out=int(nnz[stop]),
                tiles_total=rows_out * (n // 32),
                tile_rows=1,
                tile_cols=32,
                bytes_read=read + sum(layer.device_bytes for layer in layers),
                bytes_written=written,
                useful_macs=useful,
                executed_macs=sum(
                    (tiles if tile_layers is None else int(tile_layers[start + i])) * rows_per_tile * n * layer.steps
                    for i, layer in enumerate(layers)
                ),
                monitor_mode=mode if monitored else "off",
                monitor_bytes=monitor_bytes,
                blocks=tiles,
                block_rows=rows_per_tile,
                block_threads=threads,
                block_shared_bytes=rows_per_tile * (n + 32) * 4,
                resident_blocks_per_sm=resident_blocks_per_sm,
                fused_layers=length,
                measured_us=launch_seconds[launch] * 1e6 if launch_seconds else float("nan"),
                device=device,
            )
        )
        if mode == "software":
            records += [
                TraceRecord(
                    run=run_id,
                    layer=stop,
                    kernel=MONITOR_PASS,
                    variant="count-1x32",
                    rows_in=rows_out,
                    cols=n,
                    tile_rows=1,
                    tile_cols=32,
                    bytes_read=rows_out * n * 4,
                    bytes_written=count_bytes,
                    monitor_mode="software",
                    monitor_bytes=count_bytes,
                    device=device,
                ),
                TraceRecord(
                    run=run_id,
                    layer=stop,
                    kernel=COPY_D2H,
                    variant="monitor-counts",
                    rows_in=rows_out,
                    bytes_read=count_bytes,
                    bytes_written=count_bytes,
                    monitor_mode="software",
                    monitor_bytes=count_bytes,
                    device=device,
                ),
                TraceRecord(
                    run=run_id,
                    layer=stop,
                    kernel=SYNC,
                    variant="monitor",
                    host_syncs=2,
                    monitor_mode="software",
                    device=device,
                ),
            ]
        start = stop
    return records


def transfer_records(
    input_rows: int,
    input_nnz: int,
    final_rows: int,
    neurons: int,
    layers: int,
    *,
    device: str,
    run_id: str = "",
    seconds: tuple[float, float] | None = None,
) -> list[TraceRecord]:
    """The batch's copies (host to device: the input CSR; device to host: the live rows and
    their ids, into pinned memory) and the one host synchronisation before them (reading the
    per-layer counters, a few bytes)."""
    up = (input_rows + 1) * 4 + input_nnz * 8
    down = final_rows * (neurons * 4 + 4)
    h2d, d2h = seconds if seconds else (float("nan"), float("nan"))
    return [
        TraceRecord(
            run=run_id,
            layer=0,
            kernel=COPY_H2D,
            variant="input-csr",
            rows_in=input_rows,
            rows_out=input_rows,
            cols=neurons,
            nnz_in=input_nnz,
            nnz_out=input_nnz,
            bytes_read=up,
            bytes_written=up,
            measured_us=h2d * 1e6,
            device=device,
        ),
        TraceRecord(run=run_id, layer=layers, kernel=SYNC, variant="stream", host_syncs=1, device=device),
        TraceRecord(
            run=run_id,
            layer=layers,
            kernel=COPY_D2H,
            variant="live-rows",
            rows_in=final_rows,
            rows_out=final_rows,
            cols=neurons,
            bytes_read=down,
            bytes_written=down,
            measured_us=d2h * 1e6,
            device=device,
        ),
    ]
