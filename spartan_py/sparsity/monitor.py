"""The sparsity monitor: per-tile non-zero counts of a layer's output, four ways.

A layer's output is ``y = min(clamp, ReLU(z + bias))`` (the epilogue of the kernel that
produced ``z``). :meth:`SparsityMonitor.epilogue` writes ``y`` and returns a
:class:`LayerProfile` of it, according to the monitor's mode:

``off``       the plain epilogue; no profile.
``software``  the plain epilogue, then a separate counting pass over ``y`` and a copy of the
              counts to the host (the baseline Spartan improves on).
``fused``     the epilogue counts non-zeros per tile and per row as it writes them; the
              counts stay on the device.
``sampled``   ``fused`` on the first and every ``every``-th call for each layer (every k-th
              batch); other calls run the plain epilogue and return the layer's last
              profile marked ``stale``.

The same API runs on NumPy arrays (Numba kernels) and CuPy arrays (``kernels/spartan_tiles.cu``).

Time of the monitoring itself (``monitor_seconds``): ``software``, the counting pass and the
copy (CUDA events on the GPU; the host's sync wake-up is not in it); ``fused``, the fused
epilogue's time less the plain epilogue's, which the monitor times once per shape on first
use (median of 5). GPU times are resolved when first read, so a profile causes no host sync
until its time or a host-side count is asked for.

Example::

    import numpy as np
    from spartan_py.sparsity import SparsityMonitor
    z = np.random.default_rng(0).standard_normal((256, 128)).astype(np.float32)
    monitor = SparsityMonitor(tile=(32, 32), mode="fused")
    y, profile = monitor.epilogue(z, layer="fc1")
    print(profile.density, profile.tile_density, profile.live_rows)
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from spartan_py.errors import InputError
from spartan_py.host.threads import run_split
from spartan_py.sparsity import cpu_kernels
from spartan_py.sparsity.arrays import array_module, as_matrix, is_gpu_array, same_device
from spartan_py.sparsity.gpu_kernels import epilogue_grid, launch_epilogue, tile_kernels
from spartan_py.sparsity.tiles import TileShape, tile_counts

MONITOR_MODES = ("off", "software", "fused", "sampled")


@dataclass
class LayerProfile:
    """What the monitor saw of one layer's output ``[M x N]``.

    ``tile_nnz`` (int32 ``[tiles_m x tiles_n]``) and ``row_counts`` (int32 ``[M]``, or
    ``[M x chunks]`` partial counts per 128-column chunk from the GPU epilogue) live where
    the counting ran: on the GPU for ``fused``/``sampled`` there, on the host otherwise.
    The scalar properties copy what they need to the host.
    """

    layer: Any
    mode: str
    tile: TileShape
    shape: tuple[int, int]
    tile_nnz: Any
    row_counts: Any
    stale: bool = False
    call: int = 0  # which call of this layer the counts come from (0-based)
    _seconds: Any = field(default=None, repr=False)  # float, or a callable resolving GPU events
    _scalars: Any = field(default=None, repr=False)  # tuple, or a callable waiting for their copy

    @property
    def monitor_seconds(self) -> float:
        """Seconds the monitoring itself cost for this call (0 for a stale profile)."""
        if callable(self._seconds):
            self._seconds = float(self._seconds())
        return float("nan") if self._seconds is None else float(self._seconds)

    @property
    def row_nnz(self):
        """Non-zeros per row, int32 ``[M]``, on the device of the counts."""
        if self.row_counts.ndim == 1:
            return self.row_counts
        return self.row_counts.sum(axis=1, dtype=self.row_counts.dtype)

    def scalars(self) -> tuple[int, int, int]:
        """(non-zeros, non-zero tiles, live rows): one pass over the counts, one host read
        (which waits for the GPU unless :meth:`prefetch` started it and it has arrived)."""
        if self._scalars is None:
            self._scalars = count_scalars(self.tile_nnz, self.row_counts)
        elif callable(self._scalars):
            self._scalars = self._scalars()
        return self._scalars

    def prefetch(self) -> LayerProfile:
        """Start copying the scalars to the host without waiting: on the GPU their kernel and
        copy are queued behind the counts, and :meth:`scalars` later waits only for that copy
        (on the CPU they are computed now). Returns the profile."""
        if self._scalars is None:
            self._scalars = count_scalars(self.tile_nnz, self.row_counts, wait=False)
        return self

    @property
    def nnz(self) -> int:
        """Non-zero activations."""
        return self.scalars()[0]

    @property
    def density(self) -> float:
        """Non-zeros / activations."""
        m, n = self.shape
        return self.nnz / max(m * n, 1)

    @property
    def tiles_active(self) -> int:
        """Tiles with at least one non-zero."""
        return self.scalars()[1]

    @property
    def tile_density(self) -> float:
        """Non-zero tiles / all tiles."""
        return self.tiles_active / max(self.tile_nnz.size, 1)

    @property
    def live_rows(self) -> int:
        """Rows with at least one non-zero."""
        return self.scalars()[2]

    @property
    def live_row_fraction(self) -> float:
        """Live rows / rows."""
        return self.live_rows / max(self.shape[0], 1)

    def summary(self) -> dict:
        """The scalars as plain Python values (for tables)."""
        return {
            "layer": self.layer,
            "mode": self.mode,
            "tile": str(self.tile),
            "rows": self.shape[0],
            "cols": self.shape[1],
            "density": self.density,
            "tile_density": self.tile_density,
            "live_rows": self.live_rows,
            "stale": self.stale,
            "monitor_seconds": self.monitor_seconds,
        }


def count_scalars(tile_nnz, row_counts, *, wait: bool = True):
    """(non-zeros, non-zero tiles, live rows) from tile counts and row counts (``[M]`` or
    ``[M x chunks]`` partials); on the GPU one kernel and one host read. ``wait=False`` (GPU):
    queue the kernel and an asynchronous copy to pinned host memory and return a callable
    that waits for that copy alone and gives the tuple."""
    if not is_gpu_array(tile_nnz):
        rows = row_counts if row_counts.ndim == 1 else row_counts.sum(axis=1)
        return int(tile_nnz.sum()), int((tile_nnz > 0).sum()), int((rows > 0).sum())
    # optional dependency (extra gpu)
    import cupy

    # optional dependency (extra gpu)
    import cupyx

    out = cupy.zeros(3, dtype=cupy.uint64)
    chunks = 1 if row_counts.ndim == 1 else row_counts.shape[1]
    args = (
        cupy.ascontiguousarray(tile_nnz, dtype=cupy.int32),
        np.int32(tile_nnz.size),
        cupy.ascontiguousarray(row_counts, dtype=cupy.int32),
        np.int32(row_counts.shape[0]),
        np.int32(chunks),
        out,
    )
    tile_kernels(cupy.cuda.Device().id)["profile_scalars"]((264,), (256,), args)
    if wait:
        return tuple(int(v) for v in out.get())
    landed = cupyx.empty_pinned(3, dtype=np.uint64)
    out.get(out=landed, blocking=False)
    copied = cupy.cuda.Event(block=False, disable_timing=True)
    copied.record()

    def resolve() -> tuple[int, int, int]:
        copied.synchronize()
        nnz, tiles, rows = (int(v) for v in landed)
        return nnz, tiles, rows

    return resolve


class SparsityMonitor:
    """Per-tile sparsity of layer outputs in one of :data:`MONITOR_MODES` (see the module doc).

    ``tile``: ``(rows, cols)`` or an int; on the GPU both sides must divide 128 and ``cols``
    be at least 4. ``every``: the sampling period of ``sampled``. ``timed``: measure
    ``monitor_seconds`` (on the GPU this records events; nothing waits for them until read).
    """

    def __init__(self, tile=(32, 32), mode: str = "fused", *, every: int = 4, timed: bool = True):
        if mode not in MONITOR_MODES:
            raise InputError(f"monitor mode {mode!r}; expected one of {', '.join(MONITOR_MODES)}")
        if int(every) < 1:
            raise InputError(f"every must be >= 1 (a sampling period in calls), got {every!r}")
        self.tile = TileShape.of(tile)
        self.mode = mode
        self.every = int(every)
        self.timed = timed
        self._calls: dict[object, int] = {}
        self._last: dict[object, LayerProfile] = {}
        self._plain_seconds: dict[tuple, float] = {}

    def __repr__(self) -> str:
        return f"SparsityMonitor(tile={self.tile}, mode={self.mode!r}, every={self.every})"

    def epilogue(self, z, bias=None, *, clamp: float | None = None, layer=0, out=None):
        """``(y, profile)``: ``y = min(clamp, ReLU(z + bias))`` and its profile (None when the
        mode is ``off``). ``z`` is ``[M x N]`` NumPy or CuPy float32; ``bias`` ``[N]`` or None;
        ``out`` may be ``z`` itself (in place). ``layer`` keys the sampling state."""
        z = as_matrix(z, "z")
        xp = array_module(z)
        m, n = z.shape
        bias = (
            xp.zeros(n, dtype=xp.float32) if bias is None else xp.ascontiguousarray(xp.asarray(bias, dtype=xp.float32))
        )
        if bias.shape != (n,):
            raise InputError(f"bias has shape {tuple(bias.shape)}; expected ({n},) for z of shape {(m, n)}")
        if not same_device(z, bias, out):
            raise InputError("z, bias and out must all be NumPy arrays or all CuPy arrays")
        y = xp.empty_like(z) if out is None else out
        if y.shape != z.shape or y.dtype != np.float32:
            raise InputError(f"out must be float32 of shape {(m, n)}, got {y.dtype} {tuple(y.shape)}")
        clamp = float("inf") if clamp is None else float(clamp)
        call = self._calls.get(layer, 0)
        self._calls[layer] = call + 1
        mode = self.mode
        if mode == "sampled" and call % self.every:
            _run_plain(z, bias, clamp, y)
            last = self._last.get(layer)
            if last is None or last.shape != (m, n):
                return y, None
            return y, LayerProfile(
                layer,
                mode,
                self.tile,
                (m, n),
                last.tile_nnz,
                last.row_counts,
                stale=True,
                call=last.call,
                _seconds=0.0,
                _scalars=last._scalars,
            )
        if mode == "off":
            _run_plain(z, bias, clamp, y)
            return y, None
        if mode == "software":
            _run_plain(z, bias, clamp, y)
            tile_nnz, row_nnz, seconds = software_pass(y, self.tile, self.timed)
        else:
            tile_nnz, row_nnz, seconds = self._fused(z, bias, clamp, y)
        profile = LayerProfile(layer, mode, self.tile, (m, n), tile_nnz, row_nnz, call=call, _seconds=seconds)
        self._last[layer] = profile
        return y, profile

    def _fused(self, z, bias, clamp, y):
        """Fused epilogue; the seconds are its time less the plain epilogue's (timed once per shape)."""
        if not self.timed:
            return (*_run_fused(z, bias, clamp, y, self.tile), None)
        key = (is_gpu_array(z), z.shape, self.tile)
        if key not in self._plain_seconds:  # warm up (compile) both, then time the plain one
            scratch = array_module(z).empty_like(z)  # y may be z itself: never write it twice
            _run_fused(z, bias, clamp, scratch, self.tile)
            _run_plain(z, bias, clamp, scratch)
            self._plain_seconds[key] = statistics.median(
                _timed(lambda: _run_plain(z, bias, clamp, scratch), z) for _ in range(5)
            )
        plain = self._plain_seconds[key]
        result = {}
        elapsed = _timed(lambda: result.update(counts=_run_fused(z, bias, clamp, y, self.tile)), z, lazy=True)
        seconds = (lambda: max(elapsed() - plain, 0.0)) if callable(elapsed) else max(elapsed - plain, 0.0)
        return (*result["counts"], seconds)


def _check_gpu_shape(n: int, tile: TileShape | None) -> None:
    if n % 4:
        raise InputError(f"the GPU epilogue needs a column count divisible by 4, got {n}")
    if tile is not None and (tile.rows > 128 or tile.cols > 128 or tile.cols < 4):
        raise InputError(f"GPU monitor tiles need rows <= 128 and 4 <= cols <= 128, got {tile}")


def _run_plain(z, bias, clamp, y) -> None:
    if not is_gpu_array(z):
        run_split(cpu_kernels.epilogue_plain, z.shape[0], z, bias, np.float32(clamp), y)
        return
    m, n = z.shape
    _check_gpu_shape(n, None)
    launch_epilogue(
        "plain", m, n, (z, bias, y, np.int32(m), np.int32(n), np.float32(clamp), np.int32(1), np.int32(4), 0, 0)
    )


def _run_fused(z, bias, clamp, y, tile: TileShape):
    m, n = z.shape
    tm, tn = tile.grid((m, n))
    if not is_gpu_array(z):
        tile_nnz = np.empty((tm, tn), dtype=np.int32)
        row_nnz = np.empty(m, dtype=np.int32)
        run_split(
            cpu_kernels.epilogue_fused, tm, z, bias, np.float32(clamp), y, tile.rows, tile.cols, tile_nnz, row_nnz
        )
        return tile_nnz, row_nnz
    return _gpu_counts("fused", z, bias, clamp, y, tile)[:2]


def _gpu_counts(mode: str, z, bias, clamp, y, tile: TileShape):
    """(tile counts, row counts, the one int32 buffer holding both) of the epilogue kernel of
    ``mode`` (one buffer, so that the software monitor copies it to the host in one go)."""
    # optional dependency (extra gpu)
    import cupy

    m, n = z.shape
    _check_gpu_shape(n, tile)
    tm, tn = tile.grid((m, n))
    chunks = epilogue_grid(m, n)[0]
    counts = cupy.empty(tm * tn + m * chunks, dtype=cupy.int32)
    tile_nnz = counts[: tm * tn].reshape(tm, tn)
    row_part = counts[tm * tn :].reshape(m, chunks)
    args = (
        z,
        bias,
        y,
        np.int32(m),
        np.int32(n),
        np.float32(clamp),
        np.int32(tile.rows),
        np.int32(tile.cols),
        tile_nnz,
        row_part,
    )
    launch_epilogue(mode, m, n, args)
    return tile_nnz, (row_part[:, 0] if chunks == 1 else row_part), counts


def software_pass(y, tile: TileShape, timed: bool):
    """The software monitor's work on an activation matrix ``y``: a separate counting pass
    and a copy of the counts to the host (and the wait for it). Returns (tile counts, row
    counts, seconds or None); the Graph Challenge engine's software mode uses it too."""
    if not is_gpu_array(y):
        start = time.perf_counter()
        tile_nnz = tile_counts(y, tile)
        row_nnz = np.count_nonzero(y, axis=1).astype(np.int32)
        return tile_nnz.copy(), row_nnz.copy(), time.perf_counter() - start
    # optional dependency (extra gpu)
    import cupy

    # optional dependency (extra gpu)
    import cupyx

    events = (cupy.cuda.Event(), cupy.cuda.Event()) if timed else None
    if events is not None:
        events[0].record()
    tile_dev, row_dev, counts = _gpu_counts("count", y, y, 0.0, y, tile)
    landed = cupyx.empty_pinned(counts.shape, dtype=np.int32)
    counts.get(out=landed, blocking=False)  # one copy of both counts: the fewest host calls
    if events is not None:
        events[1].record()
    cupy.cuda.get_current_stream().synchronize()  # the host round trip: the counts are on the host from here on
    seconds = cupy.cuda.get_elapsed_time(*events) / 1e3 if events is not None else None
    host = np.asarray(landed)
    return host[: tile_dev.size].reshape(tile_dev.shape), host[tile_dev.size :].reshape(row_dev.shape), seconds


def _timed(work, like, *, lazy: bool = False):
    """Seconds ``work()`` took: host clock on the CPU, CUDA events on the GPU (a callable
    resolving them when ``lazy``)."""
    if not is_gpu_array(like):
        start = time.perf_counter()
        work()
        return time.perf_counter() - start
    # optional dependency (extra gpu)
    import cupy

    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    start.record()
    work()
    stop.record()

    def resolve() -> float:
        stop.synchronize()
        return cupy.cuda.get_elapsed_time(start, stop) / 1e3

    return resolve if lazy else resolve()
