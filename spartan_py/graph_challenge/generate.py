"""Seeded generators of Graph Challenge-like networks and digit-like input rows.

Networks follow the structure of the official RadiX-Net files. Neurons form 16 blocks of
``M = N / 16``. In layer ``l`` of the first ``log2(M)`` layers, output neuron ``j`` reads
the input neurons whose index within their block is ``j mod M`` or ``(j mod M + 2^(l-1))
mod M``, in all 16 blocks: 32 inputs, every weight 1/16, so every row and every column
holds exactly 32 non-zeros. (For N = 1024 this is exactly the official layers 1..6.)
Later layers repeat that butterfly pattern under random relabelings of the input and
output neurons, as the official later layers do.

In such a layer the 16 outputs of one in-block lane read the same 32 inputs, which is what
``gpu-merged`` exploits. The *unmergeable* variant (``unmergeable=True``, spec
``generated-unmergeable:N``) has no two equal columns. Lanes ``a`` and ``a + M/2`` of all 16
blocks form a class of 32 neurons (for N = 1024: one image column); output ``(b, u, a)``
(block ``b``, half ``u``, class ``a``) reads one member of class ``a`` and one of class ``a +
shift`` from every block, chosen by a Hadamard code of ``(b, u)`` (the second class's choice
also flipped by a bent function of the block, so that no output of one class copies one of
another). Same degrees (32 per row and column), weights 1/16 and bias; shifts ``1, 2, ...,
M/4`` over the classes. Random wiring without such classes loses every generated row by
layer 4 under the official bias; with them about as many rows survive as in the RadiX-Net
networks.

Inputs are binary images of hand-drawn-looking digits: strokes of a digit template, jittered
by a random affine map and thickness, rasterized on a ``sqrt(N) x sqrt(N)`` grid, with about
100 lit pixels per 1024.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import numba
import numpy as np
import scipy.sparse as sp

from spartan_py.errors import InputError
from spartan_py.graph_challenge.network import OFFICIAL_BIAS, OFFICIAL_CLAMP, Network
from spartan_py.host.threads import csr_by_parts

BLOCKS = 16
WEIGHT = 1.0 / 16.0


def _check_neurons(neurons: int) -> int:
    if neurons not in OFFICIAL_BIAS:
        sizes = ", ".join(str(n) for n in OFFICIAL_BIAS)
        raise InputError(f"generated networks have {sizes} neurons, not {neurons}")
    return neurons


def butterfly_layer(neurons: int, shift: int) -> sp.csr_matrix:
    """The un-relabelled RadiX-Net layer with the given in-block ``shift`` (float32 CSR)."""
    block = neurons // BLOCKS
    outputs = np.arange(neurons)
    lane = outputs % block
    starts = np.arange(BLOCKS)[:, None] * block
    same = starts + lane[None, :]
    shifted = starts + ((lane + shift) % block)[None, :]
    rows = np.concatenate([same, shifted]).ravel()
    cols = np.tile(outputs, 2 * BLOCKS)
    data = np.full(rows.size, WEIGHT, dtype=np.float32)
    return sp.csr_matrix((data, (rows, cols)), shape=(neurons, neurons))


class GeneratedLayers(Sequence):
    """The layers of a generated network, built on demand from (seed, layer) and cached.

    Lazy, so a 65536-neuron x 1920-layer network (4e9 edges) never has to be held at once.
    ``unmergeable``: the variant without equal columns (module docstring).
    """

    def __init__(self, neurons: int, layers: int, seed: int, cache_layers: int = 256, *, unmergeable: bool = False):
        self.neurons = _check_neurons(neurons)
        self.layer_count = layers
        self.seed = seed
        self.unmergeable = unmergeable
        self._period = int(math.log2(neurons // BLOCKS))
        self._build = lru_cache(maxsize=cache_layers)(self._make)

    def __len__(self) -> int:
        return self.layer_count

    def __getitem__(self, index):
        if isinstance(index, slice):
            start, stop, step = index.indices(self.layer_count)
            if start == 0 and step == 1:  # a prefix stays lazy
                return GeneratedLayers(self.neurons, max(stop, 0), self.seed, unmergeable=self.unmergeable)
            return [self[i] for i in range(start, stop, step)]
        if index < 0:
            index += self.layer_count
        if not 0 <= index < self.layer_count:
            raise IndexError(index)
        return self._build(index)

    @property
    def edges(self) -> int:
        """Weights over all layers (every row holds ``2 * BLOCKS``), known without building any."""
        return self.layer_count * self.neurons * 2 * BLOCKS

    def lane_lists(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """Layer ``index``'s wiring by lane (RadiX-Net variant only): ``(lists, lane)``, where
        ``lists[a]`` (int64, ``M`` x 32) are the sorted input rows that every output of in-block
        lane ``a`` reads (one output per block, 16 in all, read the same) and ``lane[j]`` is
        output ``j``'s lane; every weight is :data:`WEIGHT`. Worked out from the relabelling,
        without building or transposing the matrix."""
        if self.unmergeable:
            raise InputError("the unmergeable variant has no lanes of equal columns")
        if not 0 <= index < self.layer_count:
            raise IndexError(f"layer {index} of a {self.layer_count}-layer network")
        shift, inverse_inputs, relabel_outputs = self._relabelling(index)
        block = self.neurons // BLOCKS
        return _lane_inputs(inverse_inputs, block, shift), relabel_outputs % block

    def _relabelling(self, index: int) -> tuple[int, np.ndarray, np.ndarray]:
        """(in-block shift, new row of each old input, old output of each new column) of a
        RadiX-Net layer (identities for the un-relabelled first layers)."""
        shift = 1 << (index % self._period)
        if index < self._period:
            identity = np.arange(self.neurons)
            return shift, identity, identity
        relabel_inputs, relabel_outputs = self._permutations(index)
        return shift, _inverse(relabel_inputs), relabel_outputs

    def _permutations(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """The seeded (input, output) relabellings of layer ``index``: the layer is the
        un-relabelled one, ``[relabel_inputs][:, relabel_outputs]``."""
        rng = np.random.default_rng([self.seed, index])
        relabel_inputs = rng.permutation(self.neurons)
        return relabel_inputs, rng.permutation(self.neurons)

    def _make(self, index: int) -> sp.csr_matrix:
        # the unmergeable layers shift classes of M/2 lanes, one period shorter
        period = self._period - 1 if self.unmergeable else self._period
        shift = 1 << (index % period)
        if index < period:
            if not self.unmergeable:
                return butterfly_layer(self.neurons, shift)
            relabel_inputs = new_label = np.arange(self.neurons)
        else:  # see _relabelled_columns
            relabel_inputs, relabel_outputs = self._permutations(index)
            new_label = _inverse(relabel_outputs)
        columns = (_mixed_columns if self.unmergeable else _relabelled_columns)(
            relabel_inputs, new_label, self.neurons // BLOCKS, shift
        )
        indptr = np.arange(0, columns.size + 1, 2 * BLOCKS, dtype=np.int32)
        data = np.full(columns.size, WEIGHT, dtype=np.float32)
        return sp.csr_matrix((data, columns.ravel(), indptr), shape=(self.neurons, self.neurons))


def _inverse(permutation: np.ndarray) -> np.ndarray:
    """The inverse permutation (int64): ``inverse[permutation[i]] = i``."""
    inverse = np.empty(permutation.size, dtype=np.int64)
    inverse[permutation] = np.arange(permutation.size)
    return inverse


@numba.njit(cache=True, nogil=True)  # serial: callers build layers on several threads
def _relabelled_columns(relabel_inputs, new_label, block, shift):  # pragma: no cover - compiled
    """The sorted output columns (neurons x 32, int32) of each input row of a relabelled
    butterfly layer: new input row ``r`` is old row ``i = relabel_inputs[r]``, which feeds the
    old outputs of in-block lanes ``i mod M`` and ``(i mod M - shift) mod M`` in every block."""
    neurons = relabel_inputs.size
    blocks = neurons // block
    columns = np.empty((neurons, 2 * blocks), dtype=np.int32)
    for r in range(neurons):
        lane = relabel_inputs[r] % block
        back = (lane - shift) % block
        row = columns[r]
        for k in range(2 * blocks):
            _insert(row, k, new_label[(k % blocks) * block + (lane if k < blocks else back)])
    return columns


@numba.njit(cache=True, nogil=True)
def _lane_inputs(inverse_inputs, block, shift):  # pragma: no cover - compiled
    """The sorted input rows (M x 32, int64) read by the outputs of each in-block lane of a
    relabelled butterfly layer: old output lane ``a`` reads the old inputs of lanes ``a`` and
    ``(a + shift) mod M`` in every block; old input ``i`` is new row ``inverse_inputs[i]``."""
    blocks = inverse_inputs.size // block
    lists = np.empty((block, 2 * blocks), dtype=np.int64)
    for lane in range(block):
        ahead = (lane + shift) % block
        column = lists[lane]
        for k in range(2 * blocks):
            _insert(column, k, inverse_inputs[(k % blocks) * block + (lane if k < blocks else ahead)])
    return lists


@numba.njit(cache=True, nogil=True, inline="always")
def _insert(row, k, value):  # pragma: no cover - compiled
    """Insertion sort step: ``row[:k + 1]`` sorted with ``value`` added (no allocation)."""
    j = k
    while j > 0 and row[j - 1] > value:
        row[j] = row[j - 1]
        j -= 1
    row[j] = value


@numba.njit(cache=True, nogil=True)
def _parity(bits):  # pragma: no cover - compiled
    bits ^= bits >> 2
    bits ^= bits >> 1
    return bits & 1


@numba.njit(cache=True, nogil=True)
def _mixed_columns(relabel_inputs, new_label, block, shift):  # pragma: no cover - compiled
    """The sorted output columns (neurons x 32, int32) of each input row of a relabelled
    unmergeable layer (module docstring): old input ``i`` is in block ``c = i // M`` at half
    ``u`` and class ``a`` of its lane (``i mod M = u * M/2 + a``). It feeds, in every block
    ``b``, the output of class ``a`` at half ``u ^ <b, c>`` and the output of class ``(a -
    shift) mod M/2`` at half ``u ^ <b, c> ^ q(c)`` (``<,>``: parity of the common bits; ``q``:
    a bent function of the block's four bits)."""
    neurons = relabel_inputs.size
    blocks = neurons // block
    half = block // 2
    columns = np.empty((neurons, 2 * blocks), dtype=np.int32)
    for r in range(neurons):
        old = relabel_inputs[r]
        c, lane = old // block, old % block
        u, a = lane // half, lane % half
        back = (a - shift) % half
        q = ((c & 1) & ((c >> 1) & 1)) ^ (((c >> 2) & 1) & ((c >> 3) & 1))
        row = columns[r]
        for b in range(blocks):
            h = u ^ _parity(b & c)
            _insert(row, 2 * b, new_label[b * block + h * half + a])
            _insert(row, 2 * b + 1, new_label[b * block + (h ^ q) * half + back])
    return columns


#: Spec prefix of each generated network family (``PREFIX:N[:SEED]``) -> whether it is the
#: unmergeable variant.
GENERATED_FAMILIES = {"generated": False, "generated-unmergeable": True}


def generated_family(spec: str) -> str | None:
    """The generated-network family a spec names (a key of :data:`GENERATED_FAMILIES`), or
    None (a path)."""
    prefix = spec.split(":", 1)[0]
    return prefix if ":" in spec and prefix in GENERATED_FAMILIES else None


def generate_network(neurons: int, layers: int, seed: int = 0, *, unmergeable: bool = False) -> Network:
    """A seeded RadiX-Net-style network: 32 non-zeros of 1/16 per row and column, official
    bias; ``unmergeable``: the variant with no two equal columns (module docstring)."""
    if layers < 1:
        raise InputError(f"layers must be at least 1, got {layers}")
    prefix = next(name for name, flag in GENERATED_FAMILIES.items() if flag == unmergeable)
    return Network(
        neurons=neurons,
        weights=GeneratedLayers(neurons, layers, seed, unmergeable=unmergeable),  # type: ignore[arg-type]
        bias=OFFICIAL_BIAS[_check_neurons(neurons)],
        clamp=OFFICIAL_CLAMP,
        source=f"{prefix}:{neurons}:{seed}",
    )


# Digit templates: polylines in a unit box (x to the right, y downwards).
def _arc(cx, cy, rx, ry, start_deg, end_deg, points=10):
    angles = np.radians(np.linspace(start_deg, end_deg, points))
    return np.stack([cx + rx * np.cos(angles), cy + ry * np.sin(angles)], axis=1)


_GLYPHS: list[list[np.ndarray]] = [
    [_arc(0.5, 0.5, 0.3, 0.45, 0, 360, 16)],  # 0
    [np.array([[0.35, 0.2], [0.55, 0.05], [0.55, 0.95]])],  # 1
    [np.vstack([_arc(0.5, 0.3, 0.3, 0.25, 200, 360 + 30, 8), [[0.2, 0.95], [0.85, 0.95]]])],  # 2
    [_arc(0.5, 0.28, 0.28, 0.23, 200, 450, 9), _arc(0.5, 0.72, 0.3, 0.23, 270, 520, 9)],  # 3
    [np.array([[0.6, 0.05], [0.15, 0.65], [0.85, 0.65]]), np.array([[0.65, 0.35], [0.65, 0.95]])],  # 4
    [np.vstack([[[0.8, 0.05], [0.3, 0.05], [0.25, 0.45]], _arc(0.5, 0.68, 0.32, 0.27, 230, 490, 9)])],  # 5
    [np.vstack([[[0.7, 0.05], [0.3, 0.5]], _arc(0.5, 0.7, 0.28, 0.25, 180, 540, 12)])],  # 6
    [np.array([[0.15, 0.05], [0.85, 0.05], [0.4, 0.95]])],  # 7
    [_arc(0.5, 0.27, 0.25, 0.22, 0, 360, 12), _arc(0.5, 0.72, 0.3, 0.24, 0, 360, 12)],  # 8
    [np.vstack([_arc(0.5, 0.3, 0.28, 0.25, 0, 360, 12), [[0.78, 0.3], [0.65, 0.95]]])],  # 9
]


def _glyph_segments(digit: int) -> np.ndarray:
    """Segments (S, 4) = (x0, y0, x1, y1) of a digit template."""
    segments = [np.hstack([line[:-1], line[1:]]) for line in _GLYPHS[digit]]
    return np.vstack(segments)


_SEGMENTS = [_glyph_segments(d) for d in range(10)]
_MAX_SEGMENTS = max(s.shape[0] for s in _SEGMENTS)
#: Every digit's segments, padded to the longest (10 x S x 4), and which of them are real.
_TEMPLATES = np.stack([np.vstack([s, np.zeros((_MAX_SEGMENTS - s.shape[0], 4))]) for s in _SEGMENTS])
_TEMPLATE_VALID = np.array([[k < s.shape[0] for k in range(_MAX_SEGMENTS)] for s in _SEGMENTS])


@numba.njit(cache=True, nogil=True)
def _draw(mask, segments, valid, r, side):  # pragma: no cover - compiled
    """Light the pixels of ``mask`` (side * side) whose centres lie within ``r`` of a valid segment."""
    r2 = r * r
    for s in range(segments.shape[0]):
        if not valid[s]:
            continue
        x0, y0, x1, y1 = segments[s, 0], segments[s, 1], segments[s, 2], segments[s, 3]
        dx, dy = x1 - x0, y1 - y0
        length2 = max(dx * dx + dy * dy, 1e-9)
        lo_x = max(int(min(x0, x1) - r - 1.0), 0)
        hi_x = min(int(max(x0, x1) + r + 1.0), side - 1)
        lo_y = max(int(min(y0, y1) - r - 1.0), 0)
        hi_y = min(int(max(y0, y1) + r + 1.0), side - 1)
        for py in range(lo_y, hi_y + 1):
            cy = py + 0.5
            for px in range(lo_x, hi_x + 1):
                cx = px + 0.5
                t = ((cx - x0) * dx + (cy - y0) * dy) / length2
                t = min(max(t, 0.0), 1.0)
                ex = cx - x0 - t * dx
                ey = cy - y0 - t * dy
                if ex * ex + ey * ey <= r2:
                    mask[py * side + px] = True


@numba.njit(cache=True, nogil=True)
def _lit_pixels(first, stop, segments, valid, radius, side, indptr, indices):  # pragma: no cover - compiled
    """Images ``first:stop`` of B (segments B x S x 4), each drawn into a cache-sized mask:
    with ``indices`` empty, write each image's count of lit pixels to ``indptr[image + 1]``;
    else list them at ``indices[indptr[image]:]``."""
    mask = np.empty(side * side, dtype=np.bool_)
    listing = indices.size > 0
    for image in range(first, stop):
        mask[:] = False
        _draw(mask, segments[image], valid[image], radius[image], side)
        if listing:
            at = indptr[image]
            for p in range(side * side):
                if mask[p]:
                    indices[at] = p
                    at += 1
        else:
            lit = 0
            for p in range(side * side):
                lit += mask[p]
            indptr[image + 1] = lit


def _lit_pixels_csr(segments: np.ndarray, valid: np.ndarray, radius: np.ndarray, side: int):
    """The CSR (indptr, indices) of the lit pixels of every image, the images spread over the
    cores: counted, then drawn again and listed."""
    count = segments.shape[0]
    return csr_by_parts(_lit_pixels, count, count, segments, valid, radius, side, with_data=False)


def generate_inputs(rows: int, neurons: int = 1024, seed: int = 0, chunk: int = 8192) -> sp.csr_matrix:
    """``rows`` binary digit-like images of ``sqrt(neurons)`` pixels a side, as float32 CSR.

    Each image is a random digit template under a random affine jitter (scale, shear,
    rotation, translation) and stroke thickness, drawn inside the central 28/32 of the frame
    as MNIST digits are; about 100 pixels per 1024 are lit. The random draws are made
    ``chunk`` images at a time (the stream depends on it), then every image is drawn at once.
    """
    side = math.isqrt(neurons)
    if side * side != neurons:
        raise InputError(f"inputs need a square number of neurons (an image), got {neurons}")
    if rows < 1:
        raise InputError(f"rows must be at least 1, got {rows}")
    rng = np.random.default_rng([seed, neurons, 7])
    scale_px = side / 32.0
    pieces = []
    for start in range(0, rows, chunk):
        count = min(chunk, rows - start)
        digits = rng.integers(0, 10, size=count)
        segments = _TEMPLATES[digits]  # a copy: fancy indexing
        # Map the unit box to a ~20x20-pixel (at 32x32) box around the centre, jittered.
        height = rng.uniform(17.0, 22.0, count) * scale_px
        width = height * rng.uniform(0.55, 0.95, count)
        shear = rng.normal(0.0, 0.18, count)
        angle = rng.normal(0.0, 0.12, count)
        centre_x = 16.0 * scale_px + rng.normal(0.0, 1.0, count) * scale_px
        centre_y = 16.0 * scale_px + rng.normal(0.0, 1.0, count) * scale_px
        cos, sin = np.cos(angle), np.sin(angle)
        for k in (0, 2):
            u = segments[..., k] - 0.5
            v = segments[..., k + 1] - 0.5
            x = u * width[:, None] + shear[:, None] * v * height[:, None]
            y = v * height[:, None]
            segments[..., k] = centre_x[:, None] + cos[:, None] * x - sin[:, None] * y
            segments[..., k + 1] = centre_y[:, None] + sin[:, None] * x + cos[:, None] * y
        radius = rng.uniform(1.0, 1.6, count) * scale_px
        pieces.append((segments, _TEMPLATE_VALID[digits], radius))
    segments, valid, radius = (np.concatenate(part) for part in zip(*pieces))
    indptr, indices = _lit_pixels_csr(segments, valid, radius, side)
    data = np.ones(indices.size, dtype=np.float32)
    return sp.csr_matrix((data, indices, indptr), shape=(rows, neurons))
