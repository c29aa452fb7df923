"""Spartan's hardware as a what-if: the same training step priced with the paper's units at a
chosen granularity.

Spartan (``../shared/seeds/``) adds three units to a GPU: a sparsity monitor (counters beside
the store path), a compaction engine that packs an operand's non-zero units, and a GEMM that
skips the zero units. This module prices a convolution training step on such a GPU from two
inputs: the granularity summary of real maps (``spartan maps capture``: per layer and GEMM, the
share of the dense work left when every dead unit at a grain is skipped,
:mod:`spartan_py.sparsity.granularity`), and the dense step's time per GEMM (the cost model's
cuBLAS prediction on a described GPU, or measured times given per GEMM). Per GEMM, with ``T``
its dense time, ``L`` the launch part of it (the cost model's, which no skipping shortens) and
``live`` its live share of the work at the grain::

    sparse GEMM  = T - (T - L) x (1 - live) x skip_efficiency
    compaction   = (operand bytes read + live bytes written) at the measured gather kernel's
                   rate (the cost model's ``gpu.compact`` fit, less its launch), x (1 - hidden)
    monitor      = monitor_us (0: counters in the store path)
    step time    = sparse GEMM + compaction + monitor, or T where that is not faster (the free
                   monitor lets the step choose per GEMM at no cost)

Every number is a stated assumption (:class:`SpartanAssumptions`) or comes from the cost
model's fits of kernels measured for other purposes; none is fitted to reach Spartan's
figures. What each assumption contributes (:class:`StepPrice`'s ``parts``) sums to the
predicted time: the dense time, less the work skipped, plus what the skip misses, plus the
compaction, plus the monitor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from spartan_py.costmodel.families import COMPACT, dense_gemm
from spartan_py.costmodel.model import calibration_kind, family_parameters, predict
from spartan_py.costmodel.simulate import resolve_machine
from spartan_py.errors import InputError
from spartan_py.sparsity.granularity import GEMMS, GRAINS, ORDERS
from spartan_py.trace import TraceRecord, to_frame

#: the parts of a step's price, in the order they add up
PARTS: tuple[str, ...] = ("dense", "skipped", "skip_missed", "compaction", "monitor")
#: bytes of one operand element at FP32 and TF32 (TF32 is stored as FP32)
ELEMENT_BYTES = 4
#: the measured kernel whose rate the compaction engine is given: the gather of live rows
COMPACTION_INSTANCE = "rows"


class SpartanAssumptions(BaseModel):
    """What the what-if assumes of Spartan's units (every field a stated assumption)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    grain: str = Field(description="the unit the compaction engine packs and the GEMM skips (a GRAINS name)")
    order: Literal["chw", "nhwc"] = Field("chw", description="im2col column order the tiles are cut in")
    precision: Literal["fp32", "tf32"] = Field("fp32", description="the dense GEMM's precision (cuBLAS)")
    skip_efficiency: float = Field(
        1.0, gt=0, le=1, description="share of a dead unit's work the sparse GEMM saves (1: a dead unit costs nothing)"
    )
    compaction_hidden: float = Field(
        0.0,
        ge=0,
        le=1,
        description="share of the compaction engine's time hidden under the GEMM (0: none, its whole cost on the"
        " step; Spartan pipelines it)",
    )
    compaction_free: bool = Field(
        False, description="the compaction engine costs nothing (the ideal: the GEMM alone at the grain)"
    )
    monitor_us: float = Field(0.0, ge=0, description="the monitor's cost per GEMM, microseconds (0: in hardware)")
    choose_dense: bool = Field(
        True, description="each GEMM runs dense where the sparse one is not faster (the monitor's counts decide)"
    )

    @field_validator("grain")
    @classmethod
    def _known_grain(cls, value: str) -> str:
        if value not in GRAINS:
            raise ValueError(f"grain {value!r}; expected one of {', '.join(GRAINS)}")
        return value


@dataclass
class StepPrice:
    """A step's price: ``parts`` (microseconds, summing to ``predicted_us``), the dense time,
    the GEMMs run sparse of those priced, and the ideal speed-up (every dead unit free)."""

    dense_us: float = 0.0
    predicted_us: float = 0.0
    live_us: float = 0.0
    gemms: int = 0
    sparse_gemms: int = 0
    measured_gemms: int = 0
    parts: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PARTS, 0.0))

    @property
    def speedup(self) -> float:
        """Dense time over the predicted time."""
        return self.dense_us / self.predicted_us if self.predicted_us else math.inf

    @property
    def ideal_speedup(self) -> float:
        """Dense time over the time left when every dead unit is skipped for free: the bound at
        the grain, weighted by each GEMM's time (its launch kept)."""
        return self.dense_us / self.live_us if self.live_us else math.inf

    def add(self, other: StepPrice) -> None:
        """Add another price's times and parts to this one."""
        self.dense_us += other.dense_us
        self.predicted_us += other.predicted_us
        self.live_us += other.live_us
        self.gemms += other.gemms
        self.sparse_gemms += other.sparse_gemms
        self.measured_gemms += other.measured_gemms
        for name in PARTS:
            self.parts[name] += other.parts[name]


def gemm_shape(layer: dict, gemm: str, batch: int) -> tuple[int, int, int]:
    """(M, K, N) of ``gemm`` of a summary's layer record for ``batch`` images."""
    pixels = batch * layer["out_h"] * layer["out_w"]
    window = layer["C"] * layer["kernel"] ** 2
    return {
        "forward": (pixels, window, layer["out_channels"]),
        "weight_grad": (window, pixels, layer["out_channels"]),
        "input_grad": (pixels, layer["out_channels"], window),
    }[gemm]


def _operand_elements(m: int, k: int) -> int:
    return m * k  # the sparse operand is the GEMM's left one, [M x K], in every GEMM of the step


class DensePrices:
    """The cost model's times on ``machine`` (``sim/`` name, ``MACHINE+VARIANT`` allowed): the
    dense cuBLAS GEMM and the compaction engine (the measured gather's rate, no launch)."""

    def __init__(self, machine: str):
        self.machine_name = machine
        self.machine, self.variant = resolve_machine(machine)
        self._cache: dict[tuple, Any] = {}

    def _us(self, record: TraceRecord) -> tuple[float, float]:
        """(predicted, launch part) microseconds of one record."""
        row = predict(to_frame([record]), self.machine, self.variant).iloc[0]
        value, launch = float(row["predicted_us"]), float(row["launch_us"])
        if not math.isfinite(value):
            raise InputError(f"the cost model cannot price {record.kernel} on {self.machine_name}: {row['note']}")
        return value, launch

    def rates(self, precision: str) -> dict[str, str]:
        """Where the two rates come from on this machine: each kernel's calibration kind
        (fitted, carried over, default) and its fit's source."""
        out = {}
        for kernel, instance in ((dense_gemm(precision), ""), (COMPACT, COMPACTION_INSTANCE)):
            params, _ = family_parameters(self.machine, kernel, instance)
            name = f"{kernel}/{instance}" if instance else kernel
            out[name] = f"{calibration_kind(self.machine, kernel, instance)}: {params.source}"
        return out

    def gemm_us(self, m: int, k: int, n: int, precision: str) -> tuple[float, float]:
        """cuBLAS's predicted time of ``[m x k] @ [k x n]`` at ``precision`` and its launch part."""
        key = ("gemm", m, k, n, precision)
        if key not in self._cache:
            record = TraceRecord(
                run="", layer=0, device="policy", kernel=dense_gemm(precision), rows_in=m, rows_out=m, cols=n,
                executed_macs=m * k * n, useful_macs=m * k * n,
                bytes_read=ELEMENT_BYTES * (m * k + k * n), bytes_written=ELEMENT_BYTES * m * n,
            )  # fmt: skip
            self._cache[key] = self._us(record)
        return self._cache[key]

    def compaction_us(self, read_bytes: int, written_bytes: int) -> float:
        """The compaction engine's time to read ``read_bytes`` and write ``written_bytes``: the
        measured gather kernel's DRAM rate, less its launch (an engine launches nothing)."""
        key = ("compact", read_bytes, written_bytes)
        if key not in self._cache:
            record = TraceRecord(
                run="", layer=0, device="policy", kernel=COMPACT, variant=COMPACTION_INSTANCE,
                bytes_read=read_bytes, bytes_written=written_bytes,
            )  # fmt: skip
            value, launch = self._us(record)
            self._cache[key] = value - launch
        return self._cache[key]


def price_gemm(
    dense_us: float, launch_us: float, live: float, compaction_us: float, assumptions: SpartanAssumptions
) -> StepPrice:
    """One GEMM: ``dense_us`` its dense time, ``launch_us`` the part of it no skipping shortens,
    ``live`` its live share of the work at the grain, ``compaction_us`` the engine's whole time
    for its operand."""
    a = assumptions
    work = max(dense_us - launch_us, 0.0)
    skipped = work * (1.0 - live)
    missed = skipped * (1.0 - a.skip_efficiency)
    compaction = 0.0 if a.compaction_free else compaction_us * (1.0 - a.compaction_hidden)
    sparse = dense_us - skipped + missed + compaction + a.monitor_us
    price = StepPrice(dense_us=dense_us, live_us=dense_us - skipped, gemms=1)
    if a.choose_dense and sparse >= dense_us:
        price.predicted_us = dense_us
        price.parts["dense"] = dense_us
        return price
    price.predicted_us, price.sparse_gemms = sparse, 1
    price.parts.update(
        dense=dense_us, skipped=-skipped, skip_missed=missed, compaction=compaction, monitor=a.monitor_us
    )
    return price


def price_layers(
    layers: list[dict],
    assumptions: SpartanAssumptions,
    prices: DensePrices,
    batch: int,
    measured_us: dict[tuple[str, str], float] | None = None,
) -> StepPrice:
    """The step of ``layers`` (a summary point's layer records) on Spartan's units. A GEMM's
    dense time is ``measured_us[(layer name, gemm)]`` where given (its launch part the model's),
    else the cost model's."""
    total = StepPrice()
    for layer in layers:
        for gemm in GEMMS:
            entry = layer["gemms"].get(gemm)
            if entry is None:
                continue
            m, k, n = gemm_shape(layer, gemm, batch)
            dense, launch = prices.gemm_us(m, k, n, assumptions.precision)
            measured = (measured_us or {}).get((layer["name"], gemm))
            dense = dense if measured is None else measured
            live = entry["orders"][assumptions.order][assumptions.grain]["live_fraction_of_work"]
            elements = _operand_elements(m, k)
            read, written = ELEMENT_BYTES * elements, round(ELEMENT_BYTES * elements * live)
            price = price_gemm(dense, launch, live, prices.compaction_us(read, written), assumptions)
            price.measured_gemms = int(measured is not None)
            total.add(price)
    return total


def check_summary(summary: dict, path: str = "summary", grains: tuple[str, ...] = ()) -> None:
    """Raise :class:`InputError` unless ``summary`` is a ``spartan maps capture`` summary whose
    layers carry the grains this module reads (``grains``: those asked for, each in every order)."""
    if not isinstance(summary, dict) or not str(summary.get("schema", "")).startswith("spartan-maps/"):
        raise InputError("not a spartan maps capture summary (schema spartan-maps/N expected)", path=path)
    for network, record in summary.get("networks", {}).items():
        for point, data in record.get("points", {}).items():
            for layer in data.get("layers", []):
                missing = {"name", "C", "kernel", "out_h", "out_w", "out_channels", "gemms"} - set(layer)
                if missing:
                    raise InputError(f"{network} {point}: a layer lacks {sorted(missing)}", path=path)
                for gemm, entry in layer["gemms"].items():
                    if set(entry.get("orders", {})) != set(ORDERS):
                        raise InputError(
                            f"{network} {point} {layer['name']} {gemm}: orders {ORDERS} expected", path=path
                        )
                    for order, by_grain in entry["orders"].items():
                        lacking = [grain for grain in grains if grain not in by_grain]
                        if lacking:
                            raise InputError(
                                f"{network} {point} {layer['name']} {gemm} {order}: no {', '.join(lacking)} "
                                f"(the summary has {', '.join(by_grain)})",
                                path=path,
                            )
