"""Simulated mode: times for a twin's trace from the cost model instead of a clock."""

from __future__ import annotations

import pandas as pd

from spartan_py.costmodel.families import TIMED_FAMILIES
from spartan_py.costmodel.machine import Machine, Variant, load_machine, load_variants
from spartan_py.costmodel.model import predict
from spartan_py.errors import InputError
from spartan_py.trace import TraceRecord, to_frame


def resolve_machine(name: str, variant: str | None = None) -> tuple[Machine, Variant | None]:
    """A machine by name and an optional variant by name (``sim/variants.yaml``).

    ``name`` may also be written ``MACHINE+VARIANT``.
    """
    if "+" in name and variant is None:
        name, variant = name.split("+", 1)
    machine = load_machine(name)
    if variant is None:
        return machine, None
    variants = load_variants()
    if variant not in variants:
        raise InputError(f"unknown variant {variant!r}; known: {', '.join(sorted(variants))}")
    return machine, variants[variant]


def trust(name: str) -> str:
    """How far to trust predictions for ``name`` (``MACHINE`` or ``MACHINE+VARIANT``): the
    machine's validation (measured here, with its errors, or not) and what a variant is."""
    machine, variant = resolve_machine(name)
    text = machine.validation_summary()
    return text if variant is None else f"{text}; {variant.name}: {variant.status()}"


def simulate_trace(
    records: list[TraceRecord] | pd.DataFrame, machine: Machine, variant: Variant | None = None
) -> tuple[float, pd.DataFrame]:
    """(predicted seconds of the timed kernels, the predicted trace) for a twin's records."""
    frame = records if isinstance(records, pd.DataFrame) else to_frame(records)
    predicted = predict(frame, machine, variant)
    label = predicted["machine"].iloc[0] if len(predicted) else machine.name
    predicted["device"] = f"simulated:{label}"
    timed = predicted[predicted["kernel"].isin(TIMED_FAMILIES)]
    missing = timed["predicted_us"].isna()
    if missing.any():
        reason = timed.loc[missing, "note"].iloc[0]
        raise InputError(f"{machine.name} cannot run this kernel configuration: {reason}")
    return float(timed["predicted_us"].sum()) / 1e6, predicted
