"""Described GPUs (``sim/<name>.yaml``) and what-if variants (``sim/variants.yaml``).

A machine file is a datasheet (:class:`Datasheet`): ``specs`` (datasheet figures, units in the
names), ``sources`` (where each spec came from: every spec needs one), the host its predictions
assume and the machine it derives its calibration from. What is fitted on measured traces (per
kernel family the cost model's free parameters, the error spreads, validation results and their
provenance) is generated beside it in ``sim/fits/<name>.yaml`` (:mod:`spartan_py.costmodel.fits`)
and loaded with it as one :class:`Machine`. A what-if machine's file names its source
(``calibration_from``), and :func:`carry_over` derives its calibration when it is loaded. See
``sim/README.md`` and docs/cost-model.md.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, model_validator

from spartan_py.config import load_model, load_yaml, validate_model
from spartan_py.costmodel.fits import (
    FamilyCalibration,
    GeneratedParts,
    MachineFit,
    fit_path,
    read_fit,
    update_fit,
)
from spartan_py.errors import InputError
from spartan_py.resources import data_folder

DEFAULT_MACHINE = "h100-sxm"
"""The machine simulated mode, the policy and the CLI use when none is named (the calibrated one)."""


#: The parts of a machine its generated half (sim/fits/) holds, besides the specs it was fitted with.
_GENERATED = tuple(GeneratedParts.model_fields)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Specs(_Frozen):
    """Datasheet figures of one GPU."""

    sm_count: PositiveInt
    boost_clock_mhz: PositiveFloat
    memory_bandwidth_gb_s: PositiveFloat = Field(description="DRAM bandwidth, 1e9 bytes/s")
    l2_cache_mib: PositiveFloat
    l2_partitions: PositiveInt | None = Field(
        None,
        description="parts the L2 is split into, each caching for the SMs wired to it (data every SM reads is "
        "held in each, in l2_cache_mib / l2_partitions); null: one pool",
    )
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


class Datasheet(_Frozen):
    """A machine file as written by hand: the GPU's specifications with their sources, the host
    its predictions assume, and the machine it derives its calibration from (if any)."""

    name: str
    description: str
    device_names: list[str] = Field([], description="what the CUDA runtime calls this GPU (to match measured runs)")
    calibration_from: str | None = Field(
        None,
        description="the machine whose fit this one carries over, derived when the file is loaded "
        "(spartan_py.costmodel.carry_over): a what-if machine holds no copy of a calibration to go stale",
    )
    host: str | None = Field(
        None, description="the host (sim/hosts/) its predictions assume; none: the launch costs as fitted"
    )
    assumes: Assumed | None = Field(
        None, description="the driver-reported facts of the GPU described (clocks, power limit, GPUs in the node)"
    )
    specs: Specs
    sources: dict[str, str]

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


class Machine(Datasheet, GeneratedParts):
    """One described GPU: its datasheet and its generated half (:class:`MachineFit`) as one.

    ``validation`` is present only for a machine whose predictions were checked against
    measurements here: the others are what-if estimates (``validated`` is false).
    """

    def generated(self) -> MachineFit:
        """This machine's generated half, as :func:`~spartan_py.costmodel.fits.write_fit` writes it:
        for a machine that carries its calibration over, its own validation alone."""
        if self.calibration_from is not None:
            return MachineFit(machine=self.name, validation=self.validation)
        return MachineFit(
            machine=self.name,
            specs_fitted=self.specs.model_dump(),
            **{name: getattr(self, name) for name in _GENERATED},
        )

    @property
    def validated(self) -> bool:
        """Whether predictions for this machine were checked against measurements on it."""
        return bool(self.validation)

    def validation_summary(self) -> str:
        """Every validation entry in full, its kind first (blind release, held-out release or
        development round: :mod:`spartan_py.costmodel.releases`), or ``not validated (...)`` in words."""
        from spartan_py.costmodel.releases import record_text  # import circle: releases imports machine

        return record_text(self)

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


def load_machine(name: str | Path, *, unfitted_ok: bool = False) -> Machine:
    """A machine by name or path: its datasheet and the generated half beside it
    (``fits/<name>.yaml``) validated and checked as one (errors name the file, line and field);
    one whose datasheet names ``calibration_from`` gets that machine's fit carried over.
    ``unfitted_ok``: a datasheet with no generated half yet loads with no calibration (what
    ``spartan model calibrate`` starts a new machine from)."""
    path = machine_path(name)
    marked = load_yaml(path)
    generated = [key for key in _GENERATED if isinstance(marked.data, dict) and key in marked.data]
    if generated:
        raise InputError(
            f"`{generated[0]}` is generated, not part of a datasheet: it lives in {fit_path(path)}, written by "
            "`spartan model ...`; remove the file's `" + generated[0] + ":` block",
            path=path,
            line=marked.line_of((generated[0],)),
        )
    sheet = validate_model(Datasheet, marked)
    by_name = Path(name).suffix not in (".yaml", ".yml")
    if by_name and sheet.name != name:
        raise InputError(
            f"the file describes {sheet.name!r}, not {name!r}; its `name` must match the file name", path=path
        )
    fit = read_fit(path)
    if not (unfitted_ok and fit is None):
        _check_fit(sheet, fit, path)
    own = fit.model_dump(include=set(_GENERATED), exclude_defaults=True) if fit is not None else {}
    machine = Machine.model_validate({**sheet.model_dump(exclude_defaults=True), **own})
    if machine.calibration_from is None:
        return machine
    source = load_machine(machine.calibration_from)
    if source.calibration_from is not None:
        raise InputError(f"calibration_from names {source.name}, which carries its own over; name a fitted machine")
    return carry_over(source, machine)


def _check_fit(sheet: Datasheet, fit: MachineFit | None, path: Path) -> None:
    """Refuse a generated half that is missing, of another machine, fitted with other specs, or
    (for a machine that carries its calibration over) holding a fit of its own."""
    where = fit_path(path)
    if fit is None:
        if sheet.calibration_from is None:
            raise InputError(
                f"{sheet.name} has no generated half ({where} is missing): fit it with `spartan model calibrate` "
                "or name the machine it derives from in `calibration_from`",
                path=path,
            )
        return
    if fit.machine != sheet.name:
        raise InputError(f"the fit is of {fit.machine!r}, not of the datasheet's {sheet.name!r}", path=where)
    if sheet.calibration_from is not None:
        own = fit.carried_parts()
        if own:
            raise InputError(
                f"{sheet.name} derives its calibration from {sheet.calibration_from} when loaded; its generated half "
                f"may hold only `validation`, not {', '.join(own)}",
                path=where,
            )
        return
    changed = [key for key, value in sheet.specs.model_dump().items() if fit.specs_fitted.get(key) != value]
    if changed:
        raise InputError(
            f"the datasheet's specs differ from those the fit was made with ({', '.join(changed)}): refit with "
            f"`spartan model calibrate`, or undo the change to {path.name}",
            path=where,
        )


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


def write_machine(machine: Machine, path: Path | None = None) -> Path:
    """Write ``machine``'s generated half beside its datasheet (``path``, default its file in
    ``sim/``) through :func:`~spartan_py.costmodel.fits.write_fit`; the datasheet is not touched."""
    datasheet = path or machine_path(machine.name)
    return update_fit(datasheet, **machine.generated().model_dump())


def write_calibration(path: Path, calibration: dict[str, FamilyCalibration]) -> Path:
    """Replace the calibration in the generated half of the machine whose datasheet is ``path``
    (recording the datasheet's specs it was fitted with)."""
    sheet = load_model(Datasheet, path)
    return update_fit(path, calibration=calibration, specs_fitted=sheet.specs.model_dump())
