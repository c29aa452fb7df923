"""Order each output neuron's inputs so that a warp's shared-memory reads never conflict.

In the rows kernel, the 32 threads of a warp compute 32 consecutive output neurons; at step
``s`` each thread reads the tile entry of its ``s``-th input, and shared memory serves the
warp in one pass only if those 32 entries lie in 32 different banks (``index mod 32``).
A neuron's inputs may be summed in any order, so the order is ours to choose: for each
group of 32 outputs, build the bipartite multigraph outputs x banks (one edge per weight)
and colour its edges with as many colours as its largest degree ``D`` (Koenig's theorem:
a bipartite multigraph needs no more). Colour = step. A step where an output has no edge
reads one of 32 always-zero padding columns ``n + b`` in a bank ``b`` free at that step.

Random (relabelled) RadiX-Net layers need ``D`` ~ 44 steps instead of 32 steps with ~3.5-way
conflicts; the butterfly layers need exactly 32.
"""

from __future__ import annotations

import numba
import numpy as np

from spartan_py.engines.shared.ell import ell_from_csc

BANKS = 32


@numba.njit(cache=True, nogil=True)
def edge_colouring(end_u, end_v, vertices_u, vertices_v, colours):  # pragma: no cover - compiled
    """Colour the edges ``end_u[e] - end_v[e]`` of a bipartite multigraph so that no two
    edges at a vertex share a colour, with ``colours`` >= its largest degree (Koenig's
    theorem: a bipartite multigraph needs no more). Returns each edge's colour.
    """
    edges = end_u.shape[0]
    colour = np.full(edges, -1, np.int64)
    at_u = np.full((vertices_u, colours), -1, np.int64)
    at_v = np.full((vertices_v, colours), -1, np.int64)
    path = np.empty(2 * (vertices_u + vertices_v) + 2, np.int64)
    for e in range(edges):
        u, b = end_u[e], end_v[e]
        alpha = -1
        for c in range(colours):
            if at_u[u, c] < 0:
                alpha = c
                break
        beta = -1
        for c in range(colours):
            if at_v[b, c] < 0:
                beta = c
                break
        if at_v[b, alpha] >= 0:
            # Swap alpha and beta along the alternating path that starts at v-vertex b with
            # colour alpha; in a bipartite graph it cannot end at u, so alpha frees at b.
            length = 0
            x_is_v = True
            x = b
            c = alpha
            while True:
                f = at_v[x, c] if x_is_v else at_u[x, c]
                if f < 0:
                    break
                path[length] = f
                length += 1
                x = end_u[f] if x_is_v else end_v[f]
                x_is_v = not x_is_v
                c = beta if c == alpha else alpha
            for q in range(length):
                f = path[q]
                at_u[end_u[f], colour[f]] = -1
                at_v[end_v[f], colour[f]] = -1
            for q in range(length):
                f = path[q]
                colour[f] = beta if colour[f] == alpha else alpha
                at_u[end_u[f], colour[f]] = f
                at_v[end_v[f], colour[f]] = f
        colour[e] = alpha
        at_u[u, alpha] = e
        at_v[b, alpha] = e
    return colour


@numba.njit(cache=True, nogil=True)
def _colour_group(inputs, degree, steps):  # pragma: no cover - compiled
    """Edge-colour one group: ``inputs[u, :degree[u]]`` are output u's inputs, a colour is a
    step, the other end of an edge its input's bank.

    Returns ``slot[u, s]`` = position in ``inputs[u]`` used at step ``s`` or -1.
    """
    outputs = inputs.shape[0]
    edges = int(degree.sum())
    end_u = np.empty(edges, np.int64)
    end_b = np.empty(edges, np.int64)
    pos = np.empty(edges, np.int64)
    e = 0
    for u in range(outputs):
        for p in range(degree[u]):
            end_u[e] = u
            end_b[e] = inputs[u, p] % BANKS
            pos[e] = p
            e += 1
    colour = edge_colouring(end_u, end_b, outputs, BANKS, steps)
    slot = np.full((outputs, steps), -1, np.int64)
    for f in range(edges):
        slot[end_u[f], colour[f]] = pos[f]
    return slot


def conflict_free_ell(
    col_ptr: np.ndarray, row_index: np.ndarray, values: np.ndarray, neurons: int, input_count: int | None = None
):
    """CSC weights -> k-major ELL ``(index, weight)`` of shape (steps, neurons), bank-conflict-free.

    ``neurons`` outputs (columns); ``input_count`` input rows (default ``neurons``). ``index``
    refers to a tile row of ``input_count + 32`` entries whose last 32 are zero; padding steps
    read those, with weight 0. Both counts must be multiples of 32.
    """
    input_count = neurons if input_count is None else input_count
    if neurons % BANKS or input_count % BANKS:
        raise ValueError(f"outputs and inputs must each be a multiple of {BANKS}, got {neurons} and {input_count}")
    degree = np.diff(col_ptr).astype(np.int64)
    width = max(int(degree.max(initial=0)), 1)
    dense_inputs, dense_values = ell_from_csc(col_ptr, row_index, values, neurons, width)
    return _conflict_free(dense_inputs, dense_values, degree, input_count)


@numba.njit(cache=True, nogil=True)
def _conflict_free(inputs, values, degree, input_count):  # pragma: no cover - compiled
    """Each group of 32 outputs coloured with as many steps as its largest degree or bank
    load (at least the layer's widest column), then assembled over the most steps any
    group needs."""
    neurons, width = inputs.shape
    groups = neurons // BANKS
    steps_needed = np.empty(groups, np.int64)
    total = width
    for g in range(groups):
        bank_load = np.zeros(BANKS, np.int64)
        steps = width
        for u in range(g * BANKS, (g + 1) * BANKS):
            for p in range(degree[u]):
                bank = inputs[u, p] % BANKS
                bank_load[bank] += 1
                steps = max(steps, bank_load[bank])
        steps_needed[g] = steps
        total = max(total, steps)
    # element by element: a 2-D slice assignment costs Numba seconds to compile
    padded = np.full((neurons, total), -1, np.int64)
    for g in range(groups):
        start = g * BANKS
        found = _colour_group(inputs[start : start + BANKS], degree[start : start + BANKS], steps_needed[g])
        for u in range(BANKS):
            for step in range(steps_needed[g]):
                padded[start + u, step] = found[u, step]
    return _assemble(padded, inputs, values, neurons, input_count)


@numba.njit(cache=True, nogil=True)
def _assemble(slot, inputs, values, neurons, padding_base):  # pragma: no cover - compiled
    """k-major (index, weight) from per-output step slots; free slots read a free zero column."""
    steps = slot.shape[1]
    index = np.empty((steps, neurons), np.int32)
    weight = np.zeros((steps, neurons), np.float32)
    used = np.zeros(BANKS, np.bool_)
    for start in range(0, neurons, BANKS):
        for s in range(steps):
            used[:] = False
            for u in range(start, start + BANKS):
                p = slot[u, s]
                if p >= 0:
                    index[s, u] = inputs[u, p]
                    weight[s, u] = values[u, p]
                    used[inputs[u, p] % BANKS] = True
            free = 0
            for u in range(start, start + BANKS):
                if slot[u, s] < 0:
                    while used[free]:
                        free += 1
                    index[s, u] = padding_base + free
                    free += 1
    return index, weight
