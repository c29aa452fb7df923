"""The cost model: described GPUs, the analytical model, calibration and validation."""

from spartan_py.costmodel.calibrate import calibrate
from spartan_py.costmodel.machine import (
    Machine,
    Variant,
    carry_over,
    load_machine,
    load_variants,
    machine_names,
    write_calibration,
)
from spartan_py.costmodel.model import FAMILIES, predict, run_totals
from spartan_py.costmodel.validation import kernel_error_table

__all__ = [
    "FAMILIES",
    "Machine",
    "Variant",
    "calibrate",
    "carry_over",
    "kernel_error_table",
    "load_machine",
    "load_variants",
    "machine_names",
    "predict",
    "run_totals",
    "write_calibration",
]
