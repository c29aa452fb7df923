"""Numba kernels of the CPU engine.

Activations of a batch of rows live in a *lane-major* tile buffer of shape
``(tiles, neurons, TILE_ROWS)``: each input row is a lane, and one neuron's values for the
tile's rows are contiguous. Output neuron ``j`` is a weighted sum of the tile rows of its
inputs, computed across the lanes with SIMD. Layers ping-pong between two such buffers, so
no layer transposes anything; when rows die, the live lanes are repacked into full tiles
(:func:`repack`), which is the compaction step. Weights are in padded
ELL form: ``index[j, g, 0:8]`` and ``weight[j, g, 0:8]`` hold group ``g`` of ``j``'s
inputs, padding having weight 0. Summing eight terms per pass over the output row keeps the
accumulator out of memory for seven of every eight weights, which is what lets LLVM
vectorise the loop (a one-weight-at-a-time loop stays scalar: measured 1.2 vs 9 GMAC/s).

"""

from __future__ import annotations

import numba
import numpy as np

from spartan_py.engines.shared.ell import ell_from_csc

#: Rows per tile. 128 rows x 1024 neurons x 4 B = 512 KiB per tile, inside a core's L2.
TILE_ROWS = 128
#: Inputs per ELL group (terms summed per pass over an output row).
GROUP = 8

# Only contraction (FMA) and reassociation inside the 8-term sums; no NaN/Inf shortcuts,
# so the zero tests of the epilogue keep their meaning.
_MATH = {"contract", "reassoc"}


@numba.njit(fastmath=_MATH, inline="always")
def _output_row(tile, index, weight, j, dst, lanes):
    """``dst[:lanes] = sum_k weight[j, k] * tile[index[j, k], :lanes]``."""
    for g in range(index.shape[1]):
        i = index[j, g]
        w = weight[j, g]
        t0, t1, t2, t3 = tile[i[0]], tile[i[1]], tile[i[2]], tile[i[3]]
        t4, t5, t6, t7 = tile[i[4]], tile[i[5]], tile[i[6]], tile[i[7]]
        w0, w1, w2, w3, w4, w5, w6, w7 = w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]
        if g == 0:
            for b in range(lanes):
                dst[b] = (w0 * t0[b] + w1 * t1[b] + w2 * t2[b] + w3 * t3[b]) + (
                    w4 * t4[b] + w5 * t5[b] + w6 * t6[b] + w7 * t7[b]
                )
        else:
            for b in range(lanes):
                dst[b] += (w0 * t0[b] + w1 * t1[b] + w2 * t2[b] + w3 * t3[b]) + (
                    w4 * t4[b] + w5 * t5[b] + w6 * t6[b] + w7 * t7[b]
                )


@numba.njit(fastmath=_MATH, inline="always")
def _layer_tile(tile, out, lanes, index, weight, sizes, bias, clamp, nnz):
    """Compute lanes ``0:lanes`` of a tile's outputs ``out[:outputs]`` (``outputs =
    index.shape[0]`` rows of TILE_ROWS) with bias, ReLU and clamp, and add each lane's
    non-zeros, output ``j`` counting ``sizes[j]`` (the neurons it stands for), into ``nnz``.

    Every array here is a whole C-contiguous tile: a sliced (strided) view would stop LLVM
    from vectorising the lane loops.
    """
    zero = np.float32(0.0)
    nnz[:] = 0
    outputs = index.shape[0]
    if index.shape[1] == 0:  # a layer without weights: every output is exactly zero
        out[:outputs, :] = zero
        return
    for j in range(outputs):
        dst = out[j]
        _output_row(tile, index, weight, j, dst, lanes)
        size = sizes[j]
        for b in range(lanes):
            z = dst[b]
            y = min(max(z + bias, zero), clamp)
            y = y if z != zero else zero
            dst[b] = y
            nnz[b] += size if y != zero else 0


@numba.njit(cache=True, nogil=True)
def layer_from_csr(
    first,
    stop,
    indptr,
    indices,
    data,
    lane_rows,
    fill,
    out,
    index,
    weight,
    degree,
    sizes,
    bias,
    clamp,
    lane_nnz,
    useful,
):
    """First layer, tiles ``first:stop`` (:func:`~spartan_py.host.threads.run_split` spreads the
    tiles over the cores): lane ``b`` of tile ``t`` reads CSR input row ``lane_rows[t, b]``
    (``degree.size`` columns wide).

    Writes the outputs to ``out[t, :outputs, :fill[t]]``, each lane's non-zero count to
    ``lane_nnz[t, b]`` and the tile's useful multiply-adds (non-zero activation x weight
    pairs, ``degree[i]`` being input ``i``'s out-degree) to ``useful[t]``.
    """
    inputs = degree.size
    tile = np.empty((inputs, TILE_ROWS), dtype=np.float32)
    for t in range(first, stop):
        n = fill[t]
        tile[:] = 0
        work = 0
        for b in range(n):
            row = lane_rows[t, b]
            for k in range(indptr[row], indptr[row + 1]):
                if data[k] != 0:
                    tile[indices[k], b] = data[k]
                    work += degree[indices[k]]
        useful[t] = work
        _layer_tile(tile, out[t], n, index, weight, sizes, bias, clamp, lane_nnz[t])


@numba.njit(cache=True, nogil=True)
def layer_tiles(first, stop, source, fill, out, index, weight, degree, sizes, bias, clamp, lane_nnz, useful):
    """Later layers, tiles ``first:stop``: ``out[t, :outputs, :fill[t]]`` = the layer applied
    to ``source[t, :degree.size, :fill[t]]``."""
    for t in range(first, stop):
        n = fill[t]
        tile = source[t]
        work = 0
        for i in range(degree.size):
            lit = 0
            for b in range(n):
                lit += 1 if tile[i, b] != 0 else 0
            work += lit * degree[i]
        useful[t] = work
        _layer_tile(tile, out[t], n, index, weight, sizes, bias, clamp, lane_nnz[t])


@numba.njit(cache=True, nogil=True)
def repack(first, stop, source, src_tile, src_lane, out):
    """Gather lanes ``(src_tile[k], src_lane[k])`` of ``source`` into lane ``k`` of ``out`` (in
    order), for the output tiles ``first:stop`` (``ceil(src_tile.size / TILE_ROWS)`` in all)."""
    count = src_tile.size
    neurons = source.shape[1]
    for t in range(first, stop):
        start = t * TILE_ROWS
        n = min(TILE_ROWS, count - start)
        target = out[t]
        for i in range(neurons):
            for b in range(n):
                target[i, b] = source[src_tile[start + b], i, src_lane[start + b]]


@numba.njit(cache=True, nogil=True)
def lane_hashes(source, tile, lane, width, out):
    """``out[k]``: a 64-bit hash of the first ``width`` values (their bits) of lane
    ``(tile[k], lane[k])`` of ``source``; the lanes grouped by tile, in order."""
    count = tile.size
    start = 0
    while start < count:  # one tile's lanes at a time: each neuron's values are contiguous there
        stop = start
        while stop < count and tile[stop] == tile[start]:
            stop += 1
        bits = source[tile[start]].view(np.uint32)
        for k in range(start, stop):
            out[k] = np.uint64(0xCBF29CE484222325)
        for i in range(width):
            for k in range(start, stop):
                out[k] = (out[k] ^ np.uint64(bits[i, lane[k]])) * np.uint64(0x100000001B3)
        start = stop


@numba.njit(cache=True, nogil=True)
def lanes_equal(source, tile_a, lane_a, tile_b, lane_b, width, out):
    """``out[k]``: whether lanes ``(tile_a[k], lane_a[k])`` and ``(tile_b[k], lane_b[k])`` of
    ``source`` hold the same first ``width`` values (compared as floats, no copy made)."""
    for k in range(tile_a.size):
        a, b = source[tile_a[k]], source[tile_b[k]]
        la, lb = lane_a[k], lane_b[k]
        same = True
        for i in range(width):
            if a[i, la] != b[i, lb]:
                same = False
                break
        out[k] = same


def padded_ell(col_ptr: np.ndarray, row_index: np.ndarray, values: np.ndarray, neurons: int):
    """CSC weights -> padded ELL ``(index, weight)`` of shape (neurons, groups, GROUP).

    Padding entries point at input 0 with weight 0, which adds exactly zero (activations
    are finite).
    """
    groups = int(-(-np.diff(col_ptr).max(initial=0) // GROUP))
    index, weight = ell_from_csc(col_ptr, row_index, values, neurons, groups * GROUP)
    return index.astype(np.int32).reshape(neurons, groups, GROUP), weight.reshape(neurons, groups, GROUP)
