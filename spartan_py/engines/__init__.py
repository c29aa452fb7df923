"""Inference backends and how to pick one by name."""

from __future__ import annotations

import importlib

from spartan_py.engines.base import Engine, EngineOutput
from spartan_py.engines.shared.column_merge import worth_merging
from spartan_py.errors import BackendUnavailableError, InputError
from spartan_py.graph_challenge.network import Network

#: Backend name -> "module:Class". Imported on first use, so CuPy is only imported when a
#: GPU backend is asked for.
BACKENDS: dict[str, str] = {
    "reference": "spartan_py.engines.reference:ReferenceEngine",
    "cpu": "spartan_py.engines.cpu.engine:CpuEngine",
    "gpu": "spartan_py.engines.rows.engine:RowsEngine",
    "gpu-twin": "spartan_py.engines.rows.twin:RowsTwinEngine",
    "gpu-merged": "spartan_py.engines.merged.engine:MergedEngine",
    "gpu-merged-twin": "spartan_py.engines.merged.twin:MergedTwinEngine",
    "gpu-cusparse-spgemm": "spartan_py.engines.baselines:CusparseSpgemmEngine",
    "gpu-cusparse-spmm": "spartan_py.engines.baselines:CusparseSpmmEngine",
    "gpu-cublas-dense": "spartan_py.engines.baselines:CublasDenseEngine",
    "gpu-dense-compact": "spartan_py.engines.baselines:DenseCompactEngine",
}
#: The backend name that picks one here: the GPU's best kernel when a GPU is present, else ``cpu``.
AUTO_BACKEND = "auto"
BACKEND_CHOICES = (AUTO_BACKEND, *BACKENDS)
"""The built-in backend names, ``auto`` first (:func:`backend_choices` also has any added since)."""


def backend_choices() -> tuple[str, ...]:
    """Every backend name a run accepts now: ``auto`` and the registry's (:data:`BACKENDS`)."""
    return (AUTO_BACKEND, *BACKENDS)


def engine_class(name: str) -> type[Engine]:
    """The engine class registered as ``name`` (not ``auto``)."""
    try:
        target = BACKENDS[name]
    except KeyError:
        raise InputError(f"unknown backend {name!r}; expected one of {', '.join(backend_choices())}") from None
    module_name, class_name = target.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise BackendUnavailableError(f"backend {name!r} is unavailable: {exc}") from None
    return getattr(module, class_name)


def backends_taking(option: str) -> list[str]:
    """The backends whose engine takes the experiment option ``option`` (its class's
    :attr:`~spartan_py.engines.base.Engine.takes_options`), in registry order."""
    return [name for name in BACKENDS if option in engine_class(name).takes_options]


def unavailable_reason(name: str) -> str | None:
    """Why backend ``name`` cannot run here, or None when it can."""
    try:
        return engine_class(name).unavailable_reason()
    except BackendUnavailableError as exc:
        return str(exc)


def resolve_backend(name: str) -> str:
    """``auto`` -> ``gpu`` when a usable GPU is present, else ``cpu``; other names unchanged."""
    if name != "auto":
        engine_class(name)  # unknown names fail here, with the list of choices
        return name
    return "gpu" if unavailable_reason("gpu") is None else "cpu"


#: Backends suggested instead of one that cannot run a request, fastest first.
_SUGGESTED = ("gpu-merged", "gpu", "cpu")


def runs_width(backend: str, neurons: int) -> bool:
    """Whether ``backend`` runs networks of ``neurons`` (its ``supported_neurons``; None: any)."""
    sizes = engine_class(backend).supported_neurons
    return sizes is None or neurons in sizes


def check_backend(name: str, neurons: int) -> None:
    """Refuse, before anything is loaded, a backend that cannot run here or cannot run a
    network of ``neurons`` (:class:`InputError`, naming what to use instead)."""
    if name == "auto":
        return
    cls = engine_class(name)

    def instead() -> str:  # only worked out on a refusal: it asks every suggestion whether it runs here
        usable = [
            b
            for b in _SUGGESTED
            if b != name and runs_width(b, neurons) and engine_class(b).unavailable_reason() is None
        ]
        return f"use {' or '.join(usable)}" if usable else "no backend here runs it"

    if not runs_width(name, neurons):
        sizes = ", ".join(str(n) for n in cls.supported_neurons or ())
        raise InputError(f"backend {name!r} runs networks of {sizes} neurons, not {neurons}; {instead()}")
    reason = cls.unavailable_reason()
    if reason is not None:
        raise InputError(f"backend {name!r} cannot run here: {reason}; {instead()}")


def twin_backend(name: str, network: Network | None = None) -> str:
    """The CPU twin that simulated mode runs for backend ``name`` (``auto``: the twin of
    :func:`gpu_backend_for` the ``network``, of the ``gpu`` kernel without one).

    Raises :class:`InputError` for a backend without one.
    """
    kernel = name if name != "auto" else gpu_backend_for(network) if network is not None else "gpu"
    twin = engine_class(kernel).cpu_twin
    if twin is None:
        with_twins = sorted(n for n in BACKENDS if engine_class(n).cpu_twin is not None)
        raise InputError(
            f"simulated mode runs a GPU kernel's CPU twin; backend {name!r} has no twin "
            f"(backends with one: auto, {', '.join(with_twins)})"
        )
    return twin


def gpu_backend_for(network: Network) -> str:
    """The GPU kernel ``auto`` picks for ``network``: ``gpu-merged`` when its first layer has
    at most half as many distinct weight columns as outputs (RadiX-Net networks have 1/16;
    :func:`~spartan_py.engines.shared.column_merge.worth_merging`, the ``cpu`` engine's
    rule too), else ``gpu`` where it runs the network's width, else ``cpu``."""

    if worth_merging(network):
        return "gpu-merged"
    return "gpu" if runs_width("gpu", network.neurons) else "cpu"


def choose_backend(name: str, network: Network) -> str:
    """The backend that runs ``network`` for ``name``: ``auto`` is :func:`gpu_backend_for` on
    a GPU, ``cpu`` without one; other names are returned as they are (unknown ones raise
    :class:`InputError`)."""
    if name != "auto" or resolve_backend(name) != "gpu":
        return resolve_backend(name)
    return gpu_backend_for(network)


def make_engine(name: str, network: Network, **options) -> Engine:
    """A ready engine for ``network`` (``auto``: :func:`choose_backend`); raises
    :class:`BackendUnavailableError` with the reason."""
    cls = engine_class(choose_backend(name, network))
    reason = cls.unavailable_reason()
    if reason is not None:
        raise BackendUnavailableError(f"backend {cls.name!r} is unavailable: {reason}")
    return cls(network, **options)


__all__ = [
    "BACKENDS",
    "BACKEND_CHOICES",
    "Engine",
    "EngineOutput",
    "backend_choices",
    "backends_taking",
    "check_backend",
    "choose_backend",
    "gpu_backend_for",
    "engine_class",
    "make_engine",
    "resolve_backend",
    "twin_backend",
    "unavailable_reason",
]
