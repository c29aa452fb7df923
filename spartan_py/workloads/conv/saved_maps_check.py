"""Saved activation maps (``activations:``) checked whole before any work, and what they hold
that a point reports: each layer's batch, the maps' density, the gradient masks.

A file is checked for every layer of a point before the first layer runs (``spartan run``,
and its ``--check``): each layer's array present, N x C x H x W with the layer's input
channels and size, numbers, finite, non-negative (a ReLU's output), any batch ``N >= 1``.

Beside a layer's maps the file may carry the mask of the gradient reaching the layer's output
(where its output was positive after the ReLU: the only places a gradient passes back), under
the layer's key with :data:`GRADIENT_MASK_SUFFIX` (``vgg16/conv3_2.grad_mask`` or
``conv3_2.grad_mask``): N x out_channels x out_size x out_size, the maps' batch, booleans or
non-negative numbers (non-zero: the gradient passes). A training step takes its input
gradient's mask from there; without one it is generated (``conv_training.output_mask``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from spartan_py.errors import InputError
from spartan_py.workloads.conv.layers import IMAGE_PX, STEMS, ConvLayer, conv_layer
from spartan_py.workloads.conv.saved_maps import saved_arrays, saved_maps

#: The key suffix of a layer's output-gradient mask in a maps file.
GRADIENT_MASK_SUFFIX = ".grad_mask"


def gradient_mask_key(label: str) -> str:
    """The key under which a writer stores the gradient mask of the layer whose maps are keyed
    ``label`` (``spartan maps capture --maps-dir`` writes ``network/name`` and this)."""
    return label + GRADIENT_MASK_SUFFIX


def image_side(path: str | Path, network: str) -> int:
    """The side of the images ``network`` read to make the maps in ``path``: that of its stem's
    input, the image, where the file holds it under the stem's label (``spartan maps capture
    --maps-dir`` writes it), else :data:`~spartan_py.workloads.conv.layers.IMAGE_PX`."""
    path = str(path)
    stem = STEMS[network]
    image = saved_arrays(path).get(stem.label)
    if image is None:
        return IMAGE_PX
    if image.ndim != 4 or image.shape[1] != stem.in_channels or image.shape[2] != image.shape[3]:
        raise InputError(
            f"array {stem.label!r} has shape {image.shape}; {network}'s input image is N x {stem.in_channels} x "
            "PX x PX (NCHW), whose side sets every layer's size",
            path=path,
        )
    return int(image.shape[2])


def saved_layer(path: str | Path, label: str) -> ConvLayer:
    """Layer ``label`` at the image side of the maps in ``path`` (:func:`image_side`)."""
    layer = conv_layer(label)
    return conv_layer(label, image_side(path, layer.network))


@dataclass(frozen=True)
class SavedMapsFacts:
    """What a maps file holds for a point's layers."""

    batches: dict[str, int]
    """Images per layer label (the arrays' ``N``)."""
    density: float
    """Non-zeros over entries of all those layers' maps together."""
    masks: tuple[str, ...]
    """The layers whose output-gradient mask the file carries."""

    @property
    def batch(self) -> int | str:
        """The one batch of every layer, or ``"LOW-HIGH"`` where layers differ."""
        sizes = sorted(set(self.batches.values()))
        return sizes[0] if len(sizes) == 1 else f"{sizes[0]}-{sizes[-1]}"


def _mask_key(arrays: dict[str, np.ndarray], layer: ConvLayer) -> str | None:
    return next((gradient_mask_key(k) for k in (layer.label, layer.name) if gradient_mask_key(k) in arrays), None)


def saved_gradient_mask(path: str | Path, layer: ConvLayer, batch: int) -> np.ndarray | None:
    """The mask of the gradient reaching ``layer``'s output, as GEMM rows ``[M x N]`` (batch,
    out_y, out_x by channel; float32 0/1), or None where the file carries none. ``batch``: the
    layer's maps' batch, which the mask must share."""
    path = str(path)
    arrays = saved_arrays(path)
    key = _mask_key(arrays, layer)
    if key is None:
        return None
    mask = arrays[key]
    expected = (batch, layer.out_channels, layer.out_size, layer.out_size)
    if tuple(mask.shape) != expected:
        raise InputError(
            f"array {key!r} has shape {mask.shape}; the gradient mask of {layer.label}'s output is "
            f"{' x '.join(map(str, expected))} (N x C x H x W, the maps' batch {batch})",
            path=path,
        )
    if mask.dtype != np.bool_:
        if not np.issubdtype(mask.dtype, np.number):
            raise InputError(f"array {key!r} must hold booleans or numbers, got {mask.dtype}", path=path)
        if not np.isfinite(mask).all() or (mask < 0).any():
            raise InputError(f"array {key!r} holds NaN, infinite or negative values; expected a 0/1 mask", path=path)
    rows = (mask != 0).transpose(0, 2, 3, 1).reshape(-1, layer.out_channels)
    return np.ascontiguousarray(rows, dtype=np.float32)


@functools.lru_cache(maxsize=8)
def check_saved_maps(path: str, labels: tuple[str, ...]) -> SavedMapsFacts:
    """Check the maps (and any gradient masks) of every layer in ``labels`` in the file at
    ``path``; raise :class:`InputError` naming the file and array at the first problem."""
    batches, nonzero, entries, masks = {}, 0, 0, []
    for label in labels:
        layer = saved_layer(path, label)
        maps = saved_maps(path, layer)
        batches[layer.label] = int(maps.shape[0])
        nonzero += int(np.count_nonzero(maps))
        entries += maps.size
        if saved_gradient_mask(path, layer, maps.shape[0]) is not None:
            masks.append(layer.label)
    return SavedMapsFacts(batches, nonzero / max(entries, 1), tuple(masks))
