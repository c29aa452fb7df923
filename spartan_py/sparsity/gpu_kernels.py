"""CuPy kernels of ``kernels/spartan_tiles.cu``, ``kernels/tile_gemm.cu`` and ``kernels/col2im.cu``,
compiled once per device (like ``cupyx.scipy.sparse``'s memoized kernel factories)."""

from __future__ import annotations

import functools

from spartan_py.resources import kernel_source

EPILOGUE_MODES = {"plain": 0, "fused": 1, "count": 2}
#: (BM, BN, BK) instances of the FP32 tile GEMM; BM is the tile list's row height (16 and
#: 32 serve tile-size sweeps: smaller tiles skip more zeros but reuse each weight less).
F32_SHAPES = tuple((bm, bn, 16) for bm in (128, 64, 32, 16) for bn in (128, 64))
F32_BLOCK_K = 16  # inner step of the FP32 instances (16 beat 8 by 5-10% on an H100)
#: (BM, BN) instances of the TF32 tile GEMM (``tile_gemm_tf32``): BM is the tile list's row
#: height, BN the output columns of a block (:func:`~spartan_py.sparsity.tile_gemm.block_width`).
TF32_SHAPES = tuple((bm, bn) for bm in (128, 64) for bn in (128, 64))
TF32_BLOCK_K = 32  # the TF32 kernel's step (TC_BK in kernels/tile_gemm.cu): tile columns are a multiple of it
TF32_STAGES = 3  # steps in flight in its shared-memory ring (TC_STAGES)
#: Limits of the FP32 kernels that list their tiles from the monitor's counts in the same
#: launch (``COUNTS_MAX_K_TILES``, ``COUNTS_MAX_ROW_BLOCKS`` in ``kernels/tile_gemm.cu``):
#: a row block's list in shared memory (the ``tiles`` schedule) and every row block's
#: pointer in shared memory (``balanced``).
COUNTS_MAX_K_TILES = 1024
COUNTS_MAX_ROW_BLOCKS = 2048
EPILOGUE_ROWS = EPILOGUE_COLS = 128
EPILOGUE_THREADS = 256
#: Rows (one a thread) each block of the live-row listing kernels covers.
LIVE_ROWS_PER_BLOCK = 1024
#: Rows of each warp's 16 whose input an epilogue block stages in shared memory by cp.async
#: (``EPI_STAGED_ROWS`` in ``kernels/spartan_tiles.cu``; the other 4 go to registers), and the
#: dynamic shared memory that takes (``EPILOGUE_SHARED_BYTES``): 8 warps x 12 rows x 128
#: columns x 4 bytes.
EPILOGUE_STAGED_ROWS = 12
EPILOGUE_SHARED_BYTES = (EPILOGUE_THREADS // 32) * EPILOGUE_STAGED_ROWS * EPILOGUE_COLS * 4


def f32_blocks_per_sm(rows: int, cols: int) -> int:
    """Blocks per SM an FP32 tile-GEMM instance of ``rows x cols`` outputs is built for (its
    launch bounds, ``f32_min_blocks`` in ``kernels/tile_gemm.cu``): 2 for 128 x 128, whose
    threads then have 128 registers, 3 for the smaller ones. Registers may let more fit."""
    return 2 if rows * cols >= 128 * 128 else 3


def epilogue_grid(m: int, n: int) -> tuple[int, int]:
    """The epilogue kernels' grid for an ``[m x n]`` matrix: one block per 128 x 128."""
    return -(-n // EPILOGUE_COLS), -(-m // EPILOGUE_ROWS)


@functools.cache
def tile_kernels(device_id: int) -> dict:
    """{name: RawKernel} for the epilogue, counting and compaction kernels."""
    # optional dependency (extra gpu)
    import cupy

    names = {f"epilogue_{mode}": f"epilogue<{code}>" for mode, code in EPILOGUE_MODES.items()}
    names |= {"pack_tiles": "move_tiles<false>", "unpack_tiles": "move_tiles<true>"}
    names |= {"gather_rows": "move_rows<false, false>", "gather_rows_vec4": "move_rows<true, false>"}
    names |= {"scatter_rows": "move_rows<false, true>", "scatter_rows_vec4": "move_rows<true, true>"}
    listing = ("count_live_rows", "list_live_rows", "count_tile_rows", "list_tile_rows", "profile_scalars")
    names |= {name: name for name in listing}
    module = cupy.RawModule(
        code=kernel_source("spartan_tiles.cu"),
        options=("-std=c++17", "-DSPARTAN_TILES_NO_EXPLICIT_INSTANCES"),
        name_expressions=list(names.values()),
    )
    kernels = {key: module.get_function(name) for key, name in names.items()}
    for mode in EPILOGUE_MODES:  # with the static shared memory, above the 48 KiB a launch gets without asking
        kernels[f"epilogue_{mode}"].max_dynamic_shared_size_bytes = EPILOGUE_SHARED_BYTES
    return kernels


@functools.cache
def col2im_kernel(device_id: int):
    """The RawKernel ``col2im_gather`` (``kernels/col2im.cu``) on device ``device_id``."""
    # optional dependency (extra gpu)
    import cupy

    return cupy.RawKernel(kernel_source("col2im.cu"), "col2im_gather")


def launch_epilogue(mode: str, m: int, n: int, args: tuple) -> None:
    """Queue the epilogue kernel of ``mode`` (a key of :data:`EPILOGUE_MODES`) over an
    ``[m x n]`` matrix on the current device and stream; ``args`` are the kernel's."""
    # optional dependency (extra gpu)
    import cupy

    kernel = tile_kernels(cupy.cuda.Device().id)[f"epilogue_{mode}"]
    kernel(epilogue_grid(m, n), (EPILOGUE_THREADS,), args, shared_mem=EPILOGUE_SHARED_BYTES)


#: The FP32 tile GEMM's kernels by (schedule, where its tile list comes from): the ``tiles``
#: and ``balanced`` schedules reading a tile list, and the same two listing the tiles from
#: the monitor's counts in the same launch.
F32_KERNELS = {
    "fp32": "tile_gemm_f32",
    "fp32-balanced": "tile_gemm_f32_balanced",
    "fp32-counts": "tile_gemm_f32_counts",
    "fp32-balanced-counts": "tile_gemm_f32_balanced_counts",
}
#: The tile-list kernels built again to read A transposed (``-at``: a weight gradient's ``X``).
F32_TRANSPOSED_KINDS = ("fp32", "fp32-balanced")


@functools.cache
def gemm_kernels(device_id: int) -> dict:
    """{(kind, BM, BN, BK): RawKernel} for the tile-sparse GEMM; kind is one of
    :data:`F32_KERNELS`' keys, one of :data:`F32_TRANSPOSED_KINDS` with ``-at``, or ``tf32``."""
    # optional dependency (extra gpu)
    import cupy

    names: dict[tuple, str] = {
        (kind, *shape): f"{name}<{{}}, {{}}, {{}}>".format(*shape)
        for kind, name in F32_KERNELS.items()
        for shape in F32_SHAPES
    }
    names |= {
        (f"{kind}-at", *shape): f"{F32_KERNELS[kind]}<{{}}, {{}}, {{}}, true>".format(*shape)
        for kind in F32_TRANSPOSED_KINDS
        for shape in F32_SHAPES
    }
    names |= {("tf32", bm, bn, TF32_BLOCK_K): f"tile_gemm_tf32<{bm}, {bn}>" for bm, bn in TF32_SHAPES}
    module = cupy.RawModule(
        code=kernel_source("tile_gemm.cu"),
        options=("-std=c++17", "-DTILE_GEMM_NO_EXPLICIT_INSTANCES"),
        name_expressions=list(names.values()),
    )
    kernels = {key: module.get_function(name) for key, name in names.items()}
    for bm, bn in TF32_SHAPES:  # its ring is dynamic shared memory, above the 48 KiB a launch gets without asking
        kernels[("tf32", bm, bn, TF32_BLOCK_K)].max_dynamic_shared_size_bytes = tf32_shared_bytes(bm, bn)
    return kernels


def tf32_blocks_per_sm(rows: int, cols: int) -> int:
    """Blocks per SM of the TF32 tile GEMM's ``rows x cols`` instance, which its shared-memory
    ring limits on sm_90 (228 KiB an SM): 2 at 64 x 128 and larger (80-105 KiB a block), 4 at
    64 x 64 (54 KiB)."""
    return 2 if rows * cols >= 64 * 128 else 4


def tf32_block_threads(rows: int) -> int:
    """Threads of a TF32 tile-GEMM block of ``rows`` rows: a 64-thread pair of warps per 32 rows."""
    return rows // 32 * 64


def tf32_shared_bytes(rows: int, cols: int) -> int:
    """Dynamic shared memory of the TF32 tile GEMM's ``rows x cols`` instance: its ring of
    :data:`TF32_STAGES` steps of A (rows x 36 floats, padded) and W (32 x (cols + 8))."""
    return TF32_STAGES * (rows * (TF32_BLOCK_K + 4) + TF32_BLOCK_K * (cols + 8)) * 4


def f32_block_threads(rows: int, cols: int) -> int:
    """Threads of an FP32 tile-GEMM block of ``rows x cols`` outputs (an 8 x 8 patch each)."""
    return (rows // 8) * (cols // 8)


def f32_shared_bytes(rows: int, cols: int) -> int:
    """Static shared memory of the FP32 tile GEMM's ``rows x cols`` instance: two steps of A
    (:data:`F32_BLOCK_K` x rows) and W (:data:`F32_BLOCK_K` x cols)."""
    return 2 * F32_BLOCK_K * (rows + cols) * 4


@functools.cache
def resident_grid(device_id: int, key: tuple) -> int:
    """Blocks of the GEMM kernel ``key`` that fit on the whole GPU at once (occupancy x SMs)."""
    # optional dependency (extra gpu)
    import cupy

    kernel = gemm_kernels(device_id)[key]
    per_sm = cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(
        kernel.kernel.ptr, f32_block_threads(*key[1:3]), 0
    )
    return max(1, per_sm) * cupy.cuda.runtime.getDeviceProperties(device_id)["multiProcessorCount"]


_STREAM_WORDS: dict = {}


def balance_flags(cupy, device_id: int, stream_ptr: int, size: int):
    """The balanced kernel's flags for launches on one stream: zeros, and left zero by each
    launch (so one buffer serves every launch in that stream's order)."""
    return _stream_words(cupy, "flags", device_id, stream_ptr, max(size, 1024), cupy.int32)


def grid_barrier_words(cupy, device_id: int, stream_ptr: int):
    """The two words of ``grid_barrier`` (``kernels/tile_gemm.cu``) for launches on one
    stream: an arrival count each launch leaves zero, and a generation it raises."""
    return _stream_words(cupy, "barrier", device_id, stream_ptr, 2, cupy.uint32)


def _stream_words(cupy, name: str, device_id: int, stream_ptr: int, size: int, dtype):
    words = _STREAM_WORDS.get((name, device_id, stream_ptr))
    if words is None or words.size < size:
        words = _STREAM_WORDS[(name, device_id, stream_ptr)] = cupy.zeros(size, dtype=dtype)
    return words
