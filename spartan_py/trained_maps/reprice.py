"""A committed ``spartan maps table``'s dense GEMMs priced again with today's machine files.

The table's run priced each GEMM as it ran (``predicted_dense_us``: cuBLAS with no algorithm
named, the same records :mod:`spartan_py.workloads.conv.training` makes). After a refit, those
columns are stale until the table runs again on a GPU; this replays the rows of ``gemms.csv``
(shapes and precision; the measured times untouched) on any machine file, so a refit's effect on
the table is seen on the CPU. Only the dense step is replayed: the adaptive step's records need
the maps' tile counts, which ``gemms.csv`` does not keep.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from spartan_py.errors import InputError
from spartan_py.sparsity.candidates import candidate_records
from spartan_py.sparsity.tiles import TileShape
from spartan_py.trained_maps.table_text import load_table
from spartan_py.workloads.conv.operands import predicted_us

#: one step of the table: a network at a training point and a precision
STEP_KEYS = ["network", "training_point", "precision"]
_NEEDED = (*STEP_KEYS, "M", "K", "N", "dense_us")
_ANY_TILE = TileShape(64, 32)  # a dense record's price does not depend on the policy's tile


def dense_gemm_price_us(m: int, k: int, n: int, precision: str, machine: str) -> float:
    """The cost model's microseconds for cuBLAS on ``[m x k] @ [k x n]`` on ``machine``, priced
    as the table's run priced it (the record names no algorithm)."""
    records = candidate_records(
        "dense", m, k, n, nnz=0, tiles_active=0, live_rows=0, tile=_ANY_TILE, precision=precision
    )
    return predicted_us(records, machine)


def reprice_dense_steps(gemms: pd.DataFrame, machine: str, path: str | Path = "gemms.csv") -> pd.DataFrame:
    """Per step of ``gemms`` (``gemms.csv`` of ``spartan maps table``): the measured dense GEMMs'
    milliseconds (cuBLAS), the table's own price of them and ``machine``'s price now, and the
    errors of both against the measurement (meaningful where ``machine`` is the GPU that ran)."""
    missing = [c for c in _NEEDED if c not in gemms.columns]
    if missing:
        raise InputError(f"expected the columns {', '.join(missing)} of spartan maps table's gemms.csv", path=path)
    # a table repeats its shapes at every training point: price each shape once
    shapes = [
        (int(m), int(k), int(n), str(p))
        for m, k, n, p in zip(gemms["M"], gemms["K"], gemms["N"], gemms["precision"], strict=True)
    ]
    prices = {shape: dense_gemm_price_us(*shape, machine) for shape in dict.fromkeys(shapes)}
    priced = gemms.assign(model_us=[prices[shape] for shape in shapes])
    if "predicted_dense_us" not in priced.columns:
        priced["predicted_dense_us"] = float("nan")
    steps = priced.groupby(STEP_KEYS, sort=True)[["dense_us", "predicted_dense_us", "model_us"]].sum(min_count=1)
    out = (steps / 1e3).rename(
        columns={"dense_us": "measured_ms", "predicted_dense_us": "table_model_ms", "model_us": "model_ms"}
    )
    out["table_error"] = out["table_model_ms"] / out["measured_ms"] - 1
    out["error"] = out["model_ms"] / out["measured_ms"] - 1
    out.insert(0, "machine", machine)
    return out.reset_index()


def table_machine(folder: str | Path) -> str | None:
    """The machine file a table folder's run priced on (``model_machine`` of its ``table.json``;
    given a file, its folder's), or None where the folder holds no table.json."""
    path = Path(folder)
    path = path if path.is_dir() else path.parent
    for name in ("table.json", "table.json.gz"):
        if (path / name).is_file():
            records = load_table(path / name).get("records") or [{}]
            machine = records[0].get("model_machine")
            return str(machine) if machine else None
    return None


def read_gemms(folder: str | Path) -> tuple[pd.DataFrame, Path]:
    """A table folder's ``gemms.csv`` (or ``gemms.csv.gz``), or the file itself."""
    path = Path(folder)
    if path.is_dir():
        found = [p for p in (path / "gemms.csv", path / "gemms.csv.gz") if p.is_file()]
        if not found:
            raise InputError("expected gemms.csv or gemms.csv.gz (spartan maps table's per-GEMM rows)", path=path)
        path = found[0]
    if not path.is_file():
        raise InputError("no such file (expected spartan maps table's gemms.csv)", path=path)
    return pd.read_csv(path), path
