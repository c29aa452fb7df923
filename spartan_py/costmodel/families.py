"""Kernel family names and how the cost model treats each family.

Every trace record's ``kernel`` is one of these names. The engines import the names from
here, so that a family is spelt in one place; :data:`FAMILIES` says which unit bounds
each one (see :mod:`spartan_py.costmodel.model`).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from spartan_py.costmodel.library_gemm import ALGORITHM_INSTANCE, CublasAlgo

GC_LAYER = "gpu.gc_layer"
"""The rows kernel of the ``gpu`` backend (``kernels/gc_layer.cu``): a chunk of layers per launch."""
GC_MERGED = "gpu.gc_merged"
"""The merged-column kernel of ``gpu-merged`` (``kernels/gc_merged.cu``)."""
SCATTER_ROWS = "gpu.scatter_rows"
"""``gpu-merged``'s first step: the CSR input rows scattered into dense rows."""
EXPAND = "gpu.expand"
"""``gpu-merged``'s last step: the final live rows expanded back to all neurons."""
MONITOR_PASS = "gpu.monitor_pass"
"""The software monitor's separate counting pass."""
EPILOGUE = "gpu.epilogue"
"""Bias, ReLU and clamp over a GEMM's output, with the fused monitor or without."""
COMPACT = "gpu.compact"
"""Row compaction (gather of live rows) and its inverse."""
LIST_TILES = "gpu.list_tiles"
"""The list of non-zero tiles from the monitor's counts."""
CSR_CONVERT = "gpu.csr_convert"
"""Dense to CSR conversion (cuSPARSE)."""
CSR_GEMM_FP32 = "gpu.csr_gemm.fp32"
"""CSR times dense (cuSPARSE SpMM)."""
COPY_H2D = "gpu.copy_h2d"
"""A host-to-device copy."""
COPY_D2H = "gpu.copy_d2h"
"""A device-to-host copy."""
SYNC = "gpu.sync"
"""A host synchronisation with the device."""


def dense_gemm(precision: str) -> str:
    """The cuBLAS GEMM family at ``precision`` (``fp32``, ``tf32``)."""
    return f"gpu.dense_gemm.{precision}"


def dense_gemm_precision(kernel: str) -> str | None:
    """The precision of a cuBLAS GEMM record's ``kernel`` (:func:`dense_gemm`), ``None`` for any other kernel."""
    precision = kernel.removeprefix(dense_gemm(""))
    return precision if precision != kernel and kernel in FAMILIES else None


def tile_gemm(precision: str) -> str:
    """The tile-sparse GEMM family at ``precision`` (``fp32``, ``tf32``, ``bf16``)."""
    return f"gpu.tile_gemm.{precision}"


@dataclass(frozen=True)
class KernelFamily:
    """How a kernel uses the machine: ``unit`` is ``smem``, ``fp32``, ``tf32``, ``bf16``,
    ``memory`` (bandwidth only), ``link`` (host copies) or ``sync``."""

    unit: str
    bytes_per_mac: float = 4.0  # for the smem unit: operand bytes loaded per multiply-add
    monitor_pass: bool = False  # a separate counting pass, free under a hardware monitor
    #: whether a block loads its next step while it computes this one, so that its own memory
    #: time hides under its compute with one block per SM (the tensor-core tile GEMMs; the FP32
    #: one prefetches too, but runs three blocks per SM, which hide two thirds of it already:
    #: with the flag its fit went to 0.97 of FP32 peak and over-predicted its speed at full density)
    prefetches: bool = False
    #: whether its compiled instances (the variant's first part, e.g. ``R1xC16``: rows per tile
    #: and columns per thread) are calibrated apart: each has its own registers and occupancy
    per_instance: bool = False
    #: host synchronisations inside one record's timed work (the software monitor's pass waits
    #: for its counts; cuSPARSE's conversion reads the non-zero count back): each adds the
    #: host's round trip, which another host changes (:mod:`spartan_py.costmodel.hosts`)
    host_syncs: int = 0
    #: whether more than half of its H100 time is the host's, not the GPU's work (decided
    #: before a validation set is drawn): its error is judged against twice its run-to-run
    #: spread instead of the fixed bar (:mod:`spartan_py.costmodel.repeatability`)
    host_bound: bool = False
    #: a library GEMM (cuBLAS) whose records may name the algorithm it ran
    #: (:mod:`spartan_py.costmodel.library_gemm`): those are one instance, priced by its tiles
    library_gemm: bool = False
    #: threads an SM its launch bound keeps resident by registers (``__launch_bounds__``'
    #: minimum blocks times the block size it was written for), or 0: none. A record that
    #: names no residency (``resident_blocks_per_sm`` 0: the merged kernel's block tiles before
    #: session 46) is resident at most this over its ``block_threads``.
    register_bound_threads_per_sm: int = 0
    #: threads of a block, for a memory-bound kernel that launches one block per row it moves
    #: (``move_rows`` of ``kernels/spartan_tiles.cu``: row compaction's gather and expansion's
    #: scatter), or 0. Such a block waits DRAM round trips of its own (its row's id, then its
    #: loads), and only so many blocks are resident: narrow rows make it latency-bound, which a
    #: GPU with faster DRAM does not speed up (:func:`spartan_py.costmodel.memory_terms.row_block_rounds`)
    row_block_threads: int = 0


UNMERGED = ":unmerged"
"""Suffix of a merged-kernel instance whose merged row holds every neuron (an unmergeable
network: ``W`` equals the layer's width). Its inner loop runs 32 multiply-adds a neuron where a
merged row's runs a few a merged column, so the same compiled instance spends its time
differently (on the H100, 0.6 ps a multiply-add against 8-14 ps at ``R1xW4096``) and is fitted apart."""


ROLE_SEPARATOR = "/"
"""A training step's records append their GEMM's role to the variant (``rows/weight_grad``):
what follows it names where the launch sat, not what ran."""


def named_algorithm(variant: object) -> CublasAlgo | None:
    """The cuBLAS algorithm a record's ``variant`` names, a training step's role aside, or ``None``."""
    return CublasAlgo.from_variant(variant.split(ROLE_SEPARATOR, 1)[0]) if isinstance(variant, str) else None


def instance_of(kernel: str, variant: str, cols: int = 0) -> str:
    """The compiled instance a record of ``kernel`` ran (``R16xC1``), or ``""`` when the
    family is calibrated as one; a merged-kernel record whose row is the whole layer
    (``cols``, the layer's width, equal to its ``W``) gets :data:`UNMERGED` appended. A
    training step's role (after :data:`ROLE_SEPARATOR`) is not part of the instance."""
    family = FAMILIES.get(kernel)
    if family is None or not family.per_instance or not isinstance(variant, str) or not variant:
        return ""
    if family.library_gemm:  # one instance: the records that name their algorithm
        return ALGORITHM_INSTANCE if named_algorithm(variant) else ""
    instance = variant.split("-", 1)[0].split(ROLE_SEPARATOR, 1)[0]
    if kernel == GC_MERGED and cols and instance.endswith(f"W{int(cols)}"):
        instance += UNMERGED
    return instance


def record_instances(records: pd.DataFrame) -> list[str]:
    """:func:`instance_of` for every record of a trace (its ``kernel``, ``variant`` and ``cols``)."""
    cols = records["cols"] if "cols" in records else pd.Series(0, index=records.index)
    return [
        instance_of(k, v, int(c) if c == c else 0)
        for k, v, c in zip(records["kernel"], records["variant"], cols, strict=True)
    ]


def calibration_key(kernel: str, instance: str = "") -> str:
    """The key of a family's (or one instance's) parameters in a machine's ``calibration``."""
    return f"{kernel}/{instance}" if instance else kernel


FUSED_MONITOR_SHARE: dict[str, float] = {GC_LAYER: 0.0196, GC_MERGED: 0.0270}
"""The share of a fused-monitored launch's time that its monitor costs, measured on the official
proxy on an H100 with ``python -m benchmarks.gc_gpu``: the rows kernel in 2.3241 ms with the
monitor off and 2.3706 ms fused (``benchmarks/results/gc_gpu-20261126-183259.json.gz``, commit
5c0b6be), the merged kernels in 0.3967 and 0.4087 ms (``gc_gpu-20261128-071140.json``, commit
d121edd; 3.78% with the kernels before 9ab4d00). The monitor's extra bytes, all the records
describe of it, account for 0.02% and 0.6%: the rest is the epilogue's counting instructions.
A hardware monitor (the ``hw-monitor`` variant) removes this share."""


FAMILIES: dict[str, KernelFamily] = {
    GC_LAYER: KernelFamily("smem", per_instance=True),
    # 64 registers a thread since e5ff51c (nvcc -Xptxas -v on sm_90): 4 blocks of 256 an SM
    GC_MERGED: KernelFamily("smem", per_instance=True, register_bound_threads_per_sm=1024),
    EXPAND: KernelFamily("memory", per_instance=True),  # "final" (element-wise, before), "rowwise"
    SCATTER_ROWS: KernelFamily("memory"),
    MONITOR_PASS: KernelFamily("memory", monitor_pass=True, host_syncs=1, host_bound=True),
    EPILOGUE: KernelFamily("memory"),
    COMPACT: KernelFamily("memory", per_instance=True, row_block_threads=128),
    LIST_TILES: KernelFamily("memory"),
    tile_gemm("fp32"): KernelFamily("fp32"),
    tile_gemm("tf32"): KernelFamily("tf32", prefetches=True),
    tile_gemm("bf16"): KernelFamily("bf16", prefetches=True),
    dense_gemm("fp32"): KernelFamily("fp32", per_instance=True, library_gemm=True),
    dense_gemm("tf32"): KernelFamily("tf32", per_instance=True, library_gemm=True),
    CSR_GEMM_FP32: KernelFamily("fp32"),
    CSR_CONVERT: KernelFamily("memory", host_syncs=1, host_bound=True),
    COPY_H2D: KernelFamily("link"),
    COPY_D2H: KernelFamily("link"),
    SYNC: KernelFamily("sync"),
}
"""Kernel name -> family. Kernels not listed (CPU kernels, the stock-library baselines'
whole-run records) are not modelled."""

TIMED_FAMILIES = (
    GC_LAYER,
    GC_MERGED,
    EXPAND,
    SCATTER_ROWS,
    dense_gemm("fp32"),
    dense_gemm("tf32"),
    tile_gemm("fp32"),
    tile_gemm("tf32"),
    LIST_TILES,
    COMPACT,
    CSR_CONVERT,
    CSR_GEMM_FP32,
)
"""Families whose times a replay adds up: the Graph Challenge layer kernels and the dense-layer
kernels (the policy's candidates). Copies, syncs and the software monitor's pass are reported apart."""
