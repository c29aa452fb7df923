"""The experiment file: what to run, validated before anything runs.

An experiment is one YAML mapping (see ``experiments/README.md``). Every field has a default
but the workload; ``sweep:`` turns one experiment into many points: ``grid`` (every
combination of its lists) times ``zip`` (its lists taken together, element by element).
Keys in a sweep are dotted field paths (``workload.layers``, ``backend``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, ValidationInfo, field_validator, model_validator

from spartan_py.engines import BACKEND_CHOICES

Backend = Literal[tuple(BACKEND_CHOICES)]  # type: ignore[valid-type]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def _check_source(value: str, info: ValidationInfo, what: str) -> str:
    """A ``generated:...`` spec, or a path (relative to the experiment file) that exists."""
    if value.startswith("generated:"):
        return value
    base = (info.context or {}).get("base", Path("."))
    path = Path(value) if Path(value).is_absolute() else Path(base) / value
    if not path.exists():
        raise ValueError(f"{what} {value!r} not found (looked for {path}); expected a path or generated:...")
    return str(path.resolve())


class GraphChallengeWorkload(_Frozen):
    """Sparse DNN Graph Challenge inference."""

    kind: Literal["graph_challenge"] = "graph_challenge"
    network: str = Field("generated:1024", description="a folder of layer files, or generated:N[:SEED]")
    layers: PositiveInt | None = Field(None, description="layers to run (default: all files, 120 if generated)")
    inputs: str = Field("generated:6000", description="an input-rows file, or generated:ROWS[:SEED]")
    rows: PositiveInt | None = Field(None, description="input rows (default: the file's largest row index)")
    truth: str | None = Field(None, description="truth categories file to check against")

    @field_validator("network")
    @classmethod
    def _network_exists(cls, value: str, info: ValidationInfo) -> str:
        return _check_source(value, info, "network")

    @field_validator("inputs")
    @classmethod
    def _inputs_exist(cls, value: str, info: ValidationInfo) -> str:
        return _check_source(value, info, "inputs file")

    @field_validator("truth")
    @classmethod
    def _truth_exists(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        if value.startswith("generated:"):
            raise ValueError("truth must be a file")
        return _check_source(value, info, "truth file")


class Sweep(_Frozen):
    """``grid``: every combination of its lists; ``zip``: its lists element by element."""

    grid: dict[str, list] = {}
    zip: dict[str, list] = {}

    @model_validator(mode="after")
    def _lists(self):
        for kind, table in (("grid", self.grid), ("zip", self.zip)):
            for key, values in table.items():
                if not values:
                    raise ValueError(f"sweep.{kind}.{key} is an empty list: the sweep would have zero points")
        lengths = {key: len(values) for key, values in self.zip.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"sweep.zip lists must have one length; got {lengths}")
        both = set(self.grid) & set(self.zip)
        if both:
            raise ValueError(f"fields swept in both grid and zip: {', '.join(sorted(both))}")
        return self


class Experiment(_Frozen):
    """One experiment file (before its sweep is expanded) or one point of it (no sweep)."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", description="names the output folder")
    description: str = ""
    workload: GraphChallengeWorkload
    backend: Backend = "auto"
    mode: Literal["measured", "simulated"] = Field(
        "measured", description="simulated: the GPU kernel's CPU twin, timed by the cost model for `machines[0]`"
    )
    monitor: Literal["fused", "off", "sampled", "software"] = Field(
        "fused", description="the gpu kernel's sparsity monitor (gpu, gpu-twin): fused in its epilogue, sampled "
        "(fused on every 4th launch), software (a separate pass and host copy after every layer) or off")
    rows_per_tile: PositiveInt | None = Field(None, description="gpu kernel tile height (gpu, gpu-twin; default per size)")
    compact_every: Literal["doubling"] | PositiveInt = Field(
        "doubling", description="layers per gpu kernel launch (gpu, gpu-twin): doubling (1, 1, 1, 1, 2, 4, ... 32) or a count")
    repeats: int = Field(1, ge=1, le=100, description="runs per point; the median time is reported")
    machines: list[str] = Field([], description="sim/ machines (NAME or NAME+VARIANT) to replay each point's trace on")
    sweep: Sweep | None = None

    @field_validator("monitor", mode="before")
    @classmethod
    def _yaml_off_is_false(cls, value):
        # YAML 1.1 reads a bare `off` as false (and `on` as true)
        return {False: "off", True: "fused"}.get(value, value) if isinstance(value, bool) else value

    @field_validator("machines")
    @classmethod
    def _machines_known(cls, values: list[str]) -> list[str]:
        from spartan_py.costmodel.simulate import resolve_machine
        from spartan_py.errors import InputError

        for value in values:
            try:
                resolve_machine(value)
            except InputError as exc:
                raise ValueError(str(exc)) from None
        return values

    @model_validator(mode="after")
    def _simulated_needs_a_machine(self):
        if self.mode == "simulated" and not self.machines:
            raise ValueError("mode: simulated needs at least one entry in `machines` (the first times the run)")
        if self.mode == "simulated" and self.backend not in ("auto", "gpu", "gpu-twin"):
            raise ValueError(f"mode: simulated runs the gpu kernel's twin; backend {self.backend!r} has none")
        return self
