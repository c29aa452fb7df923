"""What the CuPy-driven engines share of CUDA: finding CuPy and the device, timing copies
with events, the paired work buffers, and copying the final rows back."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from spartan_py.errors import BackendUnavailableError


def import_cupy():
    """CuPy, whichever wheel provides it; BackendUnavailableError when absent or GPU-less."""
    try:
        import cupy
    except ImportError as exc:
        raise BackendUnavailableError(
            f"CuPy is not installed ({exc}); install spartan-py[gpu] or [gpu-cuda13]"
        ) from None
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            raise BackendUnavailableError("no CUDA device is visible")
    except cupy.cuda.runtime.CUDARuntimeError as exc:
        raise BackendUnavailableError(f"no usable CUDA device: {exc}") from None
    return cupy


def cupy_unavailable_reason() -> str | None:
    """Why CuPy cannot drive a GPU here, or None when it can."""
    try:
        import_cupy()
    except BackendUnavailableError as exc:
        return str(exc)
    return None


def device_name(cupy) -> str:
    """Name of the current CUDA device, e.g. 'NVIDIA H100 80GB HBM3'."""
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    name = props["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


NULL_POINTER = np.uint64(0)  # a null device pointer for optional kernel arguments


class EventTimer:
    """CUDA events around the copies in a ``with`` block on the current stream; ``seconds``
    after it. Copies from or to pageable host memory return when done, so the block's end
    event follows them."""

    def __init__(self, cupy):
        self._start, self._stop = cupy.cuda.Event(), cupy.cuda.Event()
        self._cupy = cupy
        self.seconds = float("nan")

    def __enter__(self) -> EventTimer:
        self._start.record()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.record()
        self._stop.synchronize()
        self.seconds = self._cupy.cuda.get_elapsed_time(self._start, self._stop) / 1e3


@dataclass
class Buffers:
    """One of a batch's two activation buffers: row values and their input-row ids."""

    values: Any
    ids: Any


def download_rows(cp, ids, values, alive: int, n: int) -> tuple[np.ndarray, np.ndarray, float]:
    """The first ``alive`` ids and n-wide value rows into pinned host memory, sorted by id,
    with the seconds of the copies alone (CUDA events)."""
    import cupyx

    host_ids = cupyx.empty_pinned((alive,), dtype=np.int32)
    host_values = cupyx.empty_pinned((alive, n), dtype=np.float32)
    with EventTimer(cp) as timer:
        ids[:alive].get(out=host_ids)
        values[: alive * n].reshape(alive, n).get(out=host_values)
    order = np.argsort(host_ids, kind="stable")
    return host_ids[order], host_values[order], timer.seconds
