"""The maps table's blind check: one GPU's ``table.json`` carries another machine's column
(``predicted_ms[machine]``, the replay of each adaptive step's launches), committed before that
GPU ran the job; the same job measured there is held against it, step by step. Both runs
train again from the seed, so the steps' shapes are the same; the maps may differ in their
bits, which the dense GEMMs' times do not see."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from spartan_py.errors import InputError
from spartan_py.report.cells import markdown_table
from spartan_py.trained_maps.table_text import NETWORK_NAMES

BLIND_WITHIN = 0.10
"""The bar: a blind prediction within 10% of the measured step (issue 77)."""

_KEY = ("network", "training_point", "precision")
_DEVICES = {"h200-sxm": "H200", "h100-sxm": "H100"}


def _measured(table: dict, machine: str, path: str | Path) -> dict[tuple, dict]:
    """``table``'s finished steps by key, each timed (not simulated) on ``machine``'s GPU."""
    device = _DEVICES.get(machine, machine).upper()
    out = {}
    for r in table.get("records", []):
        if "error" in r:
            continue
        if r.get("simulated") or device not in str(r.get("timed_on", "")).upper():
            raise InputError(
                f"expected every step timed on an {device} (not simulated); {r.get('network')} "
                f"{r.get('training_point')} {r.get('precision')} was timed on {r.get('timed_on')!r}",
                path=path,
            )
        out[tuple(r[k] for k in _KEY)] = r
    return out


def blind_rows(
    predicted: dict, measured: dict, machine: str = "h200-sxm", paths: tuple[str | Path, str | Path] = ("", "")
) -> list[dict[str, Any]]:
    """One row per step both tables finished: ``predicted``'s blind ``machine`` column against
    ``measured``'s adaptive GEMMs (the launches the column replays), and the predicted and
    measured speed-up from ``predicted``'s GPU to ``machine``. ``paths`` name the two files in
    errors. Steps without a prediction are kept with ``error`` None."""
    first = {tuple(r[k] for k in _KEY): r for r in predicted.get("records", []) if "error" not in r}
    second = _measured(measured, machine, paths[1])
    if not second:
        raise InputError("expected at least one finished step", path=paths[1])
    rows = []
    for key, m in second.items():
        p = first.get(key)
        if p is None:
            raise InputError(f"{' '.join(map(str, key))} is not among the predicted table's steps", path=paths[1])
        column = p.get("predicted_ms", {})
        guess, on_first = (_finite(column.get(name)) for name in (machine, p.get("model_machine")))
        rows.append(
            {
                **dict(zip(_KEY, key)),
                "step": m["step"],
                "predicted_ms": guess,
                "measured_ms": m["adaptive_gemms_ms"],
                "error": guess / m["adaptive_gemms_ms"] - 1 if guess else None,
                "measured_speedup": p["adaptive_gemms_ms"] / m["adaptive_gemms_ms"],
                "predicted_speedup": on_first / guess if guess and on_first else None,
            }
        )
    return rows


def _finite(value) -> float | None:
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


def blind_lines(rows: list[dict], machine: str = "h200-sxm") -> list[str]:
    """The check as Markdown: one row per step, then the count within 10%."""
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
    if not s["predicted"]:
        return [*markdown_table(header, body), "", f"No step had a blind {device} prediction."]
    low, high = s["range"]
    said = (
        f"Blind {device} predictions within {BLIND_WITHIN:.0%}: **{s['within']} of {s['predicted']}** steps "
        f"(errors {low:+.1%} to {high:+.1%}; the adaptive step's GEMM launches, as the column replays them)."
    )
    return [*markdown_table(header, body), "", said]
