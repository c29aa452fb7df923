"""Merge output neurons whose weight columns are identical (the merged plan, host side).

Two outputs of a layer with the same inputs and the same weights compute the same value in
every row: after bias, ReLU and the clamp too. RadiX-Net networks are full of them: the
official 1024-neuron layers have 64 distinct columns (32 in layer 120), each shared by 16
or 32 outputs, and the generated networks have ``neurons / 16``. Computing each distinct
column once gives the same activations with a fraction of the work:

* layer ``l`` computes ``Z_l`` (rows x ``width_l``), one column per group of equal outputs,
  and ``Y_l[:, j] = Z_l[:, groups_l[j]]``;
* layer ``l + 1`` reads ``Z_l`` instead of ``Y_l``: an input ``i`` of the original layer
  becomes ``groups_l[i]``, and several inputs of one output that fall in the same group
  become one weight, their sum (exact for the official 1/16 weights; within float32 rounding
  of the original sum otherwise);
* a row is live when a column of ``Z`` is non-zero; its non-zeros in ``Y`` are the sizes of
  its non-zero groups summed.

Nothing here assumes a structure: the groups are found by comparing every column's sorted
(input, weight) list, and a network without duplicates merges into itself (factor 1).
Widths are padded to a multiple of 32; padding columns have no inputs and size 0."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from spartan_py.engines.shared.bank_schedule import BANKS, conflict_free_ell
from spartan_py.engines.shared.layer_plan import LayerPlan
from spartan_py.engines.shared.merge_kernels import (
    column_lists_from_csr,
    first_appearance,
    group_equal_rows,
    merged_columns,
    row_hashes,
    valid_entries,
)
from spartan_py.errors import InputError
from spartan_py.graph_challenge.generate import WEIGHT, GeneratedLayers
from spartan_py.graph_challenge.network import Network


@dataclass
class MergedLayer:
    """One layer of the merged plan.

    ``plan``: ELL over the previous layer's merged columns (the input neurons for layer 1),
    steps x ``width``, bank-conflict-free, padding steps reading zero columns
    ``width_in .. width_in + 31``. ``groups[j]``: merged column of original output ``j``.
    ``sizes[h]``: original outputs in merged column ``h`` (0 for padding columns).
    ``original_nnz``: weights of the original layer. The plan's indices are 16-bit where the
    input and its padding fit (:func:`plan_index_dtype`), as the later block-tile launches read
    them, else 32-bit.
    """

    plan: LayerPlan
    groups: np.ndarray
    sizes: np.ndarray
    width_in: int
    original_nnz: int

    @property
    def width(self) -> int:
        """Merged columns, padded to a multiple of 32."""
        return int(self.sizes.size)


@dataclass
class MergedNetwork:
    """Every layer of a network, merged; see the module docstring."""

    neurons: int
    layers: list[MergedLayer]

    @property
    def width(self) -> int:
        """The widest merged layer (the row width of the kernel's activation buffers)."""
        return max(layer.width for layer in self.layers)

    @property
    def factor(self) -> float:
        """Original multiply-adds per row / merged ones (steps x width summed over layers)."""
        merged = sum(layer.plan.steps * layer.width for layer in self.layers)
        original = sum(layer.original_nnz for layer in self.layers)
        return original / max(merged, 1)


def column_lists(matrix: sp.spmatrix) -> tuple[np.ndarray, np.ndarray]:
    """Each output's (inputs, weights) sorted by input, as (outputs x max degree) arrays;
    slots past a column's degree hold input -1 and weight 0."""
    if sp.issparse(matrix) and matrix.format == "csr" and matrix.has_canonical_format:  # compiled, without the GIL
        data = np.asarray(matrix.data, dtype=np.float32)
        return column_lists_from_csr(matrix.indptr, matrix.indices, data, matrix.shape[1])
    csc = sp.csc_matrix(matrix, dtype=np.float32)
    csc.sum_duplicates()
    csc.sort_indices()
    outputs = csc.shape[1]
    degree = np.diff(csc.indptr)
    width = max(int(degree.max(initial=0)), 1)
    if outputs and int(degree.min()) == width:  # every column full (RadiX-Net): no padding
        return csc.indices.reshape(outputs, width).astype(np.int64), csc.data.reshape(outputs, width)
    inputs = np.full((outputs, width), -1, dtype=np.int64)
    weights = np.zeros((outputs, width), dtype=np.float32)
    slot = np.arange(csc.nnz) - np.repeat(csc.indptr[:-1], degree)
    column = np.repeat(np.arange(outputs), degree)
    inputs[column, slot] = csc.indices
    weights[column, slot] = csc.data
    return inputs, weights


def duplicate_groups(inputs: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Group equal rows of (``inputs``, ``weights``) (as from :func:`column_lists`).

    Returns ``(groups, representatives)``: ``groups[j]`` numbers row ``j``'s group (in order of
    first appearance) and ``representatives[g]`` is the first row of group ``g``. Rows are
    bucketed by a 64-bit hash, then every row is compared with its bucket's first row; when a
    bucket holds unequal rows (a hash collision), rows are grouped by comparing them whole.
    """
    if inputs.shape[0] == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    inputs = np.ascontiguousarray(inputs, dtype=np.int64)
    bits = np.ascontiguousarray(weights, dtype=np.float32).view(np.uint32)
    groups, representatives, exact = group_equal_rows(inputs, bits, row_hashes(inputs, bits))
    if exact:
        return groups, representatives
    packed = np.concatenate([inputs, bits.astype(np.int64)], axis=1)
    _, first, bucket = np.unique(packed, axis=0, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")  # number groups by first appearance
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return rank[bucket.ravel()], np.sort(first)


def _padded(width: int) -> int:
    return max(BANKS, -(-width // BANKS) * BANKS)


@dataclass
class _ColumnGroups:
    """A layer's groups of equal outputs, and one representative column per group."""

    groups: np.ndarray  # int32 [outputs]
    inputs: np.ndarray  # int64 [groups x degree], -1 past a column's degree
    weights: np.ndarray  # float32 [groups x degree]
    original_nnz: int


def _column_groups(network: Network, layer: int) -> _ColumnGroups:
    weights = network.weights
    if isinstance(weights, GeneratedLayers) and not weights.unmergeable:
        # the 16 outputs of a lane read the same inputs: group the lanes' lists, not every output's
        lists, lane = weights.lane_lists(layer)
        lane_groups, _ = duplicate_groups(lists, np.full(lists.shape, WEIGHT, dtype=np.float32))
        groups, representatives = first_appearance(lane_groups[lane])
        inputs = lists[lane[representatives]]
        return _ColumnGroups(
            groups.astype(np.int32), inputs, np.full(inputs.shape, WEIGHT, dtype=np.float32), lane.size * lists.shape[1]
        )
    inputs, values = column_lists(weights[layer])
    groups, representatives = duplicate_groups(inputs, values)
    return _ColumnGroups(
        groups.astype(np.int32), inputs[representatives], values[representatives], valid_entries(inputs)
    )


def plan_index_dtype(width_in: int) -> type[np.integer]:
    """The dtype of a merged plan's indices over an input ``width_in`` wide: 16-bit while the
    input and the 32 zero columns its padding steps read fit (every merged layer but a wide
    network's first), else 32-bit."""
    return np.uint16 if width_in + BANKS <= 1 << 16 else np.int32


def _merged_layer(found: _ColumnGroups, input_groups: np.ndarray | None, width_in: int) -> MergedLayer:
    width = _padded(found.inputs.shape[0])
    sizes = np.bincount(found.groups, minlength=width).astype(np.int32)
    # inputs that fell in one group: one weight, their sum
    indptr, indices, values = merged_columns(
        found.inputs, found.weights, np.zeros(0, np.int32) if input_groups is None else input_groups, width
    )
    index, weight = conflict_free_ell(indptr, indices, values, width, width_in)
    uniform = float(values[0]) if values.size and np.all(values == values[0]) else None
    plan = LayerPlan(index.astype(plan_index_dtype(width_in)), weight, uniform, int(values.size))
    return MergedLayer(plan, found.groups, sizes, width_in, found.original_nnz)


def first_layer_merge_factor(network: Network) -> float:
    """Outputs of the first layer per distinct weight column (1.0: nothing to merge)."""
    found = _column_groups(network, 0)
    return network.neurons / max(found.inputs.shape[0], 1)


#: Outputs per distinct column of the first layer from which merging pays (RadiX-Net: 16).
MERGE_MIN_FACTOR = 2.0


def worth_merging(network: Network) -> bool:
    """Whether to run ``network`` on merged columns (``gpu-merged``, the ``cpu`` engine's
    merged path): its first layer has at most 1 / :data:`MERGE_MIN_FACTOR` as many distinct
    weight columns as outputs."""
    return network.layers > 0 and first_layer_merge_factor(network) >= MERGE_MIN_FACTOR


def merge_network(network: Network, workers: int | None = None) -> MergedNetwork:
    """The merged plan of every layer of ``network``, worked out on ``workers`` threads
    (default: one per CPU). A layer's groups do not depend on the other layers, so they are
    found in parallel first; then each layer is rewritten over its input groups."""
    count = network.layers
    with ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
        found = list(pool.map(lambda layer: _column_groups(network, layer), range(count)))
        widths_in = [network.neurons] + [_padded(f.inputs.shape[0]) for f in found[:-1]]
        layers = list(
            pool.map(
                lambda layer: _merged_layer(found[layer], found[layer - 1].groups if layer else None, widths_in[layer]),
                range(count),
            )
        )
    return MergedNetwork(network.neurons, layers)


def merged_for(network: Network, merged: MergedNetwork | None) -> MergedNetwork:
    """``merged`` if given (a network merged elsewhere, as the shards of a sharded run share
    one), checked to be ``network``'s shape; else ``network`` merged here."""
    if merged is None:
        return merge_network(network)
    if merged.neurons != network.neurons or len(merged.layers) != network.layers:
        raise InputError(
            f"the merged network given has {merged.neurons} neurons x {len(merged.layers)} layers; "
            f"expected this network's {network.neurons} x {network.layers}"
        )
    return merged
