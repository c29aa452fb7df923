"""The compiled kernel instances the shipped engines and the conv workload launch, and which of
them a machine's calibration prices with a fit of their own.

The list is worked out by the engines' own launch-choice code, not written by hand: each Graph
Challenge backend's CPU twin (which writes the GPU engine's trace records by construction) is
built on a generated network of each family and width it runs, with its default options, and
asked for the records of its launches (:meth:`LayerKernelTrace.launch_trace`) at several live-row
counts; the conv workload's candidates are asked for their records
(:func:`~spartan_py.sparsity.candidates.candidate_records`) at every precision. A record's
compiled instance is what the cost model keys its fits by
(:func:`~spartan_py.costmodel.families.record_instances`).

What an instance depends on, and so what the networks built here must cover:

- the rows kernel: the tile height its launch takes for its live rows
  (:func:`~spartan_py.engines.rows.plan.gc_tile_rows`: a quarter, half or three quarters of the
  tile for launches of few rows, hence the row counts of :data:`LIVE_ROWS`), its columns per
  thread (the width) and whether the first launch counts lit inputs (``P``);
- the merged kernel: the merged width (the network's family), the first launch's kind (counts
  ``P``, bits ``B``, tile ``R`` or gather ``G``), the later launches' shape
  (:func:`~spartan_py.engines.merged.plan.later_launch_shape`) and, at widths the chain kernel
  takes, the chain launches' team warps, which depend on the launch's layers (one warp up to
  :data:`~spartan_py.engines.merged.chain.LONE_WARP_MAX_LAYERS`, pairs beyond): the doubling
  schedule's launches of 1 to 32 layers, so the networks here are :data:`LAYERS` deep where
  the chain kernel runs (width 64) and a few layers elsewhere (every later launch the same
  instance). Depth and row count beyond that change no instance.

The conv workload's instances do not depend on its layers' shapes (only per-instance families
have instances: row compaction's steps and cuBLAS's records that name their algorithm, which
every GPU run's do: ``lt``); the shapes of the committed experiments are used all the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

import numpy as np

from spartan_py.costmodel.families import (
    FAMILIES,
    calibration_key,
    dense_gemm,
    record_instances,
)
from spartan_py.costmodel.library_gemm import ALGORITHM_INSTANCE
from spartan_py.costmodel.machine import Machine
from spartan_py.costmodel.model import GUESSED_KINDS, calibration_kind
from spartan_py.engines import engine_class, twin_backend
from spartan_py.engines.shared.kernel_trace import LayerKernelTrace
from spartan_py.graph_challenge.generate import GENERATED_FAMILIES, generate_network
from spartan_py.sparsity.candidates import CANDIDATES, candidate_records
from spartan_py.sparsity.tile_gemm import PRECISIONS
from spartan_py.sparsity.tiles import TileShape
from spartan_py.trace import to_frame as records_frame
from spartan_py.workloads.conv.layers import SHAPE_SET
from spartan_py.workloads.drawn_set import GC_BACKENDS, GC_WIDTHS, ROWS_RANGE, backend_runs

#: Rows entering the first launch: the ends of the drawn sets' range (every row of a batch).
FIRST_ROWS = ROWS_RANGE

#: Live rows entering each later launch: a full batch, and the counts at which the rows
#: kernel's 16-row tile shrinks to 12, 8 and 4 rows on a grid of 132 blocks.
LIVE_ROWS = (60000, 1500, 1000, 500)

#: Layers of the networks built where the chain kernel runs (merged width 64): the doubling
#: schedule's launches of 1, 2, 4, 8, 16 and 32 layers (4 + 2 + 4 + 8 + 16 + 32 = 66).
LAYERS = 70

#: Layers elsewhere: the first launch and later ones (every later launch is one instance).
FEW_LAYERS = 6

#: cuBLAS records of a GPU run name the algorithm cuBLAS picked (instance ``lt``); the CPU's
#: candidate records name none, so each dense-GEMM family gets this instance added.
GPU_NAMED_INSTANCES = {dense_gemm(p): ALGORITHM_INSTANCE for p in ("fp32", "tf32")}


@dataclass(frozen=True)
class LaunchedInstance:
    """One compiled instance a shipped engine launches: its family, instance (``""``: the
    family is calibrated as one) and where it was seen (backend and network, or conv layer)."""

    kernel: str
    instance: str
    launched_by: str

    @property
    def key(self) -> str:
        """The instance's key in a machine's calibration (``gpu.gc_merged/R1xW4096``)."""
        return calibration_key(self.kernel, self.instance)


def _graph_challenge_records(backend: str, family: str, neurons: int):
    """The twin's records of ``backend`` on a generated ``family`` network of ``neurons``, once per
    row count of :data:`FIRST_ROWS` entering the first launch and of :data:`LIVE_ROWS` entering
    the later ones, binary inputs as the Graph Challenge's and the generated ones are."""
    merged_width = neurons // 16 if not GENERATED_FAMILIES[family] else neurons
    layers = LAYERS if backend == "gpu-merged" and merged_width <= 64 else FEW_LAYERS
    network = generate_network(neurons, layers, seed=0, unmergeable=GENERATED_FAMILIES[family])
    engine = engine_class(twin_backend(backend))(network)
    assert isinstance(engine, LayerKernelTrace)  # every Graph Challenge twin writes its launches' trace
    records = []
    for first in FIRST_ROWS:
        for rows in LIVE_ROWS:
            counts = np.full(layers + 1, min(rows, first), dtype=np.int64)
            counts[0] = first
            records += engine.launch_trace(counts, counts * 32, first * 100, bit_inputs=True)
    return records


def graph_challenge_instances(widths: tuple[int, ...] = GC_WIDTHS) -> list[LaunchedInstance]:
    """Every instance the Graph Challenge backends launch on networks of ``widths`` neurons of
    each generated family they run (:data:`~spartan_py.workloads.drawn_set.GC_BACKENDS`)."""
    found: dict[str, LaunchedInstance] = {}
    for backend in GC_BACKENDS:
        for family in GENERATED_FAMILIES:
            for neurons in widths:
                if not backend_runs(backend, family, neurons):
                    continue
                frame = records_frame(_graph_challenge_records(backend, family, neurons))
                where = f"{backend} {family}:{neurons}"
                for kernel, instance in zip(frame["kernel"], record_instances(frame), strict=True):
                    if kernel in FAMILIES and FAMILIES[kernel].per_instance:
                        key = calibration_key(kernel, instance)
                        found.setdefault(key, LaunchedInstance(kernel, instance, where))
    return sorted(found.values(), key=lambda item: item.key)


def conv_instances(batch: int = 16, density: float = 0.3) -> list[LaunchedInstance]:
    """Every instance the conv workload's candidates launch (each precision, forward and the
    ``fp32x3`` split) on the shape set's layers, and cuBLAS's ``lt`` records of a GPU run."""
    found: dict[str, LaunchedInstance] = {}
    for layer in SHAPE_SET:
        m, k, n = layer.gemm_shape(batch)
        live = max(1, int(m * density))
        counts = {"nnz": int(m * k * density), "tiles_active": max(1, m // 16), "live_rows": live}
        for precision in PRECISIONS:
            for cand in CANDIDATES:
                if precision not in cand.precisions:
                    continue
                records = candidate_records(cand.name, m, k, n, tile=TileShape(16, 16), precision=precision, **counts)
                frame = records_frame(records)
                for kernel, instance in zip(frame["kernel"], record_instances(frame), strict=True):
                    if kernel in FAMILIES and FAMILIES[kernel].per_instance:
                        key = calibration_key(kernel, instance)
                        found.setdefault(key, LaunchedInstance(kernel, instance, f"conv {layer.label} {cand.name}"))
    for kernel, instance in GPU_NAMED_INSTANCES.items():
        found.setdefault(calibration_key(kernel, instance), LaunchedInstance(kernel, instance, "conv on a GPU"))
    return sorted(found.values(), key=lambda item: item.key)


@cache
def shipped_instances() -> tuple[LaunchedInstance, ...]:
    """:func:`graph_challenge_instances` and :func:`conv_instances` (worked out once a process)."""
    return tuple(graph_challenge_instances() + conv_instances())


def unfitted_instances(machine: Machine, launched: Sequence[LaunchedInstance] | None = None) -> dict[str, str]:
    """{calibration key: how it is priced} of the ``launched`` instances (default
    :func:`shipped_instances`) that ``machine`` prices without a fit of their own
    (:data:`~spartan_py.costmodel.model.GUESSED_KINDS`: the family-wide fallback or the defaults)."""
    kinds = {
        item.key: calibration_kind(machine, item.kernel, item.instance) for item in launched or shipped_instances()
    }
    return {key: kind for key, kind in sorted(kinds.items()) if kind in GUESSED_KINDS}
