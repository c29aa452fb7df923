"""Per-layer device arrays of a GPU engine: resident, or streamed from pinned host memory.

Each layer owns a few named arrays (indices, weights, ...). They are packed into one host
buffer, 256-byte aligned. When all of it fits the device memory budget it is uploaded once
(*resident*). Otherwise it stays in pinned host memory and is *streamed*: two device slots,
each big enough for the layers of one launch; while launch ``c`` computes from slot
``c % 2``, a copy stream fills slot ``(c + 1) % 2`` with launch ``c + 1``'s layers, after
launch ``c - 1`` (its last reader) is done. The kernel finds a layer's arrays through
per-layer pointer tables, which do not change between runs.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spartan_py.errors import DeviceMemoryError

ALIGN = 256
_HOST_TO_DEVICE = 1  # cudaMemcpyHostToDevice


def _aligned(size: int) -> int:
    return -(-size // ALIGN) * ALIGN


class LayerStore:
    """The layers' arrays on the device (see the module docstring).

    ``layers[l]``: name -> array (or None: a null pointer). ``chunks``: layers per launch.
    ``budget_bytes``: device memory the weights may use; None: half the free memory.
    """

    def __init__(
        self, cp, layers: Sequence[dict[str, np.ndarray | None]], chunks: Sequence[int], budget_bytes: int | None = None
    ):
        self.cp = cp
        names = list(layers[0]) if layers else []
        offsets, sizes = [], []
        for arrays in layers:
            place, at = {}, 0
            for name in names:
                array = arrays[name]
                if array is not None:
                    place[name] = at
                    at += _aligned(array.nbytes)
            offsets.append(place)
            sizes.append(at)
        starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.total_bytes = int(starts[-1])
        if budget_bytes is None:
            budget_bytes = int(cp.cuda.runtime.memGetInfo()[0] // 2)
        self.budget_bytes = int(budget_bytes)
        self.streamed = self.total_bytes > self.budget_bytes
        self.chunk_bounds = np.concatenate([[0], np.cumsum(chunks)]).astype(np.int64)
        chunk_bytes = [int(starts[b] - starts[a]) for a, b in zip(self.chunk_bounds[:-1], self.chunk_bounds[1:])]
        self.slot_bytes = max(chunk_bytes, default=0)
        if self.streamed and 2 * self.slot_bytes > self.budget_bytes:
            raise DeviceMemoryError(
                f"the weights ({self.total_bytes} bytes) exceed the device budget ({self.budget_bytes} bytes), and two "
                f"launches' worth ({2 * self.slot_bytes} bytes) to stream them do not fit it either; "
                "launch fewer layers at once"
            )
        # streamed weights stay in pinned host memory (copies overlap compute); resident ones
        # are copied array by array straight to their place on the device (packing them on
        # the host first took a pass over every byte, on one core)
        self._host = self._pinned(self.total_bytes) if self.streamed else None
        self._starts = starts
        try:
            if self.streamed:
                self._slots = [cp.empty(max(self.slot_bytes, 1), dtype=cp.uint8) for _ in range(2)]
                bases = []
                for chunk, (a, b) in enumerate(zip(self.chunk_bounds[:-1], self.chunk_bounds[1:])):
                    bases += [self._slots[chunk % 2].data.ptr + int(starts[layer] - starts[a]) for layer in range(a, b)]
            else:
                self._device = cp.empty(max(self.total_bytes, 1), dtype=cp.uint8)
                bases = [self._device.data.ptr + int(start) for start in starts[:-1]]
        except cp.cuda.memory.OutOfMemoryError:
            need = 2 * self.slot_bytes if self.streamed else self.total_bytes
            raise DeviceMemoryError(f"layer weights ({need} bytes on the device) do not fit the GPU") from None
        for arrays, place, start, base in zip(layers, offsets, starts, bases):
            for name, at in place.items():
                raw = np.ascontiguousarray(arrays[name])
                if self._host is not None:
                    self._host[start + at : start + at + raw.nbytes] = raw.view(np.uint8).ravel()
                elif raw.nbytes:
                    cp.cuda.runtime.memcpy(base + at, raw.ctypes.data, raw.nbytes, _HOST_TO_DEVICE)
        if not self.streamed:
            # a pageable copy may return before its DMA lands, and the engines launch on
            # non-blocking streams, which do not wait for the legacy stream's copies
            cp.cuda.Device().synchronize()
        self.pointers = {
            name: cp.asarray(
                np.array(
                    [base + place[name] if name in place else 0 for base, place in zip(bases, offsets)], dtype=np.uint64
                )
            )
            for name in names
        }
        self._copy_stream = cp.cuda.Stream(non_blocking=True) if self.streamed else None

    @staticmethod
    def _pinned(size: int) -> np.ndarray:
        # optional dependency (extra gpu)
        import cupyx

        return cupyx.empty_pinned((max(size, 1),), dtype=np.uint8)

    def _copy_chunk(self, chunk: int) -> None:
        a, b = self.chunk_bounds[chunk], self.chunk_bounds[chunk + 1]
        size = int(self._starts[b] - self._starts[a])
        if size:
            self.cp.cuda.runtime.memcpyAsync(
                self._slots[chunk % 2].data.ptr,
                self._host.ctypes.data + int(self._starts[a]),  # type: ignore[union-attr]  # set when streaming is on, as here
                size,
                _HOST_TO_DEVICE,
                self._copy_stream.ptr,  # type: ignore[union-attr]  # set when streaming is on, as here
            )

    def launches(self, stream):
        """Yield each launch's number once its layers are on the device; the caller launches it
        on ``stream`` before taking the next. Resident weights need no waiting."""
        count = len(self.chunk_bounds) - 1
        if not self.streamed:
            yield from range(count)
            return
        cp = self.cp
        copied = [cp.cuda.Event() for _ in range(count)]
        done = [cp.cuda.Event() for _ in range(count)]
        self._copy_stream.wait_event(stream.record())  # earlier work on the slots is finished
        self._copy_chunk(0)
        copied[0].record(self._copy_stream)
        for chunk in range(count):
            stream.wait_event(copied[chunk])
            yield chunk
            done[chunk].record(stream)
            if chunk + 1 < count:
                if chunk >= 1:
                    self._copy_stream.wait_event(done[chunk - 1])  # the slot's last reader
                self._copy_chunk(chunk + 1)
                copied[chunk + 1].record(self._copy_stream)
