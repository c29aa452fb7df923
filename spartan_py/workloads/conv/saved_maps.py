"""Post-ReLU activation maps a user saved from their own framework, read in place of the
generated ones (the ``activations:`` field of a ``conv_layers`` workload).

A ``.npz`` holds one NCHW array per layer, keyed by the layer's ``network/name`` label
(``vgg16/conv3_2``) or by its name alone (``conv3_2``): the input of that convolution, which is
the previous ReLU's output; beside it, optionally, the mask of the gradient reaching the layer's
output (:mod:`~spartan_py.workloads.conv.saved_maps_check`). A ``.npy`` holds one array, for an
experiment of one layer. The docs (experiments page, "Your own activation maps") show a
PyTorch forward pre-hook that writes them; PyTorch is not a dependency.
"""

from __future__ import annotations

import functools
import zipfile
from pathlib import Path

import numpy as np

from spartan_py.errors import InputError
from spartan_py.workloads.conv.layers import ConvLayer


@functools.lru_cache(maxsize=2)
def saved_arrays(path: str) -> dict[str, np.ndarray]:
    """Every array of a ``.npz`` (loaded once), or a ``.npy``'s under the key ``""``."""
    if path.endswith(".npz") and not zipfile.is_zipfile(path):
        raise InputError("not a .npz archive (a zip of .npy arrays, as numpy.savez writes)", path=path)
    try:
        if path.endswith(".npy"):
            return {"": np.load(path, allow_pickle=False)}
        with np.load(path, allow_pickle=False) as archive:
            return {key: archive[key] for key in archive.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise InputError(f"not a readable .npz or .npy of activation maps ({exc})", path=path) from None


def saved_maps(path: str | Path, layer: ConvLayer) -> np.ndarray:
    """``layer``'s input maps from ``path`` as float32 NCHW, checked: the layer's channels and
    size, finite and non-negative (a ReLU's output)."""
    path = str(path)
    arrays = saved_arrays(path)
    key = "" if "" in arrays else next((k for k in (layer.label, layer.name) if k in arrays), None)
    if key is None:
        raise InputError(
            f"no maps for {layer.label}: expected an array named {layer.label!r} or {layer.name!r}; "
            f"the file has {', '.join(sorted(arrays)) or 'none'}",
            path=path,
        )
    maps = arrays[key]
    name = f"array {key!r}" if key else "the array"
    expected = (layer.in_channels, layer.size, layer.size)
    if maps.ndim != 4 or tuple(maps.shape[1:]) != expected:
        raise InputError(
            f"{name} has shape {maps.shape}; {layer.label}'s input is N x {expected[0]} x {expected[1]} x "
            f"{expected[2]} (NCHW)",
            path=path,
        )
    if maps.shape[0] < 1 or not np.issubdtype(maps.dtype, np.number):
        raise InputError(f"{name} must hold at least one image of numbers, got {maps.shape} {maps.dtype}", path=path)
    maps = np.ascontiguousarray(maps, dtype=np.float32)
    if not np.isfinite(maps).all():
        raise InputError(f"{name} holds NaN or infinite values", path=path)
    negative = int(np.count_nonzero(maps < 0))
    if negative:
        raise InputError(
            f"{name} holds {negative} negative values: expected a ReLU's output (the input of {layer.label})",
            path=path,
        )
    return maps
