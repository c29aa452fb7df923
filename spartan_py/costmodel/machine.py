"""Described GPUs (``sim/<name>.yaml``) and what-if variants (``sim/variants.yaml``).

A machine file has ``specs`` (datasheet figures, units in the names), ``sources`` (where
each spec came from: every spec needs one), and ``calibration`` (per kernel family, the
cost model's free parameters fitted on measured traces, with their provenance). See
``sim/README.md`` for the format. A what-if machine's file names its source instead
(``calibration_from``), and :func:`carry_over` derives its calibration when it is loaded.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, model_validator

from spartan_py.config import load_model, load_yaml, validate_model
from spartan_py.errors import InputError
from spartan_py.resources import data_folder

DEFAULT_MACHINE = "h100-sxm"
"""The machine simulated mode, the policy and the CLI use when none is named (the calibrated one)."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Specs(_Frozen):
    """Datasheet figures of one GPU."""

    sm_count: PositiveInt
    boost_clock_mhz: PositiveFloat
    memory_bandwidth_gb_s: PositiveFloat = Field(description="DRAM bandwidth, 1e9 bytes/s")
    l2_cache_mib: PositiveFloat
    shared_memory_per_sm_kib: PositiveFloat = Field(description="shared memory one SM can give its blocks")
    shared_memory_per_block_kib: PositiveFloat = Field(description="most one block may opt in to")
    shared_memory_bytes_per_clock_per_sm: PositiveFloat = 128.0
    registers_per_sm: PositiveInt = 65536
    max_threads_per_sm: PositiveInt
    max_blocks_per_sm: PositiveInt
    fp32_tflops: PositiveFloat
    tf32_tflops: PositiveFloat | None = Field(None, description="dense tensor-core TF32; null when absent")
    bf16_tflops: PositiveFloat | None = Field(None, description="dense tensor-core BF16; null when absent")
    pcie_gb_s: PositiveFloat = Field(description="host link, one direction, 1e9 bytes/s")
    launch_latency_us: PositiveFloat
    sync_latency_us: PositiveFloat
    memory_latency_ns: PositiveFloat | None = Field(
        None, description="a dependent DRAM load's latency (pointer chase past the L2); null: no latency term"
    )
    streaming_efficiency: float | None = Field(
        None, gt=0, le=1, description="share of the datasheet DRAM bandwidth a large device-to-device copy reaches"
    )


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


class ErrorSpread(_Frozen):
    """Held-out ratios predicted / measured of one kind of whole run (leave one point out of
    the fit, :mod:`spartan_py.costmodel.intervals`): the ends of its 80% interval."""

    low_ratio: float = Field(gt=0, description="10th percentile of predicted / measured")
    high_ratio: float = Field(gt=0, description="90th percentile of predicted / measured")
    runs: int = Field(ge=1, description="held-out runs behind it")
    source: str = Field(description="the leave-one-point-out result file")


class Assumed(_Frozen):
    """What the driver reports of the GPU a machine file describes (``nvidia-smi``, as a run's
    ``environment.json`` records it): two GPUs of one name with other clocks, power limit or
    node differ, and a run on one that differs is not the GPU the file assumes."""

    sm_clock_max_mhz: int | None = Field(None, description="the SM's maximum clock, MHz")
    memory_clock_max_mhz: int | None = Field(None, description="the memory's maximum clock, MHz")
    power_limit_w: float | None = Field(None, description="the enforced power limit, W")
    gpus_in_node: int | None = Field(None, description="GPUs the driver lists in the node")
    source: str = Field(description="where the figures come from (a run's environment.json, a datasheet)")

    def differences(self, environment: dict) -> list[str]:
        """Lines naming each fact a run's ``environment`` (``gpus``, ``gpus_in_node``) reports
        otherwise than assumed; GPUs that report no value for a fact are not compared on it."""
        found: list[str] = []
        gpus = environment.get("gpus") or []
        words = {
            "sm_clock_max_mhz": ("maximum SM clock", "MHz"),
            "memory_clock_max_mhz": ("maximum memory clock", "MHz"),
            "power_limit_w": ("power limit", "W"),
        }
        for key, (what, unit) in words.items():
            assumed = getattr(self, key)
            seen = sorted({gpu[key] for gpu in gpus if gpu.get(key) is not None})
            if assumed is not None and seen and seen != [assumed]:
                shown = ", ".join(f"{value:g}" for value in seen)
                found.append(f"{what} {shown} {unit} where the machine file assumes {assumed:g} {unit}")
        in_node = environment.get("gpus_in_node")
        if self.gpus_in_node is not None and in_node and in_node != self.gpus_in_node:
            found.append(f"{in_node} GPUs in the node where the machine file assumes {self.gpus_in_node}")
        return found


class RunToRunSpread(_Frozen):
    """How far one family's launches moved between runs of one experiment file on separately
    started machines of this kind (:mod:`spartan_py.costmodel.repeatability`)."""

    median_pct: float = Field(ge=0, description="median over launches of (max - min) / median, percent")
    p90_pct: float = Field(ge=0, description="90th percentile of the same, percent")
    launches: int = Field(ge=1, description="launches compared")
    runs: int = Field(ge=2, description="runs (separately started machines)")
    source: str = Field(description="the repeatability result file")


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
    runs: int | None = Field(None, ge=1, description="whole runs compared (a drawn set's)")
    runs_within_10pct: int | None = Field(None, ge=0, description="of them, within 10% of the measurement")
    runs_inside_interval: int | None = Field(None, ge=0, description="of them, inside their 80% interval")

    def figures(self) -> str:
        """The set's figures in words: runs within 10% (and inside their intervals) where
        counted, the worst whole run, the worst per-launch family median."""
        counted = (
            f"{self.runs_within_10pct} of {self.runs} whole runs within 10%"
            + (
                f", {self.runs_inside_interval} inside their 80% interval"
                if self.runs_inside_interval is not None
                else ""
            )
            + "; "
            if self.runs is not None and self.runs_within_10pct is not None
            else ""
        )
        return (
            f"{counted}whole runs within {self.whole_run_error_pct:.1f}%, per-launch median error at most "
            f"{self.per_launch_median_error_pct:.1f}% per family"
        )


class Machine(_Frozen):
    """One described GPU.

    ``validation`` is present only for a machine whose predictions were checked against
    measurements here: the others are what-if estimates (``validated`` is false).
    """

    name: str
    description: str
    device_names: list[str] = Field([], description="what the CUDA runtime calls this GPU (to match measured runs)")
    calibration_frozen: str | None = Field(
        None, description="the commit and traces the calibration was fitted on, once frozen (no refit after)"
    )
    validation: list[Validation] = Field(
        [], description="one entry per set of runs measured here and compared with the model's predictions"
    )
    calibration_from: str | None = Field(
        None,
        description="the machine whose fit this one carries over, derived when the file is loaded "
        "(spartan_py.costmodel.carry_over): a what-if machine holds no copy of a calibration to go stale",
    )
    host: str | None = Field(
        None, description="the host (sim/hosts/) its predictions assume; none: the launch costs as fitted"
    )
    calibration_host: str | None = Field(
        None,
        description="the host whose latencies the fitted launch costs include (the calibration runs'); "
        "a carried-over calibration keeps its source's",
    )
    assumes: Assumed | None = Field(
        None, description="the driver-reported facts of the GPU described (clocks, power limit, GPUs in the node)"
    )
    specs: Specs
    sources: dict[str, str]
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
    calibration: dict[str, FamilyCalibration] = {}

    @property
    def validated(self) -> bool:
        """Whether predictions for this machine were checked against measurements on it."""
        return bool(self.validation)

    def validation_summary(self) -> str:
        """Every validation entry in full, its kind first (blind release, held-out release or
        development round: :mod:`spartan_py.costmodel.releases`), or ``not validated (...)`` in words."""
        from spartan_py.costmodel.releases import record_text

        return record_text(self)

    @model_validator(mode="after")
    def _every_spec_has_a_source(self):
        missing = [
            name for name in Specs.model_fields if getattr(self.specs, name) is not None and name not in self.sources
        ]
        if missing:
            raise ValueError(f"specs without a source in `sources`: {', '.join(missing)}")
        unknown = [name for name in self.sources if name not in Specs.model_fields]
        if unknown:
            raise ValueError(f"`sources` names unknown specs: {', '.join(unknown)}")
        return self

    def with_specs(self, **changes) -> Machine:
        """A copy with some specs replaced (for what-if variants)."""
        specs = self.specs.model_copy(update=changes)
        return self.model_copy(update={"specs": Specs.model_validate(specs.model_dump())})


class Variant(_Frozen):
    """A what-if change applied to a machine and to the replayed records."""

    name: str
    description: str
    hardware_monitor: bool = Field(
        False, description="monitor counters beside the store path: no monitor traffic or pass"
    )
    block_rows: PositiveInt | None = Field(None, description="replay tiled kernels with this many rows per work item")
    spec_scale: dict[str, PositiveFloat] = Field({}, description="spec multipliers, e.g. memory_bandwidth_gb_s: 2")

    def status(self) -> str:
        """What its figures are, said first wherever they are printed: hardware that does not exist
        (a hardware monitor, scaled specs) or a kernel configuration replayed but never run."""
        if self.hardware_monitor or self.spec_scale:
            return "what-if of hardware that does not exist: predictions only, never measured"
        return "what-if change to the replayed kernel configuration: predictions only, never measured"


class _VariantFile(_Frozen):
    variants: list[Variant]


def sim_folder() -> Path:
    """The folder of machine files (``sim/`` in a checkout, packaged data in a wheel)."""
    return data_folder("sim")


def machine_names() -> list[str]:
    """Names of the machines described in ``sim/``."""
    return sorted(p.stem for p in sim_folder().glob("*.yaml") if p.stem != "variants")


def machine_for_device(device: str, names: list[str] | None = None) -> str | None:
    """The first of ``names`` (``NAME`` or ``NAME+VARIANT``; default every machine in ``sim/``)
    whose ``device_names`` include ``device``, as the CUDA runtime names the GPU; or None."""
    for name in machine_names() if names is None else names:
        if device in load_machine(name.split("+", 1)[0]).device_names:
            return name
    return None


def machine_path(name: str | Path) -> Path:
    """Path of a machine file from its name (``h100-sxm``) or a path to a YAML file."""
    candidate = Path(name)
    if candidate.suffix in (".yaml", ".yml"):
        if not candidate.is_file():
            raise InputError("machine file not found", path=candidate)
        return candidate
    path = sim_folder() / f"{name}.yaml"
    if not path.is_file():
        raise InputError(f"unknown machine {name!r}; known: {', '.join(machine_names())}")
    return path


def load_machine(name: str | Path) -> Machine:
    """A machine by name or path, validated (errors name the file, line and field); one whose
    file names ``calibration_from`` gets that machine's fit carried over, as it is today."""
    path = machine_path(name)
    machine = load_model(Machine, path)
    by_name = Path(name).suffix not in (".yaml", ".yml")
    if by_name and machine.name != name:
        raise InputError(
            f"the file describes {machine.name!r}, not {name!r}; its `name` must match the file name", path=path
        )
    if machine.calibration_from is None:
        return machine
    if machine.calibration:
        raise InputError(
            f"calibration_from: {machine.calibration_from} derives this machine's calibration when it is loaded; "
            "remove the file's `calibration:` block",
            path=path,
        )
    source = load_machine(machine.calibration_from)
    if source.calibration_from is not None:
        raise InputError(f"calibration_from names {source.name}, which carries its own over; name a fitted machine")
    return carry_over(source, machine)


def carry_over(calibrated: Machine, target: Machine) -> Machine:
    """``target`` with ``calibrated``'s efficiencies and per-step overheads (scaled by clock),
    for machines we could not measure; each family's source says where it came from."""
    clock_ratio = calibrated.specs.boost_clock_mhz / target.specs.boost_clock_mhz
    families = {}
    for kernel, params in calibrated.calibration.items():
        families[kernel] = params.model_copy(
            update={
                "launch_us": params.launch_us,
                "step_overhead_us": round(params.step_overhead_us * clock_ratio, 6),
                "wave_overhead_us": round(params.wave_overhead_us * clock_ratio, 6),
                "shared_step_us": round(params.shared_step_us * clock_ratio, 6),
                "source": f"carried over from {calibrated.name} ({params.source}); not measured on {target.name}",
                "records": 0,
                "fit_median_error_pct": None,
            }
        )
    return target.model_copy(
        update={
            "calibration": families,
            "calibration_host": calibrated.calibration_host or calibrated.host,
            "error_spread": calibrated.error_spread,
            "run_to_run_spread": calibrated.run_to_run_spread,
        }
    )


def load_variants(path: str | Path | None = None) -> dict[str, Variant]:
    """The what-if variants, by name (``sim/variants.yaml`` unless ``path`` is given)."""
    path = Path(path) if path else sim_folder() / "variants.yaml"
    marked = load_yaml(path)
    variants = validate_model(_VariantFile, marked).variants
    return {variant.name: variant for variant in variants}


def apply_variant(machine: Machine, variant: Variant | None) -> Machine:
    """The machine with the variant's spec multipliers (record changes happen in the model)."""
    if variant is None or not variant.spec_scale:
        return machine
    unknown = [key for key in variant.spec_scale if key not in Specs.model_fields]
    if unknown:
        raise InputError(f"variant {variant.name!r} scales unknown specs: {', '.join(unknown)}")
    changes = {key: getattr(machine.specs, key) * factor for key, factor in variant.spec_scale.items()}
    return machine.with_specs(**changes)


def write_calibration(path: Path, calibration: dict[str, FamilyCalibration]) -> Path:
    """Replace the ``calibration:`` block at the end of a machine file, keeping the rest as written."""
    from spartan_py.files import atomic_write_text

    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    cut = next((i for i, line in enumerate(lines) if line.startswith("calibration:")), len(lines))
    rest = [line for line in lines[cut + 1 :] if line and not line.startswith((" ", "#"))]
    if rest:
        raise InputError("the calibration block must be the last block of a machine file", path=path, line=cut + 1)
    block = {"calibration": {family: values.model_dump(exclude_none=True) for family, values in calibration.items()}}
    body = "\n".join(lines[:cut]).rstrip() + "\n\n" + yaml.safe_dump(block, sort_keys=False, width=120)
    return atomic_write_text(path, body)
