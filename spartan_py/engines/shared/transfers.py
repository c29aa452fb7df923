"""The records of a batch's host copies and its one host synchronisation, the same for every
GPU kernel family."""

from __future__ import annotations

from spartan_py.costmodel.families import COPY_D2H, COPY_H2D, SYNC
from spartan_py.trace import TraceRecord, pass_through


def transfer_records(
    input_rows: int,
    input_nnz: int,
    final_rows: int,
    neurons: int,
    layers: int,
    *,
    device: str,
    run_id: str = "",
    seconds: tuple[float, float] | None = None,
) -> list[TraceRecord]:
    """The batch's copies (host to device: the input CSR; device to host: the live rows and
    their ids, into pinned memory) and the one host synchronisation before them (reading the
    per-layer counters, a few bytes)."""
    up = (input_rows + 1) * 4 + input_nnz * 8
    down = final_rows * (neurons * 4 + 4)
    h2d, d2h = seconds if seconds else (float("nan"), float("nan"))
    return [
        pass_through(
            run_id,
            0,
            COPY_H2D,
            "input-csr",
            rows=input_rows,
            cols=neurons,
            nnz=input_nnz,
            bytes_read=up,
            bytes_written=up,
            measured_us=h2d * 1e6,
            device=device,
        ),
        TraceRecord(run=run_id, layer=layers, kernel=SYNC, variant="stream", host_syncs=1, device=device),
        pass_through(
            run_id,
            layers,
            COPY_D2H,
            "live-rows",
            rows=final_rows,
            cols=neurons,
            bytes_read=down,
            bytes_written=down,
            measured_us=d2h * 1e6,
            device=device,
        ),
    ]
