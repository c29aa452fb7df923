"""The conv shapes and sweep settings the Spartan benchmarks share (``spartan_machinery``,
``tile_gemm``, ``tile_gemm_variants``)."""

from __future__ import annotations

#: (layer, batch): shapes of the sweep; batches keep every GEMM above a full wave of blocks.
CONV_CASES = (
    ("alexnet/conv2", 128),
    ("alexnet/conv4", 128),
    ("vgg16/conv3_2", 16),
    ("vgg16/conv5_2", 64),
    ("resnet18/conv2_x", 64),
    ("resnet18/conv4_x", 64),
    ("resnet18/conv5_x", 128),
)
DENSITIES = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0)
GEMM_TILE = (64, 32)  # DEFAULT_GEMM_TILE, the policy's tile
SWEEP_ROUNDS = 10  # turns of the kernels compared at each sweep point


def gemm_tile_shape():
    """:data:`GEMM_TILE` as a ``TileShape``."""
    from spartan_py.sparsity import TileShape

    return TileShape(*GEMM_TILE)
