"""A merged network (:class:`~spartan_py.engines.shared.column_merge.MergedNetwork`) in one
file that any number of processes map read-only: prepared once, shared by every shard.

The file is a little-endian ``uint64`` header length, a JSON header (each layer's scalars and
its arrays' dtype, shape and offset), then the arrays, each at a 64-byte boundary. Reading it
copies nothing: the arrays are views of one read-only memory map, so the processes of a host
share its pages (the page cache; under ``/dev/shm``, memory), and an engine that wrote into
its plan would fail instead of diverging from the others.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any

import numpy as np

from spartan_py.engines.shared.column_merge import MergedLayer, MergedNetwork
from spartan_py.engines.shared.layer_plan import LayerPlan
from spartan_py.errors import InputError

_FORMAT = "spartan-merged-network/1"
_ALIGN = 64
_LAYER_ARRAYS = ("index", "weight", "groups", "sizes")


def _arrays(layer: MergedLayer) -> dict[str, np.ndarray]:
    return {"index": layer.plan.index, "weight": layer.plan.weight, "groups": layer.groups, "sizes": layer.sizes}


def merged_bytes(merged: MergedNetwork) -> int:
    """Bytes :func:`write_merged` writes for ``merged`` (within a header and 64-byte padding)."""
    return sum(array.nbytes for layer in merged.layers for array in _arrays(layer).values())


def write_merged(merged: MergedNetwork, path: str | os.PathLike) -> Path:
    """Write ``merged`` to ``path`` (through a temporary file beside it, renamed when whole)."""
    path = Path(path)
    layers: list[dict[str, Any]] = []
    offset = 0
    for layer in merged.layers:
        described: dict[str, dict[str, Any]] = {}
        for name, array in _arrays(layer).items():
            described[name] = {"dtype": array.dtype.str, "shape": list(array.shape), "offset": offset}
            offset += -(-array.nbytes // _ALIGN) * _ALIGN
        layers.append(
            {
                "uniform": None if layer.plan.uniform is None else float(layer.plan.uniform),
                "nnz": int(layer.plan.nnz),
                "width_in": int(layer.width_in),
                "original_nnz": int(layer.original_nnz),
                "arrays": described,
            }
        )
    header = json.dumps({"format": _FORMAT, "neurons": merged.neurons, "layers": layers}).encode()
    start = -(-(8 + len(header)) // _ALIGN) * _ALIGN
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        with open(partial, "wb") as out:
            out.write(struct.pack("<Q", len(header)) + header)
            for layer, header_layer in zip(merged.layers, layers):
                for name, array in _arrays(layer).items():
                    out.seek(start + header_layer["arrays"][name]["offset"])
                    out.write(np.ascontiguousarray(array).data)
            out.truncate(start + offset)
        os.replace(partial, path)
    except BaseException:  # a full disk, an interrupt: leave nothing half written behind
        partial.unlink(missing_ok=True)
        raise
    return path


def read_merged(path: str | os.PathLike) -> MergedNetwork:
    """The merged network :func:`write_merged` wrote to ``path``, its arrays read-only views of
    one memory map."""
    path = Path(path)
    try:
        with open(path, "rb") as stream:
            (length,) = struct.unpack("<Q", stream.read(8))
            header = json.loads(stream.read(length))
    except (OSError, struct.error, ValueError) as exc:
        raise InputError(f"not a readable merged network file ({exc})", path=path) from None
    if not isinstance(header, dict) or header.get("format") != _FORMAT:
        raise InputError(f"not a merged network file: expected format {_FORMAT!r}", path=path)
    start = -(-(8 + length) // _ALIGN) * _ALIGN
    mapped = np.memmap(path, dtype=np.uint8, mode="r")

    def view(spec: dict) -> np.ndarray:
        dtype = np.dtype(spec["dtype"])
        count = int(np.prod(spec["shape"], dtype=np.int64))
        first = start + spec["offset"]
        return mapped[first : first + count * dtype.itemsize].view(dtype).reshape(spec["shape"])

    layers = []
    for layer in header["layers"]:
        arrays = {name: view(layer["arrays"][name]) for name in _LAYER_ARRAYS}
        plan = LayerPlan(arrays["index"], arrays["weight"], layer["uniform"], layer["nnz"])
        layers.append(MergedLayer(plan, arrays["groups"], arrays["sizes"], layer["width_in"], layer["original_nnz"]))
    return MergedNetwork(header["neurons"], layers)
