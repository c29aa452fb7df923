"""The CPU twin of the merged-column GPU kernel (backend ``gpu-merged-twin``).

It computes what ``kernels/gc_merged.cu`` computes, in the same order: each merged column
is summed over the plan's steps one fused multiply-add at a time (padding steps read zero),
then bias on non-zeros, ReLU, clamp; non-zeros are counted in original columns (group
sizes). (The GPU's first launch may count lit binary inputs instead: the same sums, see
:mod:`spartan_py.engines.shared.input_counts`.) So its float32 results, live rows and
non-zeros per layer equal the GPU's, and its trace records the GPU's launches
(``executed_macs`` of multi-layer launches aside: they depend on the GPU's compaction
order, as with :mod:`spartan_py.engines.rows.twin`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numba
import numpy as np

from spartan_py.engines.merged.chain import checked_chain_rows, checked_chain_warps
from spartan_py.engines.merged.engine import MergedEngine
from spartan_py.engines.merged.trace import MergedKernelTrace
from spartan_py.engines.merged.variants import kernel_defines, launch_schedule
from spartan_py.engines.shared.column_merge import MergedNetwork, merged_for
from spartan_py.engines.shared.input_counts import input_bit_value
from spartan_py.engines.shared.launches import gc_monitor_mode
from spartan_py.engines.shared.twin_base import TwinEngine
from spartan_py.errors import InputError
from spartan_py.graph_challenge.network import Network
from spartan_py.host.threads import run_split


@numba.njit(fastmath={"contract"}, cache=True, nogil=True)
def twin_merged_layer(
    first, stop, rows, index, weight, uniform, use_uniform, sizes, bias, clamp, row_nnz, out
):  # pragma: no cover - compiled
    """One merged layer for rows ``first:stop``: ``rows`` (live x width_in) -> ``out`` (live x
    width); ``row_nnz`` gets each row's non-zeros in original columns."""
    width_in = rows.shape[1]
    steps, width = index.shape
    zero = np.float32(0.0)
    source = np.zeros(width_in + 32, np.float32)  # the 32 zero columns padding steps read
    for r in range(first, stop):
        source[:width_in] = rows[r]
        lit = 0
        for h in range(width):
            acc = zero
            for s in range(steps):
                w = uniform if use_uniform else weight[s, h]
                acc = acc + w * source[index[s, h]]  # contracted to an FMA, as fmaf on the GPU
            y = min(max(acc + bias, zero), clamp) if acc != zero else zero
            out[r, h] = y
            if y != zero:
                lit += sizes[h]
        row_nnz[r] = lit


class MergedTwinEngine(MergedKernelTrace, TwinEngine):
    """The merged GPU kernel's arithmetic and trace records, computed on the CPU with Numba."""

    name = "gpu-merged-twin"
    cpu_twin = "gpu-merged-twin"
    takes_options = MergedEngine.takes_options
    trace_families = MergedEngine.trace_families
    takes_merged_network = MergedEngine.takes_merged_network

    def __init__(
        self,
        network: Network,
        *,
        monitor: bool | str = True,
        monitor_every: int = 4,
        rows_per_tile: int | None = None,
        chain_rows: int | None = None,
        chain_warps: int | None = None,
        input_counts: bool = True,
        max_batch_rows: int | None = None,
        compact_every: str | int = "doubling",
        device_name: str = "simulated",
        merged: MergedNetwork | None = None,
        fused_head: bool = False,
        launch_layers: Sequence[int] | None = None,
        kernel_options: Sequence[str] = (),
    ):
        """Options as :class:`~spartan_py.engines.merged.engine.MergedEngine`'s (``merged``: the
        network already merged, else merged here). The kernel's compile-time options change no
        result; they change the trace only where ``chain-expand-final`` has the last launch
        write the rows n wide (:attr:`expanded_by_chain`)."""
        monitor = gc_monitor_mode(monitor)
        if monitor == "software":
            raise InputError("the software monitor runs with the rows kernel (backend 'gpu'), not with gpu-merged")
        super().__init__(
            network,
            monitor=monitor,
            monitor_every=monitor_every,
            max_batch_rows=max_batch_rows,
            compact_every=compact_every,
            device=f"cpu twin of gpu.gc_merged ({device_name})",
        )
        self.merged = merged_for(network, merged)
        self.chunks = launch_schedule(
            self.chunks, self.merged.layers, fused_head=fused_head, launch_layers=launch_layers
        )
        self.chain_rows = checked_chain_rows(chain_rows)
        self.chain_warps = checked_chain_warps(chain_warps)
        self.kernel_options = tuple(kernel_options)
        kernel_defines(self.kernel_options, network.neurons)  # the GPU engine's checks
        self.chain_shape_by_start = self.plan_chain_launches()
        self.input_columns = self.plan_input_counts(input_counts)
        self.plan_launch_shapes(rows_per_tile)

    def _compute_layer(self, layer, rows, bias, clamp, row_nnz):
        merged = self.merged.layers[layer]
        plan = merged.plan
        uniform = np.float32(plan.uniform if plan.uniform is not None else 0.0)
        out = np.empty((rows.shape[0], plan.index.shape[1]), np.float32)
        use_uniform = plan.uniform is not None
        run_split(
            twin_merged_layer,
            rows.shape[0],
            rows,
            plan.index,
            plan.weight,
            uniform,
            use_uniform,
            merged.sizes,
            bias,
            clamp,
            row_nnz,
            out,
        )
        return out

    def _tile_rows(self, launch_start, inputs, rows):
        if launch_start:
            return self.chain_shape_by_start.get(launch_start, (self.later_rows, 1))[0]
        return self.first_launch_tile(self._trace_options(inputs)["bit_inputs"])[0]

    def _tile_heights(self, launch_start, inputs, rows):
        if launch_start and launch_start not in self.chain_shape_by_start:
            return self.later_tile_heights(rows)  # a split launch's tail tiles are shorter
        return super()._tile_heights(launch_start, inputs, rows)

    def _trace_options(self, inputs):
        # as MergedEngine: binary inputs go to a first launch holding them as bits (the later
        # launches split as on grids of 132 blocks: launch_cost's default)
        return {"bit_inputs": input_bit_value(inputs) != 0.0}

    def _final_values(self, rows):
        return rows[:, self.merged.layers[-1].groups] if self.merged.layers else rows
