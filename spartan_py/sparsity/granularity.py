"""Sparsity of a convolution's training step at every granularity, from its maps.

For one convolution, ``X`` is the im2col of its input (rows = output pixels ordered image,
out_y, out_x; columns = channel x kernel window) and ``dY`` the gradient reaching its output
as a matrix (rows = output pixels, columns = output channels). The three GEMMs of the step and
the operand each can skip:

| GEMM | product | sparse operand (its tiles) |
| --- | --- | --- |
| ``forward`` | ``X W`` | ``X`` ``[M x K]`` |
| ``weight_grad`` | ``X^T dY`` | ``X^T`` ``[K x M]`` (a tile ``r x c`` of ``X^T`` is ``c x r`` of ``X``) |
| ``input_grad`` | ``dY W^T`` | ``dY`` ``[M x N]``, zero where the gradient is |

``X``'s columns come in two orders: ``chw`` (channel outermost, then ky, kx: cuBLAS's im2col)
and ``nhwc`` (ky, kx, then channel innermost). At each grain a unit (a tile, a row, an
(image, channel) map, an element) is live when it holds a non-zero; the **bound** is the GEMM's
dense work over the work left when every dead unit is skipped for free (live units' full
area times the other dimension). Functions take NumPy or CuPy arrays (the GPU path: CuPy
arrays, e.g. from PyTorch tensors through DLPack) and return plain floats.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from spartan_py.errors import InputError
from spartan_py.sparsity.arrays import array_module

#: tile grains, coarse to fine, as (rows, cols) of the sparse operand
TILE_GRAINS: tuple[tuple[int, int], ...] = ((64, 32), (32, 32), (16, 16), (16, 8), (8, 8), (4, 4))
#: every grain a result carries, coarse to fine: whole rows and (image, channel) maps, then tiles
GRAINS: tuple[str, ...] = ("row", "channel", *(f"{r}x{c}" for r, c in TILE_GRAINS), "element")
#: the column orders of im2col
ORDERS: tuple[str, ...] = ("chw", "nhwc")
#: the GEMMs of a step, each with its sparse operand
GEMMS: tuple[str, ...] = ("forward", "weight_grad", "input_grad")
_BASE = 4  # every tile side is a multiple of this: counts are taken once at 4 x 4 and summed up
_PAD = 64  # the largest tile side: matrices are padded to a multiple of it


@dataclass(frozen=True)
class ConvGeometry:
    """A convolution's shape: input ``in_channels x height x width``, square ``kernel``."""

    in_channels: int
    out_channels: int
    height: int
    width: int
    kernel: int
    stride: int = 1
    pad: int = 0

    @property
    def out_height(self) -> int:
        """Output rows."""
        return (self.height + 2 * self.pad - self.kernel) // self.stride + 1

    @property
    def out_width(self) -> int:
        """Output columns."""
        return (self.width + 2 * self.pad - self.kernel) // self.stride + 1


def im2col_mask(x_mask, geometry: ConvGeometry, order: str):
    """The im2col of a boolean NCHW mask as a bool ``[M x K]`` matrix in column ``order``."""
    if order not in ORDERS:
        raise InputError(f"column order must be one of {', '.join(ORDERS)}, got {order!r}")
    xp = array_module(x_mask)
    g = geometry
    n = x_mask.shape[0]
    padded = xp.pad(x_mask, ((0, 0), (0, 0), (g.pad, g.pad), (g.pad, g.pad)))
    ho, wo, s = g.out_height, g.out_width, g.stride
    windows = [
        padded[:, :, ky : ky + s * (ho - 1) + 1 : s, kx : kx + s * (wo - 1) + 1 : s]
        for ky in range(g.kernel)
        for kx in range(g.kernel)
    ]
    stacked = xp.stack(windows, axis=2)  # N, C, kk, Ho, Wo
    axes = (0, 3, 4, 1, 2) if order == "chw" else (0, 3, 4, 2, 1)
    return stacked.transpose(axes).reshape(n * ho * wo, -1)


def _base_counts(matrix):
    """Non-zeros per 4 x 4 block of a bool matrix padded with zeros to a multiple of 64."""
    xp = array_module(matrix)
    m, k = matrix.shape
    mp, kp = -(-m // _PAD) * _PAD, -(-k // _PAD) * _PAD
    padded = xp.zeros((mp, kp), dtype=xp.bool_)
    padded[:m, :k] = matrix
    return padded.reshape(mp // _BASE, _BASE, kp // _BASE, _BASE).sum(axis=(1, 3), dtype=xp.int32)


def _extents(length: int, side: int, xp):
    """Sizes of the ``side``-long pieces covering ``length`` (the last may be shorter), padded
    with zeros to cover the 64-multiple the counts span."""
    pieces = -(-length // _PAD) * _PAD // side
    starts = xp.arange(pieces) * side
    return xp.clip(length - starts, 0, side).astype(xp.float64)


def _live_area(base, shape: tuple[int, int], rows: int, cols: int) -> float:
    """Area of the ``rows x cols`` tiles of a matrix of ``shape`` holding a non-zero, from its
    4 x 4 counts."""
    xp = array_module(base)
    fr, fc = rows // _BASE, cols // _BASE
    bm, bk = base.shape
    live = base.reshape(bm // fr, fr, bk // fc, fc).sum(axis=(1, 3)) > 0
    row_ext, col_ext = _extents(shape[0], rows, xp), _extents(shape[1], cols, xp)
    return float(row_ext @ live.astype(xp.float64) @ col_ext)


def _grain(total: float, live: float, units_total: int, units_live: int) -> dict[str, float]:
    return {
        "density": units_live / units_total if units_total else 0.0,
        "bound": total / live if live else float("inf"),
        "live_fraction_of_work": live / total if total else 0.0,
    }


def operand_grains(matrix, channel_live: tuple[int, int], *, transposed: bool = False) -> dict[str, dict[str, float]]:
    """Density and bound at every grain of :data:`GRAINS` for a bool sparse operand.

    ``matrix`` is stored as ``[M x K]``; with ``transposed`` the operand is its transpose (the
    weight gradient's ``X^T``): its rows are ``matrix``'s columns and its ``r x c`` tiles are
    ``matrix``'s ``c x r`` ones. ``channel_live`` is (live, all) (image, channel) maps: each
    covers the same share of the operand, so skipping dead maps leaves that share of the work.
    """
    xp = array_module(matrix)
    m, k = matrix.shape
    total = float(m) * float(k)
    nnz = int(xp.count_nonzero(matrix))
    axis = 0 if transposed else 1  # reduce along an operand row
    live_rows = int(xp.count_nonzero(matrix.any(axis=axis)))
    n_rows, row_len = (k, m) if transposed else (m, k)
    out: dict[str, dict[str, float]] = {
        "row": _grain(total, float(live_rows) * row_len, n_rows, live_rows),
        "channel": _grain(float(channel_live[1]), float(channel_live[0]), channel_live[1], channel_live[0]),
    }
    base = _base_counts(matrix)
    for rows, cols in TILE_GRAINS:
        r, c = (cols, rows) if transposed else (rows, cols)
        live = _live_area(base, (m, k), r, c)
        fr, fc = r // _BASE, c // _BASE
        blocks = base[: -(-m // r) * fr, : -(-k // c) * fc]
        counts = blocks.reshape(blocks.shape[0] // fr, fr, blocks.shape[1] // fc, fc).sum(axis=(1, 3))
        out[f"{rows}x{cols}"] = _grain(total, live, int(counts.size), int(xp.count_nonzero(counts)))
    out["element"] = _grain(total, float(nnz), int(m * k), nnz)
    return out


def _channel_live(mask) -> tuple[int, int]:
    xp = array_module(mask)
    n, c = mask.shape[:2]
    return int(xp.count_nonzero(mask.reshape(n, c, -1).any(axis=2))), n * c


def layer_granularity(x, dy_mask, geometry: ConvGeometry, *, gemms: tuple[str, ...] = GEMMS) -> dict:
    """Per GEMM of ``gemms``: its shape (``M``, ``K``, ``N`` of the dense product), ``dense_work``
    (multiply-adds) and per column order the grains of :func:`operand_grains`. ``x`` is the
    convolution's input (NCHW, any numeric dtype; non-zero = live), ``dy_mask`` the gradient
    reaching its output (NCHW, non-zero = live)."""
    g = geometry
    n = x.shape[0]
    if tuple(x.shape[1:]) != (g.in_channels, g.height, g.width):
        raise InputError(f"maps of shape {tuple(x.shape)} do not fit {g}")
    if tuple(dy_mask.shape) != (n, g.out_channels, g.out_height, g.out_width):
        raise InputError(f"gradient mask of shape {tuple(dy_mask.shape)} does not fit {g} at batch {n}")
    x_mask = x != 0
    m, k, n_out = n * g.out_height * g.out_width, g.in_channels * g.kernel**2, g.out_channels
    dense = float(m) * k * n_out
    result: dict[str, dict] = {}
    if {"forward", "weight_grad"} & set(gemms):
        x_channels = _channel_live(x_mask)
        cols = {order: im2col_mask(x_mask, g, order) for order in ORDERS}
        for gemm in ("forward", "weight_grad"):
            if gemm in gemms:
                grains = {o: operand_grains(cols[o], x_channels, transposed=gemm == "weight_grad") for o in ORDERS}
                shape = {"M": m, "K": k, "N": n_out} if gemm == "forward" else {"M": k, "K": m, "N": n_out}
                result[gemm] = {**shape, "dense_work": dense, "orders": grains}
    if "input_grad" in gemms:
        dy = dy_mask != 0
        matrix = dy.transpose(0, 2, 3, 1).reshape(m, n_out)
        dy_grains = operand_grains(matrix, _channel_live(dy))
        result["input_grad"] = {
            "M": m,
            "K": n_out,
            "N": k,
            "dense_work": dense,
            "orders": dict.fromkeys(ORDERS, dy_grains),
        }
    return result


def network_bounds(layers: list[dict], gemms: tuple[str, ...] = GEMMS) -> dict:
    """Bounds summed over layers (each a :func:`layer_granularity` result): per GEMM and for
    the whole ``step`` (the GEMMs together), per column order and grain, dense work over live
    work."""
    out: dict[str, dict] = {}
    for name in (*gemms, "step"):
        parts = gemms if name == "step" else (name,)
        out[name] = {}
        for order in ORDERS:
            row = {}
            for grain in GRAINS:
                dense = live = 0.0
                for layer in layers:
                    for gemm in parts:
                        if gemm in layer:
                            entry = layer[gemm]
                            dense += entry["dense_work"]
                            live += entry["dense_work"] * entry["orders"][order][grain]["live_fraction_of_work"]
                row[grain] = dense / live if live else float("inf")
            out[name][order] = row
    return out


def zero_smallest(x, sparsity: float):
    """``x`` with its smallest values zeroed until at least ``sparsity`` of it is zero (a map
    already that sparse is returned unchanged). Ties at the threshold are zeroed together."""
    if not 0.0 <= sparsity < 1.0:
        raise InputError(f"sparsity must be in [0, 1), got {sparsity}")
    xp = array_module(x)
    flat = x.reshape(-1)
    zeros = int(np.ceil(sparsity * flat.size))
    if zeros == 0 or flat.size - int(xp.count_nonzero(flat)) >= zeros:
        return x
    threshold = xp.partition(flat, zeros - 1)[zeros - 1]
    return xp.where(x > threshold, x, xp.zeros_like(x))
