"""Spartan machinery for dense-weight layers with sparse ReLU activations.

- :class:`SparsityMonitor` profiles a layer's output per tile (modes ``off``, ``software``,
  ``fused``, ``sampled``) and yields a :class:`LayerProfile`.
- :func:`compact_rows` / :func:`compact_tiles` and their inverses compact activations.
- :func:`to_blocked_ell` / :func:`blocked_ell_matmul`: cuSPARSE's block-sparse SpMM, a baseline.
- :func:`tile_sparse_matmul` multiplies skipping zero tiles (``fp32`` or ``tf32``);
  :func:`dense_matmul` is the cuBLAS / NumPy baseline; :func:`matmul_error` measures either
  against float64.
- :class:`KernelPolicy` picks each layer's kernel from a profile and the cost model.
- :func:`run_mlp` runs a ReLU MLP adaptively, :class:`AdaptiveMlp` batch after batch with
  decisions from the previous batch's profiles; :mod:`spartan_py.workloads.conv.layers` has the
  AlexNet / VGG-16 / ResNet-18 convolution shapes and activation generators;
  :mod:`spartan_py.sparsity.digits` trains an MLP on real handwritten digits.

Every function takes NumPy arrays (CPU, Numba) or CuPy arrays (GPU, ``kernels/``) and
returns results on the same device.
"""

from spartan_py.sparsity.adaptive import AdaptiveMlp, MlpRun, run_mlp
from spartan_py.sparsity.blocked_ell import BlockedEll, blocked_ell_matmul, to_blocked_ell
from spartan_py.sparsity.candidates import KERNEL_CHOICES
from spartan_py.sparsity.compaction import (
    CompactRows,
    CompactTiles,
    compact_rows,
    compact_tiles,
    expand_rows,
    expand_tiles,
    tile_list,
)
from spartan_py.sparsity.monitor import MONITOR_MODES, LayerProfile, SparsityMonitor
from spartan_py.sparsity.policy import Decision, KernelPolicy
from spartan_py.sparsity.three_tf32 import round_to_tf32
from spartan_py.sparsity.tile_gemm import (
    DEFAULT_GEMM_TILE,
    DEFAULT_TF32_GEMM_TILE,
    PRECISIONS,
    default_gemm_tile,
    dense_matmul,
    matmul_error,
    tile_sparse_matmul,
)
from spartan_py.sparsity.tiles import TileCounts, TileList, TileShape, coarsen_counts, tile_counts, tile_utilization

__all__ = [
    "DEFAULT_GEMM_TILE",
    "DEFAULT_TF32_GEMM_TILE",
    "KERNEL_CHOICES",
    "MONITOR_MODES",
    "PRECISIONS",
    "AdaptiveMlp",
    "BlockedEll",
    "CompactRows",
    "CompactTiles",
    "Decision",
    "KernelPolicy",
    "LayerProfile",
    "MlpRun",
    "SparsityMonitor",
    "TileCounts",
    "TileList",
    "TileShape",
    "blocked_ell_matmul",
    "coarsen_counts",
    "compact_rows",
    "compact_tiles",
    "default_gemm_tile",
    "dense_matmul",
    "expand_rows",
    "expand_tiles",
    "matmul_error",
    "round_to_tf32",
    "run_mlp",
    "tile_counts",
    "tile_list",
    "tile_sparse_matmul",
    "tile_utilization",
    "to_blocked_ell",
]
