"""The trace of a layer kernel's launches, worked out on the host from what the GPU engine and
its CPU twin both hold (so the twin writes the GPU's records by construction): the base
class every kernel family's trace extends, and what one launch reads and computes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from spartan_py.engines.shared.launches import gc_monitor_mode, launch_monitored
from spartan_py.graph_challenge.network import Network
from spartan_py.trace import TraceRecord


@dataclass(frozen=True)
class LaunchCost:
    """What one launch of a layer kernel reads and computes, as the kernel's trace works it out
    (the rest of its record is the same for every layer kernel: see :class:`LayerKernelTrace`).

    ``bytes_read``: activations and weights; ``row_bytes_written``: per live output row, its
    values and id (the monitor's counts are added by the caller); ``weight_loads``: the trace
    field of that name (0 where the kernel's tiles compute whole tiles, whose loads the cost
    model works out from the multiply-adds).
    """

    variant: str
    tile_rows: int
    tiles: int
    bytes_read: int
    row_bytes_written: int
    useful_macs: int
    executed_macs: int
    block_threads: int
    block_shared_bytes: int
    resident_blocks_per_sm: int = 0
    weight_loads: int = 0


class LayerKernelTrace:
    """The trace of a layer kernel's launches over one batch, from attributes the GPU engine and
    its CPU twin both hold, so the twin writes the GPU's trace by construction. A kernel's
    subclass provides ``kernel_family`` and :meth:`launch_cost`, and may add records before
    the launches, after each and after all.

    ``counts[l]``: live rows entering layer l (``counts[0]``: the batch's rows); ``nnz[l]``:
    non-zeros entering layer l. Rows are compacted into memory only at a launch's end; a tile
    computes every layer of the launch until all its rows are dead (the rows kernel's tiles
    computing only their live rows, rounded up to 4, after the launch's first layer:
    :func:`rows_computed`). ``row_layers[l]``: rows computed at layer l, summed over tiles,
    and ``tile_layers[l]``: the tiles that computed it (the GPU counts both; the twin works
    them out for rows kept in order); without them every entering tile's rows are counted
    (an upper bound). ``launch_seconds``: the GPU's
    measured time of each launch (and of what follows the launches). ``monitor``: a mode of
    :data:`GC_MONITOR_MODES`; a monitored launch also writes a byte per 32-column tile and an
    int per row.
    """

    kernel_family: str
    network: Network
    chunks: list[int]
    monitor: str
    monitor_every: int
    device: str

    def launch_trace(
        self,
        counts: np.ndarray,
        nnz: np.ndarray,
        input_nnz: int,
        *,
        run_id: str = "",
        row_layers: np.ndarray | None = None,
        tile_layers: np.ndarray | None = None,
        launch_seconds: list[float] | None = None,
        **options,
    ) -> list[TraceRecord]:
        """One trace record per launch (and the kernel's own records around them);
        ``options``: the kernel's, passed to :meth:`launch_cost`."""
        mode = gc_monitor_mode(self.monitor)
        n = self.network.neurons
        seconds = list(launch_seconds or [])
        records = self.records_before(counts, input_nnz, run_id, **options)
        start = 0
        for launch, length in enumerate(self.chunks):
            stop = start + length
            rows_in, rows_out = int(counts[start]), int(counts[stop])
            entering = [input_nnz if start == 0 else int(nnz[start])] + [int(v) for v in nnz[start + 1 : stop]]
            cost = self.launch_cost(start, stop, rows_in, entering, input_nnz, row_layers, tile_layers, **options)
            monitored = launch_monitored(mode, launch, self.monitor_every)
            count_bytes = rows_out * (n // 32 + 4)  # a byte per 32-column tile, an int per row
            monitor_bytes = count_bytes * monitored
            records.append(
                TraceRecord(
                    run=run_id,
                    layer=start + 1,
                    kernel=self.kernel_family,
                    variant=cost.variant,
                    rows_in=rows_in,
                    rows_out=rows_out,
                    cols=n,
                    nnz_in=entering[0],
                    nnz_out=int(nnz[stop]),
                    tiles_total=rows_out * (n // 32),
                    tile_rows=1,
                    tile_cols=32,
                    bytes_read=cost.bytes_read,
                    bytes_written=rows_out * cost.row_bytes_written + monitor_bytes,
                    useful_macs=cost.useful_macs,
                    executed_macs=cost.executed_macs,
                    monitor_mode=mode if monitored else "off",
                    monitor_bytes=monitor_bytes,
                    blocks=cost.tiles,
                    block_rows=cost.tile_rows,
                    block_threads=cost.block_threads,
                    block_shared_bytes=cost.block_shared_bytes,
                    resident_blocks_per_sm=cost.resident_blocks_per_sm,
                    fused_layers=length,
                    weight_loads=cost.weight_loads,
                    measured_us=seconds[launch] * 1e6 if launch < len(seconds) else float("nan"),
                    device=self.device,
                )
            )
            records += self.records_after_launch(mode, stop, rows_out, count_bytes, run_id)
            start = stop
        return records + self.records_after(counts, seconds, run_id)

    def launch_cost(
        self,
        start: int,
        stop: int,
        rows_in: int,
        entering: list[int],
        input_nnz: int,
        row_layers,
        tile_layers,
        **options,
    ) -> LaunchCost:
        """The launch computing layers ``start .. stop - 1`` of ``rows_in`` live rows
        (``entering``: the non-zeros entering each of those layers; ``row_layers`` and
        ``tile_layers`` as for :meth:`launch_trace`)."""
        raise NotImplementedError

    def records_before(self, counts: np.ndarray, input_nnz: int, run_id: str, **options) -> list[TraceRecord]:
        """Records of the steps before the first launch (none by default; ``options`` as
        for :meth:`launch_cost`)."""
        return []

    def records_after_launch(
        self, mode: str, layer: int, rows_out: int, count_bytes: int, run_id: str
    ) -> list[TraceRecord]:
        """Records of the steps after each launch (none by default)."""
        return []

    def records_after(self, counts: np.ndarray, seconds: list[float], run_id: str) -> list[TraceRecord]:
        """Records of the steps after the last launch (none by default)."""
        return []


def executed_macs(
    layers: list, start: int, tiles: int, tile_rows: int, widths: list[int], row_layers: np.ndarray | None
) -> int:
    """Multiply-adds a launch executes: rows computed at each layer (``row_layers``, counted
    by the kernel; every entering tile's rows when not known) x output width x the layer's
    steps."""
    return sum(
        (tiles * tile_rows if row_layers is None else int(row_layers[start + i])) * width * layer.steps
        for i, (layer, width) in enumerate(zip(layers, widths))
    )


def weight_loads(plans: list, layers: range, tile_layers: np.ndarray, width: int) -> int:
    """Weights (indices) the tiles load over ``layers``: each of ``tile_layers[l]`` tiles all
    of layer l's, ``width`` outputs x the plan's steps, whatever rows it computes."""
    return sum(int(tile_layers[layer]) * width * plans[layer].steps for layer in layers)
