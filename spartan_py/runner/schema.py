"""The experiment file: what to run, validated before anything runs.

An experiment is one YAML mapping (see ``experiments/README.md``). Every field has a default
but the workload; ``sweep:`` turns one experiment into many points: ``grid`` (every
combination of its lists) times ``zip`` (its lists taken together, element by element).
Keys in a sweep are dotted field paths (``workload.layers``, ``backend``).

Two workloads, told apart by ``workload.kind``: ``graph_challenge`` (the default) and
``conv_layers`` (dense-weight convolution layers whose inputs are sparse ReLU outputs).
Fields that only one of them uses are refused for the other.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PositiveInt,
    Tag,
    ValidationInfo,
    field_validator,
    model_validator,
)

from spartan_py.engines import backend_choices
from spartan_py.engines.options import OPTION_NAMES, EngineOptions
from spartan_py.graph_challenge.generate import generated_family
from spartan_py.sparsity.candidates import KERNEL_CHOICES

#: Backends a ``conv_layers`` workload runs on (NumPy/Numba or CuPy/cuBLAS/our kernels).
CONV_BACKENDS = ("auto", "cpu", "gpu")
#: Fields only one workload kind takes (each kind refuses the other's).
KIND_FIELDS = {
    "graph_challenge": (
        "rows_per_tile",
        "chain_rows",
        "chain_warps",
        "input_counts",
        "compact_every",
        "time_limit_seconds",
    ),
    "conv_layers": ("tile", "policy", "precision", "trace"),
}
#: Kernel choices of the ``policy`` field: the adaptive policy or one kernel for every layer.
POLICIES = ("adaptive", *KERNEL_CHOICES)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def _check_source(value: str, info: ValidationInfo, what: str, generated: bool) -> str:
    """A path (relative to the experiment file) that exists or, where ``generated``, a
    generated spec (``generated:...``; for networks also ``generated-unmergeable:...``)."""
    if generated:
        return value
    base = (info.context or {}).get("base", Path("."))
    path = Path(value) if Path(value).is_absolute() else Path(base) / value
    if not path.exists():
        raise ValueError(f"{what} {value!r} not found (looked for {path}); expected a path or generated:...")
    return str(path.resolve())


class GraphChallengeWorkload(_Frozen):
    """Sparse DNN Graph Challenge inference."""

    kind: Literal["graph_challenge"] = "graph_challenge"
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
        return _check_source(value, info, "network", generated_family(value) is not None)

    @field_validator("inputs")
    @classmethod
    def _inputs_exist(cls, value: str, info: ValidationInfo) -> str:
        return _check_source(value, info, "inputs file", value.startswith("generated:"))

    @field_validator("truth")
    @classmethod
    def _truth_exists(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        if value.startswith("generated:"):
            raise ValueError("truth must be a file")
        return _check_source(value, info, "truth file", False)


class ConvLayersWorkload(_Frozen):
    """Convolution layers as im2col GEMMs (dense weights) over generated post-ReLU maps, or maps
    a user saved from their own framework (``activations``)."""

    kind: Literal["conv_layers"]
    layers: list[str] = Field(
        ["alexnet/conv2", "vgg16/conv3_2", "resnet18/conv2_x"],
        min_length=1,
        description="network/layer names, or a network name for all its layers (alexnet, vgg16, resnet18)",
    )
    batch: PositiveInt = Field(8, description="images per layer (GEMM rows = batch x output pixels)")
    density: float = Field(0.3, gt=0, le=1, description="fraction of non-zero input activations")
    cluster_px: float = Field(
        2.0, ge=0, description="correlation length of the non-zero regions, pixels (0: independent)"
    )
    seed: int = Field(0, description="seed of the maps and weights")
    step: Literal["forward", "training"] = Field(
        "forward",
        description="forward: each layer's forward GEMM; training: the three GEMMs of a training step "
        "(forward X W, weight gradient X^T dY, input gradient dY W^T), each with its sparse operand",
    )
    activations: str | None = Field(
        None,
        description="a .npz of post-ReLU maps saved from your framework (one NCHW array per layer, named "
        "network/layer or layer), or a .npy for one layer: used instead of generated maps, so batch, "
        "density and cluster_px are what the arrays hold",
    )
    layer_densities: dict[str, float] = Field(
        {},
        description="per layer (network/layer), the density of its generated input maps, as a published "
        "profile of a trained network gives it; layers not listed take density (needs density_source)",
    )
    density_source: str | None = Field(
        None, description="where layer_densities come from: the publication, its figure or table, the point of training"
    )

    def density_of(self, label: str) -> float:
        """The density of layer ``label``'s generated input maps."""
        return self.layer_densities.get(label, self.density)

    def short_label(self) -> str:
        """The layers and the activation density in a few words, for point labels."""
        step = ", training step" if self.step == "training" else ""
        if self.activations is not None:
            return f"{len(self.layers)} conv layers{step}, maps of {Path(self.activations).name}"
        density = "published densities" if self.layer_densities else f"density {self.density:g}"
        return f"{len(self.layers)} conv layers{step}, batch {self.batch}, {density}"

    @field_validator("layer_densities")
    @classmethod
    def _densities_of_known_layers(cls, values: dict[str, float]) -> dict[str, float]:
        from spartan_py.errors import InputError
        from spartan_py.workloads.conv.layers import conv_layer

        out = {}
        for label, density in values.items():
            try:
                label = conv_layer(label).label
            except InputError as exc:
                raise ValueError(f"layer_densities: {exc}") from None
            if not 0 < density <= 1:
                raise ValueError(f"layer_densities[{label}] is {density}; expected a density in (0, 1]")
            out[label] = density
        return out

    @model_validator(mode="after")
    def _densities_cite_their_source(self):
        if self.layer_densities and not (self.density_source or "").strip():
            raise ValueError("layer_densities need density_source: the publication and figure they come from")
        if self.layer_densities and self.activations is not None:
            raise ValueError("layer_densities are for generated maps; with activations the saved maps hold them")
        return self

    @field_validator("activations")
    @classmethod
    def _activations_exist(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        if not value.endswith((".npz", ".npy")):
            raise ValueError(f"activations {value!r}: expected a .npz (one array per layer) or a .npy")
        return _check_source(value, info, "activations file", False)

    @field_validator("layers")
    @classmethod
    def _known_layers(cls, values: list[str]) -> list[str]:
        from spartan_py.errors import InputError
        from spartan_py.workloads.conv.layers import CONV_LAYERS, conv_layer

        out = []
        for value in values:
            if value in CONV_LAYERS:
                out += [layer.label for layer in CONV_LAYERS[value]]
                continue
            try:
                out.append(conv_layer(value).label)
            except InputError as exc:
                raise ValueError(str(exc)) from None
        return out


def _workload_kind(value) -> str:
    if isinstance(value, dict):
        return value.get("kind", "graph_challenge")
    return getattr(value, "kind", "graph_challenge")


#: The ``workload`` field: the kind names the model (a file without ``kind`` is a Graph Challenge one).
Workload = Annotated[
    Annotated[GraphChallengeWorkload, Tag("graph_challenge")] | Annotated[ConvLayersWorkload, Tag("conv_layers")],
    Discriminator(_workload_kind),
]


def _kind(info: ValidationInfo) -> str | None:
    """The workload kind of the experiment being validated (None if its workload is invalid)."""
    workload = info.data.get("workload")
    return workload.kind if workload is not None else None


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
    override it). See :mod:`spartan_py.executors`."""

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
        from spartan_py.executors import LOCAL_CLUSTERS

        if value is not None and value not in LOCAL_CLUSTERS and "://" not in value:
            raise ValueError(f"expected {', '.join(LOCAL_CLUSTERS)} or a scheduler address such as tcp://host:8786")
        return value


def _name_the_backends(schema: dict) -> None:
    """JSON schema hook: each engine option's help names the backends that take it, worked out
    from the engine classes when the schema is asked for (never written by hand)."""
    from spartan_py.engines import backends_taking

    for name in OPTION_NAMES:
        entry = schema.get("properties", {}).get(name)
        if entry is not None:
            entry["description"] = f"{entry.get('description', '')} (backends: {', '.join(backends_taking(name))})"


class _ExperimentHead(_Frozen):
    """An experiment's first fields, validated before the engine options (whose checks read
    the workload's kind)."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", description="names the output folder")
    description: str = ""
    workload: Workload


class Experiment(EngineOptions, _ExperimentHead):
    """One experiment file (before its sweep is expanded) or one point of it (no sweep); the
    engine options (``monitor``, ``rows_per_tile``, ...) are
    :class:`~spartan_py.engines.options.EngineOptions`'."""

    model_config = ConfigDict(frozen=True, extra="forbid", json_schema_extra=_name_the_backends)

    backend: str = Field("auto", description="the engine (auto: the GPU's best kernel when a GPU is here, else cpu)")
    mode: Literal["measured", "simulated"] = Field(
        "measured", description="simulated: the GPU kernel's CPU twin, timed by the cost model for `machines[0]`"
    )
    tile: tuple[PositiveInt, PositiveInt] | None = Field(
        None,
        description="conv_layers: the monitor's and tile-sparse GEMM's tile, [rows, cols] or one size "
        "for square tiles (the GPU GEMM takes 16, 32, 64 or 128 rows and a multiple of 16 columns; tf32: 64 "
        "or 128 rows and a multiple of 32 columns); default: 64 x 32",
    )
    policy: Literal[POLICIES] = Field(  # type: ignore[valid-type]
        "adaptive", description="conv_layers: each layer's kernel: chosen by the cost model (adaptive) or fixed"
    )
    precision: Literal["fp32", "tf32", "fp32x3"] = Field(
        "fp32",
        description="conv_layers: GEMM precision (tf32: tensor cores; fp32x3, opt-in: every product as three "
        "TF32 products of split operands, near FP32's error on tensor cores; never chosen unless set here)",
    )
    trace: Literal["chosen", "all"] = Field(
        "chosen",
        description="conv_layers: which launches the point's trace records: the policy's choice, or every "
        "candidate's launches timed one by one (for the cost model's calibration and validation; GPU only)",
    )
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
        from spartan_py.costmodel.simulate import resolve_machine
        from spartan_py.errors import InputError

        for value in values:
            try:
                resolve_machine(value)
            except InputError as exc:
                raise ValueError(str(exc)) from None
        return values

    @field_validator("tile", mode="before")
    @classmethod
    def _square(cls, value):
        return (value, value) if isinstance(value, int) and not isinstance(value, bool) else value

    @field_validator("backend")
    @classmethod
    def _known_backend(cls, value: str) -> str:
        choices = backend_choices()  # the registry as it is now: a backend added to it is taken
        if value not in choices:
            close = difflib.get_close_matches(value, choices, n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"{value!r} is not one of {', '.join(choices)}{hint}")
        return value

    @field_validator(*(name for names in KIND_FIELDS.values() for name in names))
    @classmethod
    def _takes_the_workload_kind(cls, value, info: ValidationInfo):
        kind = _kind(info)
        owner = next(owner for owner, names in KIND_FIELDS.items() if info.field_name in names)
        if kind is not None and kind != owner:
            raise ValueError(
                f"{info.field_name} is an option of {owner} workloads; a {kind} workload takes "
                f"{', '.join(KIND_FIELDS[kind])}"
            )
        return value

    @field_validator("backend")
    @classmethod
    def _backend_fits(cls, value, info: ValidationInfo):
        if _kind(info) == "conv_layers" and value not in CONV_BACKENDS:
            raise ValueError(f"a conv_layers workload runs on {', '.join(CONV_BACKENDS)}, not {value!r}")
        return value

    @model_validator(mode="after")
    def _simulated_needs_a_machine(self):
        if self.mode == "simulated" and not self.machines:
            raise ValueError("mode: simulated needs at least one entry in `machines` (the first times the run)")
        if self.workload.kind == "conv_layers":
            if self.mode == "simulated" and self.backend == "gpu":
                raise ValueError(
                    "mode: simulated computes on the CPU and times with the cost model; use backend auto or cpu"
                )
            if self.trace == "all" and self.precision == "fp32x3":
                raise ValueError(
                    "trace: all times each candidate's launches for the cost model's fp32 and tf32 families; "
                    "fp32x3 runs the tf32 ones: use precision tf32 (or trace: chosen)"
                )
        elif self.mode == "simulated":
            from spartan_py.engines import twin_backend
            from spartan_py.errors import InputError

            try:
                twin_backend(self.backend)
            except InputError as exc:
                raise ValueError(str(exc)) from None
        return self
