"""Fit a machine's free cost-model parameters to measured traces (SciPy least squares).

Per kernel family the parameters are ``launch_us``, ``compute_efficiency``,
``memory_efficiency`` (0.5 or more), ``step_overhead_us``, ``shared_step_us``,
``wave_overhead_us``, ``weight_load_cost``, ``saturating_warps`` and ``overlap`` (fewer for
copies and syncs; see :mod:`spartan_py.costmodel.model`). The fit
minimises relative error (residuals are log(predicted / measured), with a soft-L1 loss so
that a few noisy short launches do not dominate).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from spartan_py.costmodel.families import calibration_key, record_instances
from spartan_py.costmodel.machine import FamilyCalibration, Machine
from spartan_py.costmodel.model import family_of, predict
from spartan_py.errors import InputError

#: Parameters fitted per family unit, with (lower, upper, start).
_FREE = {
    "kernel": {
        "launch_us": (0.0, 50.0, 3.0),
        "compute_efficiency": (0.005, 1.0, 0.3),
        "memory_efficiency": (0.5, 1.0, 0.7),
        "step_overhead_us": (0.0, 200.0, 1.0),
        "wave_overhead_us": (0.0, 200.0, 1.0),
        "shared_step_us": (0.0, 200.0, 1.0),
        "weight_load_cost": (0.0, 16.0, 0.5),
        "saturating_warps": (1.0, 64.0, 4.0),
        "overlap": (0.0, 1.0, 1.0),
    },
    # Little's law: the bandwidth a memory-bound family reaches is what it keeps in flight over
    # the memory latency (a property of its code, which carries over), not a share of the peak
    "memory": {"launch_us": (0.0, 500.0, 3.0), "bytes_in_flight_kib": (16.0, 262144.0, 1024.0)},
    "link": {"launch_us": (0.0, 500.0, 10.0), "memory_efficiency": (0.01, 1.0, 0.5)},
}
_FIXED = {
    "compute_efficiency": 1.0,
    "memory_efficiency": 1.0,
    "step_overhead_us": 0.0,
    "wave_overhead_us": 0.0,
    "shared_step_us": 0.0,
    "weight_load_cost": 0.0,
    "overlap": 1.0,
    "saturating_warps": 0.0,
    "bytes_in_flight_kib": 0.0,
}


def _free_parameters(kernel: str) -> dict[str, tuple[float, float, float]] | None:
    family = family_of(kernel)
    if family is None or family.unit == "sync":
        return None
    return _FREE["link" if family.unit == "link" else "memory" if family.unit == "memory" else "kernel"]


def _with_family(machine: Machine, kernel: str, values: dict, source: str, records: int) -> Machine:
    params = FamilyCalibration(**{**_FIXED, **values}, source=source, records=records)
    return machine.model_copy(update={"calibration": {**machine.calibration, kernel: params}})


def median_abs_error_pct(predicted: pd.Series, measured: pd.Series) -> float:
    """Median of |predicted - measured| / measured, in percent."""
    return float(
        np.median(np.abs(predicted.to_numpy(float) - measured.to_numpy(float)) / measured.to_numpy(float)) * 100
    )


#: Records an instance of a per-instance family needs to get its own fit.
MIN_INSTANCE_RECORDS = 5


#: Further starts of ``saturating_warps``: from its default start an SM that holds 8 warps
#: or more is already saturated, where the residuals do not move with it (no gradient), so a
#: kernel that runs slower with one block per SM than with two is only found from above.
SATURATING_WARPS_STARTS = (16.0,)


def _starts(names: list[str], start: np.ndarray) -> list[np.ndarray]:
    """The fit's starting points: the defaults, then each further ``saturating_warps`` start."""
    if "saturating_warps" not in names:
        return [start]
    at = names.index("saturating_warps")
    others = [np.where(np.arange(len(names)) == at, warps, start) for warps in SATURATING_WARPS_STARTS]
    return [start, *others]


def _fit(
    machine: Machine, key: str, kernel: str, rows: pd.DataFrame, source: str, warm: FamilyCalibration | None = None
) -> FamilyCalibration:
    """Least-squares parameters of ``key`` (a family or one of its instances) on ``rows``,
    started from ``warm`` (an earlier fit of the same key) when given, else from the defaults."""
    free = _free_parameters(kernel)
    assert free is not None
    names = list(free)
    lower = np.array([free[n][0] for n in names])
    upper = np.array([free[n][1] for n in names])
    start = np.array([free[n][2] for n in names])
    if warm is not None:
        start = np.clip(np.array([getattr(warm, n) for n in names], dtype=float), lower, upper)
    target = np.log(rows["measured_us"].to_numpy(float))

    def residuals(x):
        trial = _with_family(machine, key, dict(zip(names, x)), source, len(rows))
        return np.log(predict(rows, trial)["predicted_us"].to_numpy(float)) - target

    solutions = [
        least_squares(residuals, guess, bounds=(lower, upper), loss="soft_l1", f_scale=0.1)
        for guess in ([start] if warm is not None else _starts(names, start))
    ]
    solution = min(solutions, key=lambda found: found.cost)
    values = {n: float(round(v, 6)) for n, v in zip(names, solution.x)}
    trial = _with_family(machine, key, values, source, len(rows))
    error = median_abs_error_pct(predict(rows, trial)["predicted_us"], rows["measured_us"])
    return trial.calibration[key].model_copy(update={"fit_median_error_pct": round(error, 2)})


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

    A per-instance family (:attr:`~spartan_py.costmodel.families.KernelFamily.per_instance`)
    gets one fit over all its records (used for instances not seen) and one per compiled
    instance with at least :data:`MIN_INSTANCE_RECORDS` records (only the ``instances``
    named, when given: an instance's fit reads its own records alone, so the others' fits on
    the same records would not change). ``warm`` starts each fit from ``machine``'s own fit of
    it (fewer iterations when the records changed little, as when one point is left out).
    ``family_wide=False`` keeps ``machine``'s family-wide fits and refits the instances only (a
    new instance fitted on records the family-wide fit never read, as cuBLAS records that name
    their algorithm). ``source`` says which traces these are (it is stored with each fit).
    """
    measured = trace[trace["measured_us"].notna() & (trace["measured_us"] > 0)]
    kernels = [k for k in measured["kernel"].unique() if _free_parameters(k) is not None]
    if families is not None:
        unknown = sorted(set(families) - set(kernels))
        if unknown:
            raise InputError(f"no measured records of {', '.join(unknown)} to calibrate on")
        kernels = [k for k in kernels if k in families]
    if not kernels:
        raise InputError("no measured records of a modelled GPU kernel to calibrate on")
    calibration = dict(machine.calibration)
    earlier = dict(machine.calibration) if warm else {}
    for kernel in kernels:
        rows = measured[measured["kernel"] == kernel].reset_index(drop=True)
        # the family's earlier per-instance fits would shadow the family-wide fit
        kept = {k: v for k, v in calibration.items() if k.startswith(kernel + "/")} if instances is not None else {}
        calibration = {k: v for k, v in calibration.items() if not k.startswith(kernel + "/")}
        base = machine.model_copy(update={"calibration": calibration})
        if family_wide or kernel not in calibration:
            calibration[kernel] = _fit(base, kernel, kernel, rows, source, earlier.get(kernel))
        of_rows = pd.Series(record_instances(rows), index=rows.index)
        refitted = {}
        for instance, group in rows.groupby(of_rows):
            if instance and len(group) >= MIN_INSTANCE_RECORDS and (instances is None or instance in instances):
                key = calibration_key(kernel, instance)
                refitted[key] = _fit(base, key, kernel, group.reset_index(drop=True), source, earlier.get(key))
        calibration |= kept | refitted
    return machine.model_copy(update={"calibration": calibration})


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
