"""The maps table's blind check: one GPU's ``table.json`` carries another machine's column
(``predicted_ms[machine]``, the replay of each adaptive step's launches), committed before that
GPU ran the job; the same job measured there is held against it, step by step. Both runs
train again from the seed, so the steps' shapes are the same; the maps may differ in their
bits, which the dense GEMMs' times do not see."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from spartan_py.costmodel.machine import machine_for_device
from spartan_py.costmodel.whole_runs import WITHIN_PCT
from spartan_py.errors import InputError
from spartan_py.report.cells import markdown_table
from spartan_py.trained_maps.table_text import NETWORK_NAMES

BLIND_WITHIN = WITHIN_PCT / 100
"""The bar: a blind prediction within 10% of the measured step (issue 77)."""

_KEY = ("network", "training_point", "precision")
_DEVICES = {"h200-sxm": "H200", "h100-sxm": "H100"}  # how the text names each machine's GPU


def _key(record: dict) -> tuple:
    """A step's (network, training point, precision)."""
    return tuple(record.get(k) for k in _KEY)


def _steps(table: dict, path: str | Path) -> dict[tuple, dict]:
    """``table``'s finished steps by (network, training point, precision); two of one key are
    refused (the check would keep one silently)."""
    out: dict[tuple, dict] = {}
    for r in table.get("records", []):
        if "error" in r:
            continue
        key = _key(r)
        if key in out:
            raise InputError(f"two steps of {' '.join(map(str, key))}: expected one each", path=path)
        out[key] = r
    return out


def _measured(table: dict, machine: str, path: str | Path) -> dict[tuple, dict]:
    """``table``'s finished steps by key, each timed (not simulated) on ``machine``'s GPU (one of
    its ``device_names``)."""
    device = _DEVICES.get(machine, machine)
    out = _steps(table, path)
    for r in out.values():
        if r.get("simulated") or machine_for_device(str(r.get("timed_on", "")), [machine]) != machine:
            raise InputError(
                f"expected every step timed on an {device} (not simulated); {r.get('network')} "
                f"{r.get('training_point')} {r.get('precision')} was timed on {r.get('timed_on')!r}",
                path=path,
            )
    return out


def _positive(record: dict, name: str, path: str | Path) -> float:
    """``record[name]``, a time that must be finite and above 0."""
    value = finite_or_none(record.get(name))
    if value is None or value <= 0:
        said = " ".join(str(record.get(k)) for k in _KEY)
        raise InputError(f"{said}: expected a positive {name}, got {record.get(name)!r}", path=path)
    return value


def blind_rows(
    predicted: dict, measured: dict, machine: str = "h200-sxm", paths: tuple[str | Path, str | Path] = ("", "")
) -> list[dict[str, Any]]:
    """One row per step both tables finished: ``predicted``'s blind ``machine`` column against
    ``measured``'s adaptive GEMMs (the launches the column replays), and the predicted and
    measured speed-up from ``predicted``'s GPU to ``machine``. ``paths`` name the two files in
    errors. A step must be the same training step in both (both runs train from the seed);
    a step without a prediction is kept with ``error`` None; the predicted table's steps the
    measured one lacks are listed by :func:`unmeasured_steps`."""
    first = _steps(predicted, paths[0])
    second = _measured(measured, machine, paths[1])
    if not second:
        raise InputError("expected at least one finished step", path=paths[1])
    rows = []
    for key, m in second.items():
        p = first.get(key)
        named = " ".join(map(str, key))
        if p is None:
            raise InputError(f"{named} is not among the steps of the predicted table {paths[0]}", path=paths[1])
        if p.get("step") != m.get("step"):
            raise InputError(
                f"{named} is training step {m.get('step')} here and {p.get('step')} in {paths[0]}: "
                "expected the same maps (both runs train from the seed for the same steps)",
                path=paths[1],
            )
        column = p.get("predicted_ms") or {}
        guess, on_first = (finite_or_none(column.get(name)) for name in (machine, p.get("model_machine")))
        guess = guess if guess is not None and guess > 0 else None
        measured_ms = _positive(m, "adaptive_gemms_ms", paths[1])
        rows.append(
            {
                **dict(zip(_KEY, key)),
                "step": m["step"],
                "predicted_ms": guess,
                "measured_ms": measured_ms,
                "error": guess / measured_ms - 1 if guess else None,
                "measured_speedup": _positive(p, "adaptive_gemms_ms", paths[0]) / measured_ms,
                "predicted_speedup": on_first / guess if guess and on_first else None,
            }
        )
    return rows


def unmeasured_steps(predicted: dict, measured: dict) -> list[str]:
    """The predicted table's finished steps that the measured table did not finish (failed or
    not run there), by name."""
    done = {_key(r) for r in measured.get("records", []) if "error" not in r}
    keys = [_key(r) for r in predicted.get("records", []) if "error" not in r]
    return [" ".join(map(str, key)) for key in keys if key not in done]


def finite_or_none(value) -> float | None:
    """``value`` as a float where it is a finite number (a time the tables may hold as NaN or
    None where none was taken), else None."""
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def blind_summary(rows: list[dict]) -> dict[str, Any]:
    """How many predicted steps fall within :data:`BLIND_WITHIN`, and the errors' range."""
    errors = [r["error"] for r in rows if r["error"] is not None]
    return {
        "steps": len(rows),
        "predicted": len(errors),
        "within": sum(abs(e) <= BLIND_WITHIN for e in errors),
        "worst": max(errors, key=abs) if errors else None,
        "range": (min(errors), max(errors)) if errors else None,
    }


def blind_lines(rows: list[dict], machine: str = "h200-sxm", unmeasured: list[str] | None = None) -> list[str]:
    """The check as Markdown: one row per step, then the count within 10% and the predicted
    steps not measured there (``unmeasured``)."""
    device = _DEVICES.get(machine, machine)
    body = [
        (
            NETWORK_NAMES.get(r["network"], r["network"]),
            f"{r['training_point']} (step {r['step']})",
            r["precision"].upper(),
            f"{r['predicted_ms']:.4g}" if r["predicted_ms"] is not None else "not predicted",
            f"{r['measured_ms']:.4g}",
            f"{r['error']:+.1%}" if r["error"] is not None else "-",
            f"{r['predicted_speedup']:.3f}" if r["predicted_speedup"] is not None else "-",
            f"{r['measured_speedup']:.3f}",
        )
        for r in rows
    ]
    header = (
        "network", "point", "precision", f"{device} predicted ms (blind)", f"{device} measured ms", "error",
        "speed-up predicted", "speed-up measured",
    )  # fmt: skip
    s = blind_summary(rows)
    missing = f" Not measured on the {device}: {', '.join(unmeasured)}." if unmeasured else ""
    if not s["predicted"]:
        return [*markdown_table(header, body), "", f"No step had a blind {device} prediction.{missing}"]
    low, high = s["range"]
    said = (
        f"Blind {device} predictions within {BLIND_WITHIN:.0%}: **{s['within']} of {s['predicted']}** steps "
        f"(errors {low:+.1%} to {high:+.1%}; the adaptive step's GEMM launches, as the column replays them).{missing}"
    )
    return [*markdown_table(header, body), "", said]
