"""Workloads: what an experiment runs, one package per kind, registered by name.

- ``graph_challenge`` (:mod:`spartan_py.workloads.graph_challenge`): Sparse DNN Graph
  Challenge inference on the engines (:mod:`spartan_py.engines`); its data (formats,
  generator, :class:`~spartan_py.graph_challenge.network.Network`) stays in
  :mod:`spartan_py.graph_challenge`, the layer the engines read.
- ``conv_layers`` (:mod:`spartan_py.workloads.conv`): convolution layers as dense-weight
  GEMMs over sparse maps, on the Spartan machinery (:mod:`spartan_py.sparsity`).

A kind is a :class:`~spartan_py.workloads.base.Workload` subclass and one line in
:data:`WORKLOADS` (docs/extending.md, "A workload").
"""

from __future__ import annotations

import difflib
import importlib
from typing import Any

from spartan_py.workloads.base import DEFAULT_KIND, ReportPart, Workload, WorkloadSection, kind_of_section

#: Workload kind -> "module:Class". Imported on first use (as :data:`spartan_py.engines.BACKENDS`).
WORKLOADS: dict[str, str] = {
    "graph_challenge": "spartan_py.workloads.graph_challenge.workload:GraphChallenge",
    "conv_layers": "spartan_py.workloads.conv.workload:ConvLayers",
}


def workload_class(kind: str) -> type[Workload]:
    """The workload class registered as ``kind``; ValueError naming the kinds for another."""
    try:
        target = WORKLOADS[kind]
    except (KeyError, TypeError):
        close = difflib.get_close_matches(str(kind), list(WORKLOADS), n=1, cutoff=0.5)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"kind {kind!r} is not one of {', '.join(WORKLOADS)}{hint}") from None
    module_name, class_name = target.split(":")
    return getattr(importlib.import_module(module_name), class_name)


def workload_classes() -> list[type[Workload]]:
    """Every registered workload class, in registry order."""
    return [workload_class(kind) for kind in WORKLOADS]


def section_models() -> list[type[WorkloadSection]]:
    """The ``workload:`` section model of every registered kind."""
    return [cls.section for cls in workload_classes()]


def validate_section(value: Any, context: dict | None) -> WorkloadSection:
    """A ``workload:`` section validated by its kind's model (a validated one as it is)."""
    if isinstance(value, WorkloadSection):
        return value
    if not isinstance(value, dict):
        raise ValueError(f"expected a mapping with the workload's fields, got {value!r}")
    return workload_class(kind_of_section(value)).section.model_validate(value, context=context)


def workload_of_section(section: Any) -> type[Workload]:
    """The workload class of a ``workload:`` section (a mapping or a validated model)."""
    return workload_class(kind_of_section(section))


def workload_of(experiment: Any) -> type[Workload]:
    """The workload class of a validated experiment (or point)."""
    return workload_of_section(experiment.workload)


def workload_of_point(point: dict) -> type[Workload]:
    """The workload class of a stored point record (its ``config``)."""
    return workload_of_section(point["config"]["workload"])


__all__ = [
    "DEFAULT_KIND",
    "WORKLOADS",
    "ReportPart",
    "Workload",
    "WorkloadSection",
    "kind_of_section",
    "section_models",
    "validate_section",
    "workload_class",
    "workload_classes",
    "workload_of",
    "workload_of_point",
    "workload_of_section",
]
