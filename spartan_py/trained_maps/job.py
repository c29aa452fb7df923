"""The study in one job: train each network, and at initialisation, early, middle and late
capture every convolution's maps for a few test images, measure their sparsity at every
granularity (:mod:`spartan_py.sparsity.granularity`, on the GPU through CuPy when there is
one), and write a JSON summary and packed-bitmask samples; optionally the full maps in the
``.npz`` form a ``conv_layers`` workload's ``activations:`` reads.

The summary is rewritten after every training point, so a job cut short keeps what it did.
"""

from __future__ import annotations

import io
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from spartan_py.errors import InputError
from spartan_py.files import atomic_write_bytes, atomic_write_text, json_ready
from spartan_py.sparsity.arrays import array_module
from spartan_py.sparsity.granularity import GEMMS, layer_granularity, network_bounds, zero_smallest
from spartan_py.trained_maps import fashion
from spartan_py.trained_maps.capture import ConvMaps, capture_step
from spartan_py.trained_maps.models import LAYERS_NETWORK, NETWORKS, build, import_torch
from spartan_py.trained_maps.train import TrainSettings, accuracy, prepare, to_device_images, train
from spartan_py.workloads.conv.saved_maps_check import gradient_mask_key

#: training points and where they fall, as a fraction of the run
POINTS: dict[str, float] = {"init": 0.0, "early": 0.1, "middle": 0.5, "late": 1.0}
SCHEMA = "spartan-maps/1"


@dataclass(frozen=True)
class JobSettings:
    """One job: ``networks`` trained ``steps`` steps of ``batch`` at ``px`` pixels; ``images``
    test images captured at each point; ``train_seconds`` shared out among the networks
    (unused time passes on); ``test_images`` limits the accuracy test (0: all 10000);
    ``sensitivity``: sparsities the smallest activations are zeroed to; ``backend``: where the
    granularity runs (``auto``: CuPy when the device is a GPU and CuPy imports); ``points``:
    which of :data:`POINTS` are captured."""

    data: Path
    out: Path
    networks: tuple[str, ...] = ("alexnet", "vgg16", "resnet18")
    steps: int = 1500
    batch: int = 128
    px: int = 224
    images: int = 8
    seed: int = 0
    device: str = "cuda"
    amp: bool = True
    train_seconds: float | None = None
    test_images: int = 0
    sensitivity: tuple[float, ...] = (0.7, 0.9)
    sample_images: int = 1
    maps_dir: Path | None = None
    backend: str = "auto"
    points: tuple[str, ...] = tuple(POINTS)
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        unknown = [n for n in self.networks if n not in NETWORKS]
        if unknown:
            raise InputError(f"unknown networks {unknown}; expected some of {', '.join(NETWORKS)}")
        if self.steps < 1 or self.batch < 1 or self.images < 1 or self.px < 32:
            raise InputError("steps, batch and images must be >= 1 and px >= 32")
        if not self.points or set(self.points) - set(POINTS):
            raise InputError(f"points must be some of {', '.join(POINTS)}, got {', '.join(self.points) or 'none'}")
        if self.backend not in ("auto", "numpy", "cupy"):
            raise InputError(f"backend must be auto, numpy or cupy, got {self.backend!r}")


def _to_array(tensor, backend: str):
    if backend == "cupy":
        import cupy  # an optional dependency (CuPy), GPU paths only

        return cupy.from_dlpack(tensor)
    return tensor.cpu().numpy()


def _backend(settings: JobSettings) -> str:
    """``numpy`` or ``cupy``; ``auto`` takes CuPy when it imports and reads a PyTorch tensor
    of the device through DLPack, NumPy otherwise (slower: every map copied to the host)."""
    if settings.backend != "auto":
        return settings.backend
    if not settings.device.startswith("cuda"):
        return "numpy"
    torch, _ = import_torch()
    try:
        import cupy  # an optional dependency (CuPy), GPU paths only

        probe = torch.arange(4, device=settings.device)
        if int(cupy.from_dlpack(probe).sum()) != 6:
            return "numpy"
    except Exception:  # any failure of the optional fast path leaves the NumPy one
        return "numpy"
    return "cupy"


def point_steps(steps: int, points: tuple[str, ...] = tuple(POINTS)) -> dict[int, list[str]]:
    """Training step -> the ``points`` captured before it (the last point after the last step)."""
    out: dict[int, list[str]] = {}
    for name in points:
        out.setdefault(round(POINTS[name] * steps), []).append(name)
    return out


def _layer_record(run: ConvMaps, x, dy_mask) -> dict[str, Any]:
    g = run.geometry
    xp = array_module(x)
    gemms = GEMMS if run.relu_input else ("forward", "weight_grad")  # no input gradient for the image
    return {
        "name": run.name,
        "C": g.in_channels,
        "H": g.height,
        "W": g.width,
        "out_channels": g.out_channels,
        "kernel": g.kernel,
        "stride": g.stride,
        "pad": g.pad,
        "out_h": g.out_height,
        "out_w": g.out_width,
        "relu_input": run.relu_input,
        "x_density": int(xp.count_nonzero(x)) / x.size,
        "dy_density": int(xp.count_nonzero(dy_mask)) / dy_mask.size,
        "gemms": layer_granularity(x, dy_mask, g, gemms=gemms),
    }


def _bounds(layers: list[dict]) -> dict[str, dict]:
    return {
        "all": network_bounds([layer["gemms"] for layer in layers]),
        "relu_inputs": network_bounds([layer["gemms"] for layer in layers if layer["relu_input"]]),
    }


def analyse(runs: list[ConvMaps], settings: JobSettings, backend: str) -> dict[str, Any]:
    """Granularity of every run at the maps as captured and with the smallest activations of
    each post-ReLU input zeroed to each sparsity of ``settings.sensitivity`` (the gradient
    masks as captured)."""
    layers: list[dict] = []
    variants: dict[str, list[dict]] = {f"{s:g}": [] for s in settings.sensitivity}
    for run in runs:
        x, dy_mask = _to_array(run.x, backend), _to_array(run.dy, backend) != 0
        base = _layer_record(run, x, dy_mask)
        layers.append(base)
        if not run.relu_input:
            continue
        for sparsity in settings.sensitivity:
            thinned = zero_smallest(x, sparsity)
            record = _layer_record(run, thinned, dy_mask)
            record["gemms"]["input_grad"] = base["gemms"]["input_grad"]
            variants[f"{sparsity:g}"].append(record)
    if backend == "cupy":
        release_gpu_memory(torch_too=False)  # leave the GPU's memory to training
    return {
        "layers": layers,
        "network": _bounds(layers),
        "sensitivity": {key: {"layers": rows, "network": _bounds(rows)} for key, rows in variants.items()},
    }


def release_gpu_memory(torch_too: bool = True) -> None:
    """Hand the GPU memory CuPy's pool (and PyTorch's cache) hold but do not use back to the
    device, for the next user in this process (training after an analysis, a step after training)."""
    try:
        import cupy  # an optional dependency (CuPy), GPU paths only

        cupy.get_default_memory_pool().free_all_blocks()
    except ImportError:
        pass
    if torch_too:
        torch, _ = import_torch()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def _samples(runs: list[ConvMaps], point: str, count: int) -> dict[str, np.ndarray]:
    out = {}
    for run in runs:
        for kind, tensor in (("x", run.x), ("dy", run.dy)):
            mask = (tensor[:count] != 0).cpu().numpy()
            out[f"{point}/{run.name}/{kind}"] = np.packbits(mask.reshape(-1))
            out[f"{point}/{run.name}/{kind}_shape"] = np.asarray(mask.shape, dtype=np.int64)
    return out


def _write_npz(path: Path, arrays: dict[str, np.ndarray], compress: bool = True) -> None:
    buffer = io.BytesIO()
    if compress:
        np.savez_compressed(buffer, **arrays)  # type: ignore[arg-type]
    else:
        np.savez(buffer, **arrays)  # type: ignore[arg-type]
    atomic_write_bytes(path, buffer.getvalue())


def _full_maps(network: str, runs: list[ConvMaps]) -> dict[str, np.ndarray]:
    """The ``activations:`` form: each convolution's label (``vgg16/conv3_2``, the layers'
    network: VGG-16 with batch norm has VGG-16's) -> its input maps (float32 NCHW), and
    :func:`~spartan_py.workloads.conv.saved_maps_check.gradient_mask_key` of it -> where the
    gradient reaching its output is non-zero (bool). The stem's input, the image, is written
    too (``alexnet/conv1``): no ``conv_layers`` layer reads it."""
    out = {}
    for run in runs:
        label = f"{LAYERS_NETWORK[network]}/{run.name}"
        out[label] = run.x.cpu().numpy().astype(np.float32)
        out[gradient_mask_key(label)] = (run.dy != 0).cpu().numpy()
    return out


def run_job(settings: JobSettings, progress: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Run the study; returns the summary written to ``out/summary.json``; samples go to
    ``out/samples-NETWORK.npz``."""
    torch, torchvision = import_torch()
    if settings.device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise InputError("--device cuda asked for, but PyTorch sees no GPU; use --device cpu")
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        torch.backends.cudnn.benchmark = True
    backend = _backend(settings)
    settings.out.mkdir(parents=True, exist_ok=True)
    train_u8, train_labels = fashion.load_split(settings.data, "train")
    test_u8, test_labels = fashion.load_split(settings.data, "test")
    if settings.test_images:
        test_u8, test_labels = test_u8[: settings.test_images], test_labels[: settings.test_images]
    device = settings.device
    train_data = (
        to_device_images(train_u8, device),
        torch.from_numpy(train_labels.astype(np.int64, copy=True)).to(device),
    )
    test_x, test_y = to_device_images(test_u8, device), torch.from_numpy(test_labels.astype(np.int64)).to(device)
    probe_x = prepare(test_x[: settings.images], settings.px, channels_last=False)
    probe_y = test_y[: settings.images]
    summary: dict[str, Any] = {
        "schema": SCHEMA,
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(settings).items()},
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "device": torch.cuda.get_device_name() if device.startswith("cuda") else "cpu",
        "granularity_backend": backend,
        "data": "Fashion-MNIST (28 px grey, bilinear to px, 3 equal channels): about half its pixels are "
        "background, so its maps are sparser than ImageNet's and in large connected regions",
        "networks": {},
    }
    started = time.perf_counter()
    data = _Data(train_data, test_x, test_y, probe_x, probe_y)
    for index, network in enumerate(settings.networks):
        budget = None
        if settings.train_seconds is not None:
            left = settings.train_seconds - (time.perf_counter() - started)
            budget = max(left, 1.0) / (len(settings.networks) - index)
        record: dict[str, Any] = {"points": {}, "train_budget_s": budget}
        summary["networks"][network] = record
        _run_network(network, settings, data, record, budget, backend, lambda: _save(summary, settings), progress)
    summary["seconds"] = time.perf_counter() - started
    _save(summary, settings)
    return summary


@dataclass(frozen=True)
class _Data:
    train: tuple[Any, Any]
    test_x: Any
    test_y: Any
    probe_x: Any
    probe_y: Any


def _save(summary: dict, settings: JobSettings) -> None:
    atomic_write_text(settings.out / "summary.json", json.dumps(json_ready(summary), allow_nan=False))


def _run_network(
    network: str,
    settings: JobSettings,
    data: _Data,
    record: dict[str, Any],
    budget: float | None,
    backend: str,
    save: Callable[[], None],
    progress: Callable[[str], None],
) -> None:
    """Train ``network``, filling ``record`` point by point (``save`` after each)."""
    torch, _ = import_torch()
    device = settings.device
    torch.manual_seed(settings.seed)
    model = build(network).to(device)
    if device.startswith("cuda"):
        model = model.to(memory_format=torch.channels_last)
    samples: dict[str, np.ndarray] = {}
    train_settings = TrainSettings(
        steps=settings.steps, batch=settings.batch, px=settings.px, seed=settings.seed,
        device=device, amp=settings.amp and device.startswith("cuda"), budget_s=budget,
    )  # fmt: skip
    history: list[tuple[int, float]] = []
    record["accuracy_history"] = history

    def at_step(step: int, steps: int) -> None:
        names = point_steps(steps, settings.points).get(step, [])
        if not names and step != steps - max(steps // 10, 1):
            return
        acc = accuracy(model, data.test_x, data.test_y, settings.px, amp=train_settings.amp)
        history.append((step, acc))
        for name in names:
            tick = time.perf_counter()
            runs = capture_step(network, model, data.probe_x, data.probe_y)
            result = analyse(runs, settings, backend)
            record["points"][name] = {"step": step, "test_accuracy": acc, **result}
            samples.update(_samples(runs, name, settings.sample_images))
            if settings.maps_dir is not None:
                # uncompressed: a point's maps of 32 VGG-16 images are 1.4 GB, which zlib takes ~30 s over
                _write_npz(settings.maps_dir / f"{network}-{name}.npz", _full_maps(network, runs), compress=False)
            save()
            _write_npz(settings.out / f"samples-{network}.npz", samples)
            progress(
                f"{network} {name} step {step}/{steps}: test accuracy {acc:.4f}, {len(runs)} convolutions, "
                f"analysed in {time.perf_counter() - tick:.1f} s"
            )

    log = train(network, model, data.train, train_settings, at_step)
    record.update(
        steps_planned=log.steps_planned,
        steps=log.steps_done,
        step_seconds=log.step_seconds,
        batch=settings.batch,
        loss_history=log.loss,
        last_tenth=_last_tenth(history, log.steps_done),
    )
    save()
    progress(f"{network}: {log.steps_done} steps at {log.step_seconds * 1e3:.1f} ms/step")


def _last_tenth(history: list[tuple[int, float]], steps: int) -> dict[str, float] | None:
    """Test accuracy at the start of the last tenth of training and at its end."""
    tenth = steps - max(steps // 10, 1)
    start = next((acc for step, acc in history if step == tenth), None)
    end = next((acc for step, acc in history if step == steps), None)
    if start is None or end is None:
        return None
    return {"from_step": tenth, "to_step": steps, "accuracy_from": start, "accuracy_to": end, "change": end - start}
