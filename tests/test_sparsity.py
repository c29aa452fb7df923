"""The Spartan machinery on NumPy (always) and CuPy (gpu marker), against NumPy references."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from spartan_py.errors import InputError
from spartan_py.sparsity import (
    DEFAULT_GEMM_TILE,
    DEFAULT_TF32_GEMM_TILE,
    KERNEL_CHOICES,
    KernelPolicy,
    LayerProfile,
    SparsityMonitor,
    TileCounts,
    TileShape,
    coarsen_counts,
    compact_rows,
    compact_tiles,
    default_gemm_tile,
    dense_matmul,
    expand_rows,
    expand_tiles,
    matmul_error,
    round_to_tf32,
    tile_counts,
    tile_list,
    tile_sparse_matmul,
    tile_utilization,
)
from spartan_py.workloads.conv.layers import conv_layer, feature_maps, im2col, tiled_preactivations


def host(array):
    return array.get() if hasattr(array, "get") else np.asarray(array)


def brute_tile_counts(a: np.ndarray, tile: TileShape) -> np.ndarray:
    tm, tn = tile.grid(a.shape)
    return np.array(
        [
            [
                np.count_nonzero(a[i * tile.rows : (i + 1) * tile.rows, j * tile.cols : (j + 1) * tile.cols])
                for j in range(tn)
            ]
            for i in range(tm)
        ]
    )


def sparse_matrix(m=300, k=256, tile_density=0.3, seed=1) -> np.ndarray:
    return np.maximum(tiled_preactivations(m, k, tile_density, tile=(128, 32), seed=seed), 0)


# -- tiles ---------------------------------------------------------------------------------
def test_tile_shape_checks_its_sides():
    assert TileShape.of(16) == TileShape(16, 16) and TileShape.of((8, 32)) == TileShape(8, 32)
    with pytest.raises(InputError, match="power of two"):
        TileShape(12, 16)
    with pytest.raises(InputError, match="rows, cols"):
        TileShape.of("big")


@pytest.mark.parametrize("tile", [(8, 8), (32, 16), (128, 32), (1, 4)])
def test_tile_counts_match_brute_force(xp, tile):
    a = sparse_matrix()
    tile = TileShape.of(tile)
    counts = host(tile_counts(xp.asarray(a), tile))
    assert np.array_equal(counts, brute_tile_counts(a, tile))
    assert np.array_equal(
        coarsen_counts(tile_counts(a, (8, 8)), (8, 8), (32, 16)), brute_tile_counts(a, TileShape(32, 16))
    )


def test_tile_utilization_is_useful_over_executed():
    a = np.zeros((16, 16), np.float32)
    a[0, 0] = a[0, 1] = 1  # two non-zeros in one 8x8 tile
    assert tile_utilization(a, 8) == pytest.approx(2 / 64)
    assert tile_utilization(a, 1) == 1.0
    assert tile_utilization(np.zeros((4, 4), np.float32), 2) == 1.0


# -- monitor -------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["software", "fused"])
@pytest.mark.parametrize(
    "tile", [(8, 8), (32, 32), (128, 32), (64, 128), (1, 4), (2, 8), (4, 16), (16, 32), (32, 4), (128, 128)]
)
@pytest.mark.parametrize("shape", [(300, 256), (37, 196)])  # partial row blocks; a partial 128-column chunk
def test_monitor_counts_what_the_epilogue_writes(xp, mode, tile, shape):
    z = tiled_preactivations(*shape, 0.3, tile=(8, 4), seed=2)
    bias = np.linspace(-0.2, 0.2, shape[1], dtype=np.float32)
    y, profile = SparsityMonitor(tile=tile, mode=mode).epilogue(xp.asarray(z), xp.asarray(bias), clamp=1.5)
    expected = np.minimum(np.maximum(z + bias, 0), 1.5)
    assert np.array_equal(host(y), expected)
    assert np.array_equal(host(profile.tile_nnz), brute_tile_counts(expected, TileShape.of(tile)))
    assert np.array_equal(host(profile.row_nnz), np.count_nonzero(expected, axis=1))
    assert profile.density == pytest.approx(np.count_nonzero(expected) / expected.size)
    assert profile.live_rows == int((np.count_nonzero(expected, axis=1) > 0).sum())
    assert profile.monitor_seconds >= 0 and not profile.stale and profile.mode == mode


def test_monitor_off_and_in_place(xp):
    z = xp.asarray(tiled_preactivations(64, 64, 0.5, tile=(32, 32), seed=3))
    expected = np.maximum(host(z), 0)
    y, profile = SparsityMonitor(mode="off").epilogue(z, out=z)
    assert profile is None and y is z and np.array_equal(host(z), expected)
    z2 = xp.asarray(tiled_preactivations(64, 64, 0.5, tile=(32, 32), seed=3))
    y2, profile2 = SparsityMonitor(tile=(32, 32), mode="fused").epilogue(z2, out=z2)  # timing runs must not touch z2
    assert np.array_equal(host(y2), expected) and profile2.nnz == np.count_nonzero(expected)


def test_sampled_monitor_profiles_every_kth_call(xp):
    monitor = SparsityMonitor(tile=(32, 32), mode="sampled", every=3)
    batches = [tiled_preactivations(96, 64, d, tile=(32, 32), seed=i) for i, d in enumerate([0.2, 0.9, 0.9, 0.5])]
    profiles = [monitor.epilogue(xp.asarray(b), layer="fc")[1] for b in batches]
    assert [p.stale for p in profiles] == [False, True, True, False]
    assert profiles[1].tile_density == profiles[0].tile_density  # the stale profile is the last measured one
    assert profiles[1].monitor_seconds == 0.0 and profiles[3].call == 3
    assert monitor.epilogue(xp.asarray(batches[0][:32]), layer="fc")[1] is None  # another shape: no stale profile


def test_monitor_rejects_bad_arguments(xp):
    with pytest.raises(InputError, match="off, software, fused, sampled"):
        SparsityMonitor(mode="hardware")
    with pytest.raises(InputError, match="every"):
        SparsityMonitor(mode="sampled", every=0)
    with pytest.raises(InputError, match=r"expected \(8,\)"):
        SparsityMonitor().epilogue(xp.zeros((4, 8), dtype=xp.float32), xp.zeros(5, dtype=xp.float32))
    with pytest.raises(InputError, match="2-D"):
        SparsityMonitor().epilogue(xp.zeros(8, dtype=xp.float32))


# -- compaction ----------------------------------------------------------------------------
def test_compaction_round_trips(xp):
    a = sparse_matrix(m=300, k=250, tile_density=0.2)  # partial edge tiles both ways
    a[5] = 0
    dev = xp.asarray(a)
    rows = compact_rows(dev)
    assert np.array_equal(host(rows.ids), np.flatnonzero(np.count_nonzero(a, axis=1)))
    assert np.array_equal(host(expand_rows(rows)), a)
    given = compact_rows(dev, xp.asarray(np.count_nonzero(a, axis=1).astype(np.int32)))
    assert np.array_equal(host(given.values), host(rows.values))
    # several listing blocks (1024 rows each), rows of a multiple of 4 (the vectorised gather),
    # the live count given as the monitor's scalars give it
    big = np.zeros((3000, 64), np.float32)
    keep = np.random.default_rng(3).random(3000) < 0.3
    big[keep] = np.random.default_rng(4).random((int(keep.sum()), 64), dtype=np.float32) + 1
    known = compact_rows(xp.asarray(big), live=int(keep.sum()))
    assert np.array_equal(host(known.ids), np.flatnonzero(keep))
    assert np.array_equal(host(known.values), big[keep])
    stale = xp.full(big.shape, np.nan, dtype=xp.float32)  # every element expand_rows must write
    assert np.array_equal(host(expand_rows(known, out=stale)), big) and np.array_equal(host(stale), big)
    none = compact_rows(xp.zeros((40, 12), dtype=xp.float32))
    assert none.live == 0 and not host(expand_rows(none, out=xp.ones((40, 12), dtype=xp.float32))).any()
    with pytest.raises(InputError, match="out must be float32"):
        expand_rows(known, out=xp.zeros((3000, 63), dtype=xp.float32))
    for tile in ((16, 16), (128, 32), (8, 64)):
        tiles = compact_tiles(dev, tile)
        counts = brute_tile_counts(a, TileShape.of(tile))
        assert np.array_equal(host(tiles.tiles.coords), np.argwhere(counts > 0))
        assert tiles.tiles.tile_density == pytest.approx((counts > 0).mean())
        assert np.array_equal(host(expand_tiles(tiles)), a)
    with pytest.raises(InputError, match="pack=False"):
        expand_tiles(compact_tiles(dev, 16, pack=False))
    with pytest.raises(InputError, match="do not fit"):
        tile_list(np.zeros((2, 2), np.int32), (300, 250), 16)


# -- tile GEMM -----------------------------------------------------------------------------
@pytest.mark.parametrize("grid, density", [((700, 300), 0.3), ((3, 5), 0.0), ((1, 1), 1.0), ((4000, 1), 0.5)])
def test_tile_list_matches_the_nonzero_counts(xp, grid, density):
    rng = np.random.default_rng(sum(grid))
    counts = np.where(rng.random(grid) < density, rng.integers(1, 50, grid), 0).astype(np.int32)
    shape = (grid[0] * 16, grid[1] * 16)
    tiles = tile_list(xp.asarray(counts), shape, (16, 16))
    rows, cols = np.nonzero(counts)  # row-major, as the list
    assert tiles.count == rows.size
    assert np.array_equal(host(tiles.coords), np.stack([rows, cols], axis=1))
    assert np.array_equal(host(tiles.col_index)[: tiles.count], cols)
    assert np.array_equal(host(tiles.row_ptr), np.concatenate([[0], np.cumsum((counts > 0).sum(axis=1))]))


def test_round_to_tf32_rounds_to_nearest_ties_away():
    one = np.float32(1.0)
    values = np.array([one + 2.0**-11, one + 2.0**-12, -(one + 2.0**-11), np.inf, 3.0], np.float32)
    assert list(round_to_tf32(values)) == [1 + 2.0**-10, 1.0, -(1 + 2.0**-10), np.inf, 3.0]


@pytest.mark.parametrize("tile", [(128, 32), (64, 16), (32, 32), (16, 16), (16, 64)])
def test_tile_sparse_matmul_fp32_matches_float64(xp, tile):
    a = sparse_matrix(m=300, k=256, tile_density=0.3)
    w = np.random.default_rng(0).standard_normal((256, 192)).astype(np.float32)
    tiles = compact_tiles(xp.asarray(a), tile, pack=False).tiles
    c = tile_sparse_matmul(xp.asarray(a), xp.asarray(w), tiles)
    assert matmul_error(c, a, w)["max_rel"] < 1e-5
    assert np.allclose(
        host(c), tile_sparse_matmul(a, w, compact_tiles(a, tile, pack=False).tiles), rtol=1e-5, atol=1e-5
    )


@pytest.mark.parametrize(
    "precision, schedule, tile",
    [("fp32", s, t) for s in ("tiles", "balanced") for t in ((64, 32), (32, 64), (16, 16))]
    + [("tf32", "tiles", (64, 32))],
)
def test_a_transposed_operand_gives_the_same_product(xp, precision, schedule, tile):
    """A weight gradient X^T dY from X itself (``transposed_a``): the GPU's FP32 kernels read X
    transposed in place, the others copy it; each against float64 and the dense product."""
    a = sparse_matrix(m=192, k=1000, tile_density=0.3, seed=5)  # A = X^T: a ragged last tile of X's rows
    a = np.pad(a, ((0, 0), (0, 1024 - 1000)))  # K (X's rows) a multiple of the tile's columns
    x = np.ascontiguousarray(a.T)  # X [1024 x 192]
    dy = np.random.default_rng(6).standard_normal((1024, 128)).astype(np.float32)
    counts = TileCounts(a.shape, TileShape.of(tile), tile_counts(a, tile))
    x_dev, dy_dev = xp.asarray(x), xp.asarray(dy)
    if xp is not np:
        counts = TileCounts(a.shape, counts.tile, xp.asarray(counts.nnz))
    c = tile_sparse_matmul(x_dev, dy_dev, counts, precision=precision, schedule=schedule, transposed_a=True)
    dense = dense_matmul(x_dev, dy_dev, precision=precision, transposed_a=True)
    bound = 1e-5 if precision == "fp32" else 2e-3
    assert matmul_error(c, a, dy)["max_rel"] < bound
    assert matmul_error(dense, a, dy)["max_rel"] < bound
    with pytest.raises(InputError, match="A\\^T is"):
        dense_matmul(x_dev, dy_dev[:-1], transposed_a=True)


@pytest.mark.gpu
@pytest.mark.parametrize("tile", [(128, 32), (128, 64), (64, 32), (64, 16), (16, 32)])
@pytest.mark.parametrize("tile_density", [0.0, 0.02, 0.3, 1.0])
@pytest.mark.parametrize("n", [192, 256])  # three 64-wide blocks; two 128-wide ones
def test_balanced_schedule_writes_every_output_once(tile, tile_density, n):
    """The stream-K kernel against the one-block-per-output kernel and float64: every output
    element written (the output starts as NaN), rows without tiles zero, shared outputs summed
    once, whatever the blocks' share of steps; its flags are left zero for the next launch."""
    import cupy

    from spartan_py.sparsity.gpu_kernels import _STREAM_WORDS
    from spartan_py.sparsity.tile_gemm import _gpu_tile_matmul

    a = sparse_matrix(m=1000, k=512, tile_density=tile_density, seed=3)  # 1000: a last row block in part
    w = np.random.default_rng(4).standard_normal((512, n)).astype(np.float32)
    a_dev, w_dev = cupy.asarray(a), cupy.asarray(w)
    tiles = compact_tiles(a_dev, tile, pack=False).tiles
    reference = host(_gpu_tile_matmul(a_dev, w_dev, tiles, "fp32", None, schedule="tiles"))
    for min_steps in (1, 4, 1000):
        c = cupy.full((1000, n), cupy.nan, dtype=cupy.float32)
        for _ in range(2):  # a second launch finds the flags as the first left them
            _gpu_tile_matmul(a_dev, w_dev, tiles, "fp32", c, schedule="balanced", min_steps=min_steps)
            assert np.allclose(host(c), reference, rtol=1e-5, atol=1e-5 * np.abs(reference).max()), min_steps
        assert matmul_error(c, a, w)["max_rel"] < 1e-5
    assert all(int(flags.sum()) == 0 for (name, *_), flags in _STREAM_WORDS.items() if name == "flags")


@pytest.mark.gpu
@pytest.mark.parametrize("tile", [(128, 32), (64, 32), (64, 16), (16, 32)])
@pytest.mark.parametrize("tile_density", [0.0, 0.02, 0.3, 1.0])
@pytest.mark.parametrize("schedule", ["tiles", "balanced"])
def test_kernels_listing_from_counts_match_the_listed_ones(tile, tile_density, schedule):
    """The FP32 kernels that list A's tiles from the counts in their own launch against the
    kernels reading a tile list: the same steps in the same order one output a block (the
    tiles schedule: bitwise equal), every output written (the output starts as NaN), launch
    after launch (the grid barrier leaves its count zero for the next)."""
    import cupy

    from spartan_py.sparsity.gpu_kernels import _STREAM_WORDS
    from spartan_py.sparsity.tile_gemm import _gpu_tile_matmul

    a = sparse_matrix(m=1000, k=512, tile_density=tile_density, seed=7)
    a_dev = cupy.asarray(a)
    counts = tile_counts(a_dev, tile)
    tiles, own = tile_list(counts, a.shape, tile), TileCounts(a.shape, tile, counts)
    for n in (192, 256):
        w = np.random.default_rng(n).standard_normal((512, n)).astype(np.float32)
        w_dev = cupy.asarray(w)
        listed = host(_gpu_tile_matmul(a_dev, w_dev, tiles, "fp32", None, schedule=schedule))
        for min_steps in (1, 4, 1000) if schedule == "balanced" else (4,):
            c = cupy.full((1000, n), cupy.nan, dtype=cupy.float32)
            for _ in range(2):
                _gpu_tile_matmul(a_dev, w_dev, own, "fp32", c, schedule=schedule, min_steps=min_steps)
                if schedule == "tiles":
                    assert np.array_equal(host(c), listed)
                else:  # the grids may differ (occupancy), and with them the order partial sums are added
                    assert np.allclose(host(c), listed, rtol=1e-5, atol=1e-5 * np.abs(listed).max()), min_steps
            assert matmul_error(c, a, w)["max_rel"] < 1e-5
    assert all(int(words[0]) == 0 for (name, *_), words in _STREAM_WORDS.items() if name == "barrier")


@pytest.mark.gpu
@pytest.mark.parametrize("schedule, shape", [("tiles", (64, 16 * 1100)), ("balanced", (16 * 2100, 64))])
def test_counts_past_the_kernels_lists_are_listed_first(schedule, shape):
    """Past the in-launch lists' room (1024 k-tiles a row block for ``tiles``, 2048 row
    blocks for ``balanced``) the counts are listed by a launch of their own: still exact."""
    import cupy

    from spartan_py.sparsity.gpu_kernels import COUNTS_MAX_K_TILES, COUNTS_MAX_ROW_BLOCKS
    from spartan_py.sparsity.tile_gemm import _gpu_tile_matmul, lists_own_tiles

    tile = TileShape(16, 16)
    grid = tile.grid(shape)
    assert grid[1] > COUNTS_MAX_K_TILES or grid[0] > COUNTS_MAX_ROW_BLOCKS
    assert not lists_own_tiles("fp32", schedule, *grid)
    rng = np.random.default_rng(8)
    a = np.where(rng.random(shape) < 0.01, rng.random(shape), 0).astype(np.float32)
    w = rng.standard_normal((shape[1], 64)).astype(np.float32)
    a_dev = cupy.asarray(a)
    c = _gpu_tile_matmul(
        a_dev, cupy.asarray(w), TileCounts(shape, tile, tile_counts(a_dev, tile)), "fp32", None, schedule=schedule
    )
    assert matmul_error(c, a, w)["max_rel"] < 1e-5


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fp32", "tf32"])
def test_tile_list_and_gemm_read_nothing_back(precision):
    """Listing the tiles and the tile GEMM queue their launches without reading the tile
    count back to the host (a round trip that stalled the adaptive pick by ~50 us a layer)."""
    import cupy

    from spartan_py.sparsity import tile_list
    from spartan_py.sparsity.tile_gemm import default_gemm_tile

    tile = default_gemm_tile(precision)
    a = cupy.asarray(sparse_matrix(m=512, k=256, tile_density=0.3, seed=5))
    w = cupy.asarray(np.random.default_rng(6).standard_normal((256, 128)).astype(np.float32))
    counts = tile_counts(a, tile)
    tiles = tile_list(counts, a.shape, tile)
    c = tile_sparse_matmul(a, w, tiles, precision=precision)
    assert not tiles._count, "the tile count was read back"
    assert matmul_error(c, host(a), host(w))["max_rel"] < (1e-5 if precision == "fp32" else 3e-3)
    c = tile_sparse_matmul(a, w, TileCounts(a.shape, tile, counts), precision=precision)
    assert matmul_error(c, host(a), host(w))["max_rel"] < (1e-5 if precision == "fp32" else 3e-3)


@pytest.mark.gpu
def test_fp32_instances_fit_their_launch_bounds():
    """Every FP32 instance fits at least the blocks per SM the policy assumes."""
    import cupy

    from spartan_py.sparsity.gpu_kernels import (
        F32_KERNELS,
        F32_SHAPES,
        f32_block_threads,
        f32_blocks_per_sm,
        gemm_kernels,
    )

    kernels = gemm_kernels(cupy.cuda.Device().id)
    for schedule in F32_KERNELS:
        for bm, bn, bk in F32_SHAPES:
            kernel = kernels[(schedule, bm, bn, bk)]
            fit = cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(
                kernel.kernel.ptr, f32_block_threads(bm, bn), 0
            )
            assert fit >= f32_blocks_per_sm(bm, bn), (schedule, bm, bn, kernel.num_regs)


@pytest.mark.gpu
def test_tf32_instances_fit_their_shared_memory():
    """Every TF32 instance fits the blocks per SM the policy assumes, with its ring of steps."""
    import cupy

    from spartan_py.sparsity.gpu_kernels import (
        TF32_BLOCK_K,
        TF32_SHAPES,
        gemm_kernels,
        tf32_block_threads,
        tf32_blocks_per_sm,
        tf32_shared_bytes,
    )

    kernels = gemm_kernels(cupy.cuda.Device().id)
    for bm, bn in TF32_SHAPES:
        kernel = kernels[("tf32", bm, bn, TF32_BLOCK_K)]
        fit = cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(
            kernel.kernel.ptr, tf32_block_threads(bm), tf32_shared_bytes(bm, bn)
        )
        assert fit >= tf32_blocks_per_sm(bm, bn), (bm, bn, kernel.num_regs)


@pytest.mark.gpu
@pytest.mark.parametrize(("m", "k", "n", "rows"), [(200, 96, 64, 64), (130, 128, 100, 64), (300, 64, 256, 128)])
def test_tf32_tile_gemm_on_ragged_shapes(m, k, n, rows):
    """The TF32 kernel on rows past its last block, padded columns and both block widths
    equals the product of the TF32-rounded operands (up to FP32 summation order)."""
    import cupy

    a = np.maximum(tiled_preactivations(m, k, 0.4, tile=(rows, 32), seed=m), 0)
    w = np.random.default_rng(k).standard_normal((k, n)).astype(np.float32)
    tiles = compact_tiles(cupy.asarray(a), (rows, 32), pack=False).tiles
    c = tile_sparse_matmul(cupy.asarray(a), cupy.asarray(w), tiles, precision="tf32")
    emulated = round_to_tf32(a).astype(np.float64) @ round_to_tf32(w).astype(np.float64)
    assert c.shape == (m, n)
    assert np.allclose(host(c), emulated, rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
def test_epilogue_modes_fit_alike():
    """The fused epilogue fits as many blocks per SM as the plain one (4 on sm_90): with all
    its input held in registers it fitted 2 to the plain one's 3."""
    import cupy

    from spartan_py.sparsity.gpu_kernels import EPILOGUE_MODES, EPILOGUE_SHARED_BYTES, EPILOGUE_THREADS, tile_kernels

    kernels = tile_kernels(cupy.cuda.Device().id)
    fits = {
        mode: cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(
            kernels[f"epilogue_{mode}"].kernel.ptr, EPILOGUE_THREADS, EPILOGUE_SHARED_BYTES
        )
        for mode in EPILOGUE_MODES
    }
    assert len(set(fits.values())) == 1 and fits["plain"] >= 3, fits


def test_default_tile_follows_precision():
    """Both precisions take 64 x 32 tiles by default, policy and GEMM alike (one monitor's
    counts serve either)."""
    assert default_gemm_tile("fp32") == DEFAULT_GEMM_TILE == TileShape(64, 32)
    assert default_gemm_tile("tf32") == DEFAULT_TF32_GEMM_TILE == TileShape(64, 32)
    assert KernelPolicy().tile == DEFAULT_GEMM_TILE
    assert KernelPolicy(precision="tf32").tile == TileShape(64, 32)
    a = sparse_matrix(m=256, k=128, tile_density=0.3, seed=5)
    w = np.random.default_rng(6).standard_normal((128, 64)).astype(np.float32)
    assert np.allclose(tile_sparse_matmul(a, w), a @ w, rtol=1e-5, atol=1e-4)


def test_schedules_are_checked(xp):
    a = xp.zeros((128, 64), dtype=xp.float32)
    w = xp.zeros((64, 64), dtype=xp.float32)
    with pytest.raises(InputError, match="schedule 'stream'"):
        tile_sparse_matmul(a, w, schedule="stream")
    with pytest.raises(InputError, match="fp32 kernel only"):
        tile_sparse_matmul(a, w, precision="tf32", schedule="balanced")
    assert float(abs(tile_sparse_matmul(a, w, schedule="tiles")).sum()) == 0


def test_tile_sparse_matmul_skips_unlisted_tiles(xp):
    a = sparse_matrix(m=256, k=128, tile_density=1.0)
    w = np.random.default_rng(1).standard_normal((128, 64)).astype(np.float32)
    counts = brute_tile_counts(a, TileShape(128, 32))
    counts[0, 1] = 0  # drop one non-zero tile from the list
    tiles = tile_list(xp.asarray(counts.astype(np.int32)), a.shape, (128, 32))
    masked = a.copy()
    masked[:128, 32:64] = 0
    c = tile_sparse_matmul(xp.asarray(a), xp.asarray(w), tiles)
    assert matmul_error(c, masked, w)["max_rel"] < 1e-5


def test_tf32_error_is_reported_and_bounded(xp):
    a = sparse_matrix(m=256, k=256, tile_density=0.5)
    w = np.random.default_rng(2).standard_normal((256, 128)).astype(np.float32)
    tiles = compact_tiles(xp.asarray(a), (128, 32), pack=False).tiles
    c = tile_sparse_matmul(xp.asarray(a), xp.asarray(w), tiles, precision="tf32")
    error = matmul_error(c, a, w)
    assert 1e-6 < error["max_rel"] < 2e-3  # TF32 keeps 10 mantissa bits: visibly worse than FP32, bounded
    emulated = round_to_tf32(a).astype(np.float64) @ round_to_tf32(w).astype(np.float64)
    assert np.allclose(host(c), emulated, rtol=1e-4, atol=1e-4)
    assert matmul_error(dense_matmul(xp.asarray(a), xp.asarray(w), precision="tf32"), a, w)["max_rel"] < 2e-3


def test_matmul_checks_its_operands(xp):
    with pytest.raises(InputError, match="inner dimensions"):
        dense_matmul(xp.zeros((4, 8), dtype=xp.float32), xp.zeros((4, 8), dtype=xp.float32))
    with pytest.raises(InputError, match="precision"):
        dense_matmul(xp.zeros((4, 8), dtype=xp.float32), xp.zeros((8, 8), dtype=xp.float32), precision="fp8")
    a = xp.zeros((64, 64), dtype=xp.float32)
    with pytest.raises(InputError, match="describes"):
        tile_sparse_matmul(a, xp.zeros((64, 8), dtype=xp.float32), tile_list(xp.zeros((2, 1), xp.int32), (128, 64), 64))


# -- policy --------------------------------------------------------------------------------
def _profile(counts: np.ndarray, tile, shape, row_nnz=None) -> LayerProfile:
    row_nnz = np.full(shape[0], 1, np.int32) if row_nnz is None else row_nnz
    return LayerProfile("l", "fused", TileShape.of(tile), shape, counts.astype(np.int32), row_nnz)


def test_policy_follows_the_model():
    policy = KernelPolicy("h100-sxm")
    m, k, n = 93312, 2400, 256
    tile = (policy.tile.rows, policy.tile.cols)
    tiles = (m // tile[0]) * (k // tile[1])
    sparse = policy.predict(m, k, n, nnz=m * k // 200, tiles_active=tiles // 100, live_rows=m)
    dense = policy.predict(m, k, n, nnz=m * k // 2, tiles_active=tiles, live_rows=m)
    assert all(np.isfinite(list(sparse.values()))) and set(sparse) == set(KERNEL_CHOICES)
    assert sparse["tile_sparse"] < 0.1 * sparse["dense"]
    assert dense["tile_sparse"] > 0.9 * dense["dense"]
    # every tile live: no fewer multiply-adds than cuBLAS's, at a lower rate
    full = _profile(np.full((4096 // tile[0], 1024 // tile[1]), tile[0] * tile[1] // 2), tile, (4096, 1024))
    decision = policy.choose(full, 256)
    assert decision.kernel == "dense" and "h100-sxm" in decision.reason
    assert policy.choose(None, 64).kernel == "dense"
    mostly_empty = np.zeros((m // tile[0], k // tile[1]), np.int32)
    mostly_empty[::10, 0] = 100
    chosen = policy.choose(_profile(mostly_empty, tile, (m, k)), n)
    assert chosen.kernel != "dense" and chosen.predicted_us[chosen.kernel] < 0.9 * chosen.predicted_us["dense"]
    assert chosen.summary()["tile_density"] == pytest.approx(mostly_empty.astype(bool).mean())


@pytest.mark.parametrize("precision", ["fp32", "tf32"])
def test_no_sparse_kernel_is_predicted_below_cublas_at_its_share_of_the_work(precision):
    """At VGG-16's wide input-gradient shapes the model put the tile GEMM at full density below
    cuBLAS (it ran 1.1-1.4x slower): a candidate executing a part of the dense product is
    predicted no faster than dense scaled by that part, so at every tile density the policy's
    tile GEMM is at least cuBLAS's time times the density, and at 1 it is never picked."""
    policy = KernelPolicy("h100-sxm", precision=precision)
    m, k, n = 25088, 512, 4608
    tiles = (m // policy.tile.rows) * (k // policy.tile.cols)
    for share in (1.0, 0.5, 0.2):
        active = int(tiles * share)
        live = m if share == 1.0 else int(m * share)
        predicted = policy.predict(m, k, n, nnz=m * k // 3, tiles_active=active, live_rows=live)
        assert predicted["tile_sparse"] >= predicted["dense"] * active / tiles * (1 - 1e-9)
        assert predicted["row_compact"] >= predicted["dense"] * live / m * (1 - 1e-9)
    full = _profile(np.full((m // policy.tile.rows, k // policy.tile.cols), 100), policy.tile, (m, k))
    assert policy.choose(full, n).kernel == "dense"


def test_policy_runs_every_kernel_exactly(xp):
    z = tiled_preactivations(300, 256, 0.3, seed=4)
    w = np.random.default_rng(3).standard_normal((256, 96)).astype(np.float32)
    policy = KernelPolicy()
    y, profile = SparsityMonitor(tile=policy.tile).epilogue(xp.asarray(z))
    decision = policy.choose(profile, 96)
    for kernel in KERNEL_CHOICES:
        c = policy.run(replace(decision, kernel=kernel), y, xp.asarray(w), profile)
        assert matmul_error(c, np.maximum(z, 0), w)["max_rel"] < 1e-5, kernel
    coarse = KernelPolicy(tile=(128, 64))  # a monitor tile that divides the policy's is coarsened
    _, fine = SparsityMonitor(tile=(32, 32)).epilogue(xp.asarray(z))
    c = coarse.run(replace(coarse.choose(fine, 96), kernel="tile_sparse"), y, xp.asarray(w), fine)
    assert matmul_error(c, np.maximum(z, 0), w)["max_rel"] < 1e-5


def test_tile_gemm_schedule_follows_the_grid_and_the_model_spreads_balanced_work():
    from spartan_py.costmodel.model import predict
    from spartan_py.costmodel.simulate import resolve_machine
    from spartan_py.sparsity.candidates import candidate_records
    from spartan_py.sparsity.tile_gemm import BALANCED_BELOW_WAVES, fp32_schedule
    from spartan_py.trace import to_frame

    assert fp32_schedule(98, 2, 264) == "balanced"  # 196 outputs: under one wave
    assert fp32_schedule(729, 2, 264) == "tiles"  # 1458 outputs: 5.5 waves
    assert fp32_schedule(BALANCED_BELOW_WAVES * 264, 1, 264) == "tiles"
    # with the steps known: 2.6 waves of 5.5 steps a resident block run as tiles, under one
    # wave or with 55 steps a block balanced
    assert fp32_schedule(338, 3, 396, steps=2190) == "tiles"
    assert fp32_schedule(98, 4, 396, steps=1128) == "balanced"
    assert fp32_schedule(338, 3, 396, steps=21900) == "balanced"
    m, k, n = 12544, 2304, 256  # ResNet-18 conv4_x at batch 64: 98 x 2 outputs
    counts = dict(nnz=1000, tiles_active=705, live_rows=m, tile=TileShape(128, 32))
    (tiles,) = candidate_records("tile_sparse", m, k, n, **counts)  # FP32 lists its own tiles: one launch
    (balanced,) = candidate_records("tile_sparse", m, k, n, resident_blocks=264, **counts)
    assert [r.kernel for r in candidate_records("tile_sparse", m, k, n, precision="tf32", **counts)] == [
        "gpu.list_tiles",
        "gpu.tile_gemm.tf32",
    ]
    assert (tiles.variant, tiles.blocks) == ("counts", 98 * 2)
    assert (balanced.variant, balanced.blocks) == (
        "balanced-counts",
        705 * 2 * 2,
    )  # BK-steps: 2 per 32-column tile, 2 column blocks
    assert balanced.executed_macs == tiles.executed_macs
    machine, _ = resolve_machine("h100-sxm")
    waves = predict(to_frame([tiles, balanced]), machine)["waves"].to_numpy()
    assert waves[0] == 1  # 196 blocks: one (partial) wave of 2 blocks per SM
    assert waves[1] == pytest.approx(2820 / 264)  # 2820 steps spread over 264 resident blocks, not rounded up


def test_policy_rejects_bad_settings():
    with pytest.raises(InputError, match="must include 'dense'"):
        KernelPolicy(kernels=("tile_sparse",))
    with pytest.raises(InputError, match="margin"):
        KernelPolicy(margin=1.5)
    with pytest.raises(InputError, match="unknown machine|not found|no machine"):
        KernelPolicy("h900")


# -- workloads -----------------------------------------------------------------------------
def test_conv_shapes_and_im2col(xp):
    assert conv_layer("alexnet/conv2").gemm_shape(128) == (128 * 27 * 27, 96 * 25, 256)
    assert conv_layer("resnet18/conv3_1").gemm_shape(1) == (28 * 28, 64 * 9, 128)
    with pytest.raises(InputError, match="vgg16/conv3_2"):
        conv_layer("vgg16/conv9")
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 7, 7)).astype(np.float32)
    kernel = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    cols = host(im2col(xp.asarray(x), 3, stride=2, pad=1))
    out = (cols @ kernel.reshape(4, -1).T).reshape(2, 4, 4, 4)  # batch, oy, ox, channel
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    direct = np.array(
        [
            [
                [
                    [np.sum(padded[b, :, 2 * oy : 2 * oy + 3, 2 * ox : 2 * ox + 3] * kernel[c]) for c in range(4)]
                    for ox in range(4)
                ]
                for oy in range(4)
            ]
            for b in range(2)
        ]
    )
    assert np.allclose(out, direct, atol=1e-5)


def test_generated_activations_have_the_asked_density():
    maps = feature_maps(2, 8, 16, 0.3, cluster_px=2.0, seed=1)
    assert np.count_nonzero(maps) / maps.size == pytest.approx(0.3, abs=0.01)
    clustered = tile_utilization(maps.reshape(-1, 16), 4)
    scattered = tile_utilization(feature_maps(2, 8, 16, 0.3, seed=1).reshape(-1, 16), 4)
    assert clustered > scattered  # blobs fill the tiles they touch
    y = np.maximum(tiled_preactivations(512, 256, 0.25, tile=(64, 32), seed=2), 0)
    assert (tile_counts(y, (64, 32)) > 0).mean() == pytest.approx(0.25)


# -- digits MLP and the adaptive run ---------------------------------------------------------
def test_trained_mlp_runs_adaptively(xp):
    pytest.importorskip("sklearn", reason="the digits extra (scikit-learn) is not installed")
    from spartan_py.sparsity import run_mlp
    from spartan_py.sparsity.digits import load_digits, shifted_copies, train_mlp

    data = load_digits()
    mlp = train_mlp(data, hidden=(64, 64), epochs=5, seed=1)
    assert mlp.test_accuracy > 0.85 and mlp.sizes == (64, 64, 64, 10)
    assert shifted_copies(data.x[:10], 1).shape == (90, 64)
    x = xp.asarray(data.x)
    dense = run_mlp(mlp, x)
    adaptive = run_mlp(mlp, x, policy=KernelPolicy(), monitor=SparsityMonitor(tile=(128, 32)))
    assert np.allclose(host(adaptive.logits), host(dense.logits), atol=1e-4)
    assert adaptive.accuracy(data.y) == dense.accuracy(data.y) > 0.9
    assert len(adaptive.decisions) == 3 and adaptive.decisions[0].kernel == "dense"  # no profile of the input
    assert all(p is not None for p in adaptive.profiles[:-1])


def test_digits_without_scikit_learn_says_what_to_install(monkeypatch):
    import sys

    from spartan_py.errors import OptionalDependencyError
    from spartan_py.sparsity.digits import load_digits

    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
    with pytest.raises(OptionalDependencyError, match=r"spartan-py\[digits\]"):
        load_digits()


def _sparse_mlp(seed=0):
    """A 64-128-128-10 ReLU MLP whose hidden outputs are zero outside their first 32
    columns (large negative biases), so 64 x 32 tiles beyond those are all zero."""
    from spartan_py.sparsity.digits import Mlp

    rng = np.random.default_rng(seed)
    sizes = (64, 128, 128, 10)
    weights = tuple((rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32) for a, b in zip(sizes, sizes[1:]))
    biases = tuple(np.where(np.arange(b) < 32, 0.1, -100.0).astype(np.float32) for b in sizes[1:])
    return Mlp(weights, biases)


def test_adaptive_mlp_decides_from_the_previous_batch(xp):
    from spartan_py.sparsity import AdaptiveMlp

    mlp = _sparse_mlp()
    rng = np.random.default_rng(5)
    batches = [rng.standard_normal((rows, 64)).astype(np.float32) for rows in (640, 384, 640)]
    policy = KernelPolicy(kernels=("dense", "tile_sparse"))
    policy.predict = lambda m, k, n, **_: {"dense": 100.0, "tile_sparse": 1.0}  # always the tile GEMM
    model = AdaptiveMlp(mlp, policy, SparsityMonitor(tile=policy.tile))
    for b, x in enumerate(batches):
        run = model(xp.asarray(x))
        assert np.allclose(host(run.logits), mlp.forward(x)[-1], atol=1e-4), b
        assert [d.kernel for d in run.decisions] == ["dense", "tile_sparse", "tile_sparse"]
        from_previous = ["previous batch" in d.reason for d in run.decisions[1:]]
        assert from_previous == [b > 0] * 2, (b, [d.reason for d in run.decisions])
        if b == 1:  # 640 rows seen, 384 run: the counts are scaled, the densities kept
            assert "scaled to 384" in run.decisions[1].reason
        assert run.decisions[1].tile_density == pytest.approx(0.25)  # 1 of 4 column tiles
    sampled = AdaptiveMlp(mlp, policy, SparsityMonitor(tile=policy.tile, mode="sampled", every=3))
    runs = [sampled(xp.asarray(batches[0])) for _ in range(5)]  # runs 1-4 decide from calls 0, 0, 0, 3
    assert runs[2].decisions[1] is runs[1].decisions[1] and runs[3].decisions[1] is runs[1].decisions[1]
    assert runs[4].decisions[1] is not runs[3].decisions[1] and "stale" not in runs[4].decisions[1].reason
    assert all(np.allclose(host(r.logits), mlp.forward(batches[0])[-1], atol=1e-4) for r in runs)
    own = AdaptiveMlp(mlp, policy, SparsityMonitor(tile=policy.tile), lag=0)
    own(xp.asarray(batches[0]))
    assert not any("previous batch" in d.reason for d in own(xp.asarray(batches[1])).decisions)
    dense = AdaptiveMlp(mlp)(xp.asarray(batches[0]))
    assert [d.reason for d in dense.decisions] == ["no policy"] * 3 and dense.profiles == [None] * 3
    with pytest.raises(InputError, match="lag must be 0"):
        AdaptiveMlp(mlp, policy, lag=2)
    with pytest.raises(InputError, match="takes 64 inputs"):
        model(xp.zeros((8, 32), dtype=np.float32))


def test_policy_scales_another_batchs_counts_and_profiles_prefetch(xp):
    policy = KernelPolicy()
    z = tiled_preactivations(512, 256, 0.25, tile=(64, 32), seed=2)
    y, profile = SparsityMonitor(tile=policy.tile).epilogue(xp.asarray(z))
    policy.prefetch(profile)
    nnz, tiles, live = profile.scalars()
    a = np.maximum(z, 0)
    assert (nnz, tiles, live) == (
        np.count_nonzero(a),
        int((tile_counts(a, (64, 32)) > 0).sum()),
        int(np.count_nonzero(a.any(axis=1))),
    )
    same = policy.choose(profile, 96)
    double = policy.choose(profile, 96, m=1024)
    assert double.density == pytest.approx(same.density) and double.tile_density == pytest.approx(same.tile_density)
    _, stacked = SparsityMonitor(tile=policy.tile).epilogue(xp.asarray(np.vstack([z, z])))  # counts exactly doubled
    assert double.predicted_us == policy.choose(stacked, 96).predicted_us
    assert "scaled to 1024" in double.reason and "scaled" not in same.reason
    with pytest.raises(InputError, match="positive row count"):
        policy.choose(profile, 96, m=0)


# -- fp32x3: three TF32 products ---------------------------------------------------------------
@pytest.mark.parametrize("on_gpu", [False, pytest.param(True, marks=pytest.mark.gpu)])
def test_split_tf32_is_exact_and_its_head_is_tf32(on_gpu):
    """hi + lo is x exactly, hi is x rounded to TF32 (round_to_tf32's rounding, on either device)."""
    from spartan_py.sparsity.three_tf32 import split_tf32

    x = np.random.default_rng(0).standard_normal(4096).astype(np.float32) * 1e3
    x[:3] = [np.inf, -np.inf, 0.0]
    if on_gpu:
        import cupy

        hi, lo = (host(part) for part in split_tf32(cupy.asarray(x)))
    else:
        hi, lo = split_tf32(x)
    assert np.array_equal(hi, round_to_tf32(x))
    assert np.array_equal(hi[3:] + lo[3:], x[3:]) and (lo[:3] == 0).all()
    assert np.array_equal(hi, round_to_tf32(hi))  # the head is already TF32: a tensor core takes it as is


@pytest.mark.parametrize("on_gpu", [False, pytest.param(True, marks=pytest.mark.gpu)])
@pytest.mark.parametrize("transposed", [False, True])
def test_fp32x3_products_land_near_fp32_far_under_tf32(on_gpu, transposed):
    """Dense and tile-sparse fp32x3 against float64: within a few FP32 roundings, at least 50
    times under TF32's error, on the listed tiles alone (A zero elsewhere)."""
    a = sparse_matrix(m=512, k=256, tile_density=0.4, seed=7)
    w = np.random.default_rng(8).standard_normal((256, 128)).astype(np.float32)
    a_op = np.ascontiguousarray(a.T) if transposed else a
    xp = np
    if on_gpu:
        import cupy as xp
    a_dev, w_dev = xp.asarray(a_op), xp.asarray(w)
    errors = {}
    for precision in ("fp32", "tf32", "fp32x3"):
        c = dense_matmul(a_dev, w_dev, precision=precision, transposed_a=transposed)
        errors[precision] = matmul_error(c, a, w)["max_rel"]
    tiles = TileCounts(a.shape, DEFAULT_TF32_GEMM_TILE, xp.asarray(tile_counts(a, DEFAULT_TF32_GEMM_TILE)))
    tiled = tile_sparse_matmul(a_dev, w_dev, tiles, precision="fp32x3", transposed_a=transposed)
    assert errors["fp32x3"] < 4 * max(errors["fp32"], 1e-7)
    assert errors["tf32"] > 50 * errors["fp32x3"]
    assert matmul_error(tiled, a, w)["max_rel"] < 4 * max(errors["fp32"], 1e-7)


def test_fp32x3_records_are_a_split_and_three_tf32_gemms():
    """The model prices an fp32x3 candidate as its TF32 launches with each GEMM split and run
    three times; the tile GEMM's three outputs are added by passes of their own."""
    from spartan_py.costmodel.families import COMPACT, LIST_TILES, dense_gemm, tile_gemm
    from spartan_py.sparsity.candidates import candidate_records

    counts = dict(nnz=9000, tiles_active=20, live_rows=400, tile=TileShape(64, 32), precision="fp32x3")
    dense = candidate_records("dense", 512, 256, 128, **counts)
    assert [r.kernel for r in dense] == [COMPACT] + [dense_gemm("tf32")] * 3
    assert dense[0].variant == "split-tf32" and dense[0].bytes_written == 2 * dense[0].bytes_read
    assert dense[2].bytes_read == dense[1].bytes_read + 4 * 512 * 128  # the second adds into C
    tiled = candidate_records("tile_sparse", 512, 256, 128, **counts)
    assert [r.kernel for r in tiled].count(tile_gemm("tf32")) == 3 and tiled[0].kernel == LIST_TILES
    assert [r.variant for r in tiled if r.kernel == COMPACT] == ["split-tf32", "add", "add"]
    with pytest.raises(InputError, match="precision"):
        KernelPolicy("h100-sxm", precision="fp16")
    assert "csr" not in KernelPolicy("h100-sxm", precision="fp32x3").kernels


def test_matmul_error_on_sampled_rows_and_a_transposed_operand():
    """Sampled rows give the error of those rows; a transposed operand reads as its transpose."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((300, 40)).astype(np.float32)
    w = rng.standard_normal((40, 20)).astype(np.float32)
    c = a @ w
    c[299, 0] += 1.0  # the last row is always sampled
    full, sampled = matmul_error(c, a, w), matmul_error(c, a, w, rows=7)
    assert sampled["max_abs"] == pytest.approx(full["max_abs"]) and sampled["max_rel"] == pytest.approx(full["max_rel"])
    assert matmul_error(c, np.ascontiguousarray(a.T), w, transposed_a=True) == full


@pytest.mark.parametrize("on_gpu", [False, pytest.param(True, marks=pytest.mark.gpu)])
@pytest.mark.parametrize(("kernel", "stride", "pad"), [(3, 1, 1), (5, 2, 2), (1, 2, 0), (3, 2, 1)])
def test_col2im_is_the_adjoint_of_im2col(on_gpu, kernel, stride, pad):
    """<im2col(x), y> = <x, col2im(y)> for any y (padding rows and columns past the GEMM's ignored)."""
    from spartan_py.workloads.conv.layers import col2im

    rng = np.random.default_rng(kernel + stride)
    x = rng.standard_normal((2, 3, 11, 11)).astype(np.float32)
    cols = im2col(x, kernel, stride, pad)
    y = np.zeros((cols.shape[0] + 5, cols.shape[1] + 3), dtype=np.float32)
    y[: cols.shape[0], : cols.shape[1]] = rng.standard_normal(cols.shape)
    if on_gpu:
        import cupy

        back = host(col2im(cupy.asarray(y), x.shape, kernel, stride, pad))
        # the gather kernel sums each pixel in the strided adds' order: the same floats
        np.testing.assert_array_equal(back, col2im(y, x.shape, kernel, stride, pad))
        strided = col2im(cupy.asarray(y), x.shape, kernel, stride, pad, method="strided")
        np.testing.assert_array_equal(back, host(strided))
    else:
        back = col2im(y, x.shape, kernel, stride, pad)
    assert back.shape == x.shape
    assert np.vdot(x.astype(np.float64), back) == pytest.approx(
        np.vdot(cols.astype(np.float64), y[: cols.shape[0], : cols.shape[1]]), rel=1e-5
    )
    with pytest.raises(InputError, match="col2im"):
        col2im(y[:10], x.shape, kernel, stride, pad)
    with pytest.raises(InputError, match="method"):
        col2im(y, x.shape, kernel, stride, pad, method="scatter")
    if not on_gpu:
        with pytest.raises(InputError, match="gather method runs on CuPy"):
            col2im(y, x.shape, kernel, stride, pad, method="gather")
