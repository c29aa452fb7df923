"""The cpu engine: Numba kernels over lane-major row tiles (backend ``cpu``)."""
