"""The generated networks as the peers can read them.

XY-2021's and SNICIT's weight scheduling (their ``HashReorder`` and block generator) relies on
the official files' numbering: in every layer the 16 outputs that read the same 32 inputs are
the outputs ``j`` with one ``j mod (N/16)`` (checked on the official 1024 layers 7-9). A
``generated:N`` network relabels its later layers' outputs at random, so their scheduler stops
("TODO Just support same len"). :func:`lane_ordered` renumbers each layer's outputs (and the
next layer's inputs alike) so that the outputs of one lane are ``lane + k * N/16``: the same
network up to the order of hidden neurons, so every input row's categories are the same.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from spartan_py.graph_challenge.generate import BLOCKS


def lane_positions(lane: np.ndarray) -> np.ndarray:
    """New position of each output given its lane: ``lane + k * M`` for the ``k``-th output
    (in index order) of that lane, ``M = len(lane) / 16``."""
    width = lane.size // BLOCKS
    order = np.argsort(lane, kind="stable")
    position = np.empty(lane.size, dtype=np.int64)
    position[order] = lane[order] + width * (np.arange(lane.size) % BLOCKS)
    return position


class LaneOrdered(Sequence):
    """The layers of a generated network (``GeneratedLayers``), outputs renumbered by lane."""

    def __init__(self, layers):
        self.base = layers
        self.neurons = layers.neurons

    def __len__(self) -> int:
        return len(self.base)

    def _inverse(self, index: int) -> np.ndarray:
        """Old output at each new position of layer ``index`` (identity before layer 0)."""
        if index < 0:
            return np.arange(self.neurons)
        position = lane_positions(self.base.lane_lists(index)[1])
        inverse = np.empty_like(position)
        inverse[position] = np.arange(position.size)
        return inverse

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        matrix = self.base[index]
        renumbered = matrix[self._inverse(index - 1), :][:, self._inverse(index)]
        return sp.csr_matrix(renumbered, dtype=np.float32)

    @property
    def edges(self) -> int:
        """Weights over all layers, as the base network's."""
        return self.base.edges


def lane_ordered(network):
    """``network`` (a generated one) with its outputs renumbered by lane (module docstring)."""
    from spartan_py.graph_challenge.network import Network

    return Network(
        network.neurons, LaneOrdered(network.weights), network.bias, network.clamp, network.source + "+lanes"
    )
