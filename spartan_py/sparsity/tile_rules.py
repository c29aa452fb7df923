"""Which tiles the kernels take, checked before any work (an experiment's ``tile:``).

Everywhere a tile is ``rows x cols``, both powers of two (:class:`~spartan_py.sparsity.tiles.TileShape`).
On the GPU, the tile GEMM's instances (:data:`~spartan_py.sparsity.gpu_kernels.F32_SHAPES`,
:data:`~spartan_py.sparsity.gpu_kernels.TF32_SHAPES`) fix the rows and the inner step fixes
the columns' multiple (``fp32x3`` runs the TF32 kernel), and the monitor's epilogue takes
rows up to 128 and 4 to 128 columns (as :mod:`~spartan_py.sparsity.monitor` checks).
"""

from __future__ import annotations

from spartan_py.errors import InputError
from spartan_py.sparsity.gpu_kernels import (
    EPILOGUE_COLS,
    EPILOGUE_ROWS,
    F32_BLOCK_K,
    F32_SHAPES,
    TF32_BLOCK_K,
    TF32_SHAPES,
)
from spartan_py.sparsity.tiles import TileShape


def tile_problem(tile, precision: str, *, gpu: bool) -> str | None:
    """Why the kernels cannot take ``tile`` (a pair or one size) at ``precision`` (on the GPU
    where ``gpu``), in one line, or None."""
    try:
        shape = TileShape.of(tile)
    except InputError as exc:
        return str(exc)
    if not gpu:
        return None
    if precision == "fp32":
        heights, step = sorted({s[0] for s in F32_SHAPES}), F32_BLOCK_K
    else:
        heights, step = sorted({s[0] for s in TF32_SHAPES}), TF32_BLOCK_K
    if shape.rows not in heights:
        return f"the GPU's {precision} tile GEMM takes tiles of {', '.join(map(str, heights))} rows, not {shape.rows}"
    if shape.cols % step:
        return f"the GPU's {precision} tile GEMM takes tile columns in multiples of {step}, not {shape.cols}"
    if shape.rows > EPILOGUE_ROWS or not 4 <= shape.cols <= EPILOGUE_COLS:
        return f"the GPU monitor takes tiles of up to {EPILOGUE_ROWS} rows and 4 to {EPILOGUE_COLS} columns"
    return None
