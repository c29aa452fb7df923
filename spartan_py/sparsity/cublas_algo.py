"""Which kernel cuBLAS runs for a dense GEMM: its output tile, split-K and cluster shape.

``cublasGemmEx`` picks its kernel by cuBLASLt's heuristic, per shape: on an H100 a TF32 GEMM of
512 columns and 4608-deep rows runs 128 x 64 tiles at 784 rows, 256 x 128 at 8232 and 128 x 128
in clusters of four at 44688, and its time per multiply-add moves with the choice. The cost model
cannot guess that choice from the shape, so a GPU run asks the same heuristic (with the
preferences the legacy call passes, as ``CUBLASLT_LOG_LEVEL=5`` shows them) and writes the answer
into the record's ``variant``: a description of the launch, not of its time.

:func:`heuristic_algo` returns ``None`` wherever cuBLASLt cannot be asked (no GPU, no library):
the record then carries no algorithm, as before.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import replace

from spartan_py.costmodel.families import dense_gemm_precision
from spartan_py.costmodel.library_gemm import CublasAlgo

#: cublasLtMatmulTile_t: the tile's rows x columns in cuBLAS's column-major problem
_TILES = (
    "undefined 8x8 8x16 16x8 8x32 16x16 32x8 8x64 16x32 32x16 64x8 32x32 32x64 64x32 32x128 64x64 "
    "128x32 64x128 128x64 64x256 128x128 256x64 64x512 128x256 256x128 512x64 64x96 96x64 96x128 "
    "128x160"
).split()
#: cublasLtClusterShape_t (1 is not used)
_CLUSTERS = (
    "auto none 1x1x1 2x1x1 4x1x1 1x2x1 2x2x1 4x2x1 1x4x1 2x4x1 4x4x1 8x1x1 1x8x1 8x2x1 2x8x1 16x1x1 "
    "1x16x1 3x1x1 5x1x1 6x1x1 7x1x1 9x1x1 10x1x1 11x1x1 12x1x1 13x1x1 14x1x1 15x1x1 3x2x1 5x2x1 6x2x1 "
    "7x2x1 1x3x1 2x3x1 3x3x1 4x3x1 5x3x1 3x4x1 1x5x1 2x5x1 3x5x1 1x6x1 2x6x1 1x7x1 2x7x1 1x9x1 1x10x1 "
    "1x11x1 1x12x1 1x13x1 1x14x1 1x15x1"
).split()
_COMPUTE = {"fp32": 68, "tf32": 77}  # CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_32F_FAST_TF32
_R_32F = 0
_WORKSPACE_BYTES = 32 * 2**20  # what cublasGemmEx offers its heuristic
_IMPL_MASK = 0xFFFFFFFEFFFFFFFF  # likewise (CUBLASLT_LOG_LEVEL=5)


class _HeuristicResult(ctypes.Structure):
    _fields_ = [
        ("algo", ctypes.c_uint64 * 8),
        ("workspace_size", ctypes.c_size_t),
        ("state", ctypes.c_int),
        ("waves_count", ctypes.c_float),
        ("reserved", ctypes.c_int * 4),
    ]


@functools.cache
def _library() -> ctypes.CDLL | None:
    """cuBLASLt as loaded by CuPy's cuBLAS (the same copy the GEMMs use), else by name."""
    try:
        # optional dependency (extra gpu)
        import cupy

        cupy.cuda.device.get_cublas_handle()  # loads libcublas, which loads libcublasLt
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "libcublasLt.so" in line}
        for path in sorted(paths):
            return ctypes.CDLL(path)
        return ctypes.CDLL("libcublasLt.so")
    except Exception:  # no GPU, no CuPy or no library: nothing to ask
        return None


def _check(status: int, call: str) -> None:
    if status != 0:
        raise RuntimeError(f"{call} returned cuBLAS status {status}")


def _set(setter, obj, attribute: int, value) -> None:
    setter.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]
    _check(setter(obj, attribute, ctypes.byref(value), ctypes.sizeof(value)), setter.__name__)


def _config(lib: ctypes.CDLL, algo, attribute: int, kind) -> int:
    value, written = kind(0), ctypes.c_size_t(0)
    _check(
        lib.cublasLtMatmulAlgoConfigGetAttribute(
            ctypes.byref(algo), attribute, ctypes.byref(value), ctypes.sizeof(value), ctypes.byref(written)
        ),
        "cublasLtMatmulAlgoConfigGetAttribute",
    )
    return int(value.value)


def heuristic_algo(m: int, n: int, k: int, precision: str, transposed_a: bool = False) -> CublasAlgo | None:
    """The kernel cuBLAS's heuristic picks for ``spartan_py.sparsity.dense_matmul`` of ``[m x k]
    @ [k x n]`` at ``precision`` (``fp32`` or ``tf32``; ``transposed_a``: A stored as its
    transpose) on the current GPU, or ``None`` where it cannot be asked (asked once per GPU and shape)."""
    lib = _library()
    if lib is None or precision not in _COMPUTE or min(m, n, k) <= 0:
        return None
    # optional dependency (extra gpu)
    import cupy

    return _asked(lib, cupy.cuda.Device().id, (m, n, k), precision, transposed_a)


@functools.cache
def _asked(
    lib: ctypes.CDLL, device: int, shape: tuple[int, int, int], precision: str, transposed_a: bool
) -> CublasAlgo | None:
    """:func:`heuristic_algo` of ``shape`` on GPU ``device`` (the current one)."""
    m, n, k = shape
    handle, desc, pref = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    layouts = [ctypes.c_void_p() for _ in range(4)]
    try:
        _check(lib.cublasLtCreate(ctypes.byref(handle)), "cublasLtCreate")
        created = lib.cublasLtMatmulDescCreate(ctypes.byref(desc), _COMPUTE[precision], _R_32F)
        _check(created, "cublasLtMatmulDescCreate")
        _set(lib.cublasLtMatmulDescSetAttribute, desc, 4, ctypes.c_int32(1 if transposed_a else 0))  # TRANSB
        # the row-major product C = A W is the column-major C^T = W^T A^T (see dense_matmul)
        shapes = [(n, k, n), (m, k, m) if transposed_a else (k, m, k), (n, m, n), (n, m, n)]
        for layout, (rows, cols, ld) in zip(layouts, shapes, strict=True):
            _check(
                lib.cublasLtMatrixLayoutCreate(
                    ctypes.byref(layout), _R_32F, ctypes.c_uint64(rows), ctypes.c_uint64(cols), ctypes.c_int64(ld)
                ),
                "cublasLtMatrixLayoutCreate",
            )
        _check(lib.cublasLtMatmulPreferenceCreate(ctypes.byref(pref)), "cublasLtMatmulPreferenceCreate")
        setter = lib.cublasLtMatmulPreferenceSetAttribute
        _set(setter, pref, 1, ctypes.c_uint64(_WORKSPACE_BYTES))
        for attribute in (5, 6, 7, 8):  # minimum alignment of A, B, C, D: our arrays' 256 bytes
            _set(setter, pref, attribute, ctypes.c_uint32(16))
        _set(setter, pref, 12, ctypes.c_uint64(_IMPL_MASK))  # (the SM count target stays the GPU's own)
        result, found = _HeuristicResult(), ctypes.c_int(0)
        _check(
            lib.cublasLtMatmulAlgoGetHeuristic(
                handle, desc, *layouts, pref, 1, ctypes.byref(result), ctypes.byref(found)
            ),
            "cublasLtMatmulAlgoGetHeuristic",
        )
        if found.value < 1:
            return None
        algo = result.algo
        tile = _config(lib, algo, 1, ctypes.c_uint32)
        splits = _config(lib, algo, 2, ctypes.c_int32)
        cluster = _config(lib, algo, 8, ctypes.c_uint16)
    except (RuntimeError, AttributeError):
        return None
    finally:
        for layout in layouts:
            if layout.value:
                lib.cublasLtMatrixLayoutDestroy(layout)
        if pref.value:
            lib.cublasLtMatmulPreferenceDestroy(pref)
        if desc.value:
            lib.cublasLtMatmulDescDestroy(desc)
        if handle.value:
            lib.cublasLtDestroy(handle)
    dims = output_tile(tile)
    if dims is None:  # a tile this table does not know: no algorithm rather than a wrong one
        return None
    cluster_shape = _CLUSTERS[cluster] if cluster < len(_CLUSTERS) else f"id{cluster}"
    return CublasAlgo(*dims, max(splits, 1), cluster_shape, round(float(result.waves_count), 2))


def output_tile(tile_id: int) -> tuple[int, int] | None:
    """``cublasLtMatmulTile_t`` as the output tile in the caller's terms, ``(rows, cols)``:
    cuBLAS's tile is ``m' x n'`` of the column-major ``C^T``, whose ``m'`` is our columns; ``None``
    for the undefined tile or one this table does not hold."""
    if not 0 < tile_id < len(_TILES):
        return None
    along_cols, along_rows = (int(x) for x in _TILES[tile_id].split("x"))
    return along_rows, along_cols


def with_algorithms(records: list, transposed_a: bool = False) -> list:
    """``records`` with each cuBLAS GEMM's (``gpu.dense_gemm.*``) algorithm in its ``variant``
    (:func:`heuristic_algo` on the current GPU); records of other kernels, records that already
    name a variant and GEMMs whose algorithm cannot be asked are returned as they are."""

    out = []
    for record in records:
        precision = dense_gemm_precision(record.kernel)
        if precision is not None and not record.variant and record.rows_in and record.cols:
            k = record.executed_macs // (record.rows_in * record.cols)
            algo = heuristic_algo(int(record.rows_in), int(record.cols), int(k), precision, transposed_a)
            if algo is not None:
                record = replace(record, variant=algo.variant)
        out.append(record)
    return out
