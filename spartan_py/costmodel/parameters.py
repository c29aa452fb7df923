"""Which cost-model parameters a fit frees for a kernel family, which its compiled instances
share, and how many a machine's calibration holds (the counts docs/cost-model.md quotes).

The physics decides the structure, before any fit:

- **Shared by every instance of a family**: what the machine's memory system gives the
  family's loads whatever the compiled instance: the share of the DRAM bandwidth they reach,
  how much of the shorter of compute and memory hides under the longer, a fused layer's
  staging through L2 (which the busy SMs share).
- **Per compiled instance** (a layer kernel's tile height and columns per thread; the merged
  kernel's first launch, chain kernel and later launches, three CUDA functions of different
  block sizes; row compaction's gather or expansion; a cuBLAS kernel that names its
  algorithm): what its code changes, most telling first: its rate on the bound unit
  (registers, occupancy, instruction mix: ``compute_efficiency``), its block's start and
  finish (rows in and out: ``wave_overhead_us``), a later merged launch's first wave (and each
  later one where L2 cannot keep the layers) waiting on DRAM for each layer it reads unstaged
  (``cold_layer_us``: those instances alone,
  :func:`reads_layers_cold`), the cost of a weight load
  (``weight_load_cost``), its launch's fixed cost (a chain launch stages every layer's
  indices once), the resident warps an SM needs to issue at its rate, a fused layer's
  barriers. An instance frees as many of them as its records carry (:func:`owned`); the rest
  are its family's values, fitted on the records of the instances that do not free them. A memory-bound family's
  instances are different kernels (a gather and a fill-and-scatter; an element-wise and a
  row-wise expansion) and free everything; cuBLAS's ``lt`` records are priced by another
  formula (the algorithm's tiles) and do too.
- **Not free**: a parameter that moves no prediction of the family's records (a library's
  records carry no launch geometry, so no per-wave or per-step term; a family whose launches
  are all one layer cannot tell a per-layer cost from a per-wave one, so only the per-wave
  one), one whose value moves no residual at the fit (fixed at its neutral value: the overlap
  of blocks that run one an SM), and one the fit drove within :data:`NEAR_BOUND` of a bound
  (it is fixed there: the physical limit, e.g. no such overhead, or the unit's peak) and
  refitted without it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from spartan_py.costmodel.families import FAMILIES
from spartan_py.costmodel.machine import Machine

#: Each parameter's (lower, upper, start). ``launch_us`` reaches 0.5 ms: a host-bound launch
#: (a round trip to the host, cuSPARSE's conversion) is that slow, where the former 50 us
#: ceiling of the kernels held four instances at it.
BOUNDS: dict[str, tuple[float, float, float]] = {
    "launch_us": (0.0, 500.0, 5.0),
    "compute_efficiency": (0.005, 1.0, 0.3),
    "memory_efficiency": (0.5, 1.0, 0.7),
    "step_overhead_us": (0.0, 200.0, 1.0),
    "wave_overhead_us": (0.0, 500.0, 1.0),
    "shared_step_us": (0.0, 200.0, 1.0),
    "cold_layer_us": (0.0, 200.0, 1.0),
    "weight_load_cost": (0.0, 16.0, 0.5),
    "saturating_warps": (1.0, 64.0, 4.0),
    "overlap": (0.0, 1.0, 0.5),
    "bytes_in_flight_kib": (16.0, 262144.0, 1024.0),
    "block_round_trips": (0.0, 100.0, 2.0),
    "row_round_trips": (0.0, 20.0, 0.5),
}

#: A free parameter fitted within this share of its range from a bound is fixed at the bound.
NEAR_BOUND = 0.001

#: Parameters spanning orders of magnitude, whose range is measured in their logarithm.
LOG_SCALE = frozenset({"bytes_in_flight_kib"})

#: Records a free parameter needs at least (the issue's bar: a reviewer's).
MIN_RECORDS_PER_PARAMETER = 5

#: Records an instance of a family with shared parameters needs for each own parameter after
#: its first (twice the bar: its records fit the shared ones too).
RECORDS_PER_OWN_PARAMETER = 10

#: Records an instance needs for an entry of its own (its records then fit the family's shared
#: parameters, whatever it frees of its own).
MIN_INSTANCE_RECORDS = 5

#: The values of parameters a family does not free (the model's neutral value of each term).
FIXED = {
    "compute_efficiency": 1.0,
    "memory_efficiency": 1.0,
    "step_overhead_us": 0.0,
    "wave_overhead_us": 0.0,
    "shared_step_us": 0.0,
    "cold_layer_us": 0.0,
    "weight_load_cost": 0.0,
    "overlap": 1.0,
    "saturating_warps": 0.0,
    "bytes_in_flight_kib": 0.0,
    "block_round_trips": 0.0,
    "row_round_trips": 0.0,
}

_OWN_ORDER = (
    "compute_efficiency",
    "wave_overhead_us",
    "cold_layer_us",
    "weight_load_cost",
    "launch_us",
    "saturating_warps",
    "step_overhead_us",
)


@dataclass(frozen=True)
class Roles:
    """A family's free parameters: ``shared`` (one value for all its records) and ``own``
    (per instance, in the order instances take them; a family value for the rest)."""

    shared: tuple[str, ...]
    own: tuple[str, ...]

    @property
    def family_own(self) -> tuple[str, ...]:
        """The own parameters the family's entry holds for the records no instance entry takes:
        all but :data:`INSTANCE_ONLY`, whose family value stays neutral."""
        return _family_held(self.own)


def roles(kernel: str, records: pd.DataFrame) -> Roles | None:
    """The free parameters of ``kernel``'s family on its ``records`` (None: a family with none,
    the host syncs). The module docstring says why each is where it is."""
    family = FAMILIES.get(kernel)
    if family is None or family.unit == "sync":
        return None
    if family.unit == "link":
        return Roles(("launch_us", "memory_efficiency"), ())
    if family.unit == "memory":
        names: tuple[str, ...] = (
            ("block_round_trips", "launch_us", "row_round_trips")
            if family.row_block_threads
            else ("launch_us", "bytes_in_flight_kib")
        )
        return Roles((), names) if family.per_instance else Roles(names, ())
    geometry = bool((records["blocks"] > 0).any()) if "blocks" in records else False
    if not geometry or family.library_gemm:  # a library's launch: no geometry, no per-wave terms
        names = ("compute_efficiency", "launch_us", "memory_efficiency", "overlap")
        return Roles((), names) if family.per_instance else Roles(names, ())
    layered = bool((records["fused_layers"] > 1).any()) if "fused_layers" in records else False
    shared = ("memory_efficiency", "overlap") + (("shared_step_us",) if layered else ())
    own = tuple(name for name in _OWN_ORDER if layered or name not in ("step_overhead_us", "cold_layer_us"))
    if not family.per_instance:
        return Roles(shared + _family_held(own), ())
    return Roles(shared, own)


def reads_layers_cold(instance: str) -> bool:
    """Whether ``instance`` is a later launch of the merged kernel (``T<threads>`` in its label,
    spartan_py/engines/merged/trace.py): its layers are read for the first time in the launch, by
    dependent loads inside the k-loop where a layer does not fit the stage, so its first wave
    waits on DRAM and later waves on L2 (``benchmarks/results/ncu-merged-later-h100.json``), or
    on DRAM again where L2 cannot keep them (:func:`spartan_py.costmodel.memory_terms.cold_waves`). Only
    these free ``cold_layer_us``."""
    head = instance.split("x", 1)[0]
    return head.startswith("R") and "T" in head  # a chain launch's T counts warps: it stages its layers


_FREED_BY: dict[str, Callable[[str], bool]] = {"cold_layer_us": reads_layers_cold}
"""Own parameters only some instances free, each with the test of an instance's label."""

#: Own parameters whose family value stays neutral (:data:`FIXED`): only the instances that free
#: them (:data:`_FREED_BY`) pay the term, and the records priced by the family's entry do not.
INSTANCE_ONLY = frozenset(_FREED_BY)


def _family_held(names: tuple[str, ...]) -> tuple[str, ...]:
    """``names`` without :data:`INSTANCE_ONLY`, in their order."""
    return tuple(n for n in names if n not in INSTANCE_ONLY)


def owned(roles_: Roles, records: int, instance: str = "") -> tuple[str, ...]:
    """The parameters an instance of ``records`` records frees of its own, in the family's order:
    where the family shares none, :data:`MIN_RECORDS_PER_PARAMETER` records each; where it shares
    some, the first at :data:`MIN_RECORDS_PER_PARAMETER` records and each further one at
    :data:`RECORDS_PER_OWN_PARAMETER` more (its records fit the shared ones too).
    An :data:`INSTANCE_ONLY` parameter only where ``instance`` passes its test (:data:`_FREED_BY`)."""
    own = tuple(n for n in roles_.own if n not in _FREED_BY or _FREED_BY[n](instance))
    if not roles_.shared:
        return own[: records // MIN_RECORDS_PER_PARAMETER]
    if records < MIN_RECORDS_PER_PARAMETER:
        return ()
    return own[: 1 + (records - MIN_RECORDS_PER_PARAMETER) // RECORDS_PER_OWN_PARAMETER]


def near_bound(name: str, value: float) -> bool:
    """Whether ``value`` of parameter ``name`` lies within :data:`NEAR_BOUND` of its range from a
    bound (of its logarithm's, for :data:`LOG_SCALE`)."""
    lower, upper, _ = BOUNDS[name]
    if name in LOG_SCALE:
        lower, upper, value = np.log(lower), np.log(upper), np.log(max(value, lower))
    return bool(min(value - lower, upper - value) <= NEAR_BOUND * (upper - lower))


@dataclass(frozen=True)
class ParameterCounts:
    """What a machine's calibration frees: ``free`` parameters over ``entries`` (families and
    instances), ``near_bound`` of them within :data:`NEAR_BOUND` of a bound, ``records`` fitted
    (each family's once), the fewest records per free parameter of a family (all its entries'
    parameters over its records) and of one entry (its own parameters over the records it was
    fitted on)."""

    entries: int
    free: int
    near_bound: int
    records: int
    min_family_records_per_parameter: float
    min_entry_records_per_parameter: float

    @property
    def records_per_parameter(self) -> float:
        """Records fitted per free parameter, over every family."""
        return self.records / max(self.free, 1)


def count_parameters(machine: Machine) -> ParameterCounts:
    """:class:`ParameterCounts` of ``machine``'s own calibration. An entry that names no free
    parameters (a fit made before they were recorded) counts every parameter of its family's
    kind as free, as that fit did."""
    family_records: dict[str, int] = {}
    family_free: dict[str, int] = {}
    entry_ratios = []
    free = near = 0
    for key, params in machine.calibration.items():
        kernel = key.split("/", 1)[0]
        names = params.free_parameters if params.free_parameters or params.shared_parameters else _legacy_free(kernel)
        free += len(names)
        near += sum(near_bound(n, float(getattr(params, n))) for n in names)
        family_free[kernel] = family_free.get(kernel, 0) + len(names)
        if "/" not in key:
            family_records[kernel] = params.records
        if names:
            entry_ratios.append(params.records / len(names))
    ratios = [family_records.get(k, 0) / n for k, n in family_free.items() if n]
    return ParameterCounts(
        entries=len(machine.calibration),
        free=free,
        near_bound=near,
        records=sum(family_records.values()),
        min_family_records_per_parameter=min(ratios, default=0.0),
        min_entry_records_per_parameter=min(entry_ratios, default=0.0),
    )


def _legacy_free(kernel: str) -> list[str]:
    """The parameters the fit before shared parameters freed for every entry of ``kernel``."""
    family = FAMILIES.get(kernel)
    if family is None or family.unit == "sync":
        return []
    if family.unit == "link":
        return ["launch_us", "memory_efficiency"]
    if family.unit == "memory":
        return ["launch_us", "bytes_in_flight_kib"]
    return [name for name in BOUNDS if name not in ("bytes_in_flight_kib", "block_round_trips", "row_round_trips")]
