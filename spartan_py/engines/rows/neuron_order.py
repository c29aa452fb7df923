"""Renumber each layer's neurons so that the rows kernel's warps need as few steps as possible.

In the rows kernel the 32 threads of warp ``g`` compute outputs ``32g .. 32g + 31`` of a
layer and, at every step, read one input of each from the tile row, input ``i`` from bank
``i mod 32``; a warp needs as many steps as the most edges of its 32 outputs that start in
one bank (:mod:`~spartan_py.engines.shared.bank_schedule`), 32 at best. With natural
numbers, relabelled RadiX-Net layers need ~43.

Neurons may be renumbered between layers without changing what the network computes: the
kernel runs ``W[order[l - 1]][:, order[l]]``, where ``order[l][p]`` is the neuron of layer
``l``'s output kept at tile position ``p`` (``order[-1]``: the inputs', whose columns are
renumbered on upload; the last layer's outputs stay in natural order, so results need no
renumbering). A position
``p`` is warp ``p // 32`` and bank ``p % 32``, both ours to choose for every neuron:

- *Banks*, from the next layer: where that layer's distinct input columns form a bipartite
  graph through shared inputs (every input in at most two distinct columns, as in RadiX-Net
  layers, whose 16 copies of a column share its inputs), colouring that graph's edges with 32
  colours (:func:`~spartan_py.engines.shared.bank_schedule.edge_colouring`) gives every
  column 32 inputs in 32 different banks; then any 32 outputs read every bank exactly 32
  times. Otherwise the natural banks, ``neuron mod 32``.
- *Warps*, for this layer: where every output already reads distinct banks, in neuron order;
  otherwise a local search that swaps the warps of two outputs of one bank until no warp
  reads a bank more than 32 times or its budget is spent.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numba
import numpy as np
import scipy.sparse as sp

from spartan_py.engines.shared.bank_schedule import BANKS, edge_colouring
from spartan_py.engines.shared.ell import ell_from_csc
from spartan_py.host.threads import ordered_map

#: Swap attempts of the warp search per neuron of a layer.
SEARCH_SWAPS_PER_NEURON = 64
#: An odd 64-bit constant (the golden ratio's): its powers weight a column's inputs in its hash.
_HASH_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)


def _input_columns(csc: sp.csc_matrix) -> tuple[np.ndarray, np.ndarray]:
    """(distinct columns as rows of input indices padded with -1, in lexicographic order, each
    output's column): ``np.unique(padded, axis=0, return_inverse=True)``, found through a hash
    of each row (a sort of one integer a row, not of rows compared element by element, which
    holds the GIL: 0.45 s against 4 ms for a 16384-neuron layer), checked row by row."""
    degree = np.diff(csc.indptr)
    width = max(int(degree.max(initial=0)), 1)
    index, _ = ell_from_csc(csc.indptr, csc.indices, csc.data, csc.shape[1], width)
    padded = np.where(np.arange(width)[None, :] < degree[:, None], index, -1).astype(np.int64)
    weights = np.cumprod(np.full(width, _HASH_MULTIPLIER, dtype=np.uint64)).view(np.int64)  # wraps: a hash
    _, first, inverse = np.unique((padded * weights).sum(axis=1), return_index=True, return_inverse=True)
    distinct = padded[first]
    if not np.array_equal(padded, distinct[inverse]):  # two columns with one hash
        return np.unique(padded, axis=0, return_inverse=True)
    order = np.lexsort(distinct.T[::-1])  # lexicographic, first entry first, as np.unique's
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return distinct[order], rank[inverse]


def _two_sides(columns: int, first: np.ndarray, second: np.ndarray) -> np.ndarray | None:
    """A side (0 or 1) for each column so that every edge ``first[e] - second[e]`` joins two
    sides, or None when the graph is not bipartite."""
    graph = sp.coo_matrix((np.ones(first.size), (first, second)), shape=(columns, columns)).tocsr()
    graph = (graph + graph.T).tocsr()
    side = np.full(columns, -1, np.int64)
    for root in range(columns):
        if side[root] >= 0:
            continue
        side[root] = 0
        stack = [root]
        while stack:
            vertex = stack.pop()
            for other in graph.indices[graph.indptr[vertex] : graph.indptr[vertex + 1]]:
                if side[other] < 0:
                    side[other] = 1 - side[vertex]
                    stack.append(other)
                elif side[other] == side[vertex]:
                    return None
    return side


def rainbow_banks(next_layer: sp.spmatrix) -> np.ndarray | None:
    """A bank for each input neuron of ``next_layer`` (rows = inputs), ``n / 32`` neurons per
    bank, such that every output reads its inputs from different banks; None where this
    method cannot find one (an input in more than two distinct columns, a column of more
    than 32 inputs, an odd cycle of columns, unequal banks)."""
    n = next_layer.shape[0]
    if n % BANKS:
        return None
    csc = sp.csc_matrix(next_layer, copy=True)
    csc.sort_indices()  # equal columns must list their inputs alike
    columns, _ = _input_columns(csc)
    if columns.shape[1] > BANKS:
        return None
    column_of_entry = np.repeat(np.arange(columns.shape[0]), columns.shape[1])
    entries = columns.ravel()
    real = entries >= 0
    inputs, column_of_entry = entries[real], column_of_entry[real]
    order = np.argsort(inputs, kind="stable")
    inputs, column_of_entry = inputs[order], column_of_entry[order]
    holders = np.bincount(inputs, minlength=n)
    if holders.max(initial=0) > 2:
        return None
    starts = np.concatenate([[0], np.cumsum(holders)])[:-1]
    pair = np.flatnonzero(holders == 2)
    single = np.flatnonzero(holders == 1)
    first, second = column_of_entry[starts[pair]], column_of_entry[starts[pair] + 1]
    side = _two_sides(columns.shape[0], first, second)
    if side is None:
        return None
    # edges between the two sides: a shared input joins its two columns, an input of one
    # column joins it to a vertex of its own on the other side
    alone = column_of_entry[starts[single]]
    dummy = columns.shape[0] + np.arange(single.size)
    a = np.concatenate([np.where(side[first] == 0, first, second), np.where(side[alone] == 0, alone, dummy)])
    b = np.concatenate([np.where(side[first] == 0, second, first), np.where(side[alone] == 0, dummy, alone)])
    vertices = columns.shape[0] + single.size
    colour = edge_colouring(a.astype(np.int64), b.astype(np.int64), vertices, vertices, BANKS)
    bank = np.full(n, -1, np.int64)
    bank[np.concatenate([pair, single])] = colour
    unused = np.flatnonzero(holders == 0)
    if unused.size:  # inputs no output reads: wherever banks are short
        short = np.repeat(np.arange(BANKS), np.maximum(n // BANKS - np.bincount(bank[bank >= 0], minlength=BANKS), 0))
        if short.size != unused.size:
            return None
        bank[unused] = short
    if np.any(np.bincount(bank, minlength=BANKS) != n // BANKS):
        return None
    return bank


@numba.njit(cache=True, nogil=True)
def _search_warps(inputs, degree, in_bank, warp_of, member, swaps, seed):  # pragma: no cover - compiled
    """Swap the warps of outputs that share a bank (``member[w, b]`` is warp w's output of
    bank b) while the sum over warps and banks of reads past 32 does not grow."""
    np.random.seed(seed)
    warps = member.shape[0]
    load = np.zeros((warps, BANKS), np.int64)
    for j in range(inputs.shape[0]):
        for p in range(degree[j]):
            load[warp_of[j], in_bank[inputs[j, p]]] += 1
    excess = 0
    for w in range(warps):
        for b in range(BANKS):
            excess += max(load[w, b] - BANKS, 0)
    delta = np.zeros((2, BANKS), np.int64)
    for _ in range(swaps):
        if excess == 0:
            break
        w1 = np.random.randint(warps)
        w2 = np.random.randint(warps)
        if w1 == w2:
            continue
        bank = np.random.randint(BANKS)
        j1, j2 = member[w1, bank], member[w2, bank]
        delta[:] = 0
        for p in range(degree[j1]):
            delta[0, in_bank[inputs[j1, p]]] -= 1
            delta[1, in_bank[inputs[j1, p]]] += 1
        for p in range(degree[j2]):
            delta[0, in_bank[inputs[j2, p]]] += 1
            delta[1, in_bank[inputs[j2, p]]] -= 1
        change = 0
        for b in range(BANKS):
            change += max(load[w1, b] + delta[0, b] - BANKS, 0) - max(load[w1, b] - BANKS, 0)
            change += max(load[w2, b] + delta[1, b] - BANKS, 0) - max(load[w2, b] - BANKS, 0)
        if change <= 0:
            for b in range(BANKS):
                load[w1, b] += delta[0, b]
                load[w2, b] += delta[1, b]
            member[w1, bank], member[w2, bank] = j2, j1
            warp_of[j1], warp_of[j2] = w2, w1
            excess += change
    return warp_of


def balanced_warps(
    layer: sp.spmatrix, in_bank: np.ndarray, out_bank: np.ndarray, *, search: bool = True, seed: int = 0
) -> np.ndarray:
    """A warp for each output neuron of ``layer`` such that each warp holds one output of
    every bank (``out_bank``, ``n / 32`` outputs each) and, with ``search``, reads each bank of
    its inputs (``in_bank``) as close to 32 times as a local search finds. Without the search,
    or where it is not needed (every output reads distinct banks), warp ``w`` takes the
    ``w``-th output of every bank in neuron order: the natural warps (``neuron // 32``) where
    the banks are natural."""
    csc = sp.csc_matrix(layer)
    n = csc.shape[1]
    warp_of = _rank_in_bank(out_bank)
    member = np.empty((n // BANKS, BANKS), np.int64)
    member[warp_of, out_bank] = np.arange(n)
    degree = np.diff(csc.indptr)
    reads = np.bincount(np.repeat(np.arange(n), degree) * BANKS + in_bank[csc.indices], minlength=n * BANKS)
    if not search or reads.max(initial=0) <= 1:
        return warp_of
    inputs, _ = ell_from_csc(csc.indptr, csc.indices, csc.data, n, max(int(degree.max(initial=0)), 1))
    return _search_warps(
        inputs, degree.astype(np.int64), in_bank.astype(np.int64), warp_of, member, SEARCH_SWAPS_PER_NEURON * n, seed
    )


def _positions_to_order(position: np.ndarray) -> np.ndarray:
    """``order[p]``: the neuron at position ``p``, from each neuron's position."""
    order = np.empty_like(position)
    order[position] = np.arange(position.size)
    return order


def _rank_in_bank(bank: np.ndarray) -> np.ndarray:
    """Each neuron's rank among the neurons of its bank, in neuron order."""
    return np.argsort(np.argsort(bank, kind="stable"), kind="stable") % (bank.size // BANKS)


def neuron_orders(layers: Iterable[sp.spmatrix], workers: int | None = None) -> Iterator[np.ndarray]:
    """The rows kernel's tile positions for square ``layers`` of a width that is a multiple of
    32: first ``order[p]``, the input neuron at position ``p`` of the first layer's input, then,
    for each layer, its output neuron there (the last layer's: the identity). Each layer's
    banks and warps depend on that layer and the next only, so they are worked out on
    ``workers`` threads (:func:`~spartan_py.host.threads.ordered_map`), layers read a few
    ahead, so that a lazily built network is never held whole; the orders are the same as
    one thread's."""
    staged = ordered_map(lambda layer: (layer, rainbow_banks(layer)), layers, workers=workers)
    head = next(staged, None)
    if head is None:
        return
    layer, first_bank = head
    n = layer.shape[0]
    if n % BANKS or layer.shape != (n, n):
        raise ValueError(f"layers must be square with a multiple of {BANKS} neurons, not {layer.shape}")
    natural = np.arange(n) % BANKS
    in_bank = natural if first_bank is None else first_bank
    # the inputs are not computed by warps: any position in their bank will do
    yield _positions_to_order(_rank_in_bank(in_bank) * BANKS + in_bank)

    def jobs() -> Iterator[tuple[int, sp.spmatrix, np.ndarray, np.ndarray, bool]]:
        """(number, layer, its input banks, its output banks, whether a layer follows)."""
        number, current, bank_in = 0, layer, in_bank
        for following, following_bank in staged:
            out_bank = natural if following_bank is None else following_bank
            yield number, current, bank_in, out_bank, True
            current, bank_in, number = following, out_bank, number + 1
        yield number, current, bank_in, natural, False

    def positions(job: tuple[int, sp.spmatrix, np.ndarray, np.ndarray, bool]) -> np.ndarray:
        number, current, bank_in, out_bank, search = job
        warp = balanced_warps(current, bank_in, out_bank, search=search, seed=number)
        return _positions_to_order(warp * BANKS + out_bank)

    yield from ordered_map(positions, jobs(), workers=workers)


def renumbered(layer: sp.spmatrix, input_order: np.ndarray, output_order: np.ndarray) -> sp.csr_matrix:
    """``layer`` as the kernel runs it: input position ``p`` is neuron ``input_order[p]``,
    output position ``q`` neuron ``output_order[q]``."""
    return sp.csr_matrix(sp.csr_matrix(layer)[input_order][:, output_order])
