"""The generated half of a machine: its fits, spreads, validation results and their provenance.

A machine file in ``sim/`` is a datasheet, written by hand (:mod:`spartan_py.costmodel.machine`);
what the cost model's tooling (``spartan model ...``) derives from measured runs lives beside it
in ``sim/fits/<name>.yaml``, written only by :func:`write_fit` (one typed writer, atomic) and
read back with the datasheet as one machine. A fit records the specs it was fitted with, so a
datasheet edited after the fit is caught when the machine is loaded, not priced with a stale fit.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field

from spartan_py.config import load_model
from spartan_py.files import atomic_write_text

FITS_FOLDER = "fits"
"""The folder beside the datasheets that holds their generated halves."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class FamilyCalibration(_Frozen):
    """Fitted parameters of one kernel family on one machine, and where they came from."""

    launch_us: float = Field(ge=0, description="fixed cost per launch (or per copy)")
    compute_efficiency: float = Field(gt=0, le=1, description="fraction of the compute unit's peak reached")
    memory_efficiency: float = Field(gt=0, le=1, description="fraction of DRAM (or link) peak reached")
    step_overhead_us: float = Field(0.0, ge=0, description="per work item and fused layer: barriers, epilogue")
    shared_step_us: float = Field(
        0.0,
        ge=0,
        description="per work item and fused layer, at every SM busy (scaled by the share busy): staging "
        "through L2, which the busy SMs share",
    )
    cold_layer_us: float = Field(
        0.0,
        ge=0,
        description="per fused layer and cold wave: the first wave's dependent loads of a layer's indices and "
        "weights miss in L2 (later waves find them there unless the launch outgrows it: memory_terms.cold_waves)",
    )
    wave_overhead_us: float = Field(
        0.0,
        ge=0,
        description="per work item, once: a block's start and finish (its rows in and out, per-launch tables), "
        "bound by latency on the chip, not by DRAM bandwidth",
    )
    bytes_in_flight_kib: float = Field(
        0.0,
        ge=0,
        description="a memory-bound family's DRAM requests in flight over the whole GPU (Little's law: this over "
        "the machine's memory_latency_ns caps its bandwidth); 0: none fitted (memory_efficiency alone)",
    )
    block_round_trips: float = Field(
        0.0,
        ge=0,
        description="a family whose kernel runs a block per moved row (KernelFamily.row_block_threads): DRAM round "
        "trips a block waits whatever its row's width (its row id, then its first loads); 0: none fitted",
    )
    row_round_trips: float = Field(
        0.0,
        ge=0,
        description="the same family: DRAM round trips a block waits per step of its row (one 16-byte load a thread)",
    )
    overlap: float = Field(
        1.0,
        ge=0,
        le=1,
        description="fraction of the shorter of compute and memory hidden under the longer, per extra resident block",
    )
    weight_load_cost: float = Field(
        0.0,
        ge=0,
        description="cost of loading one weight, in multiply-adds: the trace's weight_loads of them, or one per"
        " block_rows multiply-adds where it counts none (a work item reuses each weight for its rows)",
    )
    saturating_warps: float = Field(
        0.0,
        ge=0,
        description="resident warps per SM needed to reach the family's rate; fewer reach that share "
        "of it (0: any number does)",
    )
    source: str = Field(description="the traces fitted (or the machine the values were carried over from)")
    records: int = Field(0, ge=0, description="measured records fitted")
    fit_median_error_pct: float | None = None
    free_parameters: list[str] = Field(
        [],
        description="the parameters fitted for this entry alone (a family's: its shared ones and those of the "
        "instances without their own; an instance's: its own); the others are fixed or the family's",
    )
    shared_parameters: list[str] = Field(
        [], description="an instance's parameters taken from its family's entry (fitted once on all its records)"
    )


class ErrorSpread(_Frozen):
    """Held-out ratios predicted / measured of one kind of whole run (leave one point out of
    the fit, :mod:`spartan_py.costmodel.intervals`): the ends of its 80% interval."""

    low_ratio: float = Field(gt=0, description="10th percentile of predicted / measured")
    high_ratio: float = Field(gt=0, description="90th percentile of predicted / measured")
    runs: int = Field(ge=1, description="held-out runs behind it")
    source: str = Field(description="the leave-one-point-out result file")


class RunToRunSpread(_Frozen):
    """How far one family's launches moved between runs of one experiment file on separately
    started machines of this kind (:mod:`spartan_py.costmodel.repeatability`)."""

    median_pct: float = Field(ge=0, description="median over launches of (max - min) / median, percent")
    p90_pct: float = Field(ge=0, description="90th percentile of the same, percent")
    launches: int = Field(ge=1, description="launches compared")
    runs: int = Field(ge=2, description="runs (separately started machines)")
    source: str = Field(description="the repeatability result file")


class WorkloadFigures(_Frozen):
    """One workload's whole runs in a set compared (:mod:`spartan_py.costmodel.whole_runs`): a
    Graph Challenge inference or a conv point's step each, candidate runs never counted."""

    runs: int = Field(ge=1, description="whole runs compared")
    within_10pct: int = Field(ge=0, description="of them, within 10% of the measurement")
    median_abs_error_pct: float = Field(ge=0, description="their median absolute error, percent")
    worst_error_pct: float = Field(ge=0, description="their worst absolute error, percent")
    inside_interval: int | None = Field(None, ge=0, description="of those with an interval, inside it")
    with_interval: int = Field(0, ge=0, description="runs whose predictions held an 80% interval")


class Validation(_Frozen):
    """How the model's predictions for a machine compared with runs measured on it."""

    scope: str = Field(description="the runs these figures cover (an experiment's points, at one commit)")
    device: str = Field(description="the GPU measured, as the CUDA runtime names it")
    blind: bool = Field(description="true when the calibration used saw no measurement of this machine")
    result: str = Field(description="the committed result file with the figures, relative to the repository")
    commit: str = Field(description="the commit whose code and model made the measurement and the prediction")
    whole_run_error_pct: float = Field(description="the worst whole-run error (absolute, percent)")
    per_launch_median_error_pct: float = Field(
        description="the worst per-launch median error of a kernel family with 5 or more launches (percent)"
    )
    workloads: dict[str, WorkloadFigures] = Field(
        {}, description="per workload (graph-challenge, conv): its whole runs' figures, told apart"
    )
    runs: int | None = Field(
        None, ge=1, description="superseded by workloads: runs pooled over both workloads and conv candidates"
    )
    runs_within_10pct: int | None = Field(None, ge=0, description="superseded by workloads (pooled)")
    runs_inside_interval: int | None = Field(None, ge=0, description="superseded by workloads (pooled)")


class GeneratedParts(_Frozen):
    """What the cost model's tooling derives for a machine from measured runs (a
    :class:`~spartan_py.costmodel.machine.Machine` holds them beside its datasheet)."""

    calibration_host: str | None = Field(
        None,
        description="the host whose latencies the fitted launch costs include (the calibration runs'); "
        "a carried-over calibration keeps its source's",
    )
    calibration_frozen: str | None = Field(
        None, description="the commit and traces the calibration was fitted on, once frozen (no refit after)"
    )
    validation: list[Validation] = Field(
        [], description="one entry per set of runs measured here and compared with the model's predictions"
    )
    error_spread: dict[str, ErrorSpread] = Field(
        {},
        description="per kind of whole run, the held-out spread its 80% intervals come from (a carried-over "
        "calibration carries its source's)",
    )
    run_to_run_spread: dict[str, RunToRunSpread] = Field(
        {},
        description="per kernel family, how far its launches moved between separately started machines "
        "of this kind (a carried-over calibration carries its source's)",
    )
    calibration: dict[str, FamilyCalibration] = Field(
        {}, description="per kernel family (and compiled instance): the fitted free parameters"
    )


class MachineFit(GeneratedParts):
    """The generated half of one machine (``sim/fits/<name>.yaml``). A machine that carries
    its calibration over from another (``calibration_from``) holds only its ``validation``
    here: its fit, spreads and host are its source's, derived when it is loaded."""

    machine: str = Field(description="the datasheet's `name` this fit belongs to")
    specs_fitted: dict[str, int | float | None] = Field(
        {}, description="the datasheet's specs when the fit was made; loading refuses a datasheet that differs"
    )

    def carried_parts(self) -> list[str]:
        """The parts a machine that carries its calibration over may not hold of its own."""
        parts = ("specs_fitted", "calibration_host", "calibration_frozen", "error_spread", "run_to_run_spread")
        return [name for name in (*parts, "calibration") if getattr(self, name)]


def fit_path(datasheet: Path) -> Path:
    """Where the generated half of the machine described by ``datasheet`` lives."""
    return datasheet.parent / FITS_FOLDER / f"{datasheet.stem}.yaml"


def read_fit(datasheet: Path) -> MachineFit | None:
    """The generated half beside ``datasheet``, validated (errors name the file and field); None
    when there is none."""
    path = fit_path(datasheet)
    return load_model(MachineFit, path) if path.is_file() else None


_HEADER = (
    "# Generated by `spartan model ...` (spartan_py.costmodel.fits.write_fit): do not edit by hand.\n"
    "# The generated half of the machine described by ../{name}.yaml (its datasheet): fits, spreads,\n"
    "# validation results and their provenance. See docs/cost-model.md.\n"
)


def write_fit(datasheet: Path, fit: MachineFit) -> Path:
    """Write ``fit`` beside ``datasheet`` (atomically): the one way a machine's generated half
    is written. Floats are written as Python's repr, so a reload gives the same values. Every
    value inside a part is written, defaults too, so that a later change of a default in the code
    cannot move a stored fit; parts left at their (empty) default are left out."""
    found = fit.model_dump(mode="json")
    defaults = MachineFit.model_construct(machine=fit.machine).model_dump(mode="json")
    found = {key: value for key, value in found.items() if key == "machine" or value != defaults.get(key)}
    ordered = {
        "machine": found.pop("machine"),
        **({"specs_fitted": found.pop("specs_fitted")} if "specs_fitted" in found else {}),
        **found,
    }
    body = yaml.safe_dump(ordered, sort_keys=False, width=120)
    path = fit_path(datasheet)
    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write_text(path, _HEADER.format(name=datasheet.stem) + body)


def update_fit(datasheet: Path, **changes) -> Path:
    """Write the generated half beside ``datasheet`` with ``changes`` (fields of
    :class:`MachineFit`, validated) over what it holds now (a new one when it has none)."""
    current = read_fit(datasheet) or MachineFit(machine=_datasheet_name(datasheet))
    updated = MachineFit.model_validate({**current.model_dump(), **changes})
    return write_fit(datasheet, updated)


def _datasheet_name(datasheet: Path) -> str:
    """The ``name`` a datasheet gives its machine (its file's stem when it names none)."""
    data = yaml.safe_load(datasheet.read_text()) if datasheet.is_file() else None
    return str(data.get("name", datasheet.stem)) if isinstance(data, dict) else datasheet.stem
