"""Tile-sparse GEMM ``A @ W`` skipping ``A``'s zero tiles, its dense cuBLAS baseline, and
the error of either against a float64 reference.

Precisions: ``fp32`` (CUDA cores), ``tf32`` (tensor cores; operands rounded to TF32,
10 mantissa bits, to nearest with ties away from zero, then accumulated in FP32) and the
opt-in ``fp32x3`` (three TF32 products of split operands, :mod:`~spartan_py.sparsity.three_tf32`).
The CPU path emulates TF32 by rounding the operands the same way, so CPU and GPU results
differ only by FP32 summation order (and, for ``fp32x3``, by how cuBLAS rounds the residuals).

GPU kernels (``kernels/tile_gemm.cu``) take the tile list as CSR over row blocks: the
tile's rows are the kernel's block height (16, 32, 64 or 128 for ``fp32``, 64 or 128 for
``tf32``) and its columns a multiple of the inner step (16 for ``fp32``, 32 for ``tf32``); ``K``
must be a multiple of the tile's columns. ``N`` is padded to the kernel's block width
(:func:`block_width`) when needed.
Given the per-tile counts (:class:`~spartan_py.sparsity.tiles.TileCounts`, what the
monitor writes) instead of a list, the FP32 kernels list each row block's non-zero tiles
themselves, in the same launch (:func:`lists_own_tiles`): no list launch before the GEMM.

Schedules (GPU, ``fp32``): ``balanced`` spreads the listed tiles' steps evenly over a grid
that fills the GPU once (stream-K: blocks that share an output add their partial sums), so
neither a row block with many tiles nor a grid of a wave and a half leaves SMs idle;
``tiles`` gives each (row block, column block) output its own block, which the hardware
balances well enough once there are many (:func:`fp32_schedule` picks by that count, the
default). ``tf32`` has only ``tiles``. The CPU ignores the schedule.

Example::

    import numpy as np
    from spartan_py.sparsity import compact_tiles, tile_sparse_matmul
    rng = np.random.default_rng(0)
    a = np.maximum(rng.standard_normal((256, 128)), 0).astype(np.float32)
    a[:128, 32:] = 0                      # three zero 128 x 32 tiles
    w = rng.standard_normal((128, 64)).astype(np.float32)
    tiles = compact_tiles(a, (128, 32), pack=False).tiles
    c = tile_sparse_matmul(a, w, tiles)   # equals a @ w within rounding
"""

from __future__ import annotations

import numpy as np

from spartan_py.errors import InputError
from spartan_py.sparsity.arrays import array_module, as_matrix, is_gpu_array, same_device
from spartan_py.sparsity.compaction import CompactTiles, tile_list
from spartan_py.sparsity.gpu_kernels import (
    COUNTS_MAX_K_TILES,
    COUNTS_MAX_ROW_BLOCKS,
    F32_BLOCK_K,
    F32_SHAPES,
    TF32_BLOCK_K,
    TF32_SHAPES,
    balance_flags,
    f32_block_threads,
    gemm_kernels,
    grid_barrier_words,
    resident_grid,
    tf32_block_threads,
    tf32_shared_bytes,
)
from spartan_py.sparsity.three_tf32 import round_to_tf32, summed_product, three_tf32_product
from spartan_py.sparsity.tiles import TileCounts, TileList, TileShape, tile_counts

PRECISIONS = ("fp32", "tf32", "fp32x3")
SCHEDULES = ("balanced", "tiles")
#: Fewest BK-steps a block of the balanced schedule takes: merging a shared output costs
#: about half a step, so sparser lists use fewer blocks rather than many one-step ones.
BALANCED_MIN_STEPS = 4
#: Below this many waves of outputs (outputs / resident blocks) the default is ``balanced``:
#: on an H100 it was 4-45% faster than ``tiles`` for grids of 0.7-1.9 waves and up to 35%
#: slower for 6 waves (``benchmarks/tile_gemm_variants.py``).
BALANCED_BELOW_WAVES = 4


#: ... unless the grid is over one wave and the listed tiles make fewer BK-steps than this
#: per resident block (when the caller knows the count): then what a block would balance is
#: small, and the balanced kernel's listing, barrier and merges cost more than it saves. On
#: an H100, listing from counts, grids of 2-4 waves at tile density 0.01-0.02 (5.5-11 steps
#: a block) ran 4-30% faster with ``tiles``; with 28 or more steps ``balanced`` was as fast
#: or faster on 3 of 4 layers (``scratch`` sweep of session 23, in ``docs/tile-gemm.md``).
BALANCED_MIN_STEPS_PER_BLOCK = 16


def fp32_schedule(row_blocks: int, col_blocks: int, resident_blocks: int, steps: int | None = None) -> str:
    """The default FP32 schedule for a grid of ``row_blocks x col_blocks`` outputs on a GPU
    that holds ``resident_blocks`` blocks at once; ``steps``: the BK-steps of all listed
    tiles in all column blocks, when known (it needs the tile count on the host)."""
    outputs = row_blocks * col_blocks
    if outputs >= BALANCED_BELOW_WAVES * resident_blocks:
        return "tiles"
    if steps is None or outputs <= resident_blocks or steps >= BALANCED_MIN_STEPS_PER_BLOCK * resident_blocks:
        return "balanced"
    return "tiles"


#: The FP32 tile GEMM's tile when none is given: 64-row blocks, 32 columns. On an H100 the
#: 64-row instances beat the 128-row ones at 23 of 24 conv-shape points of tile density
#: 0.05-0.3 (more blocks for the same work: shorter tails) and ran within 5% of them on
#: ResNet-18 conv2_x, whose 64 columns make small blocks
#: (``benchmarks/results/kernel-experiments-20261123b/``).
DEFAULT_GEMM_TILE = TileShape(64, 32)
#: The TF32 kernel's tile when none is given: the FP32 tile, so that the policy's counts serve
#: both. In ``benchmarks/tile_gemm.py``'s sweep the 64-row instances ran in 0.22-0.89x (median
#: 0.59) of the time of the 128-row kernel they replaced (H100; ``docs/tile-gemm.md``).
DEFAULT_TF32_GEMM_TILE = TileShape(64, 32)


def default_gemm_tile(precision: str = "fp32") -> TileShape:
    """The tile the tile GEMM of ``precision`` uses when none is given."""
    return DEFAULT_GEMM_TILE if precision == "fp32" else DEFAULT_TF32_GEMM_TILE


def block_width(n: int) -> int:
    """Output columns per block of the tile GEMM (either precision) for ``n`` columns (the
    policy's records describe the same launch)."""
    return 128 if n % 128 == 0 else 64


def _check_operands(a, w, precision: str, transposed_a: bool = False):
    """``(a, w)`` as C-contiguous float32 matrices on one device; ``transposed_a``: ``a`` holds
    A's transpose ``[K x M]``."""
    if precision not in PRECISIONS:
        raise InputError(f"precision {precision!r}; expected one of {', '.join(PRECISIONS)}")
    a, w = as_matrix(a, "A^T" if transposed_a else "A"), as_matrix(w, "W")
    if a.shape[0 if transposed_a else 1] != w.shape[0]:
        what = f"A^T is {tuple(a.shape)}" if transposed_a else f"A is {tuple(a.shape)}"
        raise InputError(f"{what} and W is {tuple(w.shape)}: inner dimensions differ")
    if not same_device(a, w):
        raise InputError("A and W must both be NumPy arrays or both CuPy arrays")
    return a, w


def lists_own_tiles(precision: str, schedule: str, tiles_m: int, k_tiles: int) -> bool:
    """Whether the GPU tile GEMM of ``precision`` and ``schedule`` (one of :data:`SCHEDULES`)
    lists the non-zero tiles from a :class:`~spartan_py.sparsity.tiles.TileCounts` in its own
    launch, for ``tiles_m`` row blocks of ``k_tiles`` tiles: FP32 within the kernels' lists
    in shared memory (else a tile list is built first, a launch of its own)."""

    if precision != "fp32":
        return False
    return tiles_m <= COUNTS_MAX_ROW_BLOCKS if schedule == "balanced" else k_tiles <= COUNTS_MAX_K_TILES


def tile_sparse_matmul(
    a,
    w,
    tiles: TileList | TileCounts | CompactTiles | None = None,
    *,
    precision: str = "fp32",
    schedule: str | None = None,
    out=None,
    transposed_a: bool = False,
):
    """``A @ W`` computing only ``A``'s non-zero tiles; ``A`` must be zero outside them.
    ``tiles``: a :class:`TileList`, what :func:`~spartan_py.sparsity.compact_tiles` returns,
    or the per-tile counts (:class:`TileCounts`, e.g. a monitor's), which the GPU's FP32
    kernel lists in its own launch (:func:`lists_own_tiles`); None: ``A``'s non-zero tiles
    at :func:`default_gemm_tile`. ``schedule``: one of :data:`SCHEDULES` (None:
    :func:`fp32_schedule`'s pick for ``fp32``, ``tiles`` for ``tf32``).

    ``transposed_a``: ``a`` holds A's transpose ``[K x M]``, as the activations ``X`` of a
    weight gradient ``X^T @ dY``; ``tiles`` still describe A ``[M x K]``. The GPU's FP32
    kernels read it in place (from a tile list: the counts are listed first); elsewhere it is
    copied transposed first, inside the call."""
    a, w = _check_operands(a, w, precision, transposed_a)
    if transposed_a and not (is_gpu_array(a) and precision == "fp32"):
        a, transposed_a = array_module(a).ascontiguousarray(a.T), False
    schedule = _check_schedule(schedule, precision)
    if isinstance(tiles, CompactTiles):
        tiles = tiles.tiles
    elif tiles is not None and not isinstance(tiles, (TileList, TileCounts)):
        raise InputError(f"tiles must be a TileList, TileCounts, CompactTiles or None, not {type(tiles).__name__}")
    shape = tuple(a.shape[::-1] if transposed_a else a.shape)
    if tiles is None:
        tile = default_gemm_tile(precision)
        tiles = TileCounts(shape, tile, tile_counts(a.T if transposed_a else a, tile))
    if tuple(tiles.shape) != shape:
        kind = "tile list" if isinstance(tiles, TileList) else "tile counts"
        raise InputError(f"the {kind} describes a {tuple(tiles.shape)} matrix, but A is {shape}")
    # row_ptr, not coords: coords reads the tile count from the device (a host round trip)
    if is_gpu_array(a) != is_gpu_array(tiles.row_ptr if isinstance(tiles, TileList) else tiles.nnz):
        raise InputError("the tiles must be described on the same device as A")
    if precision == "fp32x3":
        listed = _listed(tiles) if isinstance(tiles, TileCounts) else tiles  # listed once, used thrice
        if out is None:
            out = array_module(a).empty((a.shape[0], w.shape[1]), dtype=np.float32)
        return three_tf32_product(
            a, w, summed_product(lambda x, y, c: tile_sparse_matmul(x, y, listed, precision="tf32", out=c)), out
        )
    if is_gpu_array(a):
        return _gpu_tile_matmul(a, w, tiles, precision, out, schedule=schedule, transposed_a=transposed_a)
    if isinstance(tiles, TileCounts):
        tiles = _listed(tiles)
    return _cpu_tile_matmul(a, w, tiles, precision, out)


def _listed(counts: TileCounts) -> TileList:
    return tile_list(counts.nnz, counts.shape, counts.tile)


def _check_schedule(schedule: str | None, precision: str) -> str | None:
    if schedule is None:
        return None if precision == "fp32" else "tiles"
    if schedule not in SCHEDULES:
        raise InputError(f"schedule {schedule!r}; expected one of {', '.join(SCHEDULES)}")
    if schedule == "balanced" and precision != "fp32":
        raise InputError(f"the balanced schedule has an fp32 kernel only, not {precision}; use schedule='tiles'")
    return schedule


def _cpu_tile_matmul(a, w, tiles: TileList, precision: str, out):
    if precision == "tf32":
        a, w = round_to_tf32(a), round_to_tf32(w)
    m, k = a.shape
    n = w.shape[1]
    c = np.empty((m, n), dtype=np.float32) if out is None else out
    tile = tiles.tile
    row_ptr, k_tiles = np.asarray(tiles.row_ptr), np.asarray(tiles.col_index)
    listed = np.zeros(tiles.grid, dtype=bool)
    listed[np.repeat(np.arange(row_ptr.size - 1), np.diff(row_ptr)), k_tiles] = True
    # A outside the listed tiles read as zero, then one BLAS product per band of row blocks
    # (bounded memory; a product per row block was 10x slower at conv-layer shapes)
    band = max(1, (1 << 22) // max(k * tile.rows, 1)) * tile.rows
    for r0 in range(0, m, band):
        rows = slice(r0, min(r0 + band, m))
        mask = np.repeat(np.repeat(listed[r0 // tile.rows : -(-rows.stop // tile.rows)], tile.rows, 0), tile.cols, 1)
        np.matmul(np.where(mask[: rows.stop - r0, :k], a[rows], np.float32(0)), w, out=c[rows])
    return c


def _gpu_tile_matmul(
    a,
    w,
    tiles: TileList | TileCounts,
    precision: str,
    out,
    block: tuple | None = None,
    schedule: str | None = None,
    min_steps: int = BALANCED_MIN_STEPS,
    transposed_a: bool = False,
):
    """The CUDA tile GEMM; ``block`` = (BM, BN, BK) forces an FP32 instance, ``min_steps`` the
    balanced schedule's fewest steps per block (benchmarks); ``schedule`` None: the default;
    ``transposed_a``: ``a`` is A's transpose (FP32 only)."""
    # optional dependency (extra gpu)
    import cupy

    m, k = a.shape[::-1] if transposed_a else a.shape
    n = w.shape[1]
    if a.dtype != cupy.float32 or w.dtype != cupy.float32 or not (a.flags.c_contiguous and w.flags.c_contiguous):
        raise InputError(f"the tile GEMM kernels take C-contiguous float32 A and W, got {a.dtype} and {w.dtype}")
    if transposed_a and (precision != "fp32" or m % 4):
        raise InputError(f"a transposed A needs the fp32 kernels and M a multiple of 4, got {precision} and M = {m}")
    at = "-at" if transposed_a else ""
    tile = tiles.tile
    if precision == "tf32":
        bm, bn, bk = tile.rows, block_width(n), TF32_BLOCK_K
        if (bm, bn) not in TF32_SHAPES:
            heights = sorted({s[0] for s in TF32_SHAPES})
            raise InputError(f"the tf32 tile GEMM needs tiles of {' or '.join(map(str, heights))} rows, got {tile}")
    else:
        heights = sorted({s[0] for s in F32_SHAPES})
        if tile.rows not in heights:
            raise InputError(f"the fp32 tile GEMM needs tiles of {' or '.join(map(str, heights))} rows, got {tile}")
        bm, bn, bk = block or (tile.rows, block_width(n), F32_BLOCK_K)
        if (bm, bn, bk) not in F32_SHAPES or bm != tile.rows:
            raise InputError(f"no fp32 tile GEMM instance {(bm, bn, bk)} for {tile} tiles; have {F32_SHAPES}")
    if tile.cols % bk or k % tile.cols:
        raise InputError(
            f"{precision} tile GEMM: tile columns ({tile.cols}) must be a multiple of {bk} and divide K ({k})"
        )
    n_pad = -(-n // bn) * bn
    w_dev = w if n_pad == n else cupy.pad(w, ((0, 0), (0, n_pad - n)))
    c = out if out is not None and n_pad == n else cupy.empty((m, n_pad), dtype=cupy.float32)
    device = cupy.cuda.Device().id
    kernels = gemm_kernels(device)
    tiles_m, k_tiles = tiles.grid
    grid = (n_pad // bn, tiles_m)
    if schedule is None:
        schedule = (
            "tiles"
            if precision == "tf32"
            else fp32_schedule(*grid[::-1], resident_grid(device, (f"fp32-balanced{at}", bm, bn, bk)))
        )
    # the balanced kernel counts steps in int32: every tile listed, in every column block
    if schedule == "balanced" and tiles_m * k_tiles * (tile.cols // bk) * grid[0] >= 2**31:
        schedule = "tiles"
    head: tuple = (a, w_dev, c, np.int32(m), np.int32(n_pad), np.int32(k))
    if isinstance(tiles, TileCounts) and not transposed_a and lists_own_tiles(precision, schedule, tiles_m, k_tiles):
        counts = cupy.ascontiguousarray(tiles.nnz, dtype=cupy.int32)
        from_counts = (*head, counts, np.int32(tile.cols))
        if schedule == "balanced":
            _launch_balanced(
                cupy, device, kernels, ("fp32-balanced-counts", bm, bn, bk), from_counts, tiles_m, min_steps, k_tiles
            )
        else:
            kernels[("fp32-counts", bm, bn, bk)](grid, (f32_block_threads(bm, bn),), from_counts)
    else:
        if isinstance(tiles, TileCounts):
            tiles = _listed(tiles)
        args = (*head, tiles.row_ptr, tiles.col_index, np.int32(tile.cols))
        if schedule == "balanced":
            _launch_balanced(cupy, device, kernels, (f"fp32-balanced{at}", bm, bn, bk), args, tiles_m, min_steps)
        elif precision == "tf32":
            kernels[("tf32", bm, bn, bk)](grid, (tf32_block_threads(bm),), args, shared_mem=tf32_shared_bytes(bm, bn))
        else:
            kernels[(f"fp32{at}", bm, bn, bk)](grid, (f32_block_threads(bm, bn),), args)
    if n_pad != n:
        c = c[:, :n]
        if out is not None:
            out[...] = c
            return out
        return cupy.ascontiguousarray(c)
    return c


def _launch_balanced(
    cupy, device: int, kernels: dict, key: tuple, args: tuple, row_blocks: int, min_steps: int, k_tiles: int = 0
):
    """One launch of a balanced kernel (``key``: its kind and shape): a resident grid, a
    partial sum per block (from CuPy's pool, which orders reuse by stream), the stream's
    flags, and for the kernel listing from counts (``k_tiles`` a row block) its padded
    list, row counts and barrier."""

    kind, bm, bn, _ = key
    blocks = resident_grid(device, key)
    stream = cupy.cuda.get_current_stream().ptr
    partial = cupy.empty(blocks * bm * bn, dtype=cupy.float32)
    tail: tuple = (
        np.int32(row_blocks),
        np.int32(max(1, min_steps)),
        partial,
        balance_flags(cupy, device, stream, blocks),
    )
    if kind == "fp32-balanced-counts":
        k_pad = cupy.empty(max(row_blocks * k_tiles, 1), dtype=cupy.int32)
        row_count = cupy.empty(max(row_blocks, 1), dtype=cupy.int32)
        tail += (k_pad, row_count, grid_barrier_words(cupy, device, stream))
    kernels[key]((blocks,), (f32_block_threads(bm, bn),), (*args, *tail))


def dense_matmul(a, w, *, precision: str = "fp32", out=None, transposed_a: bool = False):
    """Dense ``A @ W``: cuBLAS (``cublasGemmEx``, FP32 or FP32-fast-TF32 compute; ``fp32x3``:
    three TF32 GEMMs accumulating into the output) on the GPU, NumPy on the CPU (TF32
    emulated by rounding the operands). ``transposed_a``: ``a`` holds A's transpose
    ``[K x M]`` (cuBLAS reads it transposed; no copy)."""
    a, w = _check_operands(a, w, precision, transposed_a)
    if precision == "fp32x3":
        if is_gpu_array(a):

            def product(x, y, c, accumulate):
                return _cublas_gemm(x, y, c, "tf32", transposed_a, accumulate)

        else:
            product = summed_product(
                lambda x, y, c: dense_matmul(x, y, precision="tf32", transposed_a=transposed_a, out=c)
            )
        if out is None:
            out = array_module(a).empty((a.shape[1 if transposed_a else 0], w.shape[1]), dtype=np.float32)
        return three_tf32_product(a, w, product, out)
    if not is_gpu_array(a):
        if precision == "tf32":
            a, w = round_to_tf32(a), round_to_tf32(w)
        return np.matmul(a.T if transposed_a else a, w, out=out)
    return _cublas_gemm(a, w, out, precision, transposed_a)


def _cublas_gemm(a, w, out, precision: str, transposed_a: bool, accumulate: bool = False):
    """``out (+)= A @ W`` by ``cublasGemmEx`` at ``precision`` (``fp32`` or ``tf32``); ``out``
    None: a new matrix (``accumulate`` then has nothing to add to)."""
    # optional dependency (extra gpu)
    import cupy

    # optional dependency (extra gpu)
    from cupy.cuda import cublas

    m, k = a.shape[::-1] if transposed_a else a.shape
    n = w.shape[1]
    c = cupy.empty((m, n), dtype=cupy.float32) if out is None else out
    compute = {
        "fp32": getattr(cublas, "CUBLAS_COMPUTE_32F", 68),
        "tf32": getattr(cublas, "CUBLAS_COMPUTE_32F_FAST_TF32", 77),
    }[precision]
    one = np.ones(1, np.float32)
    beta = one if accumulate and out is not None else np.zeros(1, np.float32)
    r32f = cupy.cuda.runtime.CUDA_R_32F
    # row-major C = A @ W is column-major C^T = W^T A^T
    # (a row-major A^T is a column-major A: cuBLAS reads it with op T)
    cublas.gemmEx(
        cupy.cuda.device.get_cublas_handle(),
        cublas.CUBLAS_OP_N,
        cublas.CUBLAS_OP_T if transposed_a else cublas.CUBLAS_OP_N,
        n,
        m,
        k,
        one.ctypes.data,
        w.data.ptr,
        r32f,
        n,
        a.data.ptr,
        r32f,
        m if transposed_a else k,
        beta.ctypes.data,
        c.data.ptr,
        r32f,
        n,
        compute,
        getattr(cublas, "CUBLAS_GEMM_DEFAULT", -1),
    )
    return c


def matmul_error(c, a, w, *, transposed_a: bool = False, rows: int | None = None) -> dict:
    """Error of ``c`` against ``A @ W`` in float64: ``max_abs``, ``max_rel`` (|error| over
    ``|A| @ |W|``, the scale rounding errors grow with) and ``rms_rel`` (RMS error over RMS
    of the reference). ``transposed_a``: ``a`` holds A's transpose. ``rows``: at most this many
    of the output's rows, evenly spaced (None: all). Computed on the GPU where any of them is."""
    xp = next((array_module(x) for x in (c, a, w) if is_gpu_array(x)), np)
    a = a.T if transposed_a else a
    m, k = a.shape
    sampled = m if rows is None else min(rows, m)
    picked = slice(None) if sampled == m else np.linspace(0, m - 1, sampled).round().astype(np.int64)
    reference = xp.zeros((sampled, w.shape[1]), dtype=xp.float64)
    scale = xp.zeros_like(reference)
    step = max(1, (1 << 26) // max(sampled, 1))  # float64 of A's sample in 512 MB pieces of the contraction
    for k0 in range(0, k, step):
        a64 = xp.asarray(a[picked, k0 : k0 + step], dtype=xp.float64)
        w64 = xp.asarray(w[k0 : k0 + step], dtype=xp.float64)
        reference += a64 @ w64
        scale += xp.abs(a64) @ xp.abs(w64)
    error = xp.abs(xp.asarray(c[picked], dtype=xp.float64) - reference)
    relative = xp.where(scale > 0, error / xp.where(scale > 0, scale, 1.0), 0.0)
    rms_ref = float(xp.sqrt(xp.mean(reference**2))) or 1.0
    return {
        "max_abs": float(error.max()) if error.size else 0.0,
        "max_rel": float(relative.max()) if relative.size else 0.0,
        "rms_rel": float(xp.sqrt(xp.mean(error**2))) / rms_ref,
    }
