"""Every candidate kernel of a ``conv_layers`` layer, timed launch by launch (``trace: all``).

The cost model is calibrated and validated on single launches, so this times each launch
of each candidate on its own (CUDA events, warm-up, L2 flush; the median of ``repeats``)
and attaches the time to that launch's trace record (the smaller of two such medians): the
dense cuBLAS GEMM, the tile-sparse GEMM (and its tile list where that is a launch of its
own), the row compaction's gather, GEMM and expansion, the CSR conversion and cuSPARSE
SpMM (FP32 only), and the epilogue without the monitor, with the fused monitor, and the
software monitor's separate counting pass.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from spartan_py.costmodel.families import EPILOGUE, LIST_TILES, MONITOR_PASS
from spartan_py.trace import TraceRecord

#: Densities at or under which the CSR candidate is timed (cuSPARSE is hopeless above).
CSR_MAX_DENSITY = 0.3


def tile_operand(tile_records: list[TraceRecord], tiles, tile_nnz):
    """What the tile GEMM of ``tile_records`` (the policy's ``tile_sparse`` records) is
    given: the tile list ``tiles`` where a list launch precedes it, else the counts it lists
    itself (``tile_nnz`` at ``tiles``' tile)."""
    from spartan_py.sparsity import TileCounts

    if any(record.kernel == LIST_TILES for record in tile_records):
        return tiles
    return TileCounts(tiles.shape, tiles.tile, tile_nnz)


def every_kernel_records(a, w, counted, policy, clock, tiles) -> list[TraceRecord]:
    """Timed records of every candidate's launches for ``a @ w`` (CuPy arrays).

    ``counted`` is the layer's monitor profile, ``tiles`` its tile list at the policy's
    tile, ``clock(work)`` the median microseconds of ``work()``.
    """
    import cupy as cp

    from spartan_py.sparsity import compact_rows, dense_matmul, expand_rows, tile_list, tile_sparse_matmul
    from spartan_py.sparsity.candidates import tile_gemm_schedule
    from spartan_py.sparsity.monitor import SparsityMonitor, software_pass

    m, k = a.shape
    n = w.shape[1]
    precision = policy.precision
    nnz, active, live = policy.profile_counts(counted)
    counts = dict(nnz=nnz, tiles_active=active, live_rows=live)
    out = cp.empty((m, n), dtype=cp.float32)
    records: list[TraceRecord] = []

    def timed(record: TraceRecord, work) -> None:
        # two medians, the smaller kept: a burst of host or device interference (seen as a
        # 50x slower median of one launch among hundreds) does not become the launch's time
        records.append(replace(record, measured_us=min(clock(work), clock(work))))

    (dense,) = policy.records("dense", m, k, n, **counts)
    timed(dense, lambda: dense_matmul(a, w, precision=precision, out=out))
    tile_records = policy.records("tile_sparse", m, k, n, **counts)
    operand = tile_operand(tile_records, tiles, counted.tile_nnz)
    for record in tile_records:
        if record.kernel == LIST_TILES:
            timed(record, lambda: tile_list(counted.tile_nnz, a.shape, policy.tile))
        else:
            schedule = tile_gemm_schedule(record)
            timed(record, lambda: tile_sparse_matmul(a, w, operand, precision=precision, schedule=schedule, out=out))
    gather, live_gemm, expand = policy.records("row_compact", m, k, n, **counts)
    packed = compact_rows(a, counted.row_nnz, live=live)
    timed(gather, lambda: compact_rows(a, counted.row_nnz, live=live))
    if packed.live:
        part = dense_matmul(packed.values, w, precision=precision)
        timed(live_gemm, lambda: dense_matmul(packed.values, w, precision=precision, out=part))

        timed(expand, lambda: expand_rows(replace(packed, values=part), out=out))
    if precision == "fp32" and counted.density <= CSR_MAX_DENSITY:
        import cupyx.scipy.sparse as sparse

        convert, spmm = policy.records("csr", m, k, n, **counts)
        timed(convert, lambda: sparse.csr_matrix(a))
        csr = sparse.csr_matrix(a)
        timed(spmm, lambda: csr @ w)
    z = dense_matmul(a, w, precision=precision)
    y = cp.empty_like(z)
    out_bytes = 4 * m * n
    tiles_out = int(np.prod(policy.tile.grid((m, n))))
    monitor_bytes = 4 * tiles_out + 4 * m
    base = TraceRecord(
        run="",
        layer=0,
        kernel=EPILOGUE,
        rows_in=m,
        rows_out=m,
        cols=n,
        bytes_read=out_bytes,
        bytes_written=out_bytes,
        device="policy",
    )
    plain = SparsityMonitor(tile=policy.tile, mode="off", timed=False)
    fused = SparsityMonitor(tile=policy.tile, mode="fused", timed=False)
    timed(replace(base, variant="plain", monitor_mode="off"), lambda: plain.epilogue(z, out=y))
    timed(
        replace(
            base,
            variant="fused",
            monitor_mode="fused",
            bytes_written=out_bytes + monitor_bytes,
            monitor_bytes=monitor_bytes,
        ),
        lambda: fused.epilogue(z, out=y),
    )
    count_pass = replace(
        base,
        kernel=MONITOR_PASS,
        variant="count",
        monitor_mode="software",
        bytes_written=monitor_bytes,
        monitor_bytes=monitor_bytes,
    )
    timed(count_pass, lambda: software_pass(y, policy.tile, timed=False))
    return records
