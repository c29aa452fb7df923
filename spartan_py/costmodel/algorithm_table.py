"""cuBLAS's algorithm for traces measured before runs recorded it: a table of shapes asked on a
GPU (``python -m benchmarks.cublas_algos``, ``cublas_algos-*.json.gz``) given to their records."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pandas as pd

from spartan_py.costmodel.families import dense_gemm_precision


def load_table(path: Path) -> dict[tuple[int, int, int, str, bool], str]:
    """A ``cublas_algos-*.json.gz`` file as ``(m, n, k, precision, transposed_a) -> variant``."""
    shapes = json.loads(gzip.decompress(path.read_bytes()))["shapes"]
    return {(s["m"], s["n"], s["k"], s["precision"], s["transposed_a"]): s["variant"] or "" for s in shapes}


def with_algorithm_table(trace: pd.DataFrame, table: dict[tuple[int, int, int, str, bool], str]) -> pd.DataFrame:
    """``trace`` with each cuBLAS record that names no algorithm given the one ``table`` holds
    for its shape: for traces measured before runs recorded it. Forward products only
    (``transposed_a`` False): a dense-layer record does not say whether A was read transposed,
    and only a training step's weight gradient reads it so."""
    out = trace.copy()
    unnamed = out["variant"].fillna("").astype(str) == ""
    keys = forward_shapes(out)[unnamed]
    out.loc[keys.dropna().index, "variant"] = [table.get(key, "") for key in keys.dropna()]
    return out


def forward_shapes(trace: pd.DataFrame) -> pd.Series:
    """Per record of ``trace``: its cuBLAS product's ``(m, n, k, precision, False)`` (A read as
    stored: a record does not say otherwise), ``None`` for other kernels."""
    precisions = [dense_gemm_precision(kernel) for kernel in trace["kernel"]]  # None kept (map would make it NaN)
    return pd.Series(
        [
            None if p is None or not m or not n else (int(m), int(n), int(macs // (m * n)), p, False)
            for p, m, n, macs in zip(precisions, trace["rows_in"], trace["cols"], trace["executed_macs"], strict=True)
        ],
        index=trace.index,
        dtype=object,
    )
