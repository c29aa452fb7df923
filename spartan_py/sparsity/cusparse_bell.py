"""cuSPARSE's block-sparse SpMM (Blocked-ELL times dense) through ctypes.

CuPy binds cuSPARSE's CSR and COO generic API but not Blocked-ELL, so this module calls the
library CuPy already loaded (found in the process's memory map, so that it is the same
build CuPy uses) for the five calls a product needs: the two descriptors, the work buffer's
size, the product, and their release. Used by
:func:`spartan_py.sparsity.blocked_ell.blocked_ell_matmul` on CuPy arrays.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

from spartan_py.errors import BackendUnavailableError

# cuSPARSE / CUDA enumerations (cusparse.h, library_types.h)
_CUDA_R_32F, _CUDA_R_16F = 0, 2
_INDEX_32I, _INDEX_BASE_ZERO = 2, 0
_ORDER_ROW = 2
_NON_TRANSPOSE = 0
_SPMM_BLOCKED_ELL_ALG1 = 13
_VALUE_TYPES = {"float32": _CUDA_R_32F, "float16": _CUDA_R_16F}

_c_void_p, _i64 = ctypes.c_void_p, ctypes.c_int64


@functools.lru_cache(maxsize=1)
def _library() -> ctypes.CDLL:
    """The cuSPARSE shared library CuPy loaded (made to load it by creating a handle)."""
    try:
        # optional dependency (extra gpu)
        from cupy_backends.cuda.libs import cusparse as cupy_cusparse

        cupy_cusparse.destroy(cupy_cusparse.create())
    except Exception as error:  # no cuSPARSE with this CuPy: say so where it is used
        raise BackendUnavailableError(f"CuPy could not load cuSPARSE: {error}") from None
    with open("/proc/self/maps") as maps:
        paths = {line.split()[-1] for line in maps if "libcusparse.so" in line}
    if not paths:
        raise BackendUnavailableError("cuSPARSE is not in this process's memory map after CuPy loaded it")
    lib = ctypes.CDLL(sorted(paths)[0])
    lib.cusparseGetErrorString.restype = ctypes.c_char_p
    return lib


def _check(status: int, call: str) -> None:
    if status:
        message = _library().cusparseGetErrorString(status).decode()
        raise RuntimeError(f"cuSPARSE {call} failed: {message} (status {status})")


@functools.lru_cache(maxsize=8)
def _handle(device: int, stream: int) -> int:
    """One cuSPARSE handle per device and stream, kept for the process."""
    lib = _library()
    handle = _c_void_p()
    _check(lib.cusparseCreate(ctypes.byref(handle)), "cusparseCreate")
    _check(lib.cusparseSetStream(handle, _c_void_p(stream)), "cusparseSetStream")
    return handle.value or 0


def spmm_blocked_ell(ell: Any, w: Any, out: Any) -> None:
    """``out = ell @ w`` with cuSPARSE's Blocked-ELL SpMM (``CUSPARSE_SPMM_BLOCKED_ELL_ALG1``).

    ``ell``: a :class:`~spartan_py.sparsity.blocked_ell.BlockedEll` of CuPy arrays; ``w``:
    C-contiguous ``[cols x n]`` of the values' dtype; ``out``: C-contiguous float32
    ``[rows x n]``. Accumulates in float32 whatever the values' dtype.
    """
    # optional dependency (extra gpu)
    import cupy as cp

    lib = _library()
    value_type = _VALUE_TYPES[str(ell.values.dtype)]
    rows, cols = ell.shape
    n = int(w.shape[1])
    handle = _c_void_p(_handle(cp.cuda.Device().id, cp.cuda.get_current_stream().ptr))
    mat_a, mat_b, mat_c = _c_void_p(), _c_void_p(), _c_void_p()
    _check(
        lib.cusparseCreateBlockedEll(
            ctypes.byref(mat_a),
            _i64(rows),
            _i64(cols),
            _i64(ell.block),
            _i64(ell.ell_cols),
            _c_void_p(ell.col_index.data.ptr),
            _c_void_p(ell.values.data.ptr),
            _INDEX_32I,
            _INDEX_BASE_ZERO,
            value_type,
        ),
        "cusparseCreateBlockedEll",
    )
    try:
        create_dense = lib.cusparseCreateDnMat
        _check(
            create_dense(
                ctypes.byref(mat_b), _i64(cols), _i64(n), _i64(n), _c_void_p(w.data.ptr), value_type, _ORDER_ROW
            ),
            "cusparseCreateDnMat (B)",
        )
        _check(
            create_dense(
                ctypes.byref(mat_c), _i64(rows), _i64(n), _i64(n), _c_void_p(out.data.ptr), _CUDA_R_32F, _ORDER_ROW
            ),
            "cusparseCreateDnMat (C)",
        )
        alpha, beta = ctypes.c_float(1.0), ctypes.c_float(0.0)
        args = (handle, _NON_TRANSPOSE, _NON_TRANSPOSE, ctypes.byref(alpha), mat_a, mat_b, ctypes.byref(beta), mat_c)
        size = ctypes.c_size_t()
        _check(
            lib.cusparseSpMM_bufferSize(*args, _CUDA_R_32F, _SPMM_BLOCKED_ELL_ALG1, ctypes.byref(size)),
            "cusparseSpMM_bufferSize",
        )
        buffer = cp.empty(max(size.value, 1), dtype=cp.uint8)
        _check(lib.cusparseSpMM(*args, _CUDA_R_32F, _SPMM_BLOCKED_ELL_ALG1, _c_void_p(buffer.data.ptr)), "cusparseSpMM")
    finally:
        for matrix, destroy in (
            (mat_a, lib.cusparseDestroySpMat),
            (mat_b, lib.cusparseDestroyDnMat),
            (mat_c, lib.cusparseDestroyDnMat),
        ):
            if matrix.value:
                destroy(matrix)
