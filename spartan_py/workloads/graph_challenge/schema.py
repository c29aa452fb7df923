"""The ``workload:`` section of a Graph Challenge experiment."""

from __future__ import annotations

from pathlib import Path
from typing import Final, Literal

from pydantic import Field, PositiveInt, ValidationInfo, field_validator

from spartan_py.graph_challenge.generate import generated_family
from spartan_py.workloads.base import WorkloadSection, check_source

#: The ``kind:`` of this workload's section.
KIND: Final = "graph_challenge"


class GraphChallengeWorkload(WorkloadSection):
    """Sparse DNN Graph Challenge inference."""

    kind: Literal["graph_challenge"] = KIND
    network: str = Field(
        "generated:1024",
        description="a folder of layer files, generated:N[:SEED] or generated-unmergeable:N[:SEED]",
    )
    layers: PositiveInt | None = Field(None, description="layers to run (default: all files, 120 if generated)")
    inputs: str = Field("generated:6000", description="an input-rows file, or generated:ROWS[:SEED]")
    rows: PositiveInt | None = Field(None, description="input rows (default: the file's largest row index)")
    truth: str | None = Field(None, description="truth categories file to check against")
    check_rows: PositiveInt | None = Field(
        None,
        description="categories of the first check_rows input rows checked against the cpu engine's "
        "(a second run on the CPU; untimed); rows where they differ are decided in float64 and pass "
        "only on an unstable fixed point (spartan_py.graph_challenge.check)",
    )

    def short_label(self) -> str:
        """``network x layers, rows from inputs`` in a few words, for point labels."""
        network = Path(self.network).name if "/" in self.network else self.network
        inputs = Path(self.inputs).name if "/" in self.inputs else self.inputs
        return f"{network} x {self.layers or 'all'} layers, {self.rows or 'all'} rows of {inputs}"

    @field_validator("network")
    @classmethod
    def _network_exists(cls, value: str, info: ValidationInfo) -> str:
        return check_source(value, info, "network", generated_family(value) is not None)

    @field_validator("inputs")
    @classmethod
    def _inputs_exist(cls, value: str, info: ValidationInfo) -> str:
        return check_source(value, info, "inputs file", value.startswith("generated:"))

    @field_validator("truth")
    @classmethod
    def _truth_exists(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        if value.startswith("generated:"):
            raise ValueError("truth must be a file")
        return check_source(value, info, "truth file", False)
