"""Dense-weight workloads with sparse activations: the convolution layers Spartan reports
(AlexNet, VGG-16, ResNet-18) as im2col GEMMs, and generated activation maps with a chosen
density and spatial clustering.

:data:`CONV_LAYERS` lists every convolution of each network whose input is a ReLU output, in
the order a training step's forward runs them (ResNet-18: its 16 3 x 3 convolutions and its
three 1 x 1 downsamples, each once, as each runs once a step). The first convolution of each
network reads the image (:data:`STEMS`): it is no ``conv_layers`` layer, but it has a name,
for the maps ``spartan maps capture`` writes. These names are the one scheme of both: a
layer's maps in a saved file are keyed by its label (:mod:`~spartan_py.workloads.conv.saved_maps`).
The four ResNet-18 shapes the table first used one layer for (``conv2_x`` .. ``conv5_x``)
still resolve by :func:`conv_layer`: each is the shape of its stage's 3 x 3 convolutions.
A layer's GEMM is ``A [M x K] @ W [K x N]`` with ``M = batch * out_h *
out_w`` (rows ordered batch, out_y, out_x), ``K = in_channels * kernel^2`` (ordered
channel, ky, kx) and ``N = out_channels``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from scipy.ndimage import gaussian_filter

from spartan_py.errors import InputError
from spartan_py.sparsity.arrays import array_module
from spartan_py.sparsity.gpu_kernels import col2im_kernel
from spartan_py.sparsity.tiles import TileShape


@dataclass(frozen=True)
class ConvLayer:
    """One convolution: square input of ``size`` pixels, square ``kernel``."""

    network: str
    name: str
    in_channels: int
    out_channels: int
    size: int
    kernel: int = 3
    stride: int = 1
    pad: int = 1
    #: a BatchNorm sits between this convolution and its ReLU (ResNet-18): the gradient of its
    #: output is dense in a training step (BatchNorm's backward spreads it), so the input
    #: gradient's GEMM has no sparse operand
    batchnorm: bool = False

    @property
    def out_size(self) -> int:
        """Output height (= width)."""
        return (self.size + 2 * self.pad - self.kernel) // self.stride + 1

    def gemm_shape(self, batch: int) -> tuple[int, int, int]:
        """(M, K, N) of the im2col GEMM for ``batch`` images."""
        return batch * self.out_size**2, self.in_channels * self.kernel**2, self.out_channels

    @property
    def label(self) -> str:
        """``network/name``."""
        return f"{self.network}/{self.name}"


def _vgg16() -> list[ConvLayer]:
    plan = [
        (64, 64, 224, "conv1_2"),
        (64, 128, 112, "conv2_1"),
        (128, 128, 112, "conv2_2"),
        (128, 256, 56, "conv3_1"),
        (256, 256, 56, "conv3_2"),
        (256, 256, 56, "conv3_3"),
        (256, 512, 28, "conv4_1"),
        (512, 512, 28, "conv4_2"),
        (512, 512, 28, "conv4_3"),
        (512, 512, 14, "conv5_1"),
        (512, 512, 14, "conv5_2"),
        (512, 512, 14, "conv5_3"),
    ]
    return [ConvLayer("vgg16", name, cin, cout, size) for cin, cout, size, name in plan]


def _resnet18() -> list[ConvLayer]:
    """Every convolution after the stem, as torchvision's ``resnet18`` runs them: per stage
    ``conv{s}_1`` (``layer{s-1}.0.conv1``), ``conv{s}_2``, the downsample ``conv{s}_ds``
    (``layer{s-1}.0.downsample.0``, stages 3-5; it runs after ``conv{s}_2``), ``conv{s}_3``
    and ``conv{s}_4`` (block 1's two). Each is followed by a BatchNorm."""
    layers = []
    for stage, (cin, cout, size) in enumerate(((64, 64, 56), (64, 128, 56), (128, 256, 28), (256, 512, 14)), 2):
        stride = 1 if stage == 2 else 2
        out = size // stride
        layers += [
            ConvLayer("resnet18", f"conv{stage}_1", cin, cout, size, stride=stride, batchnorm=True),
            ConvLayer("resnet18", f"conv{stage}_2", cout, cout, out, batchnorm=True),
        ]
        if stride != 1:
            layers.append(ConvLayer("resnet18", f"conv{stage}_ds", cin, cout, size, 1, stride, 0, batchnorm=True))
        layers += [ConvLayer("resnet18", f"conv{stage}_{i}", cout, cout, out, batchnorm=True) for i in (3, 4)]
    return layers


#: the shape of each ResNet-18 stage's 3 x 3 convolutions under the name the first table gave
#: it (one layer per shape): resolvable by :func:`conv_layer`, not part of the whole network
RESNET18_STAGE_SHAPES = tuple(
    ConvLayer("resnet18", f"conv{stage}_x", c, c, size, batchnorm=True)
    for stage, (c, size) in enumerate(((64, 56), (128, 28), (256, 14), (512, 7)), 2)
)


def _alexnet() -> list[ConvLayer]:
    return [
        ConvLayer("alexnet", "conv2", 96, 256, 27, kernel=5, pad=2),
        ConvLayer("alexnet", "conv3", 256, 384, 13),
        ConvLayer("alexnet", "conv4", 384, 384, 13),
        ConvLayer("alexnet", "conv5", 384, 256, 13),
    ]


#: network -> its convolution layers with post-ReLU inputs (all of them, in the order they run).
CONV_LAYERS: dict[str, list[ConvLayer]] = {"alexnet": _alexnet(), "vgg16": _vgg16(), "resnet18": _resnet18()}

#: network -> its first convolution, which reads the image (not a ``conv_layers`` layer)
STEMS: dict[str, ConvLayer] = {
    "alexnet": ConvLayer("alexnet", "conv1", 3, 96, 224, kernel=11, stride=4, pad=2),
    "vgg16": ConvLayer("vgg16", "conv1_1", 3, 64, 224),
    "resnet18": ConvLayer("resnet18", "conv1", 3, 64, 224, kernel=7, stride=2, pad=3, batchnorm=True),
}

#: the layers the first tables and the drawn validation sets chose from (ResNet-18: one per
#: shape); kept so that a committed drawn set draws again the same
SHAPE_SET: tuple[ConvLayer, ...] = (
    *CONV_LAYERS["alexnet"],
    *CONV_LAYERS["vgg16"],
    *(
        layer
        for name in ("conv2_x", "conv3_1", "conv3_x", "conv4_1", "conv4_x", "conv5_1", "conv5_x")
        for layer in (*CONV_LAYERS["resnet18"], *RESNET18_STAGE_SHAPES)
        if layer.name == name
    ),
)


def whole_network(network: str) -> list[ConvLayer]:
    """Every convolution of ``network`` (a key of :data:`CONV_LAYERS`) in the order they run,
    its stem first."""
    return [STEMS[network], *CONV_LAYERS[network]]


#: Spartan's conv-layer training speed-ups on ImageNet (simulated hardware; abstract in
#: ``../shared/seeds/spartan-abstract.txt``) for the networks of :data:`CONV_LAYERS`: the
#: published figure a training-step table shows beside ours.
SPARTAN_TRAINING_SPEEDUP = {"alexnet": 3.4, "vgg16": 2.14, "resnet18": 2.02}


def layers_name(labels: list[str]) -> str:
    """A short name for layer labels: the networks they make up whole (``vgg16``), with any
    other layers named; ``+``-joined."""
    parts, rest = [], list(labels)
    for network, layers in CONV_LAYERS.items():
        whole = [layer.label for layer in layers]
        if all(label in rest for label in whole):
            parts.append(network)
            rest = [label for label in rest if label not in whole]
    return "+".join(parts + rest)


#: the image side the layers' sizes above are given at (the papers' ImageNet crops)
IMAGE_PX = 224


def _pooled(size: int, kernel: int = 3, stride: int = 2, pad: int = 0) -> int:
    return (size + 2 * pad - kernel) // stride + 1


def _sizes_at(network: str, px: int) -> dict[int, int]:
    """Each input size of ``network``'s layers at :data:`IMAGE_PX` -> that input's size when
    the network reads ``px``-pixel images (the sizes follow its convolutions and pools)."""
    if network == "alexnet":
        after_conv1 = (px + 2 * 2 - 11) // 4 + 1
        return {224: px, 27: _pooled(after_conv1), 13: _pooled(_pooled(after_conv1))}
    if network == "vgg16":
        return {224 >> i: px >> i for i in range(5)}
    stage2 = _pooled((px + 2 * 3 - 7) // 2 + 1, pad=1)  # resnet18: the stem's stride 2, max pool
    sizes, size = {224: px, 56: stage2}, stage2
    for at_224 in (28, 14, 7):
        size = _pooled(size, pad=1)
        sizes[at_224] = size
    return sizes


def conv_layer(label: str, px: int = IMAGE_PX) -> ConvLayer:
    """A layer by ``network/name`` (e.g. ``vgg16/conv3_2``), its input size that of a network
    reading ``px``-pixel images (default :data:`IMAGE_PX`)."""
    for layers in (*CONV_LAYERS.values(), RESNET18_STAGE_SHAPES):
        for layer in layers:
            if layer.label == label:
                if px == IMAGE_PX:
                    return layer
                scaled = replace(layer, size=_sizes_at(layer.network, px)[layer.size])
                if scaled.size < 1 or scaled.out_size < 1:
                    raise InputError(f"{label} has no input at {px}-pixel images (too small for {layer.network})")
                return scaled
    known = ", ".join(layer.label for layers in CONV_LAYERS.values() for layer in layers)
    raise InputError(f"unknown convolution layer {label!r}; known: {known}")


def im2col(x, kernel: int, stride: int = 1, pad: int = 0):
    """Rows of receptive fields of NCHW ``x`` (NumPy or CuPy): ``[N*OH*OW x C*kernel^2]``."""
    xp = array_module(x)
    n, c, h, w = x.shape
    if pad:
        x = xp.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - kernel) // stride + 1, (w + 2 * pad - kernel) // stride + 1
    sn, sc, sh, sw = x.strides
    windows = xp.lib.stride_tricks.as_strided(
        x, shape=(n, oh, ow, c, kernel, kernel), strides=(sn, sh * stride, sw * stride, sc, sh, sw)
    )
    return xp.ascontiguousarray(windows.reshape(n * oh * ow, c * kernel * kernel))


COL2IM_METHODS = ("auto", "gather", "strided")
"""How :func:`col2im` sums: ``gather`` (CuPy only: one kernel, each pixel written once),
``strided`` (one strided add of the whole output per kernel offset, NumPy or CuPy) or ``auto``
(gather on the GPU, strided on the host)."""


def col2im(cols, shape: tuple[int, int, int, int], kernel: int, stride: int = 1, pad: int = 0, method: str = "auto"):
    """The NCHW ``shape`` maps whose :func:`im2col` rows ``cols`` would be, each pixel the sum of
    every window entry it appears in (the input gradient of a convolution from its GEMM's
    ``[N*OH*OW x C*kernel^2]`` product; extra rows or columns past those, padding, are ignored).
    ``method`` (:data:`COL2IM_METHODS`): on CuPy arrays a gather kernel (``kernels/col2im.cu``)
    by default; both methods sum each pixel in the same order, so they give the same floats."""
    xp = array_module(cols)
    n, c, h, w = shape
    oh, ow = (h + 2 * pad - kernel) // stride + 1, (w + 2 * pad - kernel) // stride + 1
    if cols.shape[0] < n * oh * ow or cols.shape[1] < c * kernel * kernel or cols.strides[1] != cols.itemsize:
        raise InputError(
            f"col2im of {tuple(cols.shape)} rows into {shape} maps needs at least {n * oh * ow} rows of "
            f"{c * kernel * kernel} contiguous columns"
        )
    if method not in COL2IM_METHODS:
        raise InputError(f"col2im method must be one of {COL2IM_METHODS}, got {method!r}")
    if method == "gather" and xp is np:
        raise InputError("col2im's gather method runs on CuPy arrays only; NumPy takes 'strided'")
    if method != "strided" and xp is not np:
        return _col2im_gpu(cols, shape, kernel, stride, pad, (oh, ow))
    row, item = cols.strides[0], cols.itemsize
    windows = xp.lib.stride_tricks.as_strided(
        cols,
        shape=(n, c, kernel, kernel, oh, ow),
        strides=(oh * ow * row, kernel * kernel * item, kernel * item, item, ow * row, row),
    )
    out = xp.zeros((n, c, h + 2 * pad, w + 2 * pad), dtype=cols.dtype)
    for ky in range(kernel):
        for kx in range(kernel):
            out[:, :, ky : ky + stride * (oh - 1) + 1 : stride, kx : kx + stride * (ow - 1) + 1 : stride] += windows[
                :, :, ky, kx
            ]
    return xp.ascontiguousarray(out[:, :, pad : pad + h, pad : pad + w])


def _col2im_gpu(cols, shape: tuple[int, int, int, int], kernel: int, stride: int, pad: int, out_hw: tuple[int, int]):
    import cupy  # an optional dependency (CuPy), GPU paths only

    if cols.dtype != cupy.float32:
        raise InputError(f"col2im on the GPU takes float32 columns, got {cols.dtype}")
    out = cupy.empty(shape, dtype=cupy.float32)
    threads = 256
    blocks = max(1, min(-(-out.size // threads), 65535 * 32))
    ld = cols.strides[0] // cols.itemsize
    args = (cols, np.int64(ld), *(np.int32(v) for v in (*shape, kernel, stride, pad, *out_hw)), out)
    col2im_kernel(cupy.cuda.Device().id)((blocks,), (threads,), args)
    return out


def feature_maps(
    batch: int, channels: int, size: int, density: float, *, cluster_px: float = 0.0, seed: int = 0
) -> np.ndarray:
    """Post-ReLU NCHW maps (float32) with the given fraction of non-zeros. ``cluster_px``
    is the correlation length of the non-zero regions (0: independent pixels; larger: the
    zeros come in blobs of about that many pixels, as in real feature maps)."""
    if not 0 <= density <= 1:
        raise InputError(f"density must be in [0, 1], got {density}")
    rng = np.random.default_rng(seed)
    field = rng.standard_normal((batch, channels, size, size)).astype(np.float32)
    if cluster_px > 0:
        field = gaussian_filter(field, sigma=(0, 0, cluster_px, cluster_px)).astype(np.float32)
    threshold = np.quantile(field, 1 - density) if 0 < density < 1 else (np.inf if density == 0 else -np.inf)
    values = np.abs(rng.standard_normal(field.shape)).astype(np.float32) + 0.01
    return np.where(field > threshold, values, np.float32(0)).astype(np.float32)


def tiled_preactivations(
    m: int, k: int, tile_density: float, *, tile=(128, 32), fill: float = 0.5, seed: int = 0, xp=np
):
    """Pre-activations ``[m x k]`` whose ReLU has exactly ``round(tile_density * tiles)``
    non-zero tiles of ``tile`` (chosen at random), each with about ``fill`` of its entries
    positive; elsewhere strictly negative. Feed them through a monitored epilogue to get the
    activations and their profile together. ``xp``: ``numpy`` or ``cupy`` (where to make them)."""
    tile = TileShape.of(tile)
    if not 0 <= tile_density <= 1 or not 0 < fill <= 1:
        raise InputError(f"tile_density must be in [0, 1] and fill in (0, 1], got {tile_density}, {fill}")
    rng = np.random.default_rng(seed)
    tm, tn = tile.grid((m, k))
    active = np.zeros(tm * tn, dtype=bool)
    active[rng.choice(tm * tn, size=int(round(tile_density * tm * tn)), replace=False)] = True
    mask = xp.asarray(active.reshape(tm, tn))
    mask = xp.repeat(xp.repeat(mask, tile.rows, axis=0), tile.cols, axis=1)[:m, :k]
    state = xp.random.RandomState(seed)
    magnitude = xp.abs(state.standard_normal((m, k))).astype(xp.float32) + xp.float32(0.01)
    positive = state.random_sample((m, k)) < fill
    return xp.where(mask & positive, magnitude, -magnitude).astype(xp.float32)
