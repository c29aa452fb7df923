"""What every workload is: the model of its experiment section and the class that runs it.

A workload kind is a :class:`Workload` subclass, registered by name in
:data:`spartan_py.workloads.WORKLOADS`; the experiment schema, the runner, the run folder's
tables and the report ask the class (:func:`spartan_py.workloads.workload_of`) and never
name a kind.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import pandas as pd
from pydantic import BaseModel, ConfigDict, ValidationInfo

if TYPE_CHECKING:
    from spartan_py.trace import TraceRecord


class WorkloadSection(BaseModel):
    """The experiment's ``workload:`` section; each kind's model subclasses it with a literal
    ``kind`` and its own fields (``extra="forbid"``, frozen)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: str

    @classmethod
    def variants(cls) -> list[type[WorkloadSection]]:
        """The section models of every registered kind (what a field of this type may hold:
        :func:`spartan_py.config.validate.models_in` reads it, for field paths and hints)."""
        from spartan_py.workloads import section_models  # the registry imports this module

        return section_models()

    def short_label(self) -> str:
        """The section in a few words, for point labels."""
        return self.kind

    def value_label(self, name: str, value: Any) -> Any:
        """How a swept field ``name`` of this section reads in a point label (as it is, by default)."""
        return value


#: The kind of a ``workload:`` section that names none.
DEFAULT_KIND = "graph_challenge"


def kind_of_section(value: Any) -> str:
    """The kind a ``workload:`` section (a mapping or a validated model) names (the default if none)."""
    if isinstance(value, dict):
        return value.get("kind", DEFAULT_KIND)
    return getattr(value, "kind", DEFAULT_KIND)


def point_of_kind(point: dict, kind: str) -> bool:
    """Whether the stored point record ``point`` finished and ran a workload of ``kind``."""
    return point["status"] == "ok" and point["summary"].get("workload", DEFAULT_KIND) == kind


def check_source(value: str, info: ValidationInfo, what: str, generated: bool) -> str:
    """A path (relative to the experiment file) that exists or, where ``generated``, a
    generated spec (``generated:...``; for networks also ``generated-unmergeable:...``)."""
    if generated:
        return value
    base = (info.context or {}).get("base", Path("."))
    path = Path(value) if Path(value).is_absolute() else Path(base) / value
    if not path.exists():
        raise ValueError(f"{what} {value!r} not found (looked for {path}); expected a path or generated:...")
    return str(path.resolve())


@dataclass
class ReportPart:
    """A workload's part of a run's report: sections ``(heading, table)`` and pictures
    ``{file name: (heading, PNG bytes or None)}``; the ``head_`` ones come before the cost
    model's, the others after."""

    head_sections: list[tuple[str, pd.DataFrame]] = field(default_factory=list)
    sections: list[tuple[str, pd.DataFrame]] = field(default_factory=list)
    head_pictures: dict[str, tuple[str, bytes | None]] = field(default_factory=dict)
    pictures: dict[str, tuple[str, bytes | None]] = field(default_factory=dict)


class Workload:
    """A workload kind: its section model, the experiment fields only it takes, the backends
    it runs on, how it runs one point, its tables and its part of the report."""

    #: The ``kind:`` of its section (the registry's key).
    kind: ClassVar[str]
    #: The model of its ``workload:`` section.
    section: ClassVar[type[WorkloadSection]]
    #: Top-level experiment fields only this kind takes (the others refuse them).
    options: ClassVar[tuple[str, ...]] = ()
    #: The ``backend`` values it runs on; None: every backend of :data:`spartan_py.engines.BACKENDS`.
    backends: ClassVar[tuple[str, ...] | None] = None
    #: Tables of the run folder written even when empty (their file names).
    always_tables: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def check(cls, experiment: Any) -> None:
        """Refuse (``ValueError``) a validated experiment of this kind whose fields do not fit together."""

    @classmethod
    def unavailable_reason(cls, experiment: Any) -> str | None:
        """Why a measured point of this kind cannot run on this machine, or None."""
        return None

    @classmethod
    def check_inputs(cls, experiment: Any) -> None:
        """Read and check the point's input files and shapes before any work; raise
        :class:`~spartan_py.errors.InputError` naming the file or field (nothing to check: pass)."""

    @classmethod
    def run_point(cls, experiment: Any, point_id: str) -> tuple[dict, list[float], list[TraceRecord]]:
        """One point: its summary (JSON-ready), each repeat's seconds and its kernel trace."""
        raise NotImplementedError

    @classmethod
    def owns(cls, point: dict) -> bool:
        """Whether the stored point record ``point`` is of this kind and finished."""
        return point_of_kind(point, cls.kind)

    @classmethod
    def edges(cls, summary: dict) -> float | None:
        """Edges one run of the point computes (the simulated table's ``edges``), if that means something."""
        return None

    @classmethod
    def answer(cls, summary: dict) -> str | None:
        """A finished point's result in one line, for the end of ``spartan run`` (None: none)."""
        return None

    @classmethod
    def tables(cls, points: list[dict]) -> dict[str, pd.DataFrame]:
        """The run folder's tables of this kind, by file name, from the stored point records."""
        return {}

    @classmethod
    def report(cls, out: Path, points: list[dict], traces: pd.DataFrame) -> ReportPart:
        """Its part of the report of run folder ``out`` (points in sweep order; every trace)."""
        return ReportPart()
