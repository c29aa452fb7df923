"""The CPU engine: Numba kernels on every core (:mod:`spartan_py.host.threads`) with live-row compaction."""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import scipy.sparse as sp

from spartan_py.engines.base import Engine, EngineOutput, live_rows_matrix
from spartan_py.engines.cpu import kernels
from spartan_py.engines.shared.column_merge import MergedNetwork, merge_network, worth_merging
from spartan_py.engines.shared.duplicate_rows import RowCopies, looks_for_copies, representatives
from spartan_py.graph_challenge.network import Network
from spartan_py.host.threads import host_threads, run_split
from spartan_py.trace import TraceRecord, pass_through

#: Default bound on the activation buffer of one batch of rows.
DEFAULT_BATCH_BYTES = 512 * 2**20
#: Repack live lanes into full tiles when fewer than this share of the computed lanes live.
REPACK_OCCUPANCY = 0.9


class _GatherWeights:
    """One layer in the kernels' format: padded ELL (inputs of each output) of the ``inputs x
    outputs`` ``matrix``, each input's out-degree in the original network (``degree``,
    default the matrix's) and the original neurons each output stands for (``sizes``,
    default one)."""

    def __init__(self, matrix: sp.spmatrix, degree: np.ndarray | None = None, sizes: np.ndarray | None = None):
        csc = sp.csc_matrix(matrix, dtype=np.float32)
        csc.sort_indices()
        outputs = matrix.shape[1]
        self.index, self.weight = kernels.padded_ell(csc.indptr, csc.indices, csc.data, outputs)
        self.degree = np.asarray(matrix.getnnz(axis=1) if degree is None else degree, dtype=np.int64)
        self.sizes = np.ones(outputs, np.int64) if sizes is None else np.asarray(sizes, dtype=np.int64)
        self.nnz = int(csc.nnz)
        self.nbytes = int(self.index.nbytes + self.weight.nbytes)

    @property
    def outputs(self) -> int:
        """Columns this layer writes."""
        return int(self.index.shape[0])

    def args(self):
        return self.index, self.weight, self.degree, self.sizes


def _merged_layers(network: Network, merged: MergedNetwork) -> list[_GatherWeights]:
    """The merged plan's layers in the kernels' format: layer ``l`` maps the previous layer's
    merged columns (the input neurons for the first) to its own. A merged input's degree is
    the original out-degrees of the neurons it stands for, summed."""

    def convert(index: int) -> _GatherWeights:
        layer = merged.layers[index]
        plan = layer.plan
        steps, width = plan.index.shape
        real = plan.index < layer.width_in  # padding steps read the zero columns past width_in
        columns = np.broadcast_to(np.arange(width), (steps, width))[real]
        values = np.full(columns.size, plan.uniform, np.float32) if plan.uniform is not None else plan.weight[real]
        matrix = sp.csc_matrix((values, (plan.index[real], columns)), shape=(layer.width_in, width))
        degree = np.asarray(network.weights[index].getnnz(axis=1), dtype=np.int64)
        if index:
            degree = np.bincount(merged.layers[index - 1].groups, weights=degree, minlength=layer.width_in)
        return _GatherWeights(matrix, degree, layer.sizes)

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        return list(pool.map(convert, range(len(merged.layers))))


class CpuEngine(Engine):
    """Numba engine: live rows in lane-major 128-row tiles kept across layers, each output a
    SIMD weighted sum over its inputs (padded ELL), rows repacked as they die.

    ``merged``: compute each group of equal weight columns once
    (:mod:`~spartan_py.engines.shared.column_merge`), as ``gpu-merged`` does; ``None``
    (default) decides as ``auto`` does on a GPU (:func:`~spartan_py.engines.shared.
    column_merge.worth_merging`). The rows are the same either way; the merged path does
    1/16 to 1/20 of the work on RadiX-Net networks.

    ``row_copies`` (default on): after 2, 4, 8, ... layers, live rows equal to another live row
    bit for bit are dropped and take that row's result at the end
    (:mod:`~spartan_py.engines.shared.duplicate_rows`); the live-row and non-zero counts per
    layer still count every row.
    """

    name = "cpu"

    def __init__(
        self,
        network: Network,
        *,
        batch_bytes: int = DEFAULT_BATCH_BYTES,
        merged: bool | None = None,
        row_copies: bool = True,
    ):
        super().__init__(network)
        self.row_copies = bool(row_copies)
        self.merged = worth_merging(network) if merged is None else bool(merged)
        # SciPy's conversions release the GIL; a generated network builds its layers here too
        if self.merged:
            self._merged = merge_network(network)
            self._layers = _merged_layers(network, self._merged)
        else:
            with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
                self._layers = list(
                    pool.map(lambda layer: _GatherWeights(network.weights[layer]), range(network.layers))
                )
        #: rows of the lane-major buffers: the widest layer's outputs (``neurons`` unmerged)
        self.width = max((layer.outputs for layer in self._layers), default=network.neurons)
        # two lane-major buffers of batch_rows x width float32 each
        self.batch_rows = max(kernels.TILE_ROWS, batch_bytes // (8 * self.width))
        self._bias = np.float32(network.bias)
        self._clamp = np.float32(network.clamp)
        self._warm_up()

    @property
    def device(self) -> str:
        return f"cpu (Numba, {host_threads()} threads{', merged columns' if self.merged else ''})"

    def _warm_up(self) -> None:
        """Compile (or load from Numba's cache) every kernel before anything is timed.

        The probe has a saturated row, which lives through the later-layer kernel, and a
        row of one pixel, which dies in layer 1 and so makes the repack kernel run.
        """
        neurons = self.network.neurons
        probe = sp.csr_matrix(
            (
                np.ones(neurons + 1, dtype=np.float32),
                np.r_[np.arange(neurons), 0].astype(np.int32),
                [0, neurons, neurons + 1],
            ),
            shape=(2, neurons),
        )
        layers = min(3, len(self._layers))
        self._run_batch(probe, np.arange(2, dtype=np.int64), layers=layers, run_id="", records=None)
        if self.row_copies:  # the probe's rows differ, so a look would not compare any: called here
            one, where = np.zeros((1, 1, kernels.TILE_ROWS), np.float32), np.zeros(1, np.int64)
            kernels.lane_hashes(one, where, where, 1, np.empty(1, np.uint64))
            kernels.lanes_equal(one, where, where, where, where, 1, np.empty(1, np.bool_))

    def _run_batch(self, inputs, rows, *, layers, run_id, records):
        """Run ``layers`` layers over input ``rows`` (ascending).

        Returns (input rows live at the end, their final values (live x neurons), live rows
        per layer, non-zeros per layer). A lane stands for ``lane_weight`` rows: itself and the
        copies dropped into it (``row_copies``); the counts per layer count them all.
        """
        width = self.width
        lanes = kernels.TILE_ROWS
        tiles = -(-rows.size // lanes)
        current = np.empty((tiles, width, lanes), dtype=np.float32)
        spare = np.empty_like(current)
        lane_rows = np.full(tiles * lanes, -1, dtype=np.int64)
        lane_rows[: rows.size] = rows
        lane_weight = np.zeros(tiles * lanes, dtype=np.int64)
        lane_weight[: rows.size] = 1
        copies = RowCopies(rows.size)
        lane_nnz = np.zeros((tiles, lanes), dtype=np.int64)
        useful = np.zeros(tiles, dtype=np.int64)
        filled = rows.size
        live_counts, nnz_counts = [], []
        nnz_in = int(inputs[rows].nnz) if records is not None else 0
        variant = "merged-" if self.merged else ""
        for index in range(layers):
            layer = self._layers[index]
            tiles = -(-filled // lanes)
            fill = np.minimum(lanes, filled - lanes * np.arange(tiles)).astype(np.int64)
            lane_nnz[:tiles] = 0
            start = time.perf_counter()
            outputs = (spare[:tiles], *layer.args(), self._bias, self._clamp, lane_nnz, useful)
            if index == 0:
                csr = (inputs.indptr, inputs.indices, inputs.data, lane_rows.reshape(-1, lanes))
                run_split(kernels.layer_from_csr, tiles, *csr, fill, *outputs)
            else:
                run_split(kernels.layer_tiles, tiles, current[:tiles], fill, *outputs)
            current, spare = spare, current
            alive = lane_nnz[:tiles] > 0
            live = int(alive.sum())
            nnz_out = int(lane_nnz[:tiles].sum())
            weight = lane_weight.reshape(-1, lanes)[:tiles]  # dead and unfilled lanes count 0 non-zeros
            live_counts.append(int(weight[alive].sum()))
            nnz_counts.append(int((lane_nnz[:tiles] * weight).sum()))
            elapsed = time.perf_counter() - start
            repacked = live < REPACK_OCCUPANCY * filled
            if repacked:
                src_tile, src_lane = np.divmod(np.flatnonzero(alive), lanes)  # C-contiguous, one kernel signature
                run_split(kernels.repack, -(-live // lanes), current, src_tile, src_lane, spare)
                current, spare = spare, current
                lane_rows[:live] = lane_rows.reshape(-1, lanes)[src_tile, src_lane]
                lane_weight[:live] = lane_weight.reshape(-1, lanes)[src_tile, src_lane]
                lane_weight[live:] = 0
                filled = live
            if records is not None:
                records.append(
                    TraceRecord(
                        run=run_id,
                        layer=index + 1,
                        kernel="cpu.tile_layer",
                        variant=variant + ("csr-input" if index == 0 else "lane-tiles"),
                        rows_in=int(fill.sum()),
                        rows_out=live,
                        cols=layer.outputs,
                        nnz_in=nnz_in,
                        nnz_out=nnz_out,
                        tiles_total=tiles,
                        tile_rows=lanes,
                        tile_cols=layer.outputs,
                        bytes_read=(nnz_in * 8 if index == 0 else int(fill.sum()) * layer.degree.size * 4)
                        + layer.nbytes,
                        bytes_written=int(fill.sum()) * layer.outputs * 4,
                        useful_macs=int(useful[:tiles].sum()),
                        executed_macs=int(fill.sum()) * layer.nnz,
                        measured_us=elapsed * 1e6,
                        device="cpu",
                    )
                )
                if repacked:
                    records.append(
                        pass_through(
                            run_id,
                            index + 1,
                            "cpu.repack",
                            rows=live,
                            cols=width,
                            nnz=nnz_out,
                            tile_rows=lanes,
                            tile_cols=width,
                            bytes_read=live * width * 4,
                            bytes_written=live * width * 4,
                            measured_us=(time.perf_counter() - start) * 1e6 - elapsed * 1e6,
                            device="cpu",
                        )
                    )
            nnz_in = nnz_out
            if live == 0:
                live_counts += [0] * (layers - index - 1)
                nnz_counts += [0] * (layers - index - 1)
                break
            if self.row_copies and index + 1 < layers and live > 1 and looks_for_copies(index + 1):
                looked = time.perf_counter()
                in_use = np.arange(filled) if repacked else np.flatnonzero(alive)
                in_use_nnz = lane_nnz[: alive.shape[0]][alive] if repacked else lane_nnz.reshape(-1)[in_use]
                kept = self._drop_copies(current, spare, in_use, layer.outputs, copies, lane_rows, lane_weight, rows)
                if kept is not None:
                    current, spare = spare, current
                    filled, repacked = kept.size, True
                    nnz_in = int(in_use_nnz[kept].sum())
                if records is not None:
                    records.append(
                        pass_through(
                            run_id,
                            index + 1,
                            "cpu.row_copies",
                            rows=in_use.size,
                            cols=layer.outputs,
                            nnz=0,
                            tile_rows=lanes,
                            tile_cols=width,
                            bytes_read=in_use.size * layer.outputs * 4,
                            bytes_written=(kept.size * width * 4) if kept is not None else 0,
                            measured_us=(time.perf_counter() - looked) * 1e6,
                            device="cpu",
                        )
                    )
        # Live lanes of the final layout: after a repack, exactly the first ``filled`` lanes.
        final_lanes = np.arange(filled) if repacked else np.flatnonzero(alive)
        final_tile, final_lane = np.divmod(final_lanes, lanes)
        outputs = self._layers[layers - 1].outputs if layers else width
        values = current[final_tile, :outputs, final_lane] if final_lanes.size else np.zeros((0, outputs), np.float32)
        if self.merged:  # each merged column back to the neurons it stands for
            values = values[:, self._merged.layers[layers - 1].groups]
        members, source = copies.expand(np.searchsorted(rows, lane_rows[final_lanes]))
        return rows[members], values[source], live_counts, nnz_counts

    def _drop_copies(self, current, spare, in_use, outputs, copies, lane_rows, lane_weight, rows) -> np.ndarray | None:
        """Keep one lane of each set of equal lanes among ``in_use`` (their first ``outputs``
        values hashed by their bits, then compared), packed into ``spare`` in order, the dropped lanes' rows
        recorded in ``copies`` and their weights added to the kept lane's. Returns which of
        ``in_use`` were kept (indices into it), or None (nothing moved) when no lane is a copy."""
        lanes = kernels.TILE_ROWS
        tile, lane = np.divmod(in_use, lanes)
        hashes = np.empty(in_use.size, dtype=np.uint64)
        kernels.lane_hashes(current, tile, lane, outputs, hashes)

        def equal(a: np.ndarray, b: np.ndarray) -> np.ndarray:
            same = np.empty(a.size, dtype=np.bool_)
            kernels.lanes_equal(current, tile[a], lane[a], tile[b], lane[b], outputs, same)
            return same

        kept_by = representatives(hashes, equal)
        own = kept_by == np.arange(in_use.size)
        if own.all():
            return None
        keep, dropped = np.flatnonzero(own), np.flatnonzero(~own)
        position = np.searchsorted(rows, lane_rows[in_use])
        copies.merge(position[dropped], position[kept_by[dropped]])
        weight = np.zeros(in_use.size, dtype=np.int64)
        np.add.at(weight, kept_by, lane_weight[in_use])
        run_split(kernels.repack, -(-keep.size // lanes), current, tile[keep], lane[keep], spare)
        lane_rows[: keep.size] = lane_rows[in_use[keep]]
        lane_weight[: keep.size] = weight[keep]
        lane_weight[keep.size :] = 0
        return keep

    def run(self, inputs: sp.csr_matrix, *, run_id: str = "") -> EngineOutput:
        network = self.network
        inputs = sp.csr_matrix(inputs, dtype=np.float32)
        inputs.indices = inputs.indices.astype(np.int32, copy=False)
        trace: list[TraceRecord] = []
        live_total = np.zeros(network.layers, dtype=np.int64)
        nnz_total = np.zeros(network.layers, dtype=np.int64)
        live_parts, value_parts = [], []
        start = time.perf_counter()
        candidates = np.flatnonzero(np.diff(inputs.indptr)).astype(np.int64)
        for first in range(0, candidates.size, self.batch_rows):
            rows = candidates[first : first + self.batch_rows]
            final_rows, values, live, nnz = self._run_batch(
                inputs, rows, layers=network.layers, run_id=run_id, records=trace
            )
            live_total += live
            nnz_total += nnz
            live_parts.append(final_rows)
            value_parts.append(values)
        seconds = time.perf_counter() - start
        live_rows = np.concatenate(live_parts) if live_parts else np.zeros(0, dtype=np.int64)
        values = np.concatenate(value_parts) if value_parts else np.zeros((0, network.neurons), np.float32)
        return EngineOutput(
            live_rows=live_rows,
            values=live_rows_matrix(live_rows, values, inputs.shape[0]),
            live_rows_by_layer=live_total.tolist(),
            nonzeros_by_layer=nnz_total.tolist(),
            seconds=seconds,
            device=self.device,
            trace=trace,
        )
