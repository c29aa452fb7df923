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
        # optional dependency (extra gpu)
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
    after it (the block's end waits for the stream, so asynchronous copies have landed)."""

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


def upload_pinned(cp, arrays: list[tuple[np.ndarray, Any]]) -> tuple[list, float]:
    """Device copies of host ``(array, dtype)`` pairs, with the seconds of the copies alone
    (CUDA events).

    Each array is converted into pinned host memory first (CuPy's pinned pool, so a later
    batch of the same size reuses it), which makes the copy a DMA at the link's rate; from
    pageable memory the driver stages it through its own buffers at the host's memcpy rate
    (5-11 GB/s on the H100 host, by size). Where the host cannot pin that much, the array is
    copied from pageable memory instead."""
    # optional dependency (extra gpu)
    import cupyx

    staged = []
    for array, dtype in arrays:
        try:
            host = cupyx.empty_pinned(array.shape, dtype=dtype)
        except cp.cuda.runtime.CUDARuntimeError:
            host = np.empty(array.shape, dtype=dtype)
        np.copyto(host, array, casting="unsafe")  # the dtype conversion the engine asks for
        staged.append(host)
    device = [cp.empty(host.shape, dtype=host.dtype) for host in staged]
    stream = cp.cuda.get_current_stream()
    with EventTimer(cp) as timer:
        for target, host in zip(device, staged):
            if host.size:
                target.set(host, stream=stream)
    return device, timer.seconds


def download_rows(cp, ids, values, alive: int, n: int) -> tuple[np.ndarray, np.ndarray, float]:
    """The first ``alive`` ids and n-wide value rows into pinned host memory, sorted by id,
    with the seconds of the copies alone (CUDA events): both queued, one wait."""
    # optional dependency (extra gpu)
    import cupyx

    host_ids = cupyx.empty_pinned((alive,), dtype=np.int32)
    host_values = cupyx.empty_pinned((alive, n), dtype=np.float32)
    with EventTimer(cp) as timer:
        ids[:alive].get(out=host_ids, blocking=False)
        values[: alive * n].reshape(alive, n).get(out=host_values, blocking=False)
    order = np.argsort(host_ids, kind="stable")
    return host_ids[order], host_values[order], timer.seconds
