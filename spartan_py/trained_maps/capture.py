"""One training step's maps of every convolution: its input and the gradient reaching its
output, for a few images (PyTorch hooks)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spartan_py.sparsity.granularity import ConvGeometry
from spartan_py.trained_maps.models import STEM, conv_names, import_torch


@dataclass
class ConvMaps:
    """One convolution's run: ``x`` its input (NCHW float32 tensor), ``dy`` the gradient of the
    loss at its output (NCHW), ``geometry`` its shape; ``name`` is unique per run (a module run
    twice gets ``#2``)."""

    name: str
    geometry: ConvGeometry
    relu_input: bool
    x: Any = None
    dy: Any = None


def capture_step(network: str, model, images, labels) -> list[ConvMaps]:
    """Forward and backward of ``model`` on ``images`` (float NCHW, on the model's device) with
    cross entropy on ``labels``, as a training step runs them (dropout on, batch norm on the
    batch's statistics; the running statistics are left as they were), weights unchanged.
    Returns every convolution's run in execution order."""
    torch, _ = import_torch()
    nn = torch.nn
    names = conv_names(network, model)
    runs: list[ConvMaps] = []
    seen: dict[str, int] = {}

    def hook(module, inputs, output):
        base = names[module]
        seen[base] = seen.get(base, 0) + 1
        name = base if seen[base] == 1 else f"{base}#{seen[base]}"
        x = inputs[0].detach().float().clone(memory_format=torch.contiguous_format)
        geometry = ConvGeometry(
            in_channels=module.in_channels,
            out_channels=module.out_channels,
            height=x.shape[2],
            width=x.shape[3],
            kernel=module.kernel_size[0],
            stride=module.stride[0],
            pad=module.padding[0],
        )
        run = ConvMaps(name, geometry, relu_input=base != STEM[network], x=x)
        runs.append(run)

        def keep_grad(grad):
            run.dy = grad.detach().float().clone(memory_format=torch.contiguous_format)

        output.register_hook(keep_grad)

    was_training = model.training
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    momenta = [m.momentum for m in norms]
    handles = [m.register_forward_hook(hook) for m in names]
    try:
        model.train()
        for m in norms:
            m.momentum = 0.0  # batch statistics used, running ones kept
        model.zero_grad(set_to_none=True)
        with torch.autocast(device_type=images.device.type, enabled=False):
            loss = nn.functional.cross_entropy(model(images.float()), labels)
        loss.backward()
    finally:
        for handle in handles:
            handle.remove()
        for m, momentum in zip(norms, momenta, strict=True):
            m.momentum = momentum
        model.zero_grad(set_to_none=True)
        model.train(was_training)
    return runs
