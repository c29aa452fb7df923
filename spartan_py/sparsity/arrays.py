"""Which array library an array belongs to: NumPy (CPU) or CuPy (GPU), without importing
CuPy unless the array is one of its own."""

from __future__ import annotations

import numpy as np

from spartan_py.errors import InputError


def is_gpu_array(array) -> bool:
    """True for a CuPy array (the GPU path), False for anything else."""
    return type(array).__module__.split(".")[0] == "cupy"


def array_module(array):
    """``cupy`` for a CuPy array, ``numpy`` otherwise."""
    if is_gpu_array(array):
        # optional dependency (extra gpu)
        import cupy

        return cupy
    return np


def as_matrix(array, name: str, *, dtype=np.float32):
    """A C-contiguous 2-D array of ``dtype`` on the array's own device; InputError otherwise."""
    xp = array_module(array)
    matrix = xp.asarray(array)
    if matrix.ndim != 2:
        raise InputError(f"{name} must be a 2-D matrix, got shape {tuple(matrix.shape)}")
    return xp.ascontiguousarray(matrix, dtype=dtype)


def same_device(*arrays) -> bool:
    """Whether all the arrays live on the CPU, or all on the GPU."""
    kinds = {is_gpu_array(a) for a in arrays if a is not None}
    return len(kinds) <= 1
