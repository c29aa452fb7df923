"""The adaptive policy: pick each layer's GEMM from the monitor's profile of its input and
the cost model's prediction for every candidate, and say why.

The candidates are :data:`~spartan_py.sparsity.candidates.CANDIDATES` (``dense``,
``tile_sparse``, ``row_compact``, ``csr``), each with its records and its run. Each
candidate becomes the trace records it would launch, which
:func:`spartan_py.costmodel.predict` times on the policy's machine (``sim/<name>.yaml``).
A sparse candidate wins only when predicted at least ``margin`` faster than ``dense``, so
prediction error near the crossover costs little. The chosen kernel runs on whatever
device holds the arrays (NumPy/SciPy on the CPU, which then only mirrors the GPU choice).

Example::

    import numpy as np
    from spartan_py.sparsity import KernelPolicy, SparsityMonitor
    z = np.random.default_rng(0).standard_normal((1024, 512)).astype(np.float32) - 2
    w = np.random.default_rng(1).standard_normal((512, 256)).astype(np.float32)
    policy = KernelPolicy("h100-sxm")
    y, profile = SparsityMonitor(tile=policy.tile).epilogue(z)
    decision = policy.choose(profile, w.shape[1])
    out = policy.run(decision, y, w, profile)
    print(decision.kernel, decision.reason)
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any

from spartan_py.costmodel.machine import DEFAULT_MACHINE
from spartan_py.costmodel.model import predict
from spartan_py.costmodel.simulate import resolve_machine
from spartan_py.errors import InputError
from spartan_py.sparsity.candidates import KERNEL_CHOICES, candidate, candidate_records, executed_part
from spartan_py.sparsity.gpu_kernels import (
    f32_blocks_per_sm,
)
from spartan_py.sparsity.monitor import LayerProfile, count_scalars
from spartan_py.sparsity.tile_gemm import (
    PRECISIONS,
    block_width,
    default_gemm_tile,
)
from spartan_py.sparsity.tiles import TileShape, coarsen_counts
from spartan_py.trace import to_frame


@dataclass(frozen=True)
class Decision:
    """The kernel chosen for one layer, the predictions behind it and a one-line reason."""

    layer: Any
    kernel: str
    predicted_us: dict = field(default_factory=dict)
    reason: str = ""
    density: float = float("nan")
    tile_density: float = float("nan")
    live_row_fraction: float = float("nan")

    def summary(self) -> dict:
        """Plain values for tables: the choice, the reason and each prediction."""
        return {
            "layer": self.layer,
            "kernel": self.kernel,
            "reason": self.reason,
            "density": self.density,
            "tile_density": self.tile_density,
            "live_row_fraction": self.live_row_fraction,
            **{f"predicted_us_{k}": v for k, v in self.predicted_us.items()},
        }


def _profile_scalars(profile: LayerProfile, counts) -> tuple[int, int, int]:
    """(non-zeros, active tiles at the policy's tile, live rows) in one host read."""
    if counts is None or counts is profile.tile_nnz:
        return profile.scalars()
    return count_scalars(counts, profile.row_counts)


def _bucket(m: int, k: int, nnz: int, tiles_active: int, live_rows: int, tile: TileShape) -> tuple[int, int, int]:
    """The counts rounded to 1/256 of their range, so that a layer seen again at about the
    same sparsity reuses its predictions (the model costs milliseconds of host time)."""
    tiles = max(math.prod(tile.grid((m, k))), 1)

    def snap(value: int, total: int) -> int:
        step = max(total // 256, 1)
        return min(total, round(value / step) * step)

    return snap(nnz, m * k), snap(tiles_active, tiles), snap(live_rows, m)


class KernelPolicy:
    """Chooses among ``kernels`` by the cost model of ``machine`` (a ``sim/`` name, with an
    optional ``+variant``). ``tile``: the tile of the tile-sparse GEMM (the monitor's tile
    must equal it or divide it; None: :func:`default_gemm_tile` of ``precision``).
    ``margin``: how much faster a sparse kernel must be predicted to be chosen over ``dense``.
    The default, 0.15, covers the model's measured errors on the conv shapes of
    ``benchmarks/tile_gemm.py`` (63 points, H100): it predicts the tile kernel's speed-up
    over cuBLAS at most 1.175x too high, so a pick at the margin runs at least
    1 / (0.85 x 1.175) = 1.001x cuBLAS's speed, inside the 5% allowed. It was 0.25 while
    cuBLAS's 64-column shapes were predicted 1.34x slow and a host round trip sat between
    the tile list and the GEMM (``docs/performance-notes.md``)."""

    def __init__(
        self,
        machine: str = DEFAULT_MACHINE,
        *,
        precision: str = "fp32",
        kernels=KERNEL_CHOICES,
        tile=None,
        margin: float = 0.15,
    ):
        if precision not in PRECISIONS:
            raise InputError(f"precision {precision!r}; expected one of {', '.join(PRECISIONS)}")
        unknown = [k for k in kernels if k not in KERNEL_CHOICES]
        if unknown or "dense" not in kernels:
            raise InputError(
                f"kernels must include 'dense' and come from {', '.join(KERNEL_CHOICES)}; got {list(kernels)}"
            )
        kernels = tuple(k for k in kernels if precision in candidate(k).precisions)
        if not 0 <= margin < 1:
            raise InputError(f"margin must be in [0, 1), got {margin}")
        self.machine, self.variant = resolve_machine(machine)
        self.machine_name = machine
        self.precision = precision
        self.kernels = tuple(kernels)
        self.tile = default_gemm_tile(precision) if tile is None else TileShape.of(tile)
        self.margin = margin

    def resident_blocks(self, n: int) -> int:
        """FP32 tile-GEMM blocks the machine holds at once for ``n`` output columns."""
        return f32_blocks_per_sm(self.tile.rows, block_width(n)) * self.machine.specs.sm_count

    def records(self, kernel: str, m: int, k: int, n: int, *, nnz: int, tiles_active: int, live_rows: int):
        """The trace records ``kernel`` launches for ``[m x k] @ [k x n]`` at this policy's
        tile, precision and machine (:func:`candidate_records`)."""
        return candidate_records(
            kernel,
            m,
            k,
            n,
            nnz=nnz,
            tiles_active=tiles_active,
            live_rows=live_rows,
            tile=self.tile,
            precision=self.precision,
            resident_blocks=self.resident_blocks(n),
        )

    def predict(self, m: int, k: int, n: int, *, nnz: int, tiles_active: int, live_rows: int) -> dict[str, float]:
        """Predicted microseconds of every candidate kernel (NaN where the model cannot say).
        A candidate that executes part of the dense work is predicted no faster than dense
        scaled by that part (:attr:`Candidate.executed_part`): where the model's GEMM times
        err, no sparse kernel is predicted to beat cuBLAS at equal work (at tile density 1, the
        tile GEMM ran 1.1-1.4x cuBLAS's time on VGG-16's wide input gradients, H100, where the
        model had put it below)."""

        counts = dict(nnz=nnz, tiles_active=tiles_active, live_rows=live_rows)
        out = {}
        for kernel in self.kernels:
            records = self.records(kernel, m, k, n, **counts)
            predicted = predict(to_frame(records), self.machine, self.variant)["predicted_us"]
            out[kernel] = float(predicted.sum()) if predicted.notna().all() else float("nan")
        dense = out.get("dense", float("nan"))
        for kernel in out:
            part = executed_part(kernel, m, k, n, tile=self.tile, precision=self.precision, **counts)
            if part is not None and not math.isnan(dense):
                out[kernel] = max(out[kernel], dense * part)
        return out

    # a policy lives as long as the run that made it; the cache keeping it alive is intended (B019)
    @functools.lru_cache(maxsize=4096)
    def _predict_cached(self, m: int, k: int, n: int, nnz: int, tiles_active: int, live_rows: int) -> tuple:
        return tuple(self.predict(m, k, n, nnz=nnz, tiles_active=tiles_active, live_rows=live_rows).items())

    def clear_prediction_cache(self) -> None:
        """Forget the predictions made so far (a benchmark timing an uncached decision)."""
        self._predict_cached.cache_clear()

    def counts_at_tile(self, profile: LayerProfile):
        """The profile's tile counts at the policy's tile, or None when they cannot be had."""
        if profile.tile == self.tile:
            return profile.tile_nnz
        if self.tile.rows % profile.tile.rows == 0 and self.tile.cols % profile.tile.cols == 0:
            return coarsen_counts(profile.tile_nnz, profile.tile, self.tile)
        return None

    def profile_counts(self, profile: LayerProfile) -> tuple[int, int, int]:
        """(non-zeros, active tiles at the policy's tile, live rows) of a profile (one host
        read); the active tiles are all tiles when the profile's tile cannot give them."""
        counts = self.counts_at_tile(profile)
        nnz, tiles_active, live = _profile_scalars(profile, counts)
        return nnz, tiles_active if counts is not None else math.prod(self.tile.grid(profile.shape)), live

    def prefetch(self, profile: LayerProfile | None) -> None:
        """Start the host copy of what :meth:`choose` will read from ``profile``, so that
        choosing later waits for nothing but that copy (see :meth:`LayerProfile.prefetch`).
        Only where the profile's tile is the policy's; otherwise :meth:`choose` counts anew."""
        if profile is not None and profile.tile == self.tile:
            profile.prefetch()

    def choose(
        self, profile: LayerProfile | None, n: int, *, m: int | None = None, k: int | None = None, layer=None
    ) -> Decision:
        """The kernel for ``input @ W`` where ``profile`` describes the input ``[M x K]`` and
        ``W`` has ``n`` columns. Without a profile the choice is ``dense``. ``m``: the rows
        of the input the kernel will run on when ``profile`` is another batch's (its counts
        are scaled by the ratio of rows)."""
        if profile is None:
            return Decision(layer, "dense", reason="no profile of the input (monitor off or first layer)")
        m_seen, k_in = profile.shape
        k = k_in if k is None else k
        m = m_seen if m is None else int(m)
        if m < 1:
            raise InputError(f"m must be a positive row count, got {m}")
        counts = self.counts_at_tile(profile)
        nnz, tiles_active, live = _profile_scalars(profile, counts)
        stale = " (stale profile)" if profile.stale else ""
        if m != m_seen:
            nnz, live = round(nnz * m / m_seen), min(m, round(live * m / m_seen))
            grid_now, grid_seen = math.prod(self.tile.grid((m, k))), max(math.prod(self.tile.grid((m_seen, k))), 1)
            tiles_active = min(grid_now, round(tiles_active * grid_now / grid_seen))
            stale += f" (counts of {m_seen} rows scaled to {m})"
        if counts is None:
            tiles_active = math.prod(self.tile.grid((m, k)))
        predicted = dict(self._predict_cached(m, k, n, *_bucket(m, k, nnz, tiles_active, live, self.tile)))
        if counts is None:
            predicted.pop("tile_sparse", None)
        dense = predicted["dense"]
        best = min((v, name) for name, v in predicted.items() if not math.isnan(v))[1]
        stats = dict(
            density=nnz / max(m * k, 1),
            tile_density=tiles_active / max(math.prod(self.tile.grid((m, k))), 1),
            live_row_fraction=live / max(m, 1),
        )
        if best != "dense" and predicted[best] <= (1 - self.margin) * dense:
            reason = (
                f"{best} predicted {predicted[best]:.1f} us vs dense {dense:.1f} us on {self.machine_name}{stale}; "
                f"tile density {stats['tile_density']:.2f} at {self.tile}, live rows {stats['live_row_fraction']:.2f}"
            )
            return Decision(layer if layer is not None else profile.layer, best, predicted, reason, **stats)
        why = "fastest predicted" if best == "dense" else f"{best} within the {self.margin:.0%} margin"
        reason = (
            f"dense: {why} ({dense:.1f} us on {self.machine_name}){stale}; tile density {stats['tile_density']:.2f}"
        )
        return Decision(layer if layer is not None else profile.layer, "dense", predicted, reason, **stats)

    def run(self, decision: Decision, a, w, profile: LayerProfile | None = None, *, out=None):
        """Run the decided kernel for ``a @ w`` (counts recomputed when the profile is stale
        or absent)."""
        fresh = profile is not None and not profile.stale and profile.shape == tuple(a.shape)
        return candidate(decision.kernel).run(self, a, w, profile if fresh else None, out)
