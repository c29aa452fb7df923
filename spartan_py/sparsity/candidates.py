"""The adaptive policy's candidate kernels, each one object listed once: its name, the trace
records it launches (which the cost model times) and how it runs.

``dense``        cuBLAS on the whole input.
``tile_sparse``  the tile-sparse GEMM over the input's non-zero tiles, from the monitor's
                 counts at the policy's tile (FP32: listed inside the GEMM's launch;
                 TF32: a list launch first, by count, scan and scatter).
``row_compact``  gather the live rows, cuBLAS on them, scatter the result back.
``csr``          convert the input to CSR and multiply with cuSPARSE (SpMM; FP32 only).

At ``fp32x3`` (opt-in) each GEMM of a candidate is three TF32 products of split operands
(:mod:`~spartan_py.sparsity.three_tf32`), and its records say so (:func:`three_tf32_records`).

A candidate's ``run`` takes the policy (its tile, precision and counts) and the input's
profile when it is fresh (None when stale or absent: the counts are recomputed).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

import scipy.sparse as scipy_sparse

from spartan_py.costmodel.families import COMPACT, CSR_CONVERT, CSR_GEMM_FP32, LIST_TILES, dense_gemm, tile_gemm
from spartan_py.errors import InputError
from spartan_py.sparsity.arrays import array_module, is_gpu_array
from spartan_py.sparsity.compaction import compact_rows, expand_rows
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


@dataclass(frozen=True)
class _Product:
    """One ``[m x k] @ [k x n]`` as the candidates' records describe it (see :func:`candidate_records`)."""

    m: int
    k: int
    n: int
    nnz: int
    tiles_active: int
    live_rows: int
    tile: TileShape
    precision: str = "fp32"
    layer: Any = 0
    resident_blocks: int = 0

    @property
    def common(self) -> dict[str, Any]:
        """The fields every record of the product shares."""
        return dict(run="", layer=self.layer if isinstance(self.layer, int) else 0, device="policy")

    @property
    def gemm(self) -> dict[str, Any]:
        """The fields every GEMM record of the product shares."""
        return dict(self.common, cols=self.n, useful_macs=self.nnz * self.n)

    def dense(self, rows: int) -> TraceRecord:
        """cuBLAS on ``rows`` rows of the input."""
        # cuBLAS picks its tiling (and split-K) to fill the GPU: its records carry no launch
        # geometry, so the model spreads the work over every SM with no partial last wave
        k, n = self.k, self.n
        return TraceRecord(
            kernel=dense_gemm(self.precision),
            rows_in=rows,
            rows_out=rows,
            executed_macs=rows * k * n,
            bytes_read=4 * (rows * k + k * n),
            bytes_written=4 * rows * n,
            **self.gemm,
        )


def _dense_records(p: _Product) -> list[TraceRecord]:
    """cuBLAS on the whole input: one GEMM."""
    return [p.dense(p.m)]


def _tile_sparse_records(p: _Product) -> list[TraceRecord]:
    """The tile-sparse GEMM over the active tiles (FP32: listed in its own launch; TF32: a list launch first)."""
    tm, tn = p.tile.grid((p.m, p.k))
    bn = block_width(p.n)
    col_blocks = -(-p.n // bn)
    steps = p.tiles_active * (p.tile.cols // F32_BLOCK_K) * col_blocks  # BK-steps of all listed tiles
    balanced = (
        p.precision == "fp32"
        and p.resident_blocks > 0
        and fp32_schedule(tm, col_blocks, p.resident_blocks, steps) == "balanced"
    )
    blocks = steps if balanced else tm * col_blocks
    tiles = tm * tn
    schedule = "balanced" if balanced else "tiles"
    own_list = lists_own_tiles(p.precision, schedule, tm, tn)
    # listing in the GEMM: the counts read by every column block (tiles) or once, with
    # the padded list written and read again (balanced)
    listing_bytes = (4 * tiles * col_blocks if not balanced else 12 * tiles + 8 * tm) if own_list else 0
    launch: dict[str, Any]
    if p.precision == "fp32":
        launch = dict(
            block_threads=f32_block_threads(p.tile.rows, bn),
            block_shared_bytes=f32_shared_bytes(p.tile.rows, bn),
            resident_blocks_per_sm=f32_blocks_per_sm(p.tile.rows, bn),
        )
    else:
        launch = dict(
            block_threads=tf32_block_threads(p.tile.rows),
            block_shared_bytes=tf32_shared_bytes(p.tile.rows, bn),
            resident_blocks_per_sm=tf32_blocks_per_sm(p.tile.rows, bn),
        )
    gemm_record = TraceRecord(
        kernel=tile_gemm(p.precision),
        variant="-".join(part for part, on in (("balanced", balanced), ("counts", own_list)) if on),
        rows_in=p.m,
        rows_out=p.m,
        tiles_total=tm * tn,
        tiles_active=p.tiles_active,
        tile_rows=p.tile.rows,
        tile_cols=p.tile.cols,
        executed_macs=p.tiles_active * p.tile.size * p.n,
        bytes_read=4 * (p.tiles_active * p.tile.size + p.k * p.n) + listing_bytes,
        bytes_written=4 * p.m * p.n,
        blocks=blocks,
        block_rows=p.tile.rows,
        **launch,
        **p.gemm,
    )
    if own_list:
        return [gemm_record]
    return [  # counts read twice (per-row counts, then the list), the list written
        TraceRecord(
            kernel=LIST_TILES,
            variant="row-scan",
            bytes_read=8 * tiles + 4 * tm,
            bytes_written=12 * p.tiles_active + 8 * (tm + 1),
            tiles_total=tm * tn,
            tiles_active=p.tiles_active,
            **p.common,
        ),
        gemm_record,
    ]


def _row_compact_records(p: _Product) -> list[TraceRecord]:
    """Gather the live rows, cuBLAS on them, scatter the result back."""

    def compact(variant: str, rows_in: int, rows_out: int, moved: tuple[int, int]) -> TraceRecord:
        read, written = moved
        return TraceRecord(
            kernel=COMPACT,
            variant=variant,
            rows_in=rows_in,
            rows_out=rows_out,
            bytes_read=read,
            bytes_written=written,
            **p.common,
        )

    return [
        compact("rows", p.m, p.live_rows, (4 * p.live_rows * p.k, 4 * p.live_rows * p.k)),
        p.dense(p.live_rows),
        compact("expand_rows", p.live_rows, p.m, (4 * p.live_rows * p.n, 4 * p.m * p.n)),
    ]


def _csr_records(p: _Product) -> list[TraceRecord]:
    """Convert to CSR, then cuSPARSE's SpMM."""
    return [
        TraceRecord(
            kernel=CSR_CONVERT,
            rows_in=p.m,
            bytes_read=4 * p.m * p.k,
            bytes_written=8 * p.nnz + 4 * (p.m + 1),
            **p.common,
        ),
        TraceRecord(
            kernel=CSR_GEMM_FP32,
            rows_in=p.m,
            rows_out=p.m,
            nnz_in=p.nnz,
            executed_macs=p.nnz * p.n,
            bytes_read=8 * p.nnz + 4 * p.k * p.n,
            bytes_written=4 * p.m * p.n,
            **p.gemm,
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
        # optional dependency (extra gpu)
        import cupyx.scipy.sparse as sparse
    else:
        sparse = scipy_sparse
    c = sparse.csr_matrix(a) @ w
    c = xp.ascontiguousarray(c, dtype=xp.float32)
    if out is not None:
        out[...] = c
        return out
    return c


@dataclass(frozen=True)
class Candidate:
    """One kernel the policy can pick: ``records(product)`` gives the launches the cost model
    times (:func:`candidate_records` describes the product); ``run(policy, a, w, profile, out)``
    computes ``a @ w`` with it."""

    name: str
    records: Callable[[_Product], list[TraceRecord]]
    run: Callable[..., Any]
    precisions: tuple[str, ...] = PRECISIONS
    #: the part of the dense product's multiply-adds it executes (None: no such bound). A
    #: kernel running part of the dense work runs it no faster than cuBLAS runs the whole,
    #: so the policy never predicts it below cuBLAS's time scaled by this part.
    executed_part: Callable[[_Product], float] | None = None


def _tiles_part(p: _Product) -> float:
    return p.tiles_active / max(math.prod(p.tile.grid((p.m, p.k))), 1)


def _rows_part(p: _Product) -> float:
    return p.live_rows / max(p.m, 1)


CANDIDATES: tuple[Candidate, ...] = (
    Candidate("dense", _dense_records, _run_dense),
    Candidate("tile_sparse", _tile_sparse_records, _run_tile_sparse, executed_part=_tiles_part),
    Candidate("row_compact", _row_compact_records, _run_row_compact, executed_part=_rows_part),
    Candidate("csr", _csr_records, _run_csr, precisions=("fp32",)),  # cuSPARSE has no TF32 SpMM (nor fp32x3)
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


def executed_part(kernel: str, m: int, k: int, n: int, **counts) -> float | None:
    """The part of the dense product's multiply-adds candidate ``kernel`` executes for the
    product :func:`candidate_records` describes (None where it states no bound)."""
    part = candidate(kernel).executed_part
    return None if part is None else part(_Product(m, k, n, **counts))


def candidate_records(kernel: str, m: int, k: int, n: int, **counts) -> list[TraceRecord]:
    """The trace records candidate ``kernel`` launches for ``[m x k] @ [k x n]`` (counts exact,
    no times): ``nnz``, ``tiles_active``, ``live_rows``, ``tile``, ``precision``, ``layer``,
    and ``resident_blocks``, blocks the GPU holds at once, which decides the FP32 tile GEMM's
    schedule (:func:`~spartan_py.sparsity.tile_gemm.fp32_schedule`; 0: ``tiles``). A
    ``balanced`` launch is recorded with its BK-steps as blocks, the units it spreads evenly.
    ``fp32x3``: the TF32 launches, each GEMM as its operands' split and three TF32 GEMMs
    (:func:`three_tf32_records`)."""
    product = _Product(m, k, n, **counts)
    if product.precision == "fp32x3":
        return three_tf32_records(candidate(kernel).records(replace(product, precision="tf32")), k, n)
    return candidate(kernel).records(product)


def three_tf32_records(records: list[TraceRecord], k: int, n: int) -> list[TraceRecord]:
    """``records`` of TF32 launches with each GEMM (``rows_in`` rows, contraction ``k``, ``n``
    columns) made an ``fp32x3`` product: one pass splitting both operands (read once, two
    parts written), then three TF32 GEMMs; cuBLAS's second and third add into the output
    (reading it), the tile GEMM's are written apart and added by a pass of their own each."""
    out: list[TraceRecord] = []
    for record in records:
        if record.kernel not in (dense_gemm("tf32"), tile_gemm("tf32")):
            out.append(record)
            continue
        operands = 4 * (record.rows_in * k + k * n)
        split: dict[str, Any] = dict(
            run=record.run, layer=record.layer, device=record.device, kernel=COMPACT, rows_in=record.rows_in
        )
        out.append(TraceRecord(variant="split-tf32", bytes_read=operands, bytes_written=2 * operands, **split))
        c_bytes = 4 * record.rows_out * n
        for term in range(3):
            if term and record.kernel == dense_gemm("tf32"):
                out.append(replace(record, variant="3xtf32", bytes_read=record.bytes_read + c_bytes))
                continue
            out.append(replace(record, variant="-".join(filter(None, (record.variant, "3xtf32")))))
            if term:
                out.append(TraceRecord(variant="add", bytes_read=2 * c_bytes, bytes_written=c_bytes, **split))
    return out
