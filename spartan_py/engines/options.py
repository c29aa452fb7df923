"""The options an engine takes from an experiment file: each declared once, here, with its
type, default and meaning.

The experiment schema (:class:`spartan_py.runner.schema.Experiment`) inherits these fields;
an engine class lists the ones its constructor takes (:attr:`Engine.takes_options
<spartan_py.engines.base.Engine.takes_options>`), and :func:`engine_options` hands it those,
so the runner has no branch per backend. Which backends take an option is worked out from
the engine classes (:func:`spartan_py.engines.backends_taking`), never written by hand.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt


class EngineOptions(BaseModel):
    """Every engine option of an experiment, with its default."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    monitor: Literal["fused", "off", "sampled", "software"] = Field(
        "fused",
        description="the layer kernel's sparsity monitor: fused in its epilogue, sampled (fused on every 4th "
        "launch), software (a separate pass and host copy after every layer) or off",
    )
    rows_per_tile: PositiveInt | None = Field(None, description="the layer kernel's tile height (default per size)")
    chain_rows: Literal[0, 1, 2] | None = Field(
        None,
        description="rows a team of the chain kernel takes in the launches after the first (null: two; "
        "0: the block-tile kernel in every launch)",
    )
    chain_warps: Literal[1, 2] | None = Field(
        None,
        description="warps of the chain kernel that share a group of rows, meeting at a barrier between "
        "layers (null: one in launches of up to 8 layers, a pair in longer ones)",
    )
    input_counts: bool = Field(
        True,
        description="binary inputs enter the first layer as counts of lit inputs per output (merged column) "
        "where the layer allows it (false: as floats, as bits in the merged kernel)",
    )
    compact_every: Literal["doubling"] | PositiveInt = Field(
        "doubling", description="layers per kernel launch: doubling (4, 2, 4, 8, ... 32) or a count"
    )
    time_limit_seconds: PositiveFloat | None = Field(
        None,
        description="stop when the inference runs longer than this (the point is recorded as over the limit)",
    )


OPTION_NAMES = tuple(EngineOptions.model_fields)
"""Every engine option's name, in declaration order."""


def engine_options(options: EngineOptions, takes: tuple[str, ...]) -> dict:
    """The keyword arguments an engine that ``takes`` these option names gets from ``options``
    (an unset option, None, is left to the engine's own default)."""
    unknown = [name for name in takes if name not in OPTION_NAMES]
    if unknown:
        raise ValueError(f"not engine options: {', '.join(unknown)} (known: {', '.join(OPTION_NAMES)})")
    return {name: value for name in takes if (value := getattr(options, name)) is not None}
