"""The chain kernel's view of a merged network (``kernels/gc_chain.cu``, host side).

After the first launch, few rows stay live (1475 of 60000 on the official proxy) and each
merged layer is narrow (64 columns). The chain kernel gives each team (a warp, or a pair of
warps meeting at a named barrier) a group of rows and carries them through all of a launch's
layers with no block barrier between layers; a block stages every layer's indices and column
sizes once, the indices packed as bytes (four steps of a column a word),
with each step's weight as a 4-bit entry of the layer's table of distinct weights (merged
RadiX-Net columns sum duplicate inputs' weights: 1/16, 2/16, ...; at most 8 values a layer
in the official network).
This module decides which launches it can run and packs their indices; the decision is
made from the network alone, so the GPU engine and its CPU twin agree on every launch.
"""

from __future__ import annotations

import numpy as np

from spartan_py.errors import InputError

#: Threads of a block of the chain kernel (one block per SM) whose warps work alone.
CHAIN_THREADS = 1024
#: Rows a team takes at once (the kernel's ``G`` instances).
CHAIN_GROUP_ROWS = (1, 2)
#: Warps a team has (the kernel's ``P`` instances): one, or a pair meeting at a named barrier
#: between layers.
CHAIN_TEAM_WARPS = (1, 2)
#: Teams of more than one warp a block may hold: named barriers 1..15 (0 is the block's).
NAMED_BARRIERS = 15
#: Threads of a block of the chain kernel whose teams are pairs (``CH_PAIR_THREADS``): 8 teams,
#: enough for the proxy's long launches (11 groups an SM), and 80 registers a thread where
#: 960 threads capped them at 64 (H100, proxy: 0.4125 against 0.4267 ms, 768 threads 0.4200).
CHAIN_PAIR_THREADS = 512
#: Rows a team takes unless the engine option ``chain_rows`` says otherwise: two rows share
#: each step's index and weight decoding (these launches are bound by instruction issue).
DEFAULT_GROUP_ROWS = 2
#: Launches of at most this many layers have teams of one warp, longer ones pairs: the early
#: launches carry most of the rows, enough to keep every warp busy; the long ones of the tail
#: few (1475 of 60000 on the official proxy), where a pair keeps as many warps at work as one
#: warp a row would, each step's decoding still serving two rows. On the official proxy
#: (H100, docs/performance-notes.md) pairs with two rows ran the 16-32-layer launches in 64.4
#: us against 70.0 (a warp of one row), 74.7 (a warp of two) and 74.9 (a pair of one), and
#: the 1-layer launches 53% slower than a warp of two.
LONE_WARP_MAX_LAYERS = 8
#: Merged columns a lane computes at most (the kernel's ``C`` instances are 1 and 2).
CHAIN_MAX_COLUMNS = 2
#: Layers a chain launch may take (``CH_MAX_LAYERS`` in the kernel).
CHAIN_MAX_LAYERS = 32
#: Dynamic shared memory a chain launch may take: within what an A100 block may opt in to
#: (163 KiB), so that the choice is the same on every supported GPU and in the CPU twin.
CHAIN_SHARED_BUDGET_BYTES = 160 * 1024
#: Zero columns after a row's values that padding steps read (``CH_PAD``).
PAD_COLUMNS = 32
#: Distinct weights a layer may have (four bits a step).
TABLE_SIZE = 16


def checked_chain_rows(rows: int | None) -> int | None:
    """``rows`` if it is None (:data:`DEFAULT_GROUP_ROWS`), 0 (no chain launches) or
    one of :data:`CHAIN_GROUP_ROWS`, else an :class:`~spartan_py.errors.InputError`."""
    if rows is not None and rows != 0 and rows not in CHAIN_GROUP_ROWS:
        raise InputError(
            f"chain_rows must be None (by launch), 0 (off) or one of {CHAIN_GROUP_ROWS} for gpu-merged, not {rows!r}"
        )
    return rows


def checked_chain_warps(warps: int | None) -> int | None:
    """``warps`` if it is None (:func:`chain_team_warps` decides) or one of
    :data:`CHAIN_TEAM_WARPS`, else an :class:`~spartan_py.errors.InputError`."""
    if warps is not None and warps not in CHAIN_TEAM_WARPS:
        raise InputError(
            f"chain_warps must be None (by launch) or one of {CHAIN_TEAM_WARPS} for gpu-merged, not {warps!r}"
        )
    return warps


def chain_team_warps(layers: int) -> int:
    """Warps a team has in a chain launch of ``layers`` layers (:data:`LONE_WARP_MAX_LAYERS`)."""
    return 1 if layers <= LONE_WARP_MAX_LAYERS else 2


def chain_teams(team_warps: int) -> int:
    """Teams of ``team_warps`` warps in a block of the chain kernel."""
    return CHAIN_THREADS // 32 if team_warps == 1 else min(CHAIN_PAIR_THREADS // (32 * team_warps), NAMED_BARRIERS)


def chain_block_threads(team_warps: int) -> int:
    """Threads of a block of the chain kernel whose teams have ``team_warps`` warps."""
    return 32 * team_warps * chain_teams(team_warps)


def _weight_table(layer) -> np.ndarray | None:
    """The distinct weights of a layer that is not uniform (sorted), or None."""
    return None if layer.plan.uniform is not None else np.unique(layer.plan.weight)


def chain_fits(layer) -> bool:
    """Whether the chain kernel can compute a merged layer: at most ``32 *
    CHAIN_MAX_COLUMNS`` columns, every index (padding columns included) a byte, and uniform
    weights or at most :data:`TABLE_SIZE` distinct ones."""
    return _fits(layer, _weight_table(layer))


def _fits(layer, table: np.ndarray | None) -> bool:
    """:func:`chain_fits` given the layer's :func:`_weight_table`."""
    return (
        layer.width <= 32 * CHAIN_MAX_COLUMNS
        and 0 < layer.width_in
        and layer.width_in + PAD_COLUMNS <= 256
        and (table is None or table.size <= TABLE_SIZE)
    )


def chain_steps(layer) -> int:
    """Index words a column of the layer takes in the chain kernel (steps / 4, rounded up)."""
    return -(-layer.plan.steps // 4)


def chain_code_steps(layer) -> int:
    """Weight-code words a column takes (steps / 8, rounded up; 0 for uniform weights)."""
    return 0 if layer.plan.uniform is not None else -(-layer.plan.steps // 8)


def chain_words(layer) -> np.ndarray | None:
    """A merged layer's stage for the chain kernel (int32): ``k4 x width`` index words (word
    ``[s4, h]``: steps ``4 s4 .. 4 s4 + 3`` of column ``h``, a byte each, low byte first),
    ``k8 x width`` code words (four bits a step into the table), then the table's
    :data:`TABLE_SIZE` floats. Steps past the plan's read the zero column ``width_in``.
    None when :func:`chain_fits` says no."""
    distinct = _weight_table(layer)
    if not _fits(layer, distinct):
        return None
    steps, width = layer.plan.steps, layer.width
    k4, k8 = chain_steps(layer), chain_code_steps(layer)
    index = np.full((4 * k4, width), layer.width_in, dtype=np.uint32)
    index[:steps] = np.asarray(layer.plan.index).reshape(steps, width)
    quads = index.reshape(k4, 4, width)
    words = quads[:, 0] | (quads[:, 1] << 8) | (quads[:, 2] << 16) | (quads[:, 3] << 24)
    table = np.zeros(TABLE_SIZE, np.float32)
    codes = np.zeros((8 * k8, width), dtype=np.uint32)
    if distinct is not None:
        table[: distinct.size] = distinct
        codes[:steps] = np.searchsorted(distinct, np.asarray(layer.plan.weight).reshape(steps, width))
    octets = codes.reshape(k8, 8, width)
    code_words = np.zeros((k8, width), dtype=np.uint32)
    for step in range(8):
        code_words |= octets[:, step] << (4 * step)
    return np.concatenate([words.ravel(), code_words.ravel(), table.view(np.uint32)]).view(np.int32)


def chain_team_bytes(stride: int, group_rows: int) -> int:
    """Shared memory of one team's two buffers of ``group_rows`` rows (``stride`` floats and
    the padding columns each)."""
    return 4 * 2 * group_rows * (stride + PAD_COLUMNS)


def chain_shared_bytes(layers, stride: int, group_rows: int, team_warps: int = 1) -> int:
    """Dynamic shared memory of a chain launch of ``layers``: their stages (:func:`chain_words`)
    and column sizes (copied there at the launch's start), and every team's buffers."""
    words = sum((chain_steps(layer) + chain_code_steps(layer) + 1) * layer.width + TABLE_SIZE for layer in layers)
    return 4 * words + chain_teams(team_warps) * chain_team_bytes(stride, group_rows)


def chain_launch(layers, start: int, stride: int, group_rows: int, team_warps: int = 1) -> bool:
    """Whether the launch of ``layers`` (starting at layer ``start``) runs the chain kernel:
    not the first launch (it reads the n-wide inputs), every layer fits, at most
    :data:`CHAIN_MAX_LAYERS` of them, within :data:`CHAIN_SHARED_BUDGET_BYTES`. ``group_rows``
    0 turns the kernel off."""
    return (
        group_rows > 0
        and start > 0
        and 0 < len(layers) <= CHAIN_MAX_LAYERS
        and all(chain_fits(layer) for layer in layers)
        and chain_shared_bytes(layers, stride, group_rows, team_warps) <= CHAIN_SHARED_BUDGET_BYTES
    )
