"""The adaptive policy's candidate kernels, each one object listed once: its name, the trace
records it launches (which the cost model times) and how it runs.

``dense``        cuBLAS on the whole input.
``tile_sparse``  the tile-sparse GEMM over the input's non-zero tiles, from the monitor's
                 counts at the policy's tile (FP32: listed inside the GEMM's launch;
                 TF32: a list launch first, by count, scan and scatter).
``row_compact``  gather the live rows, cuBLAS on them, scatter the result back.
``csr``          convert the input to CSR and multiply with cuSPARSE (SpMM; FP32 only).

A candidate's ``run`` takes the policy (its tile, precision and counts) and the input's
profile when it is fresh (None when stale or absent: the counts are recomputed).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from spartan_py.costmodel.families import COMPACT, CSR_CONVERT, CSR_GEMM_FP32, LIST_TILES, dense_gemm, tile_gemm
from spartan_py.errors import InputError
from spartan_py.sparsity.arrays import array_module, is_gpu_array
from spartan_py.sparsity.gpu_kernels import (
    F32_BLOCK_K,
    f32_block_threads,
    f32_blocks_per_sm,
    f32_shared_bytes,
    tf32_block_threads,
    tf32_blocks_per_sm,
    tf32_shared_bytes,
)
from spartan_py.sparsity.tile_gemm import (
    PRECISIONS,
    block_width,
    dense_matmul,
    fp32_schedule,
    lists_own_tiles,
    tile_sparse_matmul,
)
from spartan_py.sparsity.tiles import TileCounts, TileShape, tile_counts
from spartan_py.trace import TraceRecord

if TYPE_CHECKING:
    from spartan_py.sparsity.monitor import LayerProfile


class PolicyView(Protocol):
    """What a candidate's ``run`` reads of the policy that picked it
    (:class:`~spartan_py.sparsity.policy.KernelPolicy` has it)."""

    tile: TileShape
    precision: str

    def counts_at_tile(self, profile: LayerProfile): ...

    def profile_counts(self, profile: LayerProfile) -> tuple[int, int, int]: ...

    def records(self, kernel: str, m: int, k: int, n: int, *, nnz: int, tiles_active: int, live_rows: int): ...


def _dense_records(
    m: int,
    k: int,
    n: int,
    *,
    nnz: int,
    tiles_active: int,
    live_rows: int,
    tile: TileShape,
    precision: str = "fp32",
    layer=0,
    resident_blocks: int = 0,
) -> list[TraceRecord]:
    """cuBLAS on the whole input: one GEMM."""
    common: dict[str, Any] = dict(run="", layer=layer if isinstance(layer, int) else 0, device="policy")
    gemm: dict[str, Any] = dict(common, cols=n, useful_macs=nnz * n)

    def dense(rows: int) -> TraceRecord:
        # cuBLAS picks its tiling (and split-K) to fill the GPU: its records carry no launch
        # geometry, so the model spreads the work over every SM with no partial last wave
        return TraceRecord(
            kernel=dense_gemm(precision),
            rows_in=rows,
            rows_out=rows,
            executed_macs=rows * k * n,
            bytes_read=4 * (rows * k + k * n),
            bytes_written=4 * rows * n,
            **gemm,
        )

    return [dense(m)]


def _tile_sparse_records(
    m: int,
    k: int,
    n: int,
    *,
    nnz: int,
    tiles_active: int,
    live_rows: int,
    tile: TileShape,
    precision: str = "fp32",
    layer=0,
    resident_blocks: int = 0,
) -> list[TraceRecord]:
    """The tile-sparse GEMM over the active tiles (FP32: listed in its own launch; TF32: a list launch first)."""
    common: dict[str, Any] = dict(run="", layer=layer if isinstance(layer, int) else 0, device="policy")
    gemm: dict[str, Any] = dict(common, cols=n, useful_macs=nnz * n)

    def dense(rows: int) -> TraceRecord:
        # cuBLAS picks its tiling (and split-K) to fill the GPU: its records carry no launch
        # geometry, so the model spreads the work over every SM with no partial last wave
        return TraceRecord(
            kernel=dense_gemm(precision),
            rows_in=rows,
            rows_out=rows,
            executed_macs=rows * k * n,
            bytes_read=4 * (rows * k + k * n),
            bytes_written=4 * rows * n,
            **gemm,
        )

    tm, tn = tile.grid((m, k))
    bn = block_width(n)
    col_blocks = -(-n // bn)
    steps = tiles_active * (tile.cols // F32_BLOCK_K) * col_blocks  # BK-steps of all listed tiles
    balanced = (
        precision == "fp32"
        and resident_blocks > 0
        and fp32_schedule(tm, col_blocks, resident_blocks, steps) == "balanced"
    )
    blocks = steps if balanced else tm * col_blocks
    tiles = tm * tn
    schedule = "balanced" if balanced else "tiles"
    own_list = lists_own_tiles(precision, schedule, tm, tn)
    # listing in the GEMM: the counts read by every column block (tiles) or once, with
    # the padded list written and read again (balanced)
    listing_bytes = (4 * tiles * col_blocks if not balanced else 12 * tiles + 8 * tm) if own_list else 0
    launch: dict[str, Any]
    if precision == "fp32":
        launch = dict(
            block_threads=f32_block_threads(tile.rows, bn),
            block_shared_bytes=f32_shared_bytes(tile.rows, bn),
            resident_blocks_per_sm=f32_blocks_per_sm(tile.rows, bn),
        )
    else:
        launch = dict(
            block_threads=tf32_block_threads(tile.rows),
            block_shared_bytes=tf32_shared_bytes(tile.rows, bn),
            resident_blocks_per_sm=tf32_blocks_per_sm(tile.rows, bn),
        )
    gemm_record = TraceRecord(
        kernel=tile_gemm(precision),
        variant="-".join(part for part, on in (("balanced", balanced), ("counts", own_list)) if on),
        rows_in=m,
        rows_out=m,
        tiles_total=tm * tn,
        tiles_active=tiles_active,
        tile_rows=tile.rows,
        tile_cols=tile.cols,
        executed_macs=tiles_active * tile.size * n,
        bytes_read=4 * (tiles_active * tile.size + k * n) + listing_bytes,
        bytes_written=4 * m * n,
        blocks=blocks,
        block_rows=tile.rows,
        **launch,
        **gemm,
    )
    if own_list:
        return [gemm_record]
    return [  # counts read twice (per-row counts, then the list), the list written
        TraceRecord(
            kernel=LIST_TILES,
            variant="row-scan",
            bytes_read=8 * tiles + 4 * tm,
            bytes_written=12 * tiles_active + 8 * (tm + 1),
            tiles_total=tm * tn,
            tiles_active=tiles_active,
            **common,
        ),
        gemm_record,
    ]


def _row_compact_records(
    m: int,
    k: int,
    n: int,
    *,
    nnz: int,
    tiles_active: int,
    live_rows: int,
    tile: TileShape,
    precision: str = "fp32",
    layer=0,
    resident_blocks: int = 0,
) -> list[TraceRecord]:
    """Gather the live rows, cuBLAS on them, scatter the result back."""
    common: dict[str, Any] = dict(run="", layer=layer if isinstance(layer, int) else 0, device="policy")
    gemm: dict[str, Any] = dict(common, cols=n, useful_macs=nnz * n)

    def dense(rows: int) -> TraceRecord:
        # cuBLAS picks its tiling (and split-K) to fill the GPU: its records carry no launch
        # geometry, so the model spreads the work over every SM with no partial last wave
        return TraceRecord(
            kernel=dense_gemm(precision),
            rows_in=rows,
            rows_out=rows,
            executed_macs=rows * k * n,
            bytes_read=4 * (rows * k + k * n),
            bytes_written=4 * rows * n,
            **gemm,
        )

    def compact(variant: str, rows_in: int, rows_out: int, moved: tuple[int, int]) -> TraceRecord:
        read, written = moved
        return TraceRecord(
            kernel=COMPACT,
            variant=variant,
            rows_in=rows_in,
            rows_out=rows_out,
            bytes_read=read,
            bytes_written=written,
            **common,
        )

    return [
        compact("rows", m, live_rows, (4 * live_rows * k, 4 * live_rows * k)),
        dense(live_rows),
        compact("expand_rows", live_rows, m, (4 * live_rows * n, 4 * m * n)),
    ]


def _csr_records(
    m: int,
    k: int,
    n: int,
    *,
    nnz: int,
    tiles_active: int,
    live_rows: int,
    tile: TileShape,
    precision: str = "fp32",
    layer=0,
    resident_blocks: int = 0,
) -> list[TraceRecord]:
    """Convert to CSR, then cuSPARSE's SpMM."""
    common: dict[str, Any] = dict(run="", layer=layer if isinstance(layer, int) else 0, device="policy")
    gemm: dict[str, Any] = dict(common, cols=n, useful_macs=nnz * n)

    def dense(rows: int) -> TraceRecord:
        # cuBLAS picks its tiling (and split-K) to fill the GPU: its records carry no launch
        # geometry, so the model spreads the work over every SM with no partial last wave
        return TraceRecord(
            kernel=dense_gemm(precision),
            rows_in=rows,
            rows_out=rows,
            executed_macs=rows * k * n,
            bytes_read=4 * (rows * k + k * n),
            bytes_written=4 * rows * n,
            **gemm,
        )

    return [
        TraceRecord(kernel=CSR_CONVERT, rows_in=m, bytes_read=4 * m * k, bytes_written=8 * nnz + 4 * (m + 1), **common),
        TraceRecord(
            kernel=CSR_GEMM_FP32,
            rows_in=m,
            rows_out=m,
            nnz_in=nnz,
            executed_macs=nnz * n,
            bytes_read=8 * nnz + 4 * k * n,
            bytes_written=4 * m * n,
            **gemm,
        ),
    ]


def tile_gemm_schedule(record: TraceRecord) -> str:
    """The schedule (``tiles`` or ``balanced``) a tile-GEMM record of
    :func:`candidate_records` describes."""
    return "balanced" if record.variant.startswith("balanced") else "tiles"


def _run_dense(policy: PolicyView, a, w, profile: LayerProfile | None, out):
    return dense_matmul(a, w, precision=policy.precision, out=out)


def _run_tile_sparse(policy: PolicyView, a, w, profile: LayerProfile | None, out):
    counts = policy.counts_at_tile(profile) if profile is not None else None
    schedule = None  # without the profile's tile count: by the grid alone
    if counts is None:
        counts = tile_counts(a, policy.tile)
    elif profile is not None and counts is profile.tile_nnz and policy.precision == "fp32":
        # the schedule the records describe, from the counts the choice read
        nnz, active, live = policy.profile_counts(profile)
        m, k = a.shape
        gemm = policy.records("tile_sparse", m, k, w.shape[1], nnz=nnz, tiles_active=active, live_rows=live)[-1]
        schedule = tile_gemm_schedule(gemm)
    return tile_sparse_matmul(
        a, w, TileCounts(a.shape, policy.tile, counts), precision=policy.precision, schedule=schedule, out=out
    )


def _run_row_compact(policy: PolicyView, a, w, profile: LayerProfile | None, out):
    from spartan_py.sparsity.compaction import compact_rows, expand_rows

    xp = array_module(a)
    rows = compact_rows(a, profile.row_nnz, live=profile.live_rows) if profile is not None else compact_rows(a)
    if rows.live:
        product = dense_matmul(rows.values, w, precision=policy.precision)
    else:
        product = xp.zeros((0, w.shape[1]), dtype=xp.float32)
    return expand_rows(replace(rows, values=product), out=out)


def _run_csr(policy: PolicyView, a, w, profile: LayerProfile | None, out):
    xp = array_module(a)
    if is_gpu_array(a):
        import cupyx.scipy.sparse as sparse
    else:
        import scipy.sparse as sparse
    c = sparse.csr_matrix(a) @ w
    c = xp.ascontiguousarray(c, dtype=xp.float32)
    if out is not None:
        out[...] = c
        return out
    return c


@dataclass(frozen=True)
class Candidate:
    """One kernel the policy can pick: ``records(m, k, n, *, nnz, tiles_active, live_rows,
    tile, precision, layer, resident_blocks)`` gives the launches the cost model times;
    ``run(policy, a, w, profile, out)`` computes ``a @ w`` with it."""

    name: str
    records: Callable[..., list[TraceRecord]]
    run: Callable[..., Any]
    precisions: tuple[str, ...] = PRECISIONS


CANDIDATES: tuple[Candidate, ...] = (
    Candidate("dense", _dense_records, _run_dense),
    Candidate("tile_sparse", _tile_sparse_records, _run_tile_sparse),
    Candidate("row_compact", _row_compact_records, _run_row_compact),
    Candidate("csr", _csr_records, _run_csr, precisions=("fp32",)),  # cuSPARSE has no TF32 SpMM
)
"""Every candidate, ``dense`` first (the one a sparse pick must beat by the policy's margin)."""

KERNEL_CHOICES = tuple(c.name for c in CANDIDATES)
"""The candidates' names."""


def candidate(name: str) -> Candidate:
    """The candidate called ``name``; InputError naming the choices otherwise."""
    for found in CANDIDATES:
        if found.name == name:
            return found
    raise InputError(f"unknown kernel {name!r}; expected one of {', '.join(KERNEL_CHOICES)}")


def candidate_records(kernel: str, m: int, k: int, n: int, **counts) -> list[TraceRecord]:
    """The trace records candidate ``kernel`` launches for ``[m x k] @ [k x n]`` (counts exact,
    no times): ``nnz``, ``tiles_active``, ``live_rows``, ``tile``, ``precision``, ``layer``,
    and ``resident_blocks``, blocks the GPU holds at once, which decides the FP32 tile GEMM's
    schedule (:func:`~spartan_py.sparsity.tile_gemm.fp32_schedule`; 0: ``tiles``). A
    ``balanced`` launch is recorded with its BK-steps as blocks, the units it spreads evenly."""
    return candidate(kernel).records(m, k, n, **counts)
