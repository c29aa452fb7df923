"""The experiment file: what to run, validated before anything runs.

An experiment is one YAML mapping (see ``experiments/README.md``). Every field has a default
but the workload; ``sweep:`` turns one experiment into many points: ``grid`` (every
combination of its lists) times ``zip`` (its lists taken together, element by element).
Keys in a sweep are dotted field paths (``workload.layers``, ``backend``).

The ``workload:`` section is validated by the model of the kind it names
(:mod:`spartan_py.workloads`); top-level fields only some kind takes (its ``options``) are
refused for the others.
"""

from __future__ import annotations

import difflib
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    PositiveInt,
    SerializeAsAny,
    ValidationInfo,
    field_validator,
    model_validator,
)

from spartan_py.costmodel.simulate import resolve_machine
from spartan_py.engines import AUTO_BACKEND, backend_choices, backends_taking
from spartan_py.engines.options import OPTION_NAMES, EngineOptions
from spartan_py.errors import InputError
from spartan_py.host.executors import LOCAL_CLUSTERS
from spartan_py.workloads import (
    Workload,
    WorkloadSection,
    validate_section,
    workload_classes,
    workload_of,
    workload_of_section,
)
from spartan_py.workloads.conv.schema import ConvOptions


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def _section(value, info: ValidationInfo) -> WorkloadSection:
    return validate_section(value, info.context)


#: The ``workload`` field: its ``kind`` picks the registered model (a section without ``kind``
#: is of the default kind); dumped with the fields of its own model.
WorkloadField = Annotated[SerializeAsAny[WorkloadSection], PlainValidator(_section)]


def _workload(info: ValidationInfo) -> type[Workload] | None:
    """The workload class of the experiment being validated (None if its workload is invalid)."""
    section = info.data.get("workload")
    return workload_of_section(section) if section is not None else None


class Sweep(_Frozen):
    """``grid``: every combination of its lists; ``zip``: its lists element by element;
    ``cases``: a list of mappings, each a set of fields taken together (points that differ in
    which fields they set, such as workloads of two kinds). Points = grid x zip x cases."""

    grid: dict[str, list] = {}
    zip: dict[str, list] = {}
    cases: list[dict] = []

    @model_validator(mode="after")
    def _lists(self):
        for kind, table in (("grid", self.grid), ("zip", self.zip)):
            for key, values in table.items():
                if not values:
                    raise ValueError(f"sweep.{kind}.{key} is an empty list: the sweep would have zero points")
        lengths = {key: len(values) for key, values in self.zip.items()}
        if len(set(lengths.values())) > 1:
            shown = ", ".join(f"{key} has {length}" for key, length in lengths.items())
            raise ValueError(f"sweep.zip lists must have one length; {shown}")
        both = set(self.grid) & set(self.zip)
        if both:
            raise ValueError(f"fields swept in both grid and zip: {', '.join(sorted(both))}")
        in_cases = {key for case in self.cases for key in case} & (set(self.grid) | set(self.zip))
        if in_cases:
            raise ValueError(f"fields set in both cases and grid or zip: {', '.join(sorted(in_cases))}")
        return self


class ExecutorConfig(_Frozen):
    """Where the points run; results do not depend on it (``spartan run --cluster/--workers``
    override it). See :mod:`spartan_py.host.executors`."""

    cluster: str | None = Field(
        None,
        description="local, local-cuda, or a Dask scheduler address "
        "(tcp://host:8786); none: this machine, without Dask",
    )
    workers: PositiveInt = Field(
        1, description="processes (no cluster, or local); 1 with no cluster runs the points one by one in this process"
    )

    @field_validator("cluster")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        if value is not None and value not in LOCAL_CLUSTERS and "://" not in value:
            raise ValueError(f"expected {', '.join(LOCAL_CLUSTERS)} or a scheduler address such as tcp://host:8786")
        return value


def _name_the_backends(schema: dict) -> None:
    """JSON schema hook: each engine option's help names the backends that take it, worked out
    from the engine classes when the schema is asked for (never written by hand)."""

    for name in OPTION_NAMES:
        entry = schema.get("properties", {}).get(name)
        if entry is not None:
            entry["description"] = f"{entry.get('description', '')} (backends: {', '.join(backends_taking(name))})"


class _ExperimentHead(_Frozen):
    """An experiment's first fields, validated before the engine options (whose checks read
    the workload's kind)."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", description="names the output folder")
    description: str = ""
    workload: WorkloadField


class _ExperimentEngine(EngineOptions, _ExperimentHead):
    """The engine, the options it takes and the mode (after the head, before a workload's own fields)."""

    backend: str = Field(
        AUTO_BACKEND, description="the engine (auto: the GPU's best kernel when a GPU is here, else cpu)"
    )
    mode: Literal["measured", "simulated"] = Field(
        "measured", description="simulated: the GPU kernel's CPU twin, timed by the cost model for `machines[0]`"
    )


class Experiment(ConvOptions, _ExperimentEngine):
    """One experiment file (before its sweep is expanded) or one point of it (no sweep); the
    engine options (``monitor``, ``rows_per_tile``, ...) are
    :class:`~spartan_py.engines.options.EngineOptions`', the fields only a workload kind
    takes its own (:class:`~spartan_py.workloads.conv.schema.ConvOptions`)."""

    model_config = ConfigDict(frozen=True, extra="forbid", json_schema_extra=_name_the_backends)

    repeats: int = Field(1, ge=1, le=100, description="runs per point; the median time is reported")
    machines: list[str] = Field([], description="sim/ machines (NAME or NAME+VARIANT) to replay each point's trace on")
    executor: ExecutorConfig = ExecutorConfig()
    sweep: Sweep | None = None

    @field_validator("monitor", mode="before")
    @classmethod
    def _yaml_off_is_false(cls, value):
        # YAML 1.1 reads a bare `off` as false (and `on` as true)
        return {False: "off", True: "fused"}.get(value, value) if isinstance(value, bool) else value

    @field_validator("machines")
    @classmethod
    def _machines_known(cls, values: list[str]) -> list[str]:
        for value in values:
            try:
                resolve_machine(value)
            except InputError as exc:
                raise ValueError(str(exc)) from None
        return values

    @field_validator("backend")
    @classmethod
    def _known_backend(cls, value: str) -> str:
        choices = backend_choices()  # the registry as it is now: a backend added to it is taken
        if value not in choices:
            close = difflib.get_close_matches(value, choices, n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"{value!r} is not one of {', '.join(choices)}{hint}")
        return value

    @field_validator("backend")
    @classmethod
    def _backend_fits(cls, value, info: ValidationInfo):
        chosen = _workload(info)
        if chosen is not None and chosen.backends is not None and value not in chosen.backends:
            raise ValueError(f"a {chosen.kind} workload runs on {', '.join(chosen.backends)}, not {value!r}")
        return value

    @field_validator("*")
    @classmethod
    def _taken_by_the_workload(cls, value, info: ValidationInfo):
        chosen = _workload(info)
        if chosen is None or info.field_name in chosen.options:
            return value
        owner = next((w for w in workload_classes() if info.field_name in w.options), None)
        if owner is not None:
            raise ValueError(
                f"{info.field_name} is an option of {owner.kind} workloads; a {chosen.kind} workload takes "
                f"{', '.join(chosen.options) or 'none of them'}"
            )
        return value

    @model_validator(mode="after")
    def _simulated_needs_a_machine(self):
        if self.mode == "simulated" and not self.machines:
            raise ValueError("mode: simulated needs at least one entry in `machines` (the first times the run)")
        workload_of(self).check(self)
        return self
