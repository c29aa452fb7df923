"""The networks of the study (PyTorch; torchvision's definitions where they fit), each with
its convolutions named as the rest of spartan_py names them."""

from __future__ import annotations

from typing import Any

from spartan_py.errors import BackendUnavailableError, InputError
from spartan_py.workloads.conv.layers import STEMS, ConvLayer, whole_network

#: networks ``spartan maps`` can train
NETWORKS: tuple[str, ...] = ("alexnet", "vgg16", "vgg16_bn", "resnet18")
#: each network -> the network of :mod:`spartan_py.workloads.conv.layers` whose layers (and
#: names) its convolutions are: VGG-16 with batch norm has VGG-16's convolutions
LAYERS_NETWORK: dict[str, str] = {"alexnet": "alexnet", "vgg16": "vgg16", "vgg16_bn": "vgg16", "resnet18": "resnet18"}


def import_torch() -> tuple[Any, Any]:
    """(torch, torchvision), or BackendUnavailableError naming the extra that brings them."""
    try:
        # optional dependencies (the torch extra): spartan --help and import spartan_py work without them
        import torch
        import torchvision
    except ImportError as exc:
        raise BackendUnavailableError(
            f"spartan maps needs PyTorch and torchvision ({exc}): pip install -e '.[torch]'"
        ) from None
    return torch, torchvision


def _alexnet(num_classes: int):
    """AlexNet as Spartan (and Krizhevsky et al.) have it: 96-256-384-384-256 channels."""
    torch, _ = import_torch()
    nn = torch.nn
    features = nn.Sequential(
        nn.Conv2d(3, 96, 11, stride=4, padding=2),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(3, 2),
        nn.Conv2d(96, 256, 5, padding=2),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(3, 2),
        nn.Conv2d(256, 384, 3, padding=1),
        nn.ReLU(inplace=True),
        nn.Conv2d(384, 384, 3, padding=1),
        nn.ReLU(inplace=True),
        nn.Conv2d(384, 256, 3, padding=1),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(3, 2),
    )
    classifier = nn.Sequential(
        nn.Dropout(0.5),
        nn.Linear(256 * 6 * 6, 4096),
        nn.ReLU(inplace=True),
        nn.Dropout(0.5),
        nn.Linear(4096, 4096),
        nn.ReLU(inplace=True),
        nn.Linear(4096, num_classes),
    )
    return nn.Sequential(features, nn.AdaptiveAvgPool2d((6, 6)), nn.Flatten(), classifier)


def build(network: str, num_classes: int = 10):
    """A freshly initialised ``network`` of :data:`NETWORKS` (torch's default initialisers;
    seed torch first)."""
    _, torchvision = import_torch()
    models = torchvision.models
    if network == "alexnet":
        return _alexnet(num_classes)
    if network == "vgg16":
        return models.vgg16(weights=None, num_classes=num_classes)
    if network == "vgg16_bn":
        return models.vgg16_bn(weights=None, num_classes=num_classes)
    if network == "resnet18":
        return models.resnet18(weights=None, num_classes=num_classes)
    raise InputError(f"unknown network {network!r}; expected one of {', '.join(NETWORKS)}")


def _fits(module, layer: ConvLayer) -> bool:
    """Whether a ``Conv2d`` has ``layer``'s channels, kernel, stride and padding (not its size:
    the capture may run smaller images)."""
    shape = (module.in_channels, module.out_channels, module.kernel_size, module.stride, module.padding)
    return shape == (layer.in_channels, layer.out_channels, (layer.kernel,) * 2, (layer.stride,) * 2, (layer.pad,) * 2)


def conv_layers_of(network: str, model) -> dict[Any, ConvLayer]:
    """Each ``Conv2d`` of ``model`` -> its layer in :func:`~spartan_py.workloads.conv.layers.whole_network`
    (the one name scheme: ``alexnet/conv2``, ``vgg16/conv3_2``, ``resnet18/conv3_ds``), matched
    in order and checked shape by shape."""
    torch, _ = import_torch()
    convs = [(path, m) for path, m in model.named_modules() if isinstance(m, torch.nn.Conv2d)]
    layers = whole_network(LAYERS_NETWORK[network])
    if len(convs) != len(layers):
        raise InputError(f"{network} has {len(convs)} convolutions; spartan_py's layers name {len(layers)}")
    for (path, module), layer in zip(convs, layers, strict=True):
        if not _fits(module, layer):
            raise InputError(f"{network}'s convolution {path} ({module}) is not {layer.label} ({layer})")
    return {module: layer for (_, module), layer in zip(convs, layers, strict=True)}


def conv_names(network: str, model) -> dict[Any, str]:
    """Each ``Conv2d`` of ``model`` -> its layer's name (:func:`conv_layers_of`)."""
    return {module: layer.name for module, layer in conv_layers_of(network, model).items()}


#: each network's first convolution, which reads the image rather than a ReLU's output
STEM = {network: STEMS[layers].name for network, layers in LAYERS_NETWORK.items()}
