"""Training a network from scratch on Fashion-MNIST (28 px grey images upsampled on the device
to ``px`` pixels, 3 channels), seeded, with test accuracy on the way."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from spartan_py.trained_maps.models import import_torch

#: Fashion-MNIST's pixel mean and standard deviation (of the 0-1 scaled training images)
MEAN, STD = 0.2860, 0.3530
#: learning rate of SGD (momentum 0.9, Nesterov) per network at batch 128, scaled linearly with the batch
BASE_LR = {"alexnet": 0.01, "vgg16": 0.01, "vgg16_bn": 0.05, "resnet18": 0.05}


@dataclass(frozen=True)
class TrainSettings:
    """How a network is trained: ``steps`` of ``batch`` images at ``px`` pixels, on ``device``;
    ``amp`` runs the forward in bfloat16 autocast (TF32 for what stays FP32);
    ``budget_s`` (if set) shortens the run when the measured step time says it would overrun."""

    steps: int
    batch: int = 128
    px: int = 224
    seed: int = 0
    device: str = "cuda"
    amp: bool = True
    lr: float | None = None
    weight_decay: float = 5e-4
    warmup_steps: int = 100
    budget_s: float | None = None


@dataclass
class TrainLog:
    """What a run did: steps planned and done, seconds per step, (step, test accuracy) pairs,
    (step, mean training loss over the last 50 steps) pairs."""

    steps_planned: int
    steps_done: int = 0
    step_seconds: float = 0.0
    accuracy: list[tuple[int, float]] = field(default_factory=list)
    loss: list[tuple[int, float]] = field(default_factory=list)


def to_device_images(images: np.ndarray, device: str):
    """uint8 ``[n x 28 x 28]`` images as a uint8 tensor on ``device``."""
    torch, _ = import_torch()
    return torch.from_numpy(np.array(images, copy=True)).to(device)


def prepare(images_u8, px: int, channels_last: bool):
    """Normalised float images ``[n x 3 x px x px]`` from uint8 ``[n x 28 x 28]`` (bilinear)."""
    torch, _ = import_torch()
    x = (images_u8.float() / 255.0 - MEAN) / STD
    x = torch.nn.functional.interpolate(x[:, None], size=(px, px), mode="bilinear", align_corners=False)
    x = x.expand(-1, 3, -1, -1)
    return x.contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)


def accuracy(model, images_u8, labels, px: int, *, amp: bool, batch: int = 500) -> float:
    """Top-1 accuracy of ``model`` (eval mode) on device tensors of images and labels."""
    torch, _ = import_torch()
    device = images_u8.device
    was_training = model.training
    model.eval()
    correct = 0
    with torch.no_grad(), torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=amp):
        for start in range(0, images_u8.shape[0], batch):
            x = prepare(images_u8[start : start + batch], px, device.type == "cuda")
            correct += int((model(x).argmax(1) == labels[start : start + batch]).sum())
    model.train(was_training)
    return correct / images_u8.shape[0]


def _lr_at(step: int, settings: TrainSettings, steps: int, peak: float) -> float:
    warm = min(settings.warmup_steps, max(steps // 10, 1))
    if step < warm:
        return peak * (step + 1) / warm
    return 0.5 * peak * (1 + math.cos(math.pi * (step - warm) / max(steps - warm, 1)))


def train(
    network: str,
    model,
    train_data: tuple[Any, Any],
    settings: TrainSettings,
    at_step: Callable[[int, int], None],
    *,
    probe_steps: int = 20,
) -> TrainLog:
    """Train ``model`` in place; ``at_step(step, steps)`` runs before step ``step`` (0-based)
    and once after the last (``step == steps``), with ``steps`` the run's length (which a
    ``budget_s`` may have cut after ``probe_steps`` steps, before the learning-rate schedule
    leaves its warm-up)."""
    torch, _ = import_torch()
    images, labels = train_data
    device = images.device
    generator = torch.Generator(device=device).manual_seed(settings.seed)
    peak = settings.lr if settings.lr is not None else BASE_LR[network] * settings.batch / 128
    optimizer = torch.optim.SGD(
        model.parameters(), lr=peak, momentum=0.9, nesterov=True, weight_decay=settings.weight_decay
    )
    log = TrainLog(settings.steps)
    steps = settings.steps
    losses: list[Any] = []
    model.train()
    started = time.perf_counter()
    paused = 0.0  # seconds in at_step (tests, captures), not training
    for step in range(steps + 1):
        if step == probe_steps and settings.budget_s is not None:
            if device.type == "cuda":
                torch.cuda.synchronize()
            per_step = (time.perf_counter() - started - paused) / (probe_steps - 1)
            steps = max(min(steps, int(settings.budget_s / per_step)), probe_steps + 1)
        tick = time.perf_counter()
        at_step(step, steps)
        paused += time.perf_counter() - tick
        if step == steps:
            break
        idx = torch.randint(0, images.shape[0], (settings.batch,), device=device, generator=generator)
        x = prepare(images[idx], settings.px, device.type == "cuda")
        for group in optimizer.param_groups:
            group["lr"] = _lr_at(step, settings, steps, peak)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=settings.amp):
            loss = torch.nn.functional.cross_entropy(model(x), labels[idx].long())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        optimizer.step()
        losses.append(loss.detach())
        if (step + 1) % 50 == 0 or step + 1 == steps:
            log.loss.append((step + 1, float(torch.stack(losses[-50:]).float().mean())))
        log.steps_done = step + 1
        if step == 0:
            started, paused = time.perf_counter(), 0.0  # the first step pays for cuDNN's autotuning
    if device.type == "cuda":
        torch.cuda.synchronize()
    log.step_seconds = (time.perf_counter() - started - paused) / max(log.steps_done - 1, 1)
    return log
