"""The GPU kernels' first layer from counts of lit inputs (host side).

When every stored input entry has one value ``v`` (binary images, as the Graph Challenge's:
:func:`input_bit_value`) and every weight of layer 1
is one value ``w``, a merged column's sum over its steps is ``fmaf(w, v, acc)`` once per lit
input, in the plan's order, and ``fmaf(w, 0, acc) = acc`` for the others. So the sum depends
only on how many of the column's inputs are lit: after ``c`` of them it is the ``c``-th value
of the chain ``0, fmaf(w, v, 0), fmaf(w, v, fmaf(w, v, 0)), ...``, the same float32 bit for
bit.

The first launch of ``kernels/gc_merged.cu`` then scatters each row's lit pixels (about 100
of 1024 in the official inputs) into counts of the merged columns each feeds (two per pixel
in the official network and in the generated ones: about 200 shared-memory increments a row) and reads
every column's sum from the chain, where the bit tiles test each column's 32 inputs (2048
tests a row). The rows kernel (``kernels/gc_layer.cu``) does the same with every output a
pixel feeds (32 in RadiX-Net layers: about 3300 increments a row, where its multiply-adds
read 32768 inputs). This module says when a network allows it and packs what the kernels read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

from spartan_py.engines.shared.ell import ell_from_csc

if TYPE_CHECKING:
    from spartan_py.engines.shared.column_merge import MergedLayer
    from spartan_py.engines.shared.layer_plan import LayerPlan

#: Layer 1's steps at most (the kernels' table of chain values; ``GM_COUNT_MAX`` in
#: kernels/gc_merged.cu and ``GC_COUNT_MAX`` in kernels/gc_layer.cu).
COUNT_MAX_STEPS = 64
#: Merged columns a pixel may feed: 16 bits each in a 32-bit word.
PIXEL_MAX_COLUMNS = 2
#: The value of a word's unused half (so layer 1 is at most 65535 merged columns wide).
NO_COLUMN = 0xFFFF
#: Outputs a pixel may feed in the rows kernel: one a lane of the warp that counts it.
PIXEL_MAX_OUTPUTS = 32


def input_bit_value(inputs) -> float:
    """The value every stored entry of the input rows ``inputs`` (SciPy CSR) has, when they
    all have one non-zero value (binary images, as the Graph Challenge's), else 0.0. With
    such inputs the first launch of either GPU kernel counts them where the first layer
    allows it, and the merged kernel's holds them as bits where it does not."""
    data = np.asarray(inputs.data, dtype=np.float32)
    if data.size == 0 or data[0] == 0 or not np.isfinite(data[0]) or not (data == data[0]).all():
        return 0.0
    return float(data[0])


def pixel_columns(layer: MergedLayer, neurons: int) -> np.ndarray | None:
    """Each input pixel's merged columns of the first layer ``layer``, packed for the kernel:
    ``uint32[neurons]``, the low half of word ``p`` the first column pixel ``p`` feeds, the
    high half the second (ascending, twice the same when the pixel is a column's input
    twice), :data:`NO_COLUMN` where there is none. None when the layer does not allow the
    counts path: weights of more than one value, more than :data:`COUNT_MAX_STEPS` steps,
    a column index of 16 bits or more, or a pixel feeding more than
    :data:`PIXEL_MAX_COLUMNS` columns."""
    plan = layer.plan
    if plan.uniform is None or plan.steps > COUNT_MAX_STEPS or layer.width > NO_COLUMN:
        return None
    index = np.asarray(plan.index)
    real = index < neurons  # padding steps read the zero columns past the input
    pixels = index[real].astype(np.int64)
    columns = np.broadcast_to(np.arange(layer.width), index.shape)[real]
    order = np.lexsort((columns, pixels))
    pixels, columns = pixels[order], columns[order]
    degree = np.bincount(pixels, minlength=neurons)
    if degree.max(initial=0) > PIXEL_MAX_COLUMNS:
        return None
    slot = np.arange(pixels.size) - np.repeat(np.cumsum(degree) - degree, degree)
    packed = np.full((neurons, PIXEL_MAX_COLUMNS), NO_COLUMN, dtype=np.uint16)
    packed[pixels, slot] = columns
    return packed.view("<u4").ravel().copy()


def count_tile_words(layer: MergedLayer, neurons: int) -> int:
    """4-byte words a row of the counts tile takes: a count per merged column, and at least
    the ``neurons / 32`` one-byte monitor counts the launch's last step writes there."""
    return max(layer.width, neurons // 128)


def pixel_outputs(weights: sp.spmatrix, plan: LayerPlan) -> np.ndarray | None:
    """Each input pixel's outputs in the rows kernel's first layer (``weights``, inputs x
    outputs, and its kernel ``plan``): ``uint16[inputs, degree]``, a pixel's outputs
    ascending, then :data:`NO_COLUMN`; ``degree`` is the largest out-degree. None when the
    layer does not allow the counts path: weights of more than one value, more than
    :data:`COUNT_MAX_STEPS` steps, 65535 outputs or more, or a pixel feeding more than
    :data:`PIXEL_MAX_OUTPUTS`."""
    inputs, outputs = weights.shape
    if plan.uniform is None or plan.steps > COUNT_MAX_STEPS or outputs >= NO_COLUMN:
        return None
    csr = sp.csr_matrix(weights)
    csr.sum_duplicates()
    csr.sort_indices()
    degree = np.diff(csr.indptr)
    width = int(degree.max(initial=0))
    if width > PIXEL_MAX_OUTPUTS:
        return None
    # a pixel's outputs are the CSR row's columns: ELL of the transposed layer
    table, _ = ell_from_csc(csr.indptr, csr.indices, csr.data, inputs, max(width, 1))
    table[np.arange(table.shape[1]) >= degree[:, None]] = NO_COLUMN
    return table.astype(np.uint16)
