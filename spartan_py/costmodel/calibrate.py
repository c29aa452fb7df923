"""Fit a machine's free cost-model parameters to measured traces (SciPy least squares).

Each kernel family is fitted jointly on all its records: the parameters its compiled
instances share once, each instance's own on its records
(:mod:`spartan_py.costmodel.parameters` says which are which, and why). The fit minimises
relative error (residuals are log(predicted / measured), with a soft-L1 loss so that a few
noisy short launches do not dominate); a parameter it leaves at a bound is fixed there and
the rest fitted again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from spartan_py.costmodel.families import FAMILIES, calibration_key, record_instances
from spartan_py.costmodel.machine import FamilyCalibration, Machine
from spartan_py.costmodel.memory_terms import rows_read_bytes
from spartan_py.costmodel.model import predict
from spartan_py.costmodel.parameters import (
    BOUNDS,
    FIXED,
    MIN_INSTANCE_RECORDS,
    Roles,
    near_bound,
    owned,
    roles,
)
from spartan_py.errors import InputError


def median_abs_error_pct(predicted: pd.Series, measured: pd.Series) -> float:
    """Median of |predicted - measured| / measured, in percent."""
    return float(
        np.median(np.abs(predicted.to_numpy(float) - measured.to_numpy(float)) / measured.to_numpy(float)) * 100
    )


#: Further starts of ``saturating_warps``: from its default start an SM that holds 8 warps
#: or more is already saturated, where the residuals do not move with it (no gradient), so a
#: kernel that runs slower with one block per SM than with two is only found from above.
SATURATING_WARPS_STARTS = (16.0,)

#: How far inside its bounds (a share of the range) a start taken from an earlier fit is put.
START_INSET = 0.01

#: Rounds of fixing the parameters a fit left at a bound and fitting the rest again.
BOUND_ROUNDS = 6

#: A parameter whose largest effect on a log residual over its whole range (its gradient at
#: the fit times the range) is below this moves no prediction of the family's records: not free.
IDLE_EFFECT = 1e-6


@dataclass
class _Slot:
    """One free value of a family's joint fit: a parameter of the family (``instance`` None) or
    of one instance, and the records it moves."""

    name: str
    instance: str | None
    rows: np.ndarray


@dataclass
class _Plan:
    """A family's joint fit: its entries (family ``""`` and instances with entries of their
    own), each entry's own parameters, the free slots and the values fixed so far."""

    kernel: str
    roles: Roles
    entries: dict[str, tuple[str, ...]]  # instance ("" the family) -> the parameters it holds
    of_rows: np.ndarray  # each record's entry
    slots: list[_Slot] = field(default_factory=list)
    values: dict[tuple[str, str], float] = field(default_factory=dict)  # (entry, parameter) -> value
    family_used: set[str] = field(default_factory=set)  # own parameters some record takes the family's value of

    def value(self, entry: str, name: str) -> float:
        """The value an entry prices ``name`` with: its own, else the family's, else the fixed one."""
        if name in self.entries.get(entry, ()) and (entry, name) in self.values:
            return self.values[(entry, name)]
        return self.values.get(("", name), FIXED.get(name, 0.0))


def _plan(
    kernel: str,
    rows: pd.DataFrame,
    fitted: dict[str, FamilyCalibration],
    free_entries: set[str] | None,
    shared_free: bool,
    pooled: bool = False,
) -> _Plan:
    """The joint fit of ``kernel`` on ``rows``: which instances get entries and what each frees
    (:mod:`spartan_py.costmodel.parameters`); ``free_entries`` (None: all) limits the instances
    whose parameters are free, ``shared_free`` whether the family's are; the others keep
    ``fitted``'s values (warm values for the free ones too). ``pooled``: no instance entries,
    every record priced by the family's (the fit of the family's entry, which prices the
    instances without one)."""
    found = roles(kernel, rows)
    assert found is not None
    instances = np.array(record_instances(rows), dtype=object)
    counts = pd.Series(instances).value_counts()
    per_instance = FAMILIES[kernel].per_instance and not pooled
    entries: dict[str, tuple[str, ...]] = {"": found.shared + found.family_own}
    for instance, n in counts.items():
        if per_instance and instance and n >= MIN_INSTANCE_RECORDS:
            entries[str(instance)] = owned(found, int(n), str(instance))
    of_rows = np.array([i if i in entries else "" for i in instances], dtype=object)
    plan = _Plan(kernel, found, entries, of_rows)
    for entry, names in entries.items():
        earlier = fitted.get(calibration_key(kernel, entry) if entry else kernel) or fitted.get(kernel)
        for name in names:
            lower, upper, start = BOUNDS[name]
            if earlier is not None:  # as it is: a value fixed outside the bounds stays (0: no such limit)
                start = float(getattr(earlier, name))
            plan.values[(entry, name)] = start
    for name in found.shared:
        if shared_free:
            plan.slots.append(_Slot(name, None, np.ones(len(rows), bool)))
    for name in found.own:
        holders = [e for e, names in entries.items() if e and name in names]
        users = ~np.isin(of_rows, holders) & (name in found.family_own)
        if users.any():
            plan.family_used.add(name)
        if shared_free and users.any():
            plan.slots.append(_Slot(name, None, users))
        for entry in holders:
            if free_entries is None or entry in free_entries:
                plan.slots.append(_Slot(name, entry, of_rows == entry))
    for slot in plan.slots:  # inside the bounds: a start at one is where the fit would stay
        lower, upper, _ = BOUNDS[slot.name]
        inset = START_INSET * (upper - lower)
        key = (slot.instance or "", slot.name)
        plan.values[key] = float(np.clip(plan.values[key], lower + inset, upper - inset))
    return plan


def _machine_of(machine: Machine, plan: _Plan, records: dict[str, int], source: str) -> Machine:
    calibration = {
        k: v for k, v in machine.calibration.items() if k != plan.kernel and not k.startswith(plan.kernel + "/")
    }
    names = plan.roles.shared + plan.roles.own
    for entry, own in plan.entries.items():
        values = {n: plan.value(entry, n) for n in names}
        free = [s.name for s in plan.slots if s.instance == (entry or None)]
        shared = [n for n in names if n not in own] if entry else []
        key = calibration_key(plan.kernel, entry) if entry else plan.kernel
        calibration[key] = FamilyCalibration(
            **{**FIXED, **values},
            source=source,
            records=records.get(entry, 0),
            free_parameters=free,
            shared_parameters=shared,
        )
    return machine.model_copy(update={"calibration": calibration})


def _solve(
    machine: Machine,
    plan: _Plan,
    rows: pd.DataFrame,
    records: dict[str, int],
    source: str,
    starts: list[np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The least-squares values of ``plan``'s slots (relative error, soft-L1 loss), and each
    slot's largest effect on a residual at them (its Jacobian column's largest entry)."""
    lower = np.array([BOUNDS[s.name][0] for s in plan.slots])
    upper = np.array([BOUNDS[s.name][1] for s in plan.slots])
    start = np.array([plan.value(s.instance or "", s.name) for s in plan.slots])
    target = np.log(rows["measured_us"].to_numpy(float))
    sparsity = np.stack([s.rows for s in plan.slots], axis=1).astype(int)

    def residuals(x):
        for slot, v in zip(plan.slots, x, strict=True):
            plan.values[(slot.instance or "", slot.name)] = float(v)
        return (
            np.log(predict(rows, _machine_of(machine, plan, records, source))["predicted_us"].to_numpy(float)) - target
        )

    guesses = [start, *(starts or [])]
    solutions = [
        least_squares(
            residuals,
            np.clip(g, lower, upper),
            bounds=(lower, upper),
            loss="soft_l1",
            f_scale=0.1,
            jac_sparsity=sparsity,
        )
        for g in guesses
    ]
    best = min(solutions, key=lambda found: found.cost)
    residuals(best.x)
    moves = np.asarray(
        abs(best.jac).max(axis=0).todense() if hasattr(best.jac, "todense") else abs(best.jac).max(axis=0)
    )
    return best.x, moves.ravel()


def _span(name: str) -> float:
    """A parameter's range (its value's, from the bounds)."""
    return BOUNDS[name][1] - BOUNDS[name][0]


def _run_plan(machine: Machine, plan: _Plan, rows: pd.DataFrame, source: str, warm: bool) -> Machine:
    """``machine`` with ``plan`` fitted on ``rows``; any value left within NEAR_BOUND of a bound
    fixed there and the rest fitted again; each entry's median error on its records."""
    records = {entry: int((plan.of_rows == entry).sum()) if entry else len(rows) for entry in plan.entries}
    starts = None
    if not warm and any(s.name == "saturating_warps" for s in plan.slots):
        warps = [
            SATURATING_WARPS_STARTS[0] if s.name == "saturating_warps" else plan.value(s.instance or "", s.name)
            for s in plan.slots
        ]
        starts = [np.array(warps)]
    for _ in range(BOUND_ROUNDS):
        if not plan.slots:
            break
        values, moves = _solve(machine, plan, rows, records, source, starts)
        starts = None
        idle = [
            s
            for s, m in zip(plan.slots, moves, strict=True)
            if m * (BOUNDS[s.name][1] - BOUNDS[s.name][0]) < IDLE_EFFECT
        ]
        for slot in idle:  # moves no residual: not free, at its neutral value
            plan.values[(slot.instance or "", slot.name)] = FIXED.get(slot.name, BOUNDS[slot.name][2])
        at_bound = [
            s for s, v in zip(plan.slots, values, strict=True) if s not in idle and near_bound(s.name, float(v))
        ]
        for slot in at_bound:  # fixed at the bound it reached: the physical limit
            lower, upper, _ = BOUNDS[slot.name]
            v = plan.values[(slot.instance or "", slot.name)]
            plan.values[(slot.instance or "", slot.name)] = lower if v - lower < upper - v else upper
        if not idle and not at_bound:
            break
        plan.slots = [s for s in plan.slots if s not in at_bound and s not in idle]
    fitted = _machine_of(machine, plan, records, source)
    errors = predict(rows, fitted)["predicted_us"]
    calibration = dict(fitted.calibration)
    for entry in plan.entries:
        key = calibration_key(plan.kernel, entry) if entry else plan.kernel
        mask = (plan.of_rows == entry) if entry else np.ones(len(rows), bool)
        error = median_abs_error_pct(errors[mask], rows["measured_us"][mask])
        calibration[key] = calibration[key].model_copy(update={"fit_median_error_pct": round(error, 2)})
    return fitted.model_copy(update={"calibration": calibration})


def _fit_family(
    machine: Machine,
    kernel: str,
    rows: pd.DataFrame,
    source: str,
    *,
    warm: bool,
    free_entries: set[str] | None,
    shared_free: bool,
) -> Machine:
    """``machine`` with ``kernel``'s family fitted jointly on ``rows``: its shared parameters,
    the instances' own (:mod:`spartan_py.costmodel.parameters`). Where every record belongs to
    an instance holding a parameter of its own, the family's value of it (which prices the
    instances without an entry) is fitted after, on every record, the shared ones kept."""
    earlier = machine.calibration  # the fit it has: a start near where the records put it
    plan = _plan(kernel, rows, earlier, free_entries, shared_free)
    fitted = _run_plan(machine, plan, rows, source, warm)
    if not shared_free:  # the family's entry, and the instances' not fitted, as they were
        kept = {
            key: params
            for key, params in machine.calibration.items()
            if key == kernel
            or (key.startswith(kernel + "/") and free_entries is not None and key.split("/", 1)[1] not in free_entries)
        }
        return fitted.model_copy(update={"calibration": {**fitted.calibration, **kept}})
    unfitted = [n for n in plan.roles.family_own if n not in plan.family_used]
    if not unfitted or len(plan.entries) == 1:
        return fitted
    pooled = _plan(kernel, rows, fitted.calibration, None, shared_free=False, pooled=True)
    pooled.slots = [_Slot(n, None, np.ones(len(rows), bool)) for n in unfitted]
    family = _run_plan(fitted, pooled, rows, source, warm=True).calibration[kernel]
    shared = fitted.calibration[kernel].free_parameters
    family = family.model_copy(update={"free_parameters": [*shared, *family.free_parameters]})
    return fitted.model_copy(update={"calibration": {**fitted.calibration, kernel: family}})


def calibrate(
    trace: pd.DataFrame,
    machine: Machine,
    *,
    source: str,
    families: tuple[str, ...] | None = None,
    instances: set[str] | None = None,
    warm: bool = False,
    family_wide: bool = True,
) -> Machine:
    """The machine with every kernel family that has measured records in ``trace`` refitted
    (only those in ``families`` when given; the others keep ``machine``'s fit).

    Each family is fitted jointly (:mod:`spartan_py.costmodel.parameters`): its shared
    parameters on all its records, each compiled instance with at least
    ``MIN_INSTANCE_RECORDS`` records an entry of its own freeing what its records carry. With
    ``instances``, only those instances' own parameters are free besides the family's;
    ``family_wide=False`` keeps the family's parameters as ``machine`` has them and fits the
    named instances' (a new instance on records the family's fit never read). ``warm`` starts
    from ``machine``'s values (fewer iterations when one point is left out). ``source`` says
    which traces these are (stored with each entry).
    """
    measured = trace[trace["measured_us"].notna() & (trace["measured_us"] > 0)]
    kernels = [k for k in measured["kernel"].unique() if roles(k, measured[measured["kernel"] == k]) is not None]
    if families is not None:
        unknown = sorted(set(families) - set(kernels))
        if unknown:
            raise InputError(f"no measured records of {', '.join(unknown)} to calibrate on")
        kernels = [k for k in kernels if k in families]
    if not kernels:
        raise InputError("no measured records of a modelled GPU kernel to calibrate on")
    for kernel in kernels:
        rows = measured[measured["kernel"] == kernel].reset_index(drop=True)
        rows["rows_read_bytes"] = rows_read_bytes(rows)  # once, not at each of the fit's predictions
        machine = _fit_family(
            machine,
            kernel,
            rows,
            source,
            warm=warm,
            free_entries=instances,
            shared_free=family_wide or kernel not in machine.calibration,
        )
    return machine


def check_may_calibrate(machine: Machine, measured_on: str) -> None:
    """Refuse to fit ``machine`` on runs measured on ``measured_on`` where that would spoil
    what its file claims: a machine whose predictions were checked blind (fitting it on its
    own runs would turn its validation set into a development set), one that derives its
    calibration (``calibration_from``), or runs of a GPU the machine does not describe."""
    blind = [v.scope for v in machine.validation if v.blind]
    if blind:
        raise InputError(
            f"{machine.name}'s predictions are validated blind ({'; '.join(blind)}): a fit on its own runs "
            "would make that set a development set; calibrate the machine its fit is carried over from"
        )
    if machine.calibration_from is not None:
        raise InputError(f"{machine.name} derives its calibration from {machine.calibration_from} when loaded")
    if measured_on not in machine.device_names:
        raise InputError(
            f"the runs were measured on {measured_on!r}, which {machine.name} does not describe "
            f"(its device_names: {', '.join(machine.device_names) or 'none'})"
        )
