"""The chain kernel's view of a merged network (``kernels/gc_chain.cu``, host side).

After the first launch, few rows stay live (1475 of 60000 on the official proxy) and each
merged layer is narrow (64 columns). The chain kernel gives each warp a group of rows and
carries them through all of a launch's layers with no block barrier between layers; a
block stages every layer's indices once, packed as bytes (four steps of a column a word),
with each step's weight as a 4-bit entry of the layer's table of distinct weights (merged
RadiX-Net columns sum duplicate inputs' weights: 1/16, 2/16, ...; at most 8 values a layer
in the official network).
This module decides which launches it can run and packs their indices; the decision is
made from the network alone, so the GPU engine and its CPU twin agree on every launch.
"""

from __future__ import annotations

import numpy as np

from spartan_py.errors import InputError

#: Threads of a block of the chain kernel; one block per SM.
CHAIN_THREADS = 1024
#: Rows a warp takes at once (the kernel's ``G`` instances).
CHAIN_GROUP_ROWS = (1, 2)
#: Launches of at most this many layers take two rows a warp, longer ones one: the early
#: launches carry most of the rows (two a warp share each step's index and weight decoding),
#: the long ones of the tail few (one a warp spreads them over more warps). On the official
#: proxy (H100, session 25 of docs/performance-notes.md) two rows ran the 1-8-layer launches
#: 5-27% faster and one row the 16-32-layer launches 3-4% faster.
TWO_ROW_MAX_LAYERS = 8
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
    """``rows`` if it is None (:func:`chain_group_rows` decides), 0 (no chain launches) or
    one of :data:`CHAIN_GROUP_ROWS`, else an :class:`~spartan_py.errors.InputError`."""
    if rows is not None and rows != 0 and rows not in CHAIN_GROUP_ROWS:
        raise InputError(
            f"chain_rows must be None (by launch), 0 (off) or one of {CHAIN_GROUP_ROWS} for gpu-merged, not {rows!r}"
        )
    return rows


def chain_group_rows(layers: int) -> int:
    """Rows a warp takes in a chain launch of ``layers`` layers (:data:`TWO_ROW_MAX_LAYERS`)."""
    return 2 if layers <= TWO_ROW_MAX_LAYERS else 1


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


def chain_warp_bytes(stride: int, group_rows: int) -> int:
    """Shared memory of one warp's two buffers of ``group_rows`` rows (``stride`` floats and
    the padding columns each)."""
    return 4 * 2 * group_rows * (stride + PAD_COLUMNS)


def chain_shared_bytes(layers, stride: int, group_rows: int) -> int:
    """Dynamic shared memory of a chain launch of ``layers``: their stages (:func:`chain_words`)
    and every warp's buffers."""
    words = sum((chain_steps(layer) + chain_code_steps(layer)) * layer.width + TABLE_SIZE for layer in layers)
    return 4 * words + (CHAIN_THREADS // 32) * chain_warp_bytes(stride, group_rows)


def chain_launch(layers, start: int, stride: int, group_rows: int) -> bool:
    """Whether the launch of ``layers`` (starting at layer ``start``) runs the chain kernel:
    not the first launch (it reads the n-wide inputs), every layer fits, at most
    :data:`CHAIN_MAX_LAYERS` of them, within :data:`CHAIN_SHARED_BUDGET_BYTES`. ``group_rows``
    0 turns the kernel off."""
    return (
        group_rows > 0
        and start > 0
        and 0 < len(layers) <= CHAIN_MAX_LAYERS
        and all(chain_fits(layer) for layer in layers)
        and chain_shared_bytes(layers, stride, group_rows) <= CHAIN_SHARED_BUDGET_BYTES
    )
