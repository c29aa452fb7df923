"""The trace schema and its files."""

from __future__ import annotations

import math

import pytest

from spartan_py import InputError, TraceRecord, read_trace, to_frame, write_trace
from spartan_py.trace import TRACE_COLUMNS, TRACE_SCHEMA_VERSION


@pytest.mark.parametrize("suffix", [".csv"])
def test_round_trip(tmp_path, suffix):
    records = [
        TraceRecord(run="r", layer=1, kernel="cpu.tile_layer", rows_in=5, bytes_read=100, measured_us=3.5),
        TraceRecord(run="r", layer=2, kernel="cpu.repack", variant=""),
    ]
    path = write_trace(tmp_path / f"t{suffix}", records)
    frame = read_trace(path)
    assert list(frame.columns) == list(TRACE_COLUMNS)
    assert frame["rows_in"].tolist() == [5, 0]
    assert frame["measured_us"].iloc[0] == 3.5 and math.isnan(frame["measured_us"].iloc[1])
    assert frame.equals(to_frame(records))


def test_not_a_trace(tmp_path):
    (tmp_path / "x.csv").write_text("a,b\n1,2\n")
    with pytest.raises(InputError, match="missing columns run, layer"):
        read_trace(tmp_path / "x.csv")


def test_older_schema_is_refused(tmp_path):
    path = tmp_path / "old.csv"
    path.write_text("# spartan_py trace schema 1\nrun,layer,kernel\nx,1,cpu.tile_layer\n")
    with pytest.raises(
        InputError, match=f"old.csv:1: trace schema 1; this version reads schemas 2 and {TRACE_SCHEMA_VERSION}"
    ):
        read_trace(path)


def test_schema_2_reads_without_weight_loads(tmp_path):
    """A version 2 file (before ``weight_loads``) reads with the field 0; a current file
    missing it is refused."""
    frame = to_frame([TraceRecord("r", 1, "gpu.gc_layer", weight_loads=7)]).drop(columns="weight_loads")
    old = tmp_path / "old.csv"
    old.write_text("# spartan_py trace schema 2\n" + frame.to_csv(index=False))
    assert read_trace(old)["weight_loads"].tolist() == [0]
    new = tmp_path / "new.csv"
    new.write_text(f"# spartan_py trace schema {TRACE_SCHEMA_VERSION}\n" + frame.to_csv(index=False))
    with pytest.raises(InputError, match="missing columns weight_loads"):
        read_trace(new)
