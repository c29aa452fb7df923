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
from spartan_py.sparsity import TileCounts, compact_rows, dense_matmul, expand_rows, tile_list, tile_sparse_matmul
from spartan_py.sparsity.candidates import tile_gemm_schedule
from spartan_py.sparsity.monitor import SparsityMonitor, software_pass
from spartan_py.trace import TraceRecord

#: Densities at or under which the CSR candidate is timed (cuSPARSE is hopeless above).
CSR_MAX_DENSITY = 0.3


def tile_operand(tile_records: list[TraceRecord], tiles, tile_nnz):
    """What the tile GEMM of ``tile_records`` (the policy's ``tile_sparse`` records) is
    given: the tile list ``tiles`` where a list launch precedes it, else the counts it lists
    itself (``tile_nnz`` at ``tiles``' tile)."""
    if any(record.kernel == LIST_TILES for record in tile_records):
        return tiles
    return TileCounts(tiles.shape, tiles.tile, tile_nnz)


def every_kernel_plan(m: int, k: int, n: int, counted, policy) -> list[tuple[str, TraceRecord]]:
    """Every candidate's launches for an ``m x k`` by ``k x n`` product, untimed, as ``(role,
    record)`` in the order :func:`every_kernel_records` times them: what a GPU run with
    ``trace: all`` records, known from the shapes and the monitor's counts alone (a simulated
    run lists the same launches). ``counted`` is the layer's monitor profile."""
    precision = policy.precision
    nnz, active, live = policy.profile_counts(counted)
    counts = dict(nnz=nnz, tiles_active=active, live_rows=live)
    plan = [("dense", policy.records("dense", m, k, n, **counts)[0])]
    plan += [
        ("list" if record.kernel == LIST_TILES else "tile", record)
        for record in policy.records("tile_sparse", m, k, n, **counts)
    ]
    gather, live_gemm, expand = policy.records("row_compact", m, k, n, **counts)
    plan.append(("gather", gather))
    if live:
        plan += [("live_gemm", live_gemm), ("expand", expand)]
    if precision == "fp32" and counted.density <= CSR_MAX_DENSITY:
        convert, spmm = policy.records("csr", m, k, n, **counts)
        plan += [("csr_convert", convert), ("csr_spmm", spmm)]
    out_bytes = 4 * m * n
    monitor_bytes = 4 * int(np.prod(policy.tile.grid((m, n)))) + 4 * m
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
    fused = replace(
        base,
        variant="fused",
        monitor_mode="fused",
        bytes_written=out_bytes + monitor_bytes,
        monitor_bytes=monitor_bytes,
    )
    count_pass = replace(
        base,
        kernel=MONITOR_PASS,
        variant="count",
        monitor_mode="software",
        bytes_written=monitor_bytes,
        monitor_bytes=monitor_bytes,
    )
    return [
        *plan,
        ("plain", replace(base, variant="plain", monitor_mode="off")),
        ("fused", fused),
        ("count", count_pass),
    ]


def every_kernel_records(a, w, counted, policy, clock, tiles) -> list[TraceRecord]:
    """Timed records of every candidate's launches for ``a @ w`` (CuPy arrays):
    :func:`every_kernel_plan`, each launch run on its own.

    ``counted`` is the layer's monitor profile, ``tiles`` its tile list at the policy's
    tile, ``clock(work)`` the median microseconds of ``work()``.
    """
    import cupy as cp  # an optional dependency (CuPy), GPU paths only

    m, k = a.shape
    n = w.shape[1]
    precision = policy.precision
    plan = every_kernel_plan(m, k, n, counted, policy)
    live = policy.profile_counts(counted)[2]
    out = cp.empty((m, n), dtype=cp.float32)
    operand = tile_operand([record for _, record in plan], tiles, counted.tile_nnz)
    made: dict = {}  # operands a later launch needs, made (untimed) when first wanted

    def packed():
        if "packed" not in made:
            made["packed"] = compact_rows(a, counted.row_nnz, live=live)
            made["part"] = dense_matmul(made["packed"].values, w, precision=precision)
        return made["packed"]

    def csr():
        if "csr" not in made:
            import cupyx.scipy.sparse as sparse  # an optional dependency (CuPy)

            made["csr"] = sparse.csr_matrix(a)
        return made["csr"]

    def epilogue_operands():
        if "z" not in made:
            made["z"] = dense_matmul(a, w, precision=precision)
            made["y"] = cp.empty_like(made["z"])
        return made["z"], made["y"]

    def work_of(role: str, record: TraceRecord):
        if role == "dense":
            return lambda: dense_matmul(a, w, precision=precision, out=out)
        if role == "list":
            return lambda: tile_list(counted.tile_nnz, a.shape, policy.tile)
        if role == "tile":
            schedule = tile_gemm_schedule(record)
            return lambda: tile_sparse_matmul(a, w, operand, precision=precision, schedule=schedule, out=out)
        if role == "gather":
            return lambda: compact_rows(a, counted.row_nnz, live=live)
        if role == "live_gemm":
            rows = packed()
            return lambda: dense_matmul(rows.values, w, precision=precision, out=made["part"])
        if role == "expand":
            rows = replace(packed(), values=made["part"])
            return lambda: expand_rows(rows, out=out)
        if role == "csr_convert":
            import cupyx.scipy.sparse as sparse  # an optional dependency (CuPy)

            return lambda: sparse.csr_matrix(a)
        if role == "csr_spmm":
            matrix = csr()
            return lambda: matrix @ w
        z, y = epilogue_operands()
        if role == "count":
            return lambda: software_pass(y, policy.tile, timed=False)
        monitor = SparsityMonitor(tile=policy.tile, mode="off" if role == "plain" else "fused", timed=False)
        return lambda: monitor.epilogue(z, out=y)

    # two medians, the smaller kept: a burst of host or device interference (seen as a 50x
    # slower median of one launch among hundreds) does not become the launch's time
    records = []
    for role, record in plan:
        work = work_of(role, record)
        records.append(replace(record, measured_us=min(clock(work), clock(work))))
    return records
