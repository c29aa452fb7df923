"""The ``conv_layers`` experiment: its ``workload:`` section and the top-level fields only it
takes (:class:`ConvOptions`: the tile, the policy, the precision, the trace)."""

from __future__ import annotations

from pathlib import Path
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, ValidationInfo, field_validator, model_validator

from spartan_py.errors import InputError
from spartan_py.sparsity.candidates import KERNEL_CHOICES
from spartan_py.workloads.base import WorkloadSection, check_source
from spartan_py.workloads.conv.layers import CONV_LAYERS, conv_layer, layers_name

#: The ``kind:`` of this workload's section.
KIND: Final = "conv_layers"

#: Kernel choices of the ``policy`` field: the adaptive policy or one kernel for every layer.
POLICIES = ("adaptive", *KERNEL_CHOICES)


class ConvLayersWorkload(WorkloadSection):
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

    def value_label(self, name: str, value):
        """A swept ``layers`` list reads as its network's name where it is a whole network."""
        return layers_name(value) if name == "layers" and isinstance(value, list) else value

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
        given = sorted({"batch", "density", "cluster_px"} & self.model_fields_set)
        if given and self.activations is not None:  # a sweep over them would label identical runs apart
            raise ValueError(
                f"{', '.join(given)}: the saved maps (activations) hold their own batch and density; "
                "remove it (the tables report the maps' own)"
            )
        return self

    @field_validator("activations")
    @classmethod
    def _activations_exist(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        if not value.endswith((".npz", ".npy")):
            raise ValueError(f"activations {value!r}: expected a .npz (one array per layer) or a .npy")
        return check_source(value, info, "activations file", False)

    @field_validator("layers")
    @classmethod
    def _known_layers(cls, values: list[str]) -> list[str]:
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


class ConvOptions(BaseModel):
    """The experiment's top-level fields only a ``conv_layers`` workload takes (the
    experiment inherits them; a Graph Challenge experiment refuses them)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

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

    @field_validator("tile", mode="before")
    @classmethod
    def _square(cls, value):
        return (value, value) if isinstance(value, int) and not isinstance(value, bool) else value
