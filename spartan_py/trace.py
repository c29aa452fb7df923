"""The kernel trace: one record per kernel launch (or CPU twin of one).

One schema serves the engines (which write it), the cost model (which replays it), the
runner and the report. Records are plain dataclasses; :func:`to_frame` and
:func:`read_trace` / :func:`write_trace` move them to and from pandas tables (CSV or
Parquet). Bump :data:`TRACE_SCHEMA_VERSION` whenever a field changes meaning.

Version 2 added the launch geometry the cost model needs (``blocks``, ``block_rows``,
``block_threads``, ``block_shared_bytes``, ``resident_blocks_per_sm``, ``fused_layers``)
and ``monitor_bytes``. Version 3 added ``weight_loads``; a version 2 file reads with it 0
(not counted: the cost model then works the loads out from ``executed_macs``, which is
exact for every kernel of that time but the rows kernel of 03f42b0 and later, whose tiles
compact).
"""

from __future__ import annotations

import dataclasses
import gzip
import importlib.util
import io
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import pandas as pd

from spartan_py.errors import InputError
from spartan_py.files import atomic_write_bytes

TRACE_SCHEMA_VERSION = 3
#: Fields added after version 2, with the value an older file reads as.
_ADDED_SINCE_2 = {"weight_loads": 0}


@dataclass
class TraceRecord:
    """What one kernel did. Counts are exact; ``measured_us`` is empty (NaN) unless timed.

    Fields:
        run: identifier of the run (free text, e.g. the experiment point).
        layer: 1-based layer the kernel belongs to (0 for set-up work).
        kernel: kernel name, ``<backend>.<what>`` (e.g. ``cpu.gather_rows``).
        variant: implementation variant or tile configuration (a cuBLAS record measured on a GPU:
            the algorithm cuBLAS ran, ``lt-<rows>x<cols>-s<split>-c<cluster>-w<waves>``).
        rows_in / rows_out: live rows read / live rows written.
        cols: neurons (columns) of the activation matrix.
        nnz_in / nnz_out: non-zero activations read / written.
        tiles_total / tiles_active: activation tiles in the live rows / tiles with a non-zero.
        tile_rows / tile_cols: tile shape used by the monitor or the tiled kernel (0 if none).
        bytes_read / bytes_written: device-memory traffic the kernel needs (each operand once).
        useful_macs: multiply-adds with a non-zero activation; executed_macs: those performed.
        monitor_mode: ``off``, ``software``, ``fused`` or ``sampled``.
        monitor_bytes: the part of ``bytes_written`` (or ``bytes_read``) that is monitor output.
        blocks: independent work items the kernel runs as thread blocks (row tiles), 0 if none.
        block_rows: activation rows per work item; block_threads: threads per block;
            block_shared_bytes: dynamic shared memory per block; resident_blocks_per_sm: blocks
            of the kernel one SM holds at once as launched (registers included), 0 if unknown.
        fused_layers: network layers the launch computes (a fused kernel runs several).
        weight_loads: weights (or weight indices) the kernel loaded where each work item loads
            every weight of each layer it computes, however many of its rows it computes (the
            rows kernel's compacted tiles); 0 when not counted, where they are
            ``executed_macs / block_rows``.
        host_syncs: host round trips the kernel caused.
        measured_us: measured time in microseconds, NaN when not measured.
        device: where it ran (``cpu``, a GPU name, or ``simulated:<machine>``).
    """

    run: str
    layer: int
    kernel: str
    variant: str = ""
    rows_in: int = 0
    rows_out: int = 0
    cols: int = 0
    nnz_in: int = 0
    nnz_out: int = 0
    tiles_total: int = 0
    tiles_active: int = 0
    tile_rows: int = 0
    tile_cols: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    useful_macs: int = 0
    executed_macs: int = 0
    monitor_mode: str = "off"
    monitor_bytes: int = 0
    blocks: int = 0
    block_rows: int = 0
    block_threads: int = 0
    block_shared_bytes: int = 0
    resident_blocks_per_sm: int = 0
    fused_layers: int = 1
    weight_loads: int = 0
    host_syncs: int = 0
    measured_us: float = float("nan")
    device: str = "cpu"


def pass_through(
    run: str, layer: int, kernel: str, variant: str = "", *, rows: int, cols: int = 0, nnz: int = 0, **fields
) -> TraceRecord:
    """The record of a step that passes rows through unchanged (a copy, a scatter, an
    expansion, a repack): as many rows and non-zeros out as in."""
    # positional: run, layer, kernel, variant, rows_in, rows_out, cols, nnz_in, nnz_out
    return TraceRecord(run, layer, kernel, variant, rows, rows, cols, nnz, nnz, **fields)


TRACE_COLUMNS = tuple(f.name for f in fields(TraceRecord))
_DTYPES = {f.name: {"str": str, "int": np.int64, "float": np.float64}[str(f.type)] for f in fields(TraceRecord)}


def to_frame(records: list[TraceRecord]) -> pd.DataFrame:
    """Records as a pandas table with the schema's columns in order."""
    frame = pd.DataFrame([dataclasses.astuple(r) for r in records], columns=list(TRACE_COLUMNS))
    frame = frame.astype(_DTYPES)
    frame.attrs["trace_schema_version"] = TRACE_SCHEMA_VERSION
    return frame


#: The extra that installs what Parquet traces need (``pip install 'spartan-py[parquet]'``).
PARQUET_EXTRA = "parquet"


def parquet_available() -> bool:
    """Whether Parquet traces can be written and read here (pyarrow is installed)."""

    return importlib.util.find_spec("pyarrow") is not None


def trace_formats() -> str:
    """The trace formats offered here, for ``--help``: Parquet only where pyarrow is installed."""
    if parquet_available():
        return "CSV, .csv.gz or .parquet"
    return f"CSV or .csv.gz; .parquet needs pyarrow: pip install 'spartan-py[{PARQUET_EXTRA}]'"


def check_trace_path(path: str | Path) -> None:
    """Refuse, before any work, a trace path whose format cannot be written or read here."""
    if Path(path).suffix == ".parquet" and not parquet_available():
        raise InputError(
            f"a .parquet trace needs pyarrow, which is not installed: pip install 'spartan-py[{PARQUET_EXTRA}]' "
            "(or use .csv / .csv.gz)",
            path=path,
        )


def write_trace(path: str | Path, records: list[TraceRecord] | pd.DataFrame) -> Path:
    """Write a trace as CSV (``.csv``, or gzipped ``.csv.gz``) or Parquet (``.parquet``), atomically."""

    frame = records if isinstance(records, pd.DataFrame) else to_frame(records)
    path = Path(path)
    if path.suffix == ".parquet":
        check_trace_path(path)
        buffer = io.BytesIO()
        frame.to_parquet(buffer, index=False)
        return atomic_write_bytes(path, buffer.getvalue())
    text = f"# spartan_py trace schema {TRACE_SCHEMA_VERSION}\n" + frame.to_csv(index=False)
    data = gzip.compress(text.encode(), mtime=0) if path.suffix == ".gz" else text.encode()
    return atomic_write_bytes(path, data)


def read_trace(path: str | Path) -> pd.DataFrame:
    """Read a trace written by :func:`write_trace` (this schema or version 2), checking its columns."""
    path = Path(path)
    if not path.is_file():
        raise InputError("trace file not found", path=path)
    older = True  # a Parquet file names no version: it may predate the fields added since 2
    if path.suffix == ".parquet":
        check_trace_path(path)
        frame = pd.read_parquet(path)
    else:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as handle:
            first = handle.readline()
        if first.startswith("# spartan_py trace schema "):
            version = first.rsplit(" ", 1)[-1].strip()
            if version not in (str(TRACE_SCHEMA_VERSION), "2"):
                raise InputError(
                    f"trace schema {version}; this version reads schemas 2 and {TRACE_SCHEMA_VERSION}",
                    path=path,
                    line=1,
                )
            older = version == "2"
        frame = pd.read_csv(path, comment="#", keep_default_na=False, na_values={"measured_us": ["", "nan", "NaN"]})
    if older:
        for column, value in _ADDED_SINCE_2.items():
            if column not in frame.columns:
                frame[column] = value
    missing = [c for c in TRACE_COLUMNS if c not in frame.columns]
    if missing:
        raise InputError(f"not a spartan_py trace: missing columns {', '.join(missing)}", path=path)
    try:
        frame = frame[list(TRACE_COLUMNS)].astype(_DTYPES)
    except (ValueError, TypeError) as exc:
        raise InputError(f"trace column of the wrong type: {exc}", path=path) from None
    frame.attrs["trace_schema_version"] = TRACE_SCHEMA_VERSION
    return frame
