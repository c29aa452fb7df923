"""The networks of the study (PyTorch; torchvision's definitions where they fit), each with
its convolutions named as the rest of spartan_py names them."""

from __future__ import annotations

from typing import Any

from spartan_py.errors import BackendUnavailableError, InputError

#: networks ``spartan maps`` can train
NETWORKS: tuple[str, ...] = ("alexnet", "vgg16", "vgg16_bn", "resnet18")
_VGG_NAMES = [f"conv{b}_{i}" for b, n in ((1, 2), (2, 2), (3, 3), (4, 3), (5, 3)) for i in range(1, n + 1)]


def import_torch() -> tuple[Any, Any]:
    """(torch, torchvision), or BackendUnavailableError naming the extra that brings them."""
    try:
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


def conv_names(network: str, model) -> dict[Any, str]:
    """Each ``Conv2d`` of ``model`` -> its name: ``conv1``..``conv5`` (AlexNet), ``conv1_1``..
    ``conv5_3`` (VGG-16, as :mod:`spartan_py.workloads.conv.layers`), torchvision's module path
    (ResNet-18: ``layer2.0.downsample.0``)."""
    torch, _ = import_torch()
    convs = [(path, m) for path, m in model.named_modules() if isinstance(m, torch.nn.Conv2d)]
    if network == "alexnet":
        return {m: f"conv{i + 1}" for i, (_, m) in enumerate(convs)}
    if network.startswith("vgg16"):
        return {m: _VGG_NAMES[i] for i, (_, m) in enumerate(convs)}
    return {m: path for path, m in convs}


#: each network's first convolution, which reads the image rather than a ReLU's output
STEM = {"alexnet": "conv1", "vgg16": "conv1_1", "vgg16_bn": "conv1_1", "resnet18": "conv1"}
