"""The conv_layers workload class: what the runner, the tables and the report ask of it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from spartan_py.engines import AUTO_BACKEND, resolve_backend, unavailable_reason
from spartan_py.errors import InputError
from spartan_py.sparsity.tile_rules import tile_problem
from spartan_py.trace import TraceRecord
from spartan_py.workloads.base import ReportPart, Workload
from spartan_py.workloads.conv.dense_layers import run_conv_point
from spartan_py.workloads.conv.report import conv_report
from spartan_py.workloads.conv.saved_maps_check import check_saved_maps
from spartan_py.workloads.conv.schema import KIND, ConvLayersWorkload, ConvOptions
from spartan_py.workloads.conv.tables import dense_layer_table

#: The GPU path's backend name (CuPy, cuBLAS and our kernels): it runs where the rows kernel's engine does.
GPU_BACKEND = "gpu"


def _runs_on_gpu(experiment: Any) -> bool:
    """Whether a point runs its kernels on the GPU (measured, on ``gpu`` or on ``auto`` where there is one)."""
    if experiment.mode == "simulated":
        return False
    return experiment.backend == GPU_BACKEND or (
        experiment.backend == AUTO_BACKEND and resolve_backend(AUTO_BACKEND) == GPU_BACKEND
    )


class ConvLayers(Workload):
    """Convolution layers as dense-weight GEMMs over sparse maps, on the CPU (NumPy/Numba)
    or the GPU (CuPy/cuBLAS/our kernels); simulated points compute on the CPU."""

    kind = KIND
    section = ConvLayersWorkload
    options = tuple(ConvOptions.model_fields)
    backends = (AUTO_BACKEND, "cpu", GPU_BACKEND)

    @classmethod
    def check(cls, experiment: Any) -> None:
        """Simulated points compute on the CPU; ``trace: all`` times the fp32 and tf32 families."""
        if experiment.mode == "simulated" and experiment.backend == GPU_BACKEND:
            raise ValueError(
                "mode: simulated computes on the CPU and times with the cost model; use backend auto or cpu"
            )
        if experiment.trace == "all" and experiment.precision == "fp32x3":
            raise ValueError(
                "trace: all times each candidate's launches for the cost model's fp32 and tf32 families; "
                "fp32x3 runs the tf32 ones: use precision tf32 (or trace: chosen)"
            )

    @classmethod
    def unavailable_reason(cls, experiment: Any) -> str | None:
        """Only the GPU path needs a GPU (``auto`` runs on the CPU where there is none)."""
        return unavailable_reason(GPU_BACKEND) if experiment.backend == GPU_BACKEND else None

    @classmethod
    def check_inputs(cls, experiment: Any) -> None:
        """The tile against what the kernels take (on the GPU where the point runs there) and the saved maps."""
        if experiment.tile is not None:
            problem = tile_problem(experiment.tile, experiment.precision, gpu=_runs_on_gpu(experiment))
            if problem:
                raise InputError(f"tile {list(experiment.tile)}: {problem}")
        if experiment.workload.activations is not None:
            check_saved_maps(experiment.workload.activations, tuple(experiment.workload.layers))

    @classmethod
    def run_point(cls, experiment: Any, point_id: str) -> tuple[dict, list[float], list[TraceRecord]]:
        """See :func:`~spartan_py.workloads.conv.dense_layers.run_conv_point` (one time: the layers' sum)."""
        summary, trace = run_conv_point(experiment, point_id)
        return summary, [summary["seconds"]], trace

    @classmethod
    def tables(cls, points: list[dict]) -> dict[str, pd.DataFrame]:
        """``dense-layers.csv``."""
        return {"dense-layers.csv": dense_layer_table(points)}

    @classmethod
    def report(cls, out: Path, points: list[dict], traces: pd.DataFrame) -> ReportPart:
        """See :func:`~spartan_py.workloads.conv.report.conv_report`."""
        return conv_report(out, points, traces)
